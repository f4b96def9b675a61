package agent

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"

	"github.com/outpost-mesh/outpost/edge/cgroups"
	"github.com/outpost-mesh/outpost/edge/checkpoint"
	"github.com/outpost-mesh/outpost/edge/eviction"
	"github.com/outpost-mesh/outpost/edge/images"
	"github.com/outpost-mesh/outpost/edge/netsvc"
	"github.com/outpost-mesh/outpost/edge/objects"
	"github.com/outpost-mesh/outpost/edge/pods"
	"github.com/outpost-mesh/outpost/edge/probes"
	"github.com/outpost-mesh/outpost/edge/runtime"
	"github.com/outpost-mesh/outpost/edge/sandbox"
	"github.com/outpost-mesh/outpost/edge/volumes"
	"github.com/outpost-mesh/outpost/netd"
	"github.com/outpost-mesh/outpost/netd/ipam"
	"github.com/outpost-mesh/outpost/netd/podfiles"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// Paths under Config.DataDir of a node of real containers.
const (
	PodsDir    = "pods"    // each pod's own files (sandbox)
	VolumesDir = "volumes" // the pods' volumes
	LogsDir    = "logs"    // the containers' logs, as kubelet's /var/log/pods
	NetNSDir   = "netns"   // the pods' network namespaces
)

// PodsConfig configures what the pods of a node of real containers share
// and how they are admitted. The fake runtime's nodes have none.
type PodsConfig struct {
	// Bridge names the pods' bridge: one per agent on a machine.
	Bridge string
	// ClusterCIDR holds every node's pod CIDR, and ServiceCIDR the
	// services' addresses; the node's own pod CIDR comes from the hub
	// (its Node's spec.podCIDR, checkpointed).
	ClusterCIDR, ServiceCIDR netip.Prefix
	// MTU of the bridge and the pods' links.
	MTU int
	// HostNetNS is the network namespace that plays the node, "" for the
	// agent's own (tests run each node in one of its own).
	HostNetNS string
	// CgroupRoot is the cgroup of the node's pods, such as
	// /outpost-NODE/kubepods; "" makes that from the node's name.
	CgroupRoot string
	// ClusterDomain is the cluster's DNS domain: cluster.local.
	ClusterDomain string
	// ClusterDNS is the cluster DNS address that pods' resolv.conf
	// names and that the node answers with a DNS server of its own on
	// the bridge's address; not valid: no node DNS server, pods resolve
	// through the node's resolvers. The default is the service CIDR's
	// (wire.ClusterDNSAddr), the address the hub gives kube-dns.
	ClusterDNS netip.Addr
	// ResolvConf is the node's resolver file: names outside the cluster
	// are forwarded to its nameservers.
	ResolvConf string
	// ServiceRouting is how the node routes Services: netsvc.RoutingAuto
	// (eBPF where the kernel runs it, else nftables), RoutingEBPF,
	// RoutingNftables or RoutingNone.
	ServiceRouting string
	// BPFFS is the bpffs the node pins its eBPF service routing on,
	// mounted there if it is not one; "" is the data dir's "bpf", so that
	// everything of the node lives under its data dir and a node removed
	// with it leaves no program attached.
	BPFFS string
	// SiteOverlay connects the pods of the nodes of the node's site
	// over VXLAN.
	SiteOverlay bool
	// SystemReserved is kept from pods for the system and the agent
	// (kubelet's --system-reserved); nil for none.
	SystemReserved corev1.ResourceList
}

// DefaultPodsConfig returns the defaults: bridge outpost0, cluster CIDR
// 10.42.0.0/16 and service CIDR 10.43.0.0/16 (the hub's defaults), MTU
// 1500, the cgroup from the node's name, cluster.local answered by the
// node at 10.43.0.10 with /etc/resolv.conf's resolvers for other names,
// Services routed with eBPF where the kernel runs it, pinned on a bpffs
// in the data dir, and the site overlay.
func DefaultPodsConfig() PodsConfig {
	n := netd.DefaultConfig()
	return PodsConfig{
		Bridge: n.Bridge, ClusterCIDR: n.ClusterCIDR, ServiceCIDR: n.ServiceCIDR, MTU: n.MTU,
		ClusterDomain: "cluster.local", ClusterDNS: wire.ClusterDNSAddr(n.ServiceCIDR), ResolvConf: "/etc/resolv.conf",
		ServiceRouting: netsvc.RoutingAuto, SiteOverlay: true,
	}
}

// realPods is what the agent builds for a node of real containers.
type realPods struct {
	sandbox *sandbox.Sandbox
	prober  *probes.Manager
	cgroups *cgroups.Manager
	net     *lazyNetwork
}

// buildRealPods builds the pods' sandbox and prober; it starts nothing.
// kick asks the pod workers for a round; alloc is the node's allocatable,
// and reserved what the pods' cgroup may hold.
func (a *Agent) buildRealPods(kick func(), alloc, reserved corev1.ResourceList) (*realPods, error) {
	pc := a.cfg.Pods
	root := pc.CgroupRoot
	if root == "" {
		root = "/outpost-" + a.cfg.NodeName + "/kubepods"
	}
	ccfg := cgroups.DefaultConfig()
	ccfg.Root = root
	cg, err := cgroups.New(ccfg)
	if err != nil {
		return nil, fmt.Errorf("pod cgroups: %w", err)
	}
	if cc := a.cfg.Containerd; cc != nil && cc.OCIRuntime == "crun" {
		// Said once at the start, not on every pod as crun's own
		// "cgroups in hybrid mode not supported".
		if err := cg.Layout().CheckCrun(); err != nil {
			return nil, fmt.Errorf("--oci-runtime crun: %w; or use runc", err)
		}
	}
	cpu := reserved[corev1.ResourceCPU]
	mem := reserved[corev1.ResourceMemory]
	if err := cg.Setup(cpu.MilliValue(), mem.Value()); err != nil {
		return nil, fmt.Errorf("pod cgroups: %w", err)
	}
	vcfg := volumes.DefaultConfig()
	vcfg.Dir = filepath.Join(a.cfg.DataDir, VolumesDir)
	vcfg.Source = viewObjects{a}
	vcfg.Tokens = volumes.TokenFunc(func(p *corev1.Pod, v, path string) (string, time.Time, bool) {
		t, ok := a.TokenFor(p, v, path)
		return t.Token, t.Expiry, ok
	})
	vcfg.Logger, vcfg.Now = a.log.With("component", "volumes"), a.now
	vm, err := volumes.New(vcfg)
	if err != nil {
		return nil, err
	}
	net := &lazyNetwork{a: a, cfg: pc}
	node := podfiles.Node{ClusterDomain: pc.ClusterDomain}
	if pc.ClusterDNS.IsValid() && pc.ServiceRouting != netsvc.RoutingNone {
		node.ClusterDNS = []netip.Addr{pc.ClusterDNS}
	}
	scfg := sandbox.Config{
		Dir: filepath.Join(a.cfg.DataDir, PodsDir), LogDir: filepath.Join(a.cfg.DataDir, LogsDir),
		Network: net, Volumes: vm, Cgroups: cg,
		Node:     node,
		NodeName: a.cfg.NodeName, Allocatable: alloc, MemoryCapacity: a.cfg.Capacity.MemoryBytes,
		ServiceAccountAutomount: a.serviceAccountAutomount,
		PullCredentials:         a.pullCredentials,
		Logger:                  a.log.With("component", "sandbox"),
	}
	sb, err := sandbox.New(scfg)
	if err != nil {
		return nil, err
	}
	pcfg := probes.DefaultConfig()
	pcfg.Exec, _ = a.rt.(runtime.Execer)
	pcfg.OnChange = func(string) { kick() }
	pcfg.Logger = a.log.With("component", "probes")
	pm, err := probes.New(pcfg)
	if err != nil {
		return nil, err
	}
	return &realPods{sandbox: sb, prober: pm, cgroups: cg, net: net}, nil
}

// serviceAccountAutomount returns the automountServiceAccountToken of the
// pod's service account, as the view holds it.
func (a *Agent) serviceAccountAutomount(pod *corev1.Pod) *bool {
	name := pod.Spec.ServiceAccountName
	if name == "" {
		name = "default"
	}
	o, ok, err := a.cp.Get(wire.Key{Resource: wire.ResourceServiceAccounts, Namespace: pod.Namespace, Name: name})
	if err != nil || !ok {
		return nil
	}
	var sa corev1.ServiceAccount
	if err := objects.Decode(o.Raw, o.Revision, &sa); err != nil {
		return nil
	}
	return sa.AutomountServiceAccountToken
}

// pullCredentials returns the registry credentials of the pod's
// imagePullSecrets that the view holds, as kubelet reads them: secrets
// of type kubernetes.io/dockerconfigjson or dockercfg; others, and those
// that do not parse, are left out, said in the log.
func (a *Agent) pullCredentials(pod *corev1.Pod) []runtime.Credential {
	var out []runtime.Credential
	for _, ref := range pod.Spec.ImagePullSecrets {
		s, ok, err := viewObjects{a}.Secret(pod.Namespace, ref.Name)
		if err != nil || !ok {
			a.log.Info("image pull secret not on the node", "pod", pod.Namespace+"/"+pod.Name, "secret", ref.Name, "err", err)
			continue
		}
		var data []byte
		switch s.Type {
		case corev1.SecretTypeDockerConfigJson:
			data = s.Data[corev1.DockerConfigJsonKey]
		case corev1.SecretTypeDockercfg:
			data = s.Data[corev1.DockerConfigKey]
		default:
			continue
		}
		creds, err := images.ParseDockerConfig(data)
		if err != nil {
			a.log.Warn("image pull secret does not parse", "pod", pod.Namespace+"/"+pod.Name, "secret", ref.Name, "err", err)
			continue
		}
		out = append(out, creds...)
	}
	return out
}

// viewObjects gives the pods' volumes the configMaps and secrets of the
// view.
type viewObjects struct{ a *Agent }

func (v viewObjects) ConfigMap(ns, name string) (*corev1.ConfigMap, bool, error) {
	var cm corev1.ConfigMap
	ok, err := v.decode(wire.ResourceConfigMaps, ns, name, &cm)
	if !ok || err != nil {
		return nil, ok, err
	}
	return &cm, true, nil
}

func (v viewObjects) Secret(ns, name string) (*corev1.Secret, bool, error) {
	var s corev1.Secret
	ok, err := v.decode(wire.ResourceSecrets, ns, name, &s)
	if !ok || err != nil {
		return nil, ok, err
	}
	return &s, true, nil
}

// decode decodes the view's object of res, ns and name into into, and
// reports whether there is one.
func (v viewObjects) decode(res, ns, name string, into k8sruntime.Object) (bool, error) {
	cp := v.a.open.Load()
	if cp == nil {
		return false, errors.New("the checkpoint is closed")
	}
	o, ok, err := cp.Get(wire.Key{Resource: res, Namespace: ns, Name: name})
	if err != nil {
		v.a.dropCorrupt(err) // the hub sends it again
		return false, err
	}
	if !ok {
		return false, nil
	}
	return true, objects.Decode(o.Raw, o.Revision, into)
}

// admitter admits pods as kubelet's admission handlers do: none the
// node's pressure keeps out (the eviction manager's handler, first), then
// those that fit the node's allocatable beside those it took.
type admitter struct {
	// pressure, when set, returns why pod may not start under the
	// node's pressure, or nil.
	pressure func(pod *corev1.Pod) *pods.Rejection
	// allocatable is what pods may have of the node; nil admits every
	// pod that pressure does (the fake runtime's nodes).
	allocatable corev1.ResourceList
}

func (ad admitter) Admit(pod *corev1.Pod, admitted []*corev1.Pod) *pods.Rejection {
	if ad.pressure != nil {
		if rej := ad.pressure(pod); rej != nil {
			return rej
		}
	}
	if ad.allocatable == nil {
		return nil
	}
	r := eviction.Admit(pod, admitted, ad.allocatable)
	if r.Admit {
		return nil
	}
	return &pods.Rejection{Reason: r.Reason, Message: r.Message}
}

// prober is the probes Manager as the pod workers' podworker.Prober.
type prober struct{ m *probes.Manager }

func (p prober) Sync(pod *corev1.Pod, actual *runtime.PodStatus, ip string) {
	t := probes.Target{IP: ip}
	if actual != nil {
		t = probes.TargetOf(actual)
		if t.IP == "" {
			t.IP = ip
		}
	}
	p.m.Sync(pod, t)
}

func (p prober) Forget(uid string) { p.m.Remove(uid) }

func (p prober) Probed(uid string) *pods.Probed {
	res := p.m.Results(uid)
	out := &pods.Probed{Results: make(map[string]pods.ProbeResult, len(res))}
	for name, r := range res {
		out.Results[name] = pods.ProbeResult{ID: r.ContainerID, Started: r.Started, Ready: r.Ready, Unhealthy: r.LivenessFailed, Message: r.Message}
	}
	return out
}

// hooks runs lifecycle hooks through the runtime.
type hooks struct{ exec runtime.Execer }

func (h hooks) PostStart(ctx context.Context, pod *corev1.Pod, c *corev1.Container, ip string) error {
	return probes.RunHandler(ctx, c.Lifecycle.PostStart, probes.HookTarget{Exec: h.exec, Pod: refOf(pod), Container: c, PodIP: ip})
}

func (h hooks) PreStop(ctx context.Context, pod *corev1.Pod, c *corev1.Container, ip string, grace time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, grace)
	defer cancel()
	return probes.RunHandler(ctx, c.Lifecycle.PreStop, probes.HookTarget{Exec: h.exec, Pod: refOf(pod), Container: c, PodIP: ip})
}

func refOf(p *corev1.Pod) runtime.PodRef {
	return runtime.PodRef{UID: string(p.UID), Namespace: p.Namespace, Name: p.Name}
}

// lazyNetwork is the pod network once the node knows its pod CIDR, which
// the hub assigns after the node first joined and the checkpoint keeps:
// until then, pods that need a network wait.
type lazyNetwork struct {
	a   *Agent
	cfg *PodsConfig

	mu   sync.Mutex
	net  *netd.Network
	cidr netip.Prefix
}

// errNoPodCIDR is why a pod cannot have a network yet.
var errNoPodCIDR = errors.New("network is not ready: the hub has not assigned this node a pod CIDR yet")

// get returns the network, set up, or errNoPodCIDR.
func (l *lazyNetwork) get(ctx context.Context) (*netd.Network, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	cidr, err := l.a.podCIDR()
	if err != nil {
		return nil, err
	}
	if l.net != nil {
		if cidr != l.cidr {
			l.a.log.Warn("the node's pod CIDR changed; pods keep the network they have until the agent restarts", "had", l.cidr, "now", cidr)
		}
		return l.net, nil
	}
	cfg := netd.DefaultConfig()
	cfg.Bridge, cfg.PodCIDR, cfg.ClusterCIDR, cfg.ServiceCIDR, cfg.MTU, cfg.HostNetNS = l.cfg.Bridge, cidr, l.cfg.ClusterCIDR, l.cfg.ServiceCIDR, l.cfg.MTU, l.cfg.HostNetNS
	cfg.NetNSDir = filepath.Join(l.a.cfg.DataDir, NetNSDir)
	cfg.Leases = leases{l.a.cp}
	cfg.Logger = l.a.log.With("component", "netd")
	n, err := netd.New(cfg)
	if err != nil {
		return nil, err
	}
	if err := n.Setup(ctx); err != nil {
		return nil, fmt.Errorf("set up the pod network: %w", err)
	}
	l.a.log.Info("pod network up", "bridge", cfg.Bridge, "pod_cidr", cidr)
	l.net, l.cidr = n, cidr
	return n, nil
}

func (l *lazyNetwork) AddPod(ctx context.Context, spec netd.PodSpec) (netd.Attachment, error) {
	n, err := l.get(ctx)
	if err != nil {
		return netd.Attachment{}, err
	}
	at, err := n.AddPod(ctx, spec)
	if err == nil && l.a.netsvc != nil {
		// Before the pod's containers start: their first connection to
		// a Service must be routed.
		l.a.netsvc.PodNetwork(at.NetNSPath)
	}
	return at, err
}

func (l *lazyNetwork) RemovePod(ctx context.Context, uid string) error {
	n, err := l.get(ctx)
	if errors.Is(err, errNoPodCIDR) {
		return nil // no network, so no pod has one
	}
	if err != nil {
		return err
	}
	return n.RemovePod(ctx, uid)
}

func (l *lazyNetwork) Sweep(ctx context.Context, keep func(string) bool) error {
	n, err := l.get(ctx)
	if errors.Is(err, errNoPodCIDR) {
		return nil
	}
	if err != nil {
		return err
	}
	return n.Sweep(ctx, keep)
}

func (l *lazyNetwork) Leases(ctx context.Context) ([]ipam.Lease, error) {
	return leases{l.a.cp}.LoadLeases(ctx)
}

// podCIDR returns the node's pod CIDR as its checkpointed Node says.
func (a *Agent) podCIDR() (netip.Prefix, error) {
	o, ok, err := a.cp.Get(wire.Key{Resource: wire.ResourceNodes, Name: a.cfg.NodeName})
	if err != nil {
		return netip.Prefix{}, err
	}
	if !ok {
		return netip.Prefix{}, errNoPodCIDR
	}
	var n corev1.Node
	if err := objects.Decode(o.Raw, o.Revision, &n); err != nil {
		return netip.Prefix{}, err
	}
	p, ok := objects.PodCIDR(&n)
	if !ok {
		return netip.Prefix{}, errNoPodCIDR
	}
	return p, nil
}

// leases keeps netd's IP leases in the checkpoint's local records, so
// that a pod keeps its IP across agent restarts and reboots.
type leases struct{ cp *checkpoint.Store }

const leasePrefix = "lease/"

func (l leases) LoadLeases(context.Context) ([]ipam.Lease, error) {
	m, err := l.cp.ListLocal(leasePrefix)
	if err != nil {
		return nil, err
	}
	out := make([]ipam.Lease, 0, len(m))
	for k, v := range m {
		ip, err := netip.ParseAddr(string(v))
		if err != nil {
			continue // netd drops what it cannot use; so does this
		}
		out = append(out, ipam.Lease{UID: strings.TrimPrefix(k, leasePrefix), IP: ip})
	}
	return out, nil
}

func (l leases) SaveLease(_ context.Context, le ipam.Lease) error {
	return l.cp.PutLocal(leasePrefix+le.UID, []byte(le.IP.String()))
}

func (l leases) DeleteLease(_ context.Context, uid string) error {
	return l.cp.DeleteLocal(leasePrefix + uid)
}
