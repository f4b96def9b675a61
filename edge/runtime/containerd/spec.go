package containerd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/containerd/containerd/v2/contrib/seccomp"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/oci"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/outpost-mesh/outpost/edge/runtime"
)

// groupAnnotation is the annotation by which containerd's runc shim (v2)
// groups containers into one shim process: the first container of a group
// starts the shim, the others connect to its socket, named by a hash of
// containerd's address, the namespace and the group. The shim exits when
// its last container is deleted; deleting the container that started it
// leaves it serving the others.
const groupAnnotation = "io.kubernetes.cri.sandbox-id"

// nodeGroup is the shim group of every pod with ShimPerNode.
const nodeGroup = "outpost-node"

// processArgs returns the container's command line by Kubernetes' rules:
// Command replaces the image's entrypoint and drops its cmd; Args alone
// replace the image's cmd.
func processArgs(c *runtime.ContainerSpec, img ocispec.ImageConfig) ([]string, error) {
	var args []string
	switch {
	case len(c.Command) > 0:
		args = append(slices.Clone(c.Command), c.Args...)
	case len(c.Args) > 0:
		args = append(slices.Clone(img.Entrypoint), c.Args...)
	default:
		args = append(slices.Clone(img.Entrypoint), img.Cmd...)
	}
	if len(args) == 0 {
		return nil, fmt.Errorf("no command specified: %w", runtime.ErrNotSupported)
	}
	return args, nil
}

// verifyNonRoot is kubelet's verifyRunAsNonRoot: with RunAsNonRoot, the
// container must not run as UID 0, and an image user that is a name
// cannot be verified. An image with no user runs as root. podName is
// kubelet's "name_namespace(uid)".
func verifyNonRoot(c *runtime.ContainerSpec, imageUser, podName string) error {
	if !c.RunAsNonRoot {
		return nil
	}
	if c.RunAsUser != nil {
		if *c.RunAsUser == 0 {
			return fmt.Errorf("container's runAsUser breaks non-root policy (pod: %q, container: %s): %w", podName, c.Name, runtime.ErrContainerConfig)
		}
		return nil
	}
	user, _, _ := strings.Cut(imageUser, ":")
	if user == "" {
		user = "0"
	}
	uid, err := strconv.ParseInt(user, 10, 64)
	switch {
	case err != nil:
		return fmt.Errorf("container has runAsNonRoot and image has non-numeric user (%s), cannot verify user is non-root (pod: %q, container: %s): %w", user, podName, c.Name, runtime.ErrContainerConfig)
	case uid == 0:
		return fmt.Errorf("container has runAsNonRoot and image will run as root (pod: %q, container: %s): %w", podName, c.Name, runtime.ErrContainerConfig)
	}
	return nil
}

// cpuShares is kubelet's MilliCPUToShares for a non-zero request.
func cpuShares(milli int64) uint64 {
	return uint64(max(milli*1024/1000, 2))
}

// cpuQuota is kubelet's MilliCPUToQuota with a period of 100ms.
func cpuQuota(milli int64) (quota int64, period uint64) {
	const p = 100000
	return max(milli*p/1000, 1000), p
}

// capabilities returns the capability set of a container from the
// default set by CRI's rules: "ALL" in add grants every capability, in
// drop removes the defaults, before the named ones are added and removed.
// Names may have the CAP_ prefix or not.
func capabilities(defaults, all, add, drop []string) []string {
	norm := func(l []string) []string {
		out := make([]string, 0, len(l))
		for _, c := range l {
			c = strings.ToUpper(c)
			if c != "ALL" && !strings.HasPrefix(c, "CAP_") {
				c = "CAP_" + c
			}
			out = append(out, c)
		}
		return out
	}
	add, drop = norm(add), norm(drop)
	caps := slices.Clone(defaults)
	if slices.Contains(add, "ALL") {
		caps = slices.Clone(all)
	}
	if slices.Contains(drop, "ALL") {
		caps = nil
	}
	for _, c := range add {
		if c != "ALL" && !slices.Contains(caps, c) {
			caps = append(caps, c)
		}
	}
	return slices.DeleteFunc(caps, func(c string) bool { return slices.Contains(drop, c) })
}

// withCapabilities applies capabilities to every set but the ambient one.
func withCapabilities(add, drop []string) oci.SpecOpts {
	return func(ctx context.Context, cl oci.Client, c *containers.Container, s *oci.Spec) error {
		if s.Process.Capabilities == nil {
			s.Process.Capabilities = &specs.LinuxCapabilities{}
		}
		all := s.Process.Capabilities.Bounding
		if slices.Contains(add, "ALL") || slices.Contains(add, "all") {
			var tmp oci.Spec
			tmp.Process = &specs.Process{}
			if err := oci.WithAllCurrentCapabilities(ctx, cl, c, &tmp); err != nil {
				return err
			}
			all = tmp.Process.Capabilities.Bounding
		}
		caps := capabilities(s.Process.Capabilities.Bounding, all, add, drop)
		s.Process.Capabilities.Bounding = caps
		s.Process.Capabilities.Effective = slices.Clone(caps)
		s.Process.Capabilities.Permitted = slices.Clone(caps)
		s.Process.Capabilities.Inheritable = nil
		return nil
	}
}

// bindMounts returns the spec mounts of ms, as CRI makes them: rbind,
// rprivate, ro or rw; a missing host path is made a directory.
func bindMounts(ms []runtime.Mount) ([]specs.Mount, error) {
	out := make([]specs.Mount, 0, len(ms))
	for _, m := range ms {
		if !path.IsAbs(m.ContainerPath) || !path.IsAbs(m.HostPath) {
			return nil, fmt.Errorf("mount %q at %q: paths must be absolute: %w", m.HostPath, m.ContainerPath, runtime.ErrNotSupported)
		}
		if _, err := os.Stat(m.HostPath); errors.Is(err, os.ErrNotExist) {
			if err := os.MkdirAll(m.HostPath, 0o755); err != nil {
				return nil, fmt.Errorf("mount %q: %w", m.HostPath, err)
			}
		}
		mode := "rw"
		if m.ReadOnly {
			mode = "ro"
		}
		out = append(out, specs.Mount{
			Destination: path.Clean(m.ContainerPath),
			Type:        "bind",
			Source:      m.HostPath,
			Options:     []string{"rbind", "rprivate", mode},
		})
	}
	// Shallower destinations first, so that /a is mounted before /a/b.
	slices.SortStableFunc(out, func(a, b specs.Mount) int {
		return strings.Count(a.Destination, "/") - strings.Count(b.Destination, "/")
	})
	return out, nil
}

// withMounts adds ms, replacing default mounts at the same destination.
func withMounts(ms []specs.Mount) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		s.Mounts = slices.DeleteFunc(s.Mounts, func(d specs.Mount) bool {
			return slices.ContainsFunc(ms, func(m specs.Mount) bool { return m.Destination == path.Clean(d.Destination) })
		})
		s.Mounts = append(s.Mounts, ms...)
		return nil
	}
}

// withNamespaces joins the pod's network namespace, or, for the host's
// network, shares the host's network and UTS namespaces, as CRI does for
// hostNetwork pods.
func withNamespaces(netns, hostname string) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		nss := s.Linux.Namespaces[:0]
		for _, ns := range s.Linux.Namespaces {
			switch ns.Type {
			case specs.NetworkNamespace:
				if netns == "" {
					continue
				}
				ns.Path = netns
			case specs.UTSNamespace:
				if netns == "" {
					continue
				}
			}
			nss = append(nss, ns)
		}
		s.Linux.Namespaces = nss
		if netns != "" && hostname != "" {
			s.Hostname = hostname
		} else {
			s.Hostname = ""
		}
		return nil
	}
}

// withProcess sets what the default spec has and a pod's container must
// not: its rlimits (the container inherits containerd's) and
// no_new_privs, which Kubernetes leaves off unless asked.
func withProcess(c *runtime.ContainerSpec) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		s.Process.Rlimits = nil
		s.Process.NoNewPrivileges = c.NoNewPrivileges
		s.Process.Terminal = c.TTY
		adj := restrictOOMScoreAdj(c.OOMScoreAdj)
		s.Process.OOMScoreAdj = &adj
		if s.Linux.Seccomp != nil && !c.SeccompRuntimeDefault {
			s.Linux.Seccomp = nil
		}
		return nil
	}
}

// specOpts returns the options that make a container's OCI spec from its
// ContainerSpec and image config, as CRI's container_create does. id is
// the container's ID, group its shim group.
func specOpts(c *runtime.ContainerSpec, img ocispec.ImageConfig, id, group string) ([]oci.SpecOpts, error) {
	args, err := processArgs(c, img)
	if err != nil {
		return nil, err
	}
	env := make([]string, 0, len(c.Env)+1)
	if c.TTY {
		env = append(env, "TERM=xterm")
	}
	for _, e := range c.Env {
		env = append(env, e.Name+"="+e.Value)
	}
	cwd := c.WorkingDir
	if cwd == "" {
		cwd = img.WorkingDir
	}
	if cwd == "" {
		cwd = "/"
	}
	mounts, err := bindMounts(c.Mounts)
	if err != nil {
		return nil, err
	}
	opts := []oci.SpecOpts{
		withSpecVersion,
		oci.WithProcessArgs(args...),
		oci.WithEnv(img.Env),
		oci.WithEnv(env),
		oci.WithProcessCwd(cwd),
		withNamespaces(c.NetNS, c.Hostname),
		withMounts(mounts),
		withProcess(c),
		oci.WithAnnotations(map[string]string{groupAnnotation: group}),
		// The user and groups: the image's user, runAsUser,
		// runAsGroup and supplementalGroups, resolved in the image's
		// /etc/passwd and /etc/group.
		withUser(c, img.User),
	}

	if c.Privileged {
		opts = append(opts, oci.WithPrivileged, oci.WithAllDevicesAllowed, oci.WithHostDevices)
	} else {
		opts = append(opts, withCapabilities(c.CapAdd, c.CapDrop))
		if c.SeccompRuntimeDefault {
			opts = append(opts, seccomp.WithDefaultProfile())
		}
	}
	if c.ReadOnlyRootFilesystem {
		opts = append(opts, oci.WithRootFSReadonly())
	}
	if c.CgroupParent != "" {
		opts = append(opts, oci.WithCgroup(path.Join(c.CgroupParent, id)))
	}
	if c.CPURequestMilli > 0 {
		opts = append(opts, oci.WithCPUShares(cpuShares(c.CPURequestMilli)))
	}
	if c.CPULimitMilli > 0 {
		opts = append(opts, oci.WithCPUCFS(cpuQuota(c.CPULimitMilli)))
	}
	if c.MemoryLimitBytes > 0 {
		// Swap limit equal to the memory limit: no swap, as kubelet.
		opts = append(opts, oci.WithMemoryLimit(uint64(c.MemoryLimitBytes)), oci.WithMemorySwap(c.MemoryLimitBytes))
	}
	return opts, nil
}

// specVersion is the OCI runtime spec version containers are made with:
// containerd 1.6's, which every runtime in use reads (crun before 1.9
// refuses any version but 1.0.x); the fields used are all in 1.0.
const specVersion = "1.0.2-dev"

func withSpecVersion(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
	s.Version = specVersion
	return nil
}

// restrictOOMScoreAdj returns adj, or the agent's own OOM score adjustment
// if adj is lower and the agent may not lower it (it lacks
// CAP_SYS_RESOURCE, as in some sandboxes and user namespaces): runc would
// fail the container's start otherwise. containerd's CRI plugin does the
// same with restrict_oom_score_adj.
func restrictOOMScoreAdj(adj int) int {
	own, canLower := ownOOMScoreAdj()
	if adj < own && !canLower {
		return own
	}
	return adj
}

// ownOOMScoreAdj returns the process's OOM score adjustment and whether it
// has CAP_SYS_RESOURCE, read once.
var ownOOMScoreAdj = sync.OnceValues(func() (int, bool) {
	own := 0
	if b, err := os.ReadFile("/proc/self/oom_score_adj"); err == nil {
		own, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	const capSysResource = 24
	can := true
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
				if caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64); err == nil {
					can = caps&(1<<capSysResource) != 0
				}
			}
		}
	}
	return own, can
})
