package core

import (
	"regexp"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/registry/typed"
)

// podRules adds graceful deletion to the pod rules.
type podRules struct {
	*typed.Rules[*corev1.Pod]
}

var _ apiserver.GracefulDeleter = podRules{}

func podResource(now func() time.Time) apiserver.Resource {
	return apiserver.Resource{
		GroupVersion: corev1.SchemeGroupVersion,
		Kind:         "Pod",
		Plural:       "pods",
		Singular:     "pod",
		ShortNames:   []string{"po"},
		Categories:   []string{"all"},
		Namespaced:   true,
		New:          func() runtime.Object { return &corev1.Pod{} },
		NewList:      func() runtime.Object { return &corev1.PodList{} },
		AddToScheme:  corev1.AddToScheme,
		Status:       true,
		Rules: podRules{&typed.Rules[*corev1.Pod]{
			Now:           now,
			Defaults:      defaultPod,
			PrepareCreate: preparePodForCreate,
			PrepareUpdate: preparePodForUpdate,
			Check:         validatePodCreate,
			CheckUpdate:   validatePodUpdate,
			FieldSet:      podFields,
			TableColumns:  podColumns,
			TableRow:      podRow,
			CheckStatus:   validatePodStatusUpdate,
			// As upstream, a status write may not change the owners:
			// old kubelets corrupt them.
			PrepareStatus: func(p, old *corev1.Pod) { p.OwnerReferences = old.OwnerReferences },
		}},
	}
}

// GracePeriod returns the grace period of a pod's deletion as upstream's
// pod strategy decides it: the requested one, else the pod's
// terminationGracePeriodSeconds (30 when unset); but 0 when no node runs
// the pod (unbound, or already Succeeded or Failed), since nobody would
// confirm the deletion. Negative periods become 1.
func (podRules) GracePeriod(obj runtime.Object, requested *int64) int64 {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return 0
	}
	period := int64(corev1.DefaultTerminationGracePeriodSeconds)
	switch {
	case requested != nil:
		period = *requested
	case pod.Spec.TerminationGracePeriodSeconds != nil:
		period = *pod.Spec.TerminationGracePeriodSeconds
	}
	if pod.Spec.NodeName == "" || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		period = 0
	}
	if period < 0 {
		period = 1
	}
	return period
}

// preparePodForCreate resets the status a client may not set: a new pod
// is Pending, with its QoS class computed from its resources.
func preparePodForCreate(pod *corev1.Pod) {
	pod.Status = corev1.PodStatus{
		Phase:    corev1.PodPending,
		QOSClass: podQOS(pod),
	}
}

// preparePodForUpdate keeps the stored status; the status subresource
// changes it.
func preparePodForUpdate(pod, old *corev1.Pod) {
	pod.Status = old.Status
}

// podFields are the pod fields a field selector may use, beyond
// metadata.name and metadata.namespace.
func podFields(pod *corev1.Pod) fields.Set {
	podIP := ""
	if len(pod.Status.PodIPs) > 0 {
		podIP = pod.Status.PodIPs[0].IP
	}
	return fields.Set{
		"spec.nodeName":            pod.Spec.NodeName,
		"spec.restartPolicy":       string(pod.Spec.RestartPolicy),
		"spec.schedulerName":       pod.Spec.SchedulerName,
		"spec.serviceAccountName":  pod.Spec.ServiceAccountName,
		"spec.hostNetwork":         strconv.FormatBool(pod.Spec.HostNetwork),
		"status.phase":             string(pod.Status.Phase),
		"status.podIP":             podIP,
		"status.nominatedNodeName": pod.Status.NominatedNodeName,
	}
}

// podQOS computes a pod's quality of service class from the cpu and
// memory requests and limits of its containers (or of the pod, when it
// sets pod-level resources): Guaranteed when every container limits both
// and requests equal limits, BestEffort when nothing is requested or
// limited, Burstable otherwise.
func podQOS(pod *corev1.Pod) corev1.PodQOSClass {
	requests := corev1.ResourceList{}
	limits := corev1.ResourceList{}
	guaranteed := true
	add := func(list corev1.ResourceList, name corev1.ResourceName, q resource.Quantity) {
		sum := q.DeepCopy()
		if prev, ok := list[name]; ok {
			sum.Add(prev)
		}
		list[name] = sum
	}
	collect := func(r *corev1.ResourceRequirements) {
		for name, q := range r.Requests {
			if (name == corev1.ResourceCPU || name == corev1.ResourceMemory) && q.Sign() > 0 {
				add(requests, name, q)
			}
		}
		found := 0
		for name, q := range r.Limits {
			if (name == corev1.ResourceCPU || name == corev1.ResourceMemory) && q.Sign() > 0 {
				found++
				add(limits, name, q)
			}
		}
		if found != 2 {
			guaranteed = false
		}
	}
	if r := pod.Spec.Resources; r != nil && hasCPUOrMemory(r) {
		collect(r)
	} else {
		for i := range pod.Spec.Containers {
			collect(&pod.Spec.Containers[i].Resources)
		}
		for i := range pod.Spec.InitContainers {
			collect(&pod.Spec.InitContainers[i].Resources)
		}
	}
	if len(requests) == 0 && len(limits) == 0 {
		return corev1.PodQOSBestEffort
	}
	if guaranteed {
		for name, req := range requests {
			if lim, ok := limits[name]; !ok || lim.Cmp(req) != 0 {
				guaranteed = false
				break
			}
		}
	}
	if guaranteed && len(requests) == len(limits) {
		return corev1.PodQOSGuaranteed
	}
	return corev1.PodQOSBurstable
}

func hasCPUOrMemory(r *corev1.ResourceRequirements) bool {
	for _, list := range []corev1.ResourceList{r.Requests, r.Limits} {
		if _, ok := list[corev1.ResourceCPU]; ok {
			return true
		}
		if _, ok := list[corev1.ResourceMemory]; ok {
			return true
		}
	}
	return false
}

// Defaults, as SetObjectDefaults_Pod upstream applies them on decode.

// The priorities of the built-in priority classes, which the priority
// admission plugin resolves upstream.
var systemPriorities = map[string]int32{
	"":                        0,
	"system-cluster-critical": 2000000000,
	"system-node-critical":    2000001000,
}

func defaultPod(pod *corev1.Pod) {
	spec := &pod.Spec
	// Requests default to limits, for pods only (not templates).
	for _, cs := range [][]corev1.Container{spec.Containers, spec.InitContainers} {
		for i := range cs {
			defaultRequestsFromLimits(&cs[i].Resources)
		}
	}
	if spec.EnableServiceLinks == nil {
		spec.EnableServiceLinks = ptrTo(corev1.DefaultEnableServiceLinks)
	}
	if spec.HostNetwork {
		for _, cs := range [][]corev1.Container{spec.Containers, spec.InitContainers} {
			for i := range cs {
				for j := range cs[i].Ports {
					if cs[i].Ports[j].HostPort == 0 {
						cs[i].Ports[j].HostPort = cs[i].Ports[j].ContainerPort
					}
				}
			}
		}
	}
	// What the priority admission plugin sets when no priority class
	// beyond the built-in ones exists.
	if spec.Priority == nil {
		if p, ok := systemPriorities[spec.PriorityClassName]; ok {
			spec.Priority = ptrTo(p)
		}
	}
	if spec.Priority != nil && spec.PreemptionPolicy == nil {
		spec.PreemptionPolicy = ptrTo(corev1.PreemptLowerPriority)
	}
	defaultPodSpec(spec)
}

func defaultRequestsFromLimits(r *corev1.ResourceRequirements) {
	if r.Limits == nil {
		return
	}
	if r.Requests == nil {
		r.Requests = corev1.ResourceList{}
	}
	for name, q := range r.Limits {
		if _, ok := r.Requests[name]; !ok {
			r.Requests[name] = q.DeepCopy()
		}
	}
}

func defaultPodSpec(spec *corev1.PodSpec) {
	if spec.DNSPolicy == "" {
		spec.DNSPolicy = corev1.DNSClusterFirst
	}
	if spec.RestartPolicy == "" {
		spec.RestartPolicy = corev1.RestartPolicyAlways
	}
	if spec.SecurityContext == nil {
		spec.SecurityContext = &corev1.PodSecurityContext{}
	}
	if spec.TerminationGracePeriodSeconds == nil {
		spec.TerminationGracePeriodSeconds = ptrTo(int64(corev1.DefaultTerminationGracePeriodSeconds))
	}
	if spec.SchedulerName == "" {
		spec.SchedulerName = corev1.DefaultSchedulerName
	}
	// serviceAccount is the deprecated twin of serviceAccountName; the v1
	// conversion reads the old one when the new one is empty and always
	// writes both.
	if spec.ServiceAccountName == "" {
		spec.ServiceAccountName = spec.DeprecatedServiceAccount
	}
	spec.DeprecatedServiceAccount = spec.ServiceAccountName
	if spec.Resources != nil {
		roundResources(spec.Resources.Limits)
		roundResources(spec.Resources.Requests)
	}
	roundResources(spec.Overhead)
	for i := range spec.Volumes {
		defaultVolume(&spec.Volumes[i])
	}
	for i := range spec.Containers {
		defaultContainer(&spec.Containers[i])
	}
	for i := range spec.InitContainers {
		defaultContainer(&spec.InitContainers[i])
	}
	for i := range spec.EphemeralContainers {
		c := corev1.Container(spec.EphemeralContainers[i].EphemeralContainerCommon)
		defaultContainer(&c)
		spec.EphemeralContainers[i].EphemeralContainerCommon = corev1.EphemeralContainerCommon(c)
	}
}

func defaultContainer(c *corev1.Container) {
	if c.ImagePullPolicy == "" {
		c.ImagePullPolicy = defaultPullPolicy(c.Image)
	}
	if c.TerminationMessagePath == "" {
		c.TerminationMessagePath = corev1.TerminationMessagePathDefault
	}
	if c.TerminationMessagePolicy == "" {
		c.TerminationMessagePolicy = corev1.TerminationMessageReadFile
	}
	for i := range c.Ports {
		if c.Ports[i].Protocol == "" {
			c.Ports[i].Protocol = corev1.ProtocolTCP
		}
	}
	for i := range c.Env {
		if vf := c.Env[i].ValueFrom; vf != nil && vf.FieldRef != nil {
			defaultFieldSelector(vf.FieldRef)
		}
	}
	roundResources(c.Resources.Limits)
	roundResources(c.Resources.Requests)
	for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
		defaultProbe(p)
	}
	if c.Lifecycle != nil {
		for _, h := range []*corev1.LifecycleHandler{c.Lifecycle.PostStart, c.Lifecycle.PreStop} {
			if h != nil && h.HTTPGet != nil {
				defaultHTTPGet(h.HTTPGet)
			}
		}
	}
}

func defaultProbe(p *corev1.Probe) {
	if p == nil {
		return
	}
	if p.TimeoutSeconds == 0 {
		p.TimeoutSeconds = 1
	}
	if p.PeriodSeconds == 0 {
		p.PeriodSeconds = 10
	}
	if p.SuccessThreshold == 0 {
		p.SuccessThreshold = 1
	}
	if p.FailureThreshold == 0 {
		p.FailureThreshold = 3
	}
	if p.HTTPGet != nil {
		defaultHTTPGet(p.HTTPGet)
	}
	if p.GRPC != nil && p.GRPC.Service == nil {
		p.GRPC.Service = ptrTo("")
	}
}

func defaultHTTPGet(h *corev1.HTTPGetAction) {
	if h.Path == "" {
		h.Path = "/"
	}
	if h.Scheme == "" {
		h.Scheme = corev1.URISchemeHTTP
	}
}

func defaultFieldSelector(s *corev1.ObjectFieldSelector) {
	if s.APIVersion == "" {
		s.APIVersion = "v1"
	}
}

// defaultMode is 0644, the mode of files projected into volumes.
const defaultMode = int32(corev1.SecretVolumeSourceDefaultMode)

func defaultVolume(v *corev1.Volume) {
	s := &v.VolumeSource
	if (*s == corev1.VolumeSource{}) {
		s.EmptyDir = &corev1.EmptyDirVolumeSource{}
	}
	if s.HostPath != nil && s.HostPath.Type == nil {
		s.HostPath.Type = ptrTo(corev1.HostPathUnset)
	}
	if s.Secret != nil && s.Secret.DefaultMode == nil {
		s.Secret.DefaultMode = ptrTo(defaultMode)
	}
	if s.ConfigMap != nil && s.ConfigMap.DefaultMode == nil {
		s.ConfigMap.DefaultMode = ptrTo(defaultMode)
	}
	if s.DownwardAPI != nil {
		if s.DownwardAPI.DefaultMode == nil {
			s.DownwardAPI.DefaultMode = ptrTo(defaultMode)
		}
		for i := range s.DownwardAPI.Items {
			if s.DownwardAPI.Items[i].FieldRef != nil {
				defaultFieldSelector(s.DownwardAPI.Items[i].FieldRef)
			}
		}
	}
	if s.Projected != nil {
		if s.Projected.DefaultMode == nil {
			s.Projected.DefaultMode = ptrTo(defaultMode)
		}
		for i := range s.Projected.Sources {
			src := &s.Projected.Sources[i]
			if src.ServiceAccountToken != nil && src.ServiceAccountToken.ExpirationSeconds == nil {
				src.ServiceAccountToken.ExpirationSeconds = ptrTo(int64(3600))
			}
			if src.DownwardAPI != nil {
				for j := range src.DownwardAPI.Items {
					if src.DownwardAPI.Items[j].FieldRef != nil {
						defaultFieldSelector(src.DownwardAPI.Items[j].FieldRef)
					}
				}
			}
		}
	}
	if s.Image != nil && s.Image.PullPolicy == "" {
		s.Image.PullPolicy = defaultPullPolicy(s.Image.Reference)
	}
	if s.Ephemeral != nil && s.Ephemeral.VolumeClaimTemplate != nil {
		defaultClaimSpec(&s.Ephemeral.VolumeClaimTemplate.Spec)
	}
}

// imageRef matches an image reference in the distribution grammar:
// [domain[:port]/]path[:tag][@digest]. Group 1 is the tag, group 2 the
// digest.
var imageRef = regexp.MustCompile(`^` +
	`(?:(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*|\[[0-9a-fA-F:.]+\])(?::[0-9]+)?/)?` +
	`[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*` +
	`(?::([A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?` +
	`(?:@([A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9A-Fa-f]{32,}))?$`)

// defaultPullPolicy is Always for an image without tag or digest or with
// the tag latest, IfNotPresent otherwise (and for references that do not
// parse, which validation or the runtime will reject).
func defaultPullPolicy(image string) corev1.PullPolicy {
	m := imageRef.FindStringSubmatch(image)
	if m == nil {
		return corev1.PullIfNotPresent
	}
	tag, digest := m[1], m[2]
	if tag == "latest" || (tag == "" && digest == "") {
		return corev1.PullAlways
	}
	return corev1.PullIfNotPresent
}
