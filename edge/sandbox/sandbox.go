// Package sandbox readies what the containers of a pod share on a node
// that runs real containers, as kubelet's pod sandbox and volume manager
// do: its network namespace and IP (netd), its volumes (edge/volumes), its
// cgroup (edge/cgroups), its /etc/hosts, hostname and resolver files
// (netd/podfiles), its termination-message files and log directory; and
// removes them once the pod is gone. A Sandbox is the pod workers'
// podworker.Sandbox; only edge/agent builds one.
package sandbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/outpost-mesh/outpost/edge/cgroups"
	"github.com/outpost-mesh/outpost/edge/logs"
	"github.com/outpost-mesh/outpost/edge/pods"
	"github.com/outpost-mesh/outpost/edge/runtime"
	"github.com/outpost-mesh/outpost/edge/volumes"
	"github.com/outpost-mesh/outpost/netd"
	"github.com/outpost-mesh/outpost/netd/ipam"
	"github.com/outpost-mesh/outpost/netd/podfiles"
)

// Network is the node's pod network; a *netd.Network is one.
type Network interface {
	AddPod(ctx context.Context, spec netd.PodSpec) (netd.Attachment, error)
	RemovePod(ctx context.Context, uid string) error
	Sweep(ctx context.Context, keep func(uid string) bool) error
	Leases(ctx context.Context) ([]ipam.Lease, error)
}

// Volumes sets pods' volumes up; a *volumes.Manager is one.
type Volumes interface {
	Setup(ctx context.Context, pod *corev1.Pod, opts volumes.SetupOptions) (*volumes.PodVolumes, error)
	Teardown(ctx context.Context, uid string) error
	Sweep(ctx context.Context, keep func(uid string) bool) error
}

// Cgroups makes pods' cgroups; a *cgroups.Manager is one.
type Cgroups interface {
	PodCgroup(pod *corev1.Pod) string
	// UpdateQoS sets the QoS cgroups' shares, the burstable one's to
	// burstableShares.
	UpdateQoS(burstableShares uint64) error
	EnsurePod(pod *corev1.Pod) error
	RemovePod(ctx context.Context, uid types.UID) error
	ListPods() ([]cgroups.PodCgroupInfo, error)
}

var (
	_ Network = (*netd.Network)(nil)
	_ Volumes = (*volumes.Manager)(nil)
	_ Cgroups = (*cgroups.Manager)(nil)
)

// Config configures a Sandbox.
type Config struct {
	// Dir holds each pod's own files, as Dir/<uid>/: its resolver files
	// and its containers' termination-message files. Required.
	Dir string
	// LogDir holds the containers' logs, as kubelet's /var/log/pods:
	// LogDir/<namespace>_<name>_<uid>/<container>/<attempt>.log. Required.
	LogDir string

	Network Network // nil: no pod network; only hostNetwork pods run
	Volumes Volumes // required
	Cgroups Cgroups // nil: pods get the runtime's default cgroups

	// Node is what the pods' resolver files take from the node.
	Node podfiles.Node
	// NodeName is the hostname of hostNetwork pods.
	NodeName string
	// Allocatable is the node's allocatable resources (the downward
	// API's default limits, memory-backed volumes' bound), and
	// MemoryCapacity its memory, which the OOM score adjustments are
	// relative to.
	Allocatable    corev1.ResourceList
	MemoryCapacity int64
	// ServiceAccountAutomount returns the automountServiceAccountToken of
	// the pod's service account, nil when unset or unknown; nil for none.
	ServiceAccountAutomount func(pod *corev1.Pod) *bool
	// PullCredentials returns the registry credentials of the pod's
	// imagePullSecrets; nil for none.
	PullCredentials func(pod *corev1.Pod) []runtime.Credential

	Logger *slog.Logger // nil discards
}

// Validate reports the first invalid field.
func (c *Config) Validate() error {
	switch {
	case c.Dir == "" || c.LogDir == "":
		return errors.New("sandbox directory and log directory are required")
	case c.Volumes == nil:
		return errors.New("volumes are required")
	}
	return nil
}

// Sandbox readies pods. Its methods are safe for concurrent use; calls for
// one pod are serialized.
type Sandbox struct {
	cfg Config
	log *slog.Logger

	mu     sync.Mutex
	locks  map[string]*sync.Mutex  // by pod UID
	ips    map[string]netip.Addr   // by pod UID, as leased
	loaded bool                    // ips holds the leases from before the start
	ready  map[string]*preparedPod // by pod UID

	qosMu     sync.Mutex
	qos       map[string]int64 // by UID of the pods the QoS cgroups' shares count: cgroups.BurstableMilliCPU
	qosMilli  int64            // the sum of qos
	qosShares uint64           // the burstable cgroup's shares as last set; 0 before
}

// preparedPod is what Container readied of a pod, kept while the pod is.
type preparedPod struct {
	netns string // "" for a hostNetwork pod
	files podfiles.Files
}

// New checks cfg and returns a Sandbox; it starts and touches nothing.
func New(cfg Config) (*Sandbox, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("sandbox config: %w", err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Sandbox{
		cfg: cfg, log: cfg.Logger,
		locks: map[string]*sync.Mutex{},
		ips:   map[string]netip.Addr{},
		ready: map[string]*preparedPod{},
		qos:   map[string]int64{},
	}, nil
}

// lock serializes the calls for one pod; the caller calls the result.
func (s *Sandbox) lock(uid string) (unlock func()) {
	s.mu.Lock()
	l := s.locks[uid]
	if l == nil {
		l = &sync.Mutex{}
		s.locks[uid] = l
	}
	s.mu.Unlock()
	l.Lock()
	return l.Unlock
}

// configError marks err as caused by the pod's spec or the objects it
// refers to, which the pod's status words CreateContainerConfigError.
func configError(err error) error {
	return fmt.Errorf("%w: %w", pods.ErrContainerConfig, err)
}

// Container readies pod and fills spec with what container c, about to
// start as attempt, needs of it: the network namespace, the cgroup and
// OOM score, the mounts of its volumes and of the pod's resolver files
// and its termination-message file, and its log file.
func (s *Sandbox) Container(ctx context.Context, pod *corev1.Pod, c *corev1.Container, attempt int, spec *runtime.ContainerSpec) error {
	uid := string(pod.UID)
	if err := checkUID(uid); err != nil {
		return configError(err)
	}
	unlock := s.lock(uid)
	defer unlock()

	p, err := s.prepare(ctx, pod)
	if err != nil {
		return err
	}
	spec.NetNS = p.netns
	if s.cfg.PullCredentials != nil && len(pod.Spec.ImagePullSecrets) > 0 {
		spec.PullCredentials = s.cfg.PullCredentials(pod)
	}
	if s.cfg.Cgroups != nil {
		spec.CgroupParent = s.cfg.Cgroups.PodCgroup(pod)
		spec.OOMScoreAdj = cgroups.OOMScoreAdj(pod, c, s.cfg.MemoryCapacity)
	}

	// The volumes each time, which brings their content up to date too.
	pv, err := s.setupVolumes(ctx, pod)
	if err != nil {
		return err
	}
	mounts, err := pv.Mounts(c, spec.Env)
	if err != nil {
		return configError(err)
	}
	taken := map[string]bool{}
	for _, m := range mounts {
		taken[m.ContainerPath] = true
	}
	// kubelet's own mounts, unless the container mounts something there.
	for _, m := range []runtime.Mount{
		{HostPath: p.files.Hosts, ContainerPath: "/etc/hosts"},
		{HostPath: p.files.Hostname, ContainerPath: "/etc/hostname"},
		{HostPath: p.files.ResolvConf, ContainerPath: "/etc/resolv.conf"},
	} {
		if !taken[m.ContainerPath] {
			mounts = append(mounts, m)
		}
	}
	msgPath := c.TerminationMessagePath
	if msgPath == "" {
		msgPath = corev1.TerminationMessagePathDefault
	}
	if !taken[msgPath] {
		host, err := s.terminationFile(uid, c.Name, attempt)
		if err != nil {
			return err
		}
		mounts = append(mounts, runtime.Mount{HostPath: host, ContainerPath: msgPath})
	}
	spec.Mounts = mounts

	spec.LogPath = s.LogPath(pod.Namespace, pod.Name, uid, c.Name, attempt)
	if err := os.MkdirAll(filepath.Dir(spec.LogPath), 0o755); err != nil {
		return fmt.Errorf("make log directory: %w", err)
	}
	return nil
}

// prepare readies what the pod's containers share and does not change:
// its network, its cgroup, its resolver files. s.lock(uid) is held.
func (s *Sandbox) prepare(ctx context.Context, pod *corev1.Pod) (*preparedPod, error) {
	uid := string(pod.UID)
	s.mu.Lock()
	p := s.ready[uid]
	s.mu.Unlock()
	if p != nil {
		return p, nil
	}
	p = &preparedPod{}
	var ips []netip.Addr
	if !pod.Spec.HostNetwork {
		if s.cfg.Network == nil {
			return nil, fmt.Errorf("%w: this node has no pod network; only hostNetwork pods run on it", runtime.ErrNotSupported)
		}
		att, err := s.cfg.Network.AddPod(ctx, netd.PodSpec{UID: uid, Namespace: pod.Namespace, Name: pod.Name, HostPorts: hostPorts(pod)})
		if err != nil {
			if errors.Is(err, netd.ErrHostPortConflict) {
				return nil, configError(err)
			}
			return nil, fmt.Errorf("set up pod network: %w", err)
		}
		p.netns = att.NetNSPath
		ips = []netip.Addr{att.IP}
		s.mu.Lock()
		s.ips[uid] = att.IP
		s.mu.Unlock()
	}
	if s.cfg.Cgroups != nil {
		if err := s.countQoS(uid, pod); err != nil {
			return nil, err
		}
		if err := s.cfg.Cgroups.EnsurePod(pod); err != nil {
			return nil, fmt.Errorf("make pod cgroup: %w", err)
		}
	}
	files, err := podfiles.Write(filepath.Join(s.podDir(uid), "etc"), s.cfg.Node, podFilesPod(pod, s.cfg.NodeName, s.cfg.Node.ClusterDomain, ips))
	if err != nil {
		return nil, fmt.Errorf("write pod resolver files: %w", err)
	}
	for _, w := range files.Warnings {
		s.log.Info("pod DNS config", "pod", pod.Namespace+"/"+pod.Name, "warning", w)
	}
	p.files = files
	s.mu.Lock()
	s.ready[uid] = p
	s.mu.Unlock()
	return p, nil
}

// Refresh brings the volumes of a pod that was readied, by this process
// or by the agent before a restart or reboot, up to date with the objects
// they project and its tokens; a pod never readied is left alone. It
// counts the pod in the QoS cgroups' shares.
func (s *Sandbox) Refresh(ctx context.Context, pod *corev1.Pod) error {
	uid := string(pod.UID)
	if checkUID(uid) != nil {
		return nil
	}
	var errs []error
	if s.cfg.Cgroups != nil {
		errs = append(errs, s.countQoS(uid, pod))
	}
	s.mu.Lock()
	_, ok := s.ready[uid]
	s.mu.Unlock()
	if !ok {
		// Readied by the agent before a restart, or before a reboot
		// that took its memory volumes: its directory says so.
		if _, err := os.Stat(s.podDir(uid)); err != nil {
			return errors.Join(errs...)
		}
	}
	unlock := s.lock(uid)
	defer unlock()
	_, err := s.setupVolumes(ctx, pod)
	return errors.Join(append(errs, err)...)
}

// countQoS counts pod, of UID uid, in the QoS cgroups' shares, or, with
// pod nil, no longer; it sets the shares when they change, as kubelet's
// QoS manager does when a pod is admitted or goes.
func (s *Sandbox) countQoS(uid string, pod *corev1.Pod) error {
	s.qosMu.Lock()
	defer s.qosMu.Unlock()
	s.qosMilli -= s.qos[uid]
	if pod == nil {
		delete(s.qos, uid)
	} else {
		s.qos[uid] = cgroups.BurstableMilliCPU(pod)
		s.qosMilli += s.qos[uid]
	}
	shares := cgroups.MilliCPUToShares(s.qosMilli)
	if shares == s.qosShares {
		return nil
	}
	if err := s.cfg.Cgroups.UpdateQoS(shares); err != nil {
		return fmt.Errorf("update QoS cgroups: %w", err)
	}
	s.qosShares = shares
	return nil
}

// setupVolumes sets the pod's volumes up, or brings them up to date. s.lock(uid) is held.
func (s *Sandbox) setupVolumes(ctx context.Context, pod *corev1.Pod) (*volumes.PodVolumes, error) {
	var sa *bool
	if s.cfg.ServiceAccountAutomount != nil {
		sa = s.cfg.ServiceAccountAutomount(pod)
	}
	pv, err := s.cfg.Volumes.Setup(ctx, pod, volumes.SetupOptions{NodeAllocatable: s.cfg.Allocatable, ServiceAccountAutomount: sa})
	if err != nil {
		if errors.Is(err, volumes.ErrMissingSource) || errors.Is(err, volumes.ErrUnsupported) || errors.Is(err, volumes.ErrInvalidSpec) {
			return nil, configError(err)
		}
		return nil, fmt.Errorf("set up volumes: %w", err)
	}
	return pv, nil
}

// hostPorts returns the hostPorts the pod's containers ask for.
func hostPorts(pod *corev1.Pod) []netd.HostPort {
	var out []netd.HostPort
	for _, l := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range l {
			for _, cp := range l[i].Ports {
				if cp.HostPort <= 0 || cp.HostPort > 65535 || cp.ContainerPort <= 0 || cp.ContainerPort > 65535 {
					continue
				}
				hp := netd.HostPort{Protocol: netd.Protocol(cp.Protocol), HostPort: uint16(cp.HostPort), ContainerPort: uint16(cp.ContainerPort)}
				if a, err := netip.ParseAddr(cp.HostIP); err == nil {
					hp.HostIP = a
				}
				out = append(out, hp)
			}
		}
	}
	return out
}

// podFilesPod is what the pod's resolver files say of it, as kubelet
// words it.
func podFilesPod(pod *corev1.Pod, nodeName, clusterDomain string, ips []netip.Addr) podfiles.Pod {
	p := podfiles.Pod{
		Hostname:    pod.Name,
		Namespace:   pod.Namespace,
		IPs:         ips,
		HostNetwork: pod.Spec.HostNetwork,
		DNSPolicy:   podfiles.DNSPolicy(pod.Spec.DNSPolicy),
	}
	if pod.Spec.Hostname != "" {
		p.Hostname = pod.Spec.Hostname
	}
	if len(p.Hostname) > 63 {
		p.Hostname = p.Hostname[:63]
	}
	if pod.Spec.HostNetwork {
		p.Hostname = nodeName
	}
	if pod.Spec.Subdomain != "" && clusterDomain != "" {
		p.Domain = pod.Spec.Subdomain + "." + pod.Namespace + ".svc." + clusterDomain
	}
	for _, a := range pod.Spec.HostAliases {
		p.HostAliases = append(p.HostAliases, podfiles.HostAlias{IP: a.IP, Hostnames: a.Hostnames})
	}
	if dc := pod.Spec.DNSConfig; dc != nil {
		c := &podfiles.DNSConfig{Nameservers: dc.Nameservers, Searches: dc.Searches}
		for _, o := range dc.Options {
			if o.Value != nil {
				c.Options = append(c.Options, o.Name+":"+*o.Value)
			} else {
				c.Options = append(c.Options, o.Name)
			}
		}
		p.DNSConfig = c
	}
	return p
}

// podDir returns the directory of the pod's own files.
func (s *Sandbox) podDir(uid string) string { return filepath.Join(s.cfg.Dir, uid) }

// LogPath returns the log file of attempt of container c of a pod.
func (s *Sandbox) LogPath(namespace, name, uid, c string, attempt int) string {
	return filepath.Join(s.cfg.LogDir, namespace+"_"+name+"_"+uid, c, strconv.Itoa(attempt)+".log")
}

// terminationFile makes the empty file whose content becomes the
// termination message of attempt of container c, and returns its path.
func (s *Sandbox) terminationFile(uid, c string, attempt int) (string, error) {
	dir := filepath.Join(s.podDir(uid), "containers", c)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("make termination message file: %w", err)
	}
	path := filepath.Join(dir, strconv.Itoa(attempt)+".termination-log")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o666)
	if err != nil {
		return "", fmt.Errorf("make termination message file: %w", err)
	}
	if err := f.Chmod(0o666); err != nil { // writable by any user the container runs as
		f.Close()
		return "", err
	}
	return path, f.Close()
}

// maxTerminationMessage is kubelet's bound on one container's termination
// message.
const maxTerminationMessage = 4096

// Kubelet's bounds on a termination message taken from the log: its last
// 80 lines, 2048 bytes.
const (
	fallbackLines = 80
	fallbackBytes = 2048
)

// TerminationMessage returns what attempt of container c of pod wrote to
// its termination-message file, at most 4096 bytes; if it wrote nothing
// and fallbackToLogs is set (its policy is FallbackToLogsOnError and it
// failed), the end of its log instead; "" if neither has anything.
func (s *Sandbox) TerminationMessage(pod runtime.PodRef, c string, attempt int, fallbackToLogs bool) string {
	if checkUID(pod.UID) != nil {
		return ""
	}
	if f, err := os.Open(filepath.Join(s.podDir(pod.UID), "containers", c, strconv.Itoa(attempt)+".termination-log")); err == nil {
		defer f.Close()
		b := make([]byte, maxTerminationMessage)
		if n, _ := f.Read(b); n > 0 {
			return string(b[:n])
		}
	}
	if !fallbackToLogs {
		return ""
	}
	msg, err := logs.Tail(s.LogPath(pod.Namespace, pod.Name, pod.UID, c, attempt), fallbackLines, fallbackBytes)
	if err != nil {
		return ""
	}
	return msg
}

// IP returns the pod's IP, "" if it has none: its lease, which outlives
// an agent restart and a reboot.
func (s *Sandbox) IP(uid string) string {
	s.mu.Lock()
	loaded := s.loaded
	s.mu.Unlock()
	if !loaded && s.cfg.Network != nil {
		if leases, err := s.cfg.Network.Leases(context.Background()); err == nil {
			s.mu.Lock()
			for _, l := range leases {
				if _, ok := s.ips[l.UID]; !ok {
					s.ips[l.UID] = l.IP
				}
			}
			s.loaded = true
			s.mu.Unlock()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if ip, ok := s.ips[uid]; ok {
		return ip.String()
	}
	return ""
}

// Release removes what was readied for the pod: its network, volumes,
// cgroup, own files and logs. It goes on past a failure, and returns the
// failures joined.
func (s *Sandbox) Release(ctx context.Context, ref runtime.PodRef) error {
	uid := ref.UID
	if err := checkUID(uid); err != nil {
		return err
	}
	unlock := s.lock(uid)
	defer unlock()
	var errs []error
	if s.cfg.Network != nil {
		if err := s.cfg.Network.RemovePod(ctx, uid); err != nil {
			errs = append(errs, fmt.Errorf("remove pod network: %w", err))
		}
	}
	if err := s.cfg.Volumes.Teardown(ctx, uid); err != nil {
		errs = append(errs, fmt.Errorf("tear down volumes: %w", err))
	}
	if s.cfg.Cgroups != nil {
		if err := s.cfg.Cgroups.RemovePod(ctx, types.UID(uid)); err != nil {
			errs = append(errs, fmt.Errorf("remove pod cgroup: %w", err))
		}
		errs = append(errs, s.countQoS(uid, nil))
	}
	if err := os.RemoveAll(s.podDir(uid)); err != nil {
		errs = append(errs, err)
	}
	if ref.Namespace != "" && ref.Name != "" {
		if err := os.RemoveAll(filepath.Join(s.cfg.LogDir, ref.Namespace+"_"+ref.Name+"_"+uid)); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		s.mu.Lock()
		delete(s.ready, uid)
		delete(s.ips, uid)
		delete(s.locks, uid) // the caller's unlock still holds it
		s.mu.Unlock()
	}
	return errors.Join(errs...)
}

// Sweep releases what is readied for pods keep does not keep, as a
// crash left it: pod networks, volumes, cgroups, own files and logs.
func (s *Sandbox) Sweep(ctx context.Context, keep func(uid string) bool) error {
	var errs []error
	if s.cfg.Network != nil {
		if err := s.cfg.Network.Sweep(ctx, keep); err != nil {
			errs = append(errs, fmt.Errorf("sweep pod networks: %w", err))
		}
	}
	if err := s.cfg.Volumes.Sweep(ctx, keep); err != nil {
		errs = append(errs, fmt.Errorf("sweep volumes: %w", err))
	}
	if s.cfg.Cgroups != nil {
		l, err := s.cfg.Cgroups.ListPods()
		if err != nil {
			errs = append(errs, fmt.Errorf("list pod cgroups: %w", err))
		}
		for _, pc := range l {
			if !keep(string(pc.UID)) {
				if err := s.cfg.Cgroups.RemovePod(ctx, pc.UID); err != nil {
					errs = append(errs, fmt.Errorf("remove pod cgroup %s: %w", pc.UID, err))
				}
			}
		}
	}
	if ents, err := os.ReadDir(s.cfg.Dir); err == nil {
		for _, e := range ents {
			if checkUID(e.Name()) == nil && !keep(e.Name()) {
				if err := os.RemoveAll(filepath.Join(s.cfg.Dir, e.Name())); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	if ents, err := os.ReadDir(s.cfg.LogDir); err == nil {
		for _, e := range ents {
			if uid := logDirUID(e.Name()); uid != "" && !keep(uid) {
				if err := os.RemoveAll(filepath.Join(s.cfg.LogDir, e.Name())); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	return errors.Join(errs...)
}

// logDirUID returns the pod UID of a log directory's name,
// <namespace>_<name>_<uid>, or "".
func logDirUID(name string) string {
	for i := len(name) - 1; i >= 0; i-- {
		if name[i] == '_' {
			if checkUID(name[i+1:]) == nil {
				return name[i+1:]
			}
			return ""
		}
	}
	return ""
}

// checkUID refuses a pod UID that cannot name a directory of its own.
func checkUID(uid string) error {
	if uid == "" || uid == "." || uid == ".." || len(uid) > 128 {
		return fmt.Errorf("pod uid %q cannot name a directory", uid)
	}
	for _, r := range uid {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.') {
			return fmt.Errorf("pod uid %q cannot name a directory", uid)
		}
	}
	return nil
}
