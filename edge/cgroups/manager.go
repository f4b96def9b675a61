package cgroups

import (
	"context"
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// QoS cgroup names under the root, as kubelet's.
const (
	BurstableDir  = "burstable"
	BestEffortDir = "besteffort"
	podPrefix     = "pod"
)

// ErrInvalidUID is returned for a pod UID that cannot name a cgroup.
var ErrInvalidUID = errors.New("pod uid cannot name a cgroup")

// Config configures a Manager.
type Config struct {
	// Root is the cgroup the pod tree is made in, relative to each
	// hierarchy's root, such as "/outpost-gw1/kubepods". Required, and
	// another for each agent on one machine.
	Root string
	// PodPidsLimit caps the processes of each pod; 0 for no cap
	// (kubelet's default).
	PodPidsLimit int64
	// MountRoot is where cgroup file systems are mounted; "" for
	// DefaultMountRoot.
	MountRoot string
	// KillTimeout bounds how long RemovePod waits for the processes it
	// killed to leave a cgroup that would not go; 0 for 10s.
	KillTimeout time.Duration
}

// DefaultConfig returns a Config with Root still to fill in.
func DefaultConfig() Config {
	return Config{
		PodPidsLimit: 0,                // no cap, as kubelet's -1
		MountRoot:    DefaultMountRoot, // the usual mount point
		KillTimeout:  10 * time.Second, // a SIGKILLed process is gone in far less
	}
}

// Validate reports what is wrong with c.
func (c Config) Validate() error {
	if c.Root == "" || !strings.HasPrefix(c.Root, "/") || path.Clean(c.Root) != c.Root || c.Root == "/" {
		return fmt.Errorf("cgroup root %q: want a clean absolute path below /, such as /outpost-NODE/kubepods", c.Root)
	}
	if c.PodPidsLimit < 0 {
		return fmt.Errorf("pod pids limit %d: want 0 (none) or more", c.PodPidsLimit)
	}
	if c.KillTimeout < 0 {
		return fmt.Errorf("kill timeout %v: want 0 or more", c.KillTimeout)
	}
	return nil
}

// Manager makes, limits, reads and removes the pod cgroups under its
// root. Its methods are safe for concurrent use for different pods; calls
// for one pod must not overlap.
type Manager struct {
	cfg    Config
	layout *Layout
}

// New detects the machine's cgroup layout (an error wrapping
// ErrNotSupported when there is none) and returns a Manager. It creates
// nothing; Setup does.
func New(cfg Config) (*Manager, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.KillTimeout == 0 {
		cfg.KillTimeout = 10 * time.Second
	}
	l, err := DetectLayout(cfg.MountRoot)
	if err != nil {
		return nil, err
	}
	return &Manager{cfg: cfg, layout: l}, nil
}

// Layout returns the detected layout.
func (m *Manager) Layout() *Layout { return m.layout }

// Root returns the configured root.
func (m *Manager) Root() string { return m.cfg.Root }

// PodCgroup returns the cgroup of pod, relative to each hierarchy's root,
// for ContainerSpec.CgroupParent: ROOT/pod<uid> for a Guaranteed pod,
// ROOT/burstable/pod<uid> or ROOT/besteffort/pod<uid> otherwise.
func (m *Manager) PodCgroup(pod *corev1.Pod) string {
	return m.podPath(pod.UID, QOSClass(pod))
}

func (m *Manager) podPath(uid types.UID, qos corev1.PodQOSClass) string {
	return path.Join(m.qosPath(qos), podPrefix+string(uid))
}

func (m *Manager) qosPath(qos corev1.PodQOSClass) string {
	switch qos {
	case corev1.PodQOSBurstable:
		return path.Join(m.cfg.Root, BurstableDir)
	case corev1.PodQOSBestEffort:
		return path.Join(m.cfg.Root, BestEffortDir)
	}
	return m.cfg.Root
}

func validUID(uid types.UID) error {
	s := string(uid)
	if s == "" || s == "." || s == ".." || strings.ContainsAny(s, "/\x00\n") || len(s) > 200 {
		return fmt.Errorf("%w: %q", ErrInvalidUID, s)
	}
	return nil
}

// Setup creates the root and its QoS cgroups, if missing, and sets the
// root's limits as kubelet enforces node allocatable on kubepods:
// cpuMilli and memoryLimit are the node's capacity less the system and
// kube reservations (not less the eviction threshold); 0 for no limit.
// The QoS cgroups get kubelet's initial shares (MinShares for both).
func (m *Manager) Setup(cpuMilli, memoryLimit int64) error {
	root := Resources{CPUShares: MilliCPUToShares(cpuMilli), MemoryLimit: max(memoryLimit, 0)}
	if cpuMilli <= 0 {
		root.CPUShares = 0
	}
	if err := m.layout.ensure(m.cfg.Root, root); err != nil {
		return fmt.Errorf("set up cgroup root: %w", err)
	}
	for _, q := range []corev1.PodQOSClass{corev1.PodQOSBurstable, corev1.PodQOSBestEffort} {
		if err := m.layout.ensure(m.qosPath(q), Resources{CPUShares: MinShares}); err != nil {
			return fmt.Errorf("set up %s cgroup: %w", q, err)
		}
	}
	return nil
}

// UpdateQoS sets the QoS cgroups' cpu shares as kubelet's QoS manager
// does: burstable's to burstableShares (BurstableShares of the pods
// admitted to the node), besteffort's to MinShares. Call it after a pod
// is admitted (before its cgroup is made) and after one is removed.
func (m *Manager) UpdateQoS(burstableShares uint64) error {
	if err := m.layout.set(m.qosPath(corev1.PodQOSBurstable), Resources{CPUShares: burstableShares}); err != nil {
		return fmt.Errorf("update burstable cgroup: %w", err)
	}
	if err := m.layout.set(m.qosPath(corev1.PodQOSBestEffort), Resources{CPUShares: MinShares}); err != nil {
		return fmt.Errorf("update besteffort cgroup: %w", err)
	}
	return nil
}

// EnsurePod creates pod's cgroup in every hierarchy, if missing, and sets
// its limits (PodResources with the configured pids limit). Setup must
// have run.
func (m *Manager) EnsurePod(pod *corev1.Pod) error {
	if err := validUID(pod.UID); err != nil {
		return err
	}
	p := m.PodCgroup(pod)
	if err := m.layout.ensure(p, PodResources(pod, m.cfg.PodPidsLimit)); err != nil {
		return fmt.Errorf("pod cgroup %s: %w", p, err)
	}
	return nil
}

// PodCgroupInfo is a pod cgroup found under the root.
type PodCgroupInfo struct {
	UID  types.UID
	QOS  corev1.PodQOSClass
	Path string // relative to each hierarchy's root
}

// ListPods returns the pod cgroups under the root, in any hierarchy, for a
// start-up sweep of those whose pods are not kept. A pod's cgroup found
// under two QoS classes is listed twice.
func (m *Manager) ListPods() ([]PodCgroupInfo, error) {
	var out []PodCgroupInfo
	seen := map[string]bool{}
	for _, q := range []corev1.PodQOSClass{corev1.PodQOSGuaranteed, corev1.PodQOSBurstable, corev1.PodQOSBestEffort} {
		names, err := m.layout.children(m.qosPath(q))
		if err != nil {
			return nil, fmt.Errorf("list pod cgroups: %w", err)
		}
		for _, n := range names {
			uid, ok := strings.CutPrefix(n, podPrefix)
			if !ok || uid == "" {
				continue
			}
			p := m.podPath(types.UID(uid), q)
			if seen[p] {
				continue
			}
			seen[p] = true
			out = append(out, PodCgroupInfo{UID: types.UID(uid), QOS: q, Path: p})
		}
	}
	return out, nil
}

// findPod returns the cgroups of the pod with uid, under whichever QoS
// classes they are.
func (m *Manager) findPod(uid types.UID) []string {
	var out []string
	for _, q := range []corev1.PodQOSClass{corev1.PodQOSGuaranteed, corev1.PodQOSBurstable, corev1.PodQOSBestEffort} {
		p := m.podPath(uid, q)
		if m.layout.existsAny(p) {
			out = append(out, p)
		}
	}
	return out
}

// RemovePod removes the cgroup of the pod with uid, under whichever QoS
// class it is, from every hierarchy, with whatever runc left below it.
// Remove a pod's containers first: if a cgroup will not go because
// processes remain, RemovePod kills them (SIGKILL), as kubelet's pod
// container manager does, waits up to the kill timeout for them to
// leave, and tries again. Removing a pod without a cgroup is not an error.
func (m *Manager) RemovePod(ctx context.Context, uid types.UID) error {
	if err := validUID(uid); err != nil {
		return err
	}
	for _, p := range m.findPod(uid) {
		if err := m.layout.remove(ctx, p, m.cfg.KillTimeout); err != nil {
			return fmt.Errorf("remove pod cgroup %s: %w", p, err)
		}
	}
	return nil
}

// PodStats returns the readings of the pod with uid's cgroup. It returns
// an error wrapping fs.ErrNotExist when the pod has none.
func (m *Manager) PodStats(uid types.UID) (Stats, error) {
	if err := validUID(uid); err != nil {
		return Stats{}, err
	}
	ps := m.findPod(uid)
	if len(ps) == 0 {
		return Stats{}, fmt.Errorf("pod %s cgroup: %w", uid, errNotExist)
	}
	return m.layout.Stats(ps[0])
}

// dirsOf returns path's directory in every tree.
func (l *Layout) dirsOf(p string) []string {
	out := make([]string, len(l.dirs))
	for i, d := range l.dirs {
		out[i] = filepath.Join(d, p)
	}
	return out
}

// PodPath returns the cgroup of the pod with uid (relative to each
// hierarchy's root), under whichever QoS class it is; its containers'
// are below it, named by their IDs. It returns an error wrapping
// fs.ErrNotExist when the pod has none.
func (m *Manager) PodPath(uid types.UID) (string, error) {
	if err := validUID(uid); err != nil {
		return "", err
	}
	ps := m.findPod(uid)
	if len(ps) == 0 {
		return "", fmt.Errorf("pod %s cgroup: %w", uid, errNotExist)
	}
	return ps[0], nil
}
