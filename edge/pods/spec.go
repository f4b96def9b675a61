package pods

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/outpost-mesh/outpost/edge/runtime"
)

// Grace periods.
const (
	// defaultGrace is the termination grace period of a pod that sets none.
	defaultGrace = 30 * time.Second
	// minGrace is the least grace a graceful stop gets (kubelet's
	// minimumGracePeriodInSeconds); only a stop that already ran out
	// of time is turned into a kill.
	minGrace = 2 * time.Second
	// stopSlack is how long past a stop's grace Plan waits for the
	// container to be seen exited before it asks again, with no grace.
	stopSlack = 5 * time.Second
)

// kind is the role of a container in its pod.
type kind int

const (
	kindInit    kind = iota // a regular init container: runs to completion before the next
	kindSidecar             // an init container with restartPolicy Always: started in order, kept running
	kindApp                 // a regular container
)

// ctr is one container of a pod's spec.
type ctr struct {
	spec *corev1.Container
	kind kind
}

// containersOf returns the pod's containers: init containers (sidecars
// among them) in order, then app containers.
func containersOf(pod *corev1.Pod) []ctr {
	out := make([]ctr, 0, len(pod.Spec.InitContainers)+len(pod.Spec.Containers))
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		k := kindInit
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			k = kindSidecar
		}
		out = append(out, ctr{c, k})
	}
	for i := range pod.Spec.Containers {
		out = append(out, ctr{&pod.Spec.Containers[i], kindApp})
	}
	return out
}

// restartPolicy returns the pod's restart policy, Always when unset.
func restartPolicy(pod *corev1.Pod) corev1.RestartPolicy {
	if p := pod.Spec.RestartPolicy; p != "" {
		return p
	}
	return corev1.RestartPolicyAlways
}

// shouldRestart reports whether a container of kind k that exited with
// code is restarted under policy. Sidecars always are; a regular init
// container is on failure unless the policy is Never.
func shouldRestart(k kind, policy corev1.RestartPolicy, code int32) bool {
	switch {
	case k == kindSidecar:
		return true
	case k == kindInit:
		return policy != corev1.RestartPolicyNever && code != 0
	case policy == corev1.RestartPolicyAlways:
		return true
	case policy == corev1.RestartPolicyOnFailure:
		return code != 0
	}
	return false
}

// podGrace is the pod's termination grace period.
func podGrace(pod *corev1.Pod) time.Duration {
	d := defaultGrace
	if s := pod.Spec.TerminationGracePeriodSeconds; s != nil {
		d = time.Duration(*s) * time.Second
	}
	return max(d, minGrace)
}

// deletionGrace is the grace period of a pod being deleted: the one its
// deletion set, else its own.
func deletionGrace(pod *corev1.Pod) time.Duration {
	if s := pod.DeletionGracePeriodSeconds; s != nil {
		return max(time.Duration(*s)*time.Second, minGrace)
	}
	return podGrace(pod)
}

// supportedProjections are the projected volume sources the agent can set
// up, besides the plain volume types unsupported accepts.
var supportedProjections = []string{"configMap", "secret", "downwardAPI", "serviceAccountToken"}

// unsupported returns why the agent cannot run pod, or "". It gates only
// starts: containers of such a pod that already run are left alone.
func unsupported(pod *corev1.Pod) string {
	if len(pod.Spec.Containers) == 0 {
		return "pod has no containers"
	}
	// The API's validation holds these; a pod that skipped it (a static
	// manifest, an old checkpoint) is not run on a guess.
	seen := map[string]bool{}
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			switch name := cs[i].Name; {
			case name == "":
				return "invalid pod spec: a container has no name"
			case seen[name]:
				return fmt.Sprintf("invalid pod spec: container name %q is used twice", name)
			default:
				seen[name] = true
			}
		}
	}
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		vs := &v.VolumeSource
		switch {
		case vs.EmptyDir != nil, vs.HostPath != nil, vs.ConfigMap != nil, vs.Secret != nil, vs.DownwardAPI != nil:
		case vs.Projected != nil:
			for j := range vs.Projected.Sources {
				if t := setField(&vs.Projected.Sources[j]); !slices.Contains(supportedProjections, t) {
					return fmt.Sprintf("volume %q: projected %s sources are not supported on this node", v.Name, t)
				}
			}
		default:
			return fmt.Sprintf("volume %q: %s volumes are not supported on this node", v.Name, setField(vs))
		}
	}
	return ""
}

// setField returns the JSON name of the first non-nil pointer field of the
// struct *s points to (the member set of a Kubernetes union), or "unknown".
func setField(s any) string {
	v := reflect.ValueOf(s).Elem()
	for i := range v.NumField() {
		if f := v.Field(i); f.Kind() == reflect.Pointer && !f.IsNil() {
			name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("json"), ",")
			return name
		}
	}
	return "unknown"
}

// containerSpec returns what the pod alone says of container c to the
// runtime. Env holds c's literal values in order; values from valueFrom
// and envFrom, Mounts and NetNS are the caller's to add.
func containerSpec(pod *corev1.Pod, c *corev1.Container) runtime.ContainerSpec {
	s := runtime.ContainerSpec{
		Name:                   c.Name,
		Image:                  c.Image,
		PullPolicy:             pullPolicy(c),
		Command:                slices.Clone(c.Command),
		Args:                   slices.Clone(c.Args),
		WorkingDir:             c.WorkingDir,
		TTY:                    c.TTY,
		Stdin:                  c.Stdin,
		Hostname:               pod.Name,
		TerminationMessagePath: c.TerminationMessagePath,
	}
	if pod.Spec.Hostname != "" {
		s.Hostname = pod.Spec.Hostname
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			s.Env = append(s.Env, runtime.EnvVar{Name: e.Name, Value: e.Value})
		}
	}
	seccomp := ""
	if psc := pod.Spec.SecurityContext; psc != nil {
		s.RunAsUser, s.RunAsGroup = psc.RunAsUser, psc.RunAsGroup
		s.RunAsNonRoot = psc.RunAsNonRoot != nil && *psc.RunAsNonRoot
		if psc.FSGroup != nil {
			s.SupplementalGroups = append(s.SupplementalGroups, *psc.FSGroup)
		}
		s.SupplementalGroups = append(s.SupplementalGroups, psc.SupplementalGroups...)
		if psc.SeccompProfile != nil {
			seccomp = string(psc.SeccompProfile.Type)
		}
	}
	if sc := c.SecurityContext; sc != nil {
		if sc.RunAsUser != nil {
			s.RunAsUser = sc.RunAsUser
		}
		if sc.RunAsGroup != nil {
			s.RunAsGroup = sc.RunAsGroup
		}
		if sc.RunAsNonRoot != nil {
			s.RunAsNonRoot = *sc.RunAsNonRoot
		}
		s.Privileged = sc.Privileged != nil && *sc.Privileged
		s.ReadOnlyRootFilesystem = sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem
		if caps := sc.Capabilities; caps != nil {
			for _, c := range caps.Add {
				s.CapAdd = append(s.CapAdd, string(c))
			}
			for _, c := range caps.Drop {
				s.CapDrop = append(s.CapDrop, string(c))
			}
		}
		s.NoNewPrivileges = sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation
		if sc.SeccompProfile != nil {
			seccomp = string(sc.SeccompProfile.Type)
		}
	}
	s.SeccompRuntimeDefault = seccomp == string(corev1.SeccompProfileTypeRuntimeDefault)
	if s.RunAsUser != nil {
		s.RunAsUser = new(*s.RunAsUser)
	}
	if s.RunAsGroup != nil {
		s.RunAsGroup = new(*s.RunAsGroup)
	}
	if q, ok := c.Resources.Requests[corev1.ResourceCPU]; ok {
		s.CPURequestMilli = q.MilliValue()
	} else if q, ok := c.Resources.Limits[corev1.ResourceCPU]; ok {
		s.CPURequestMilli = q.MilliValue() // a request defaults to the limit, as the API server's defaulting does
	}
	if q, ok := c.Resources.Limits[corev1.ResourceCPU]; ok {
		s.CPULimitMilli = q.MilliValue()
	}
	if q, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
		s.MemoryLimitBytes = q.Value()
	}
	return s
}

// pullPolicy returns c's image pull policy, defaulted as the API server
// defaults it (a static pod's manifest may leave it out): Always for an
// image tagged latest or not at all, else IfNotPresent.
func pullPolicy(c *corev1.Container) runtime.PullPolicy {
	if c.ImagePullPolicy != "" {
		return runtime.PullPolicy(c.ImagePullPolicy)
	}
	if strings.Contains(c.Image, "@") {
		return runtime.PullIfNotPresent
	}
	name := c.Image[strings.LastIndexByte(c.Image, '/')+1:]
	if _, tag, ok := strings.Cut(name, ":"); ok && tag != "latest" {
		return runtime.PullIfNotPresent
	}
	return runtime.PullAlways
}
