// Package edgecmd is the `edge` command that both binaries carry: `outpost
// edge` and `outpost-edge` run the same agent with the same flags. It links
// no hub code, and no cobra: cmd/outpost wraps it in a cobra command, while
// outpost-edge parses its flags with pflag alone, since cobra's help
// templates would make the linker keep every exported method of the edge
// binary (test/arch checks that).
package edgecmd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/outpost-mesh/outpost/edge/agent"
	"github.com/outpost-mesh/outpost/edge/eviction"
	"github.com/outpost-mesh/outpost/edge/mesh"
	"github.com/outpost-mesh/outpost/edge/runtime"
	"github.com/outpost-mesh/outpost/edge/runtime/fake"
	"github.com/outpost-mesh/outpost/edge/status"
	"github.com/outpost-mesh/outpost/edge/usage"
	fwv1 "github.com/outpost-mesh/outpost/firmware/apis/v1"
	"github.com/outpost-mesh/outpost/firmware/transfer"
	"github.com/outpost-mesh/outpost/firmware/updater"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// Flags are the edge agent's command-line flags.
type Flags struct {
	Hub      string
	Token    string
	CAHash   string
	NodeName string
	Site     string
	// TimeZone is the site's IANA time zone; empty is the machine's own
	// (agent.LocalTimeZone).
	TimeZone string
	DataDir  string
	Runtime  string

	Containerd         string // managed or external
	ContainerdAddress  string
	ContainerdBinary   string
	OCIRuntime         string
	ShimPerNode        bool
	Bridge             string
	ClusterCIDR        string
	ServiceCIDR        string
	ClusterDomain      string
	ClusterDNS         string // "" for the service CIDR's, "none" for no node DNS
	ResolvConf         string
	ServiceRouting     string
	BPFFS              string
	SiteOverlay        bool
	SystemReserved     string
	InsecureRegistries []string
	MaxPods            int64

	EvictionHard                     string
	EvictionPressureTransitionPeriod time.Duration

	UsageInterval time.Duration
	NodeUsage     string // machine or agent-cgroup

	Mesh     bool
	MeshAddr string // "" for the node's InternalIP
	// MeshRelay relays the site peers' sync sessions, and the node's own
	// through a peer, while an uplink is down.
	MeshRelay bool

	// Supervise runs the agent as a child that it restarts, and reverts a
	// trial of a new agent that crashes or hangs (firmware/updater).
	Supervise bool
	// OTABandwidth caps over-the-air downloads: "auto", "0" or a size a
	// second.
	OTABandwidth string
	// InstallHook is the executable file components of releases are
	// handed to.
	InstallHook string

	// Args are the agent's arguments as given, after the program's name
	// and command: the agent runs another of its binaries with them after
	// an update. InstalledArgs go before them when the binary the node was
	// installed with runs: ["edge"] for `outpost edge`.
	Args, InstalledArgs []string
}

// DefaultFlags returns the flags' defaults.
func DefaultFlags() Flags {
	pods := agent.DefaultPodsConfig()
	ctrd := agent.DefaultContainerdConfig()
	ev := eviction.DefaultConfig()
	var hard []string
	for _, t := range ev.Thresholds {
		hard = append(hard, t.String())
	}
	return Flags{
		EvictionHard:                     strings.Join(hard, ","),
		EvictionPressureTransitionPeriod: ev.PressureTransitionPeriod,
		DataDir:                          "/var/lib/outpost-edge",
		Runtime:                          "containerd",
		Containerd:                       "managed",
		ContainerdBinary:                 ctrd.Binary,
		OCIRuntime:                       ctrd.OCIRuntime,
		Bridge:                           pods.Bridge,
		ClusterCIDR:                      pods.ClusterCIDR.String(),
		ServiceCIDR:                      pods.ServiceCIDR.String(),
		ClusterDomain:                    pods.ClusterDomain,
		ResolvConf:                       pods.ResolvConf,
		ServiceRouting:                   pods.ServiceRouting,
		BPFFS:                            pods.BPFFS,
		SiteOverlay:                      pods.SiteOverlay,
		MaxPods:                          status.HostCapacity().Pods,
		UsageInterval:                    agent.DefaultConfig().Sync.UsageInterval,
		NodeUsage:                        "machine",
		Mesh:                             true,
		MeshRelay:                        true,
		OTABandwidth:                     "auto",
	}
}

// Required are the flags without which the agent does not run; Register
// gives them no usable default.
var Required = []string{"hub", "node-name"}

// CheckRequired returns an error naming the Required flags not set on fs,
// worded as cobra words it for flags marked required.
func CheckRequired(fs *pflag.FlagSet) error {
	var missing []string
	for _, name := range Required {
		if !fs.Changed(name) {
			missing = append(missing, strconv.Quote(name))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("required flag(s) %s not set", strings.Join(missing, ", "))
	}
	return nil
}

// Register adds the flags to fs, with f's values as their defaults.
func (f *Flags) Register(fs *pflag.FlagSet) {
	fs.StringVar(&f.Hub, "hub", f.Hub, "host:port of the hub's sync endpoint (required)")
	fs.StringVar(&f.Token, "token", f.Token, "bootstrap token <6 characters [a-z0-9]>.<16 characters [a-z0-9]> from outpost token create, to join the first time")
	fs.StringVar(&f.CAHash, "ca-cert-hash", f.CAHash, "sha256:<64 hex digits> hash of the hub CA, printed by outpost token create")
	fs.StringVar(&f.NodeName, "node-name", f.NodeName, "name of this node (required)")
	fs.StringVar(&f.Site, "site", f.Site, "site the node belongs to (label topology.outpost.dev/site)")
	fs.StringVar(&f.TimeZone, "timezone", f.TimeZone, "the site's time zone, an IANA name such as Europe/Berlin, in which rollouts' maintenance windows open (default the zone this machine's clock is set to, UTC if none)")
	fs.StringVar(&f.DataDir, "data-dir", f.DataDir, "directory for the node's certificate, checkpoint, containerd, pods' files and static pod manifests")
	fs.StringVar(&f.Runtime, "runtime", f.Runtime, "container runtime: containerd, or fake (pods are simulated in memory; for tests and fleet simulation)")
	fs.StringVar(&f.Containerd, "containerd", f.Containerd, "managed: the agent starts and supervises its own containerd under --data-dir; external: the one at --containerd-address")
	fs.StringVar(&f.ContainerdAddress, "containerd-address", f.ContainerdAddress, "socket of a running containerd to use (implies --containerd external)")
	fs.StringVar(&f.ContainerdBinary, "containerd-binary", f.ContainerdBinary, "the containerd a managed one runs")
	fs.StringVar(&f.OCIRuntime, "oci-runtime", f.OCIRuntime, "OCI runtime of the containers: runc or crun")
	fs.BoolVar(&f.ShimPerNode, "shim-per-node", f.ShimPerNode, "run every pod of the node in one runc shim (less memory per pod) instead of one shim per pod")
	fs.StringVar(&f.Bridge, "bridge", f.Bridge, "the pods' bridge; each agent on one machine needs its own")
	fs.StringVar(&f.ClusterCIDR, "cluster-cidr", f.ClusterCIDR, "the CIDR of every node's pod CIDR, as the hub's --cluster-cidr")
	fs.StringVar(&f.ServiceCIDR, "service-cidr", f.ServiceCIDR, "the services' CIDR, as the hub's --service-cidr")
	fs.StringVar(&f.ClusterDomain, "cluster-domain", f.ClusterDomain, "the cluster's DNS domain")
	fs.StringVar(&f.ClusterDNS, "cluster-dns", f.ClusterDNS, "the cluster DNS address pods' resolv.conf names, which the node answers itself on its bridge's address (default the service CIDR's tenth address, the hub's kube-dns); none: pods use the node's resolvers")
	fs.StringVar(&f.ResolvConf, "resolv-conf", f.ResolvConf, "the node's resolver file; the node's DNS server forwards names outside the cluster to its nameservers")
	fs.StringVar(&f.ServiceRouting, "service-routing", f.ServiceRouting, "how Services are routed: auto (eBPF where the kernel runs it, else nftables), ebpf, nftables or none")
	fs.StringVar(&f.BPFFS, "bpffs", f.BPFFS, "the bpffs the node pins its eBPF service routing on, mounted there if it is not one (default DATA-DIR/bpf)")
	fs.BoolVar(&f.SiteOverlay, "site-overlay", f.SiteOverlay, "reach the pods of the other nodes of the node's --site over VXLAN")
	fs.StringSliceVar(&f.InsecureRegistries, "insecure-registry", f.InsecureRegistries, "a registry, host[:port], that may be reached over plain HTTP (a registry on loopback or at the site); repeat or comma-separate for more")
	fs.Int64Var(&f.MaxPods, "max-pods", f.MaxPods, "the most pods the node runs, as kubelet's --max-pods")
	fs.StringVar(&f.SystemReserved, "system-reserved", f.SystemReserved, "resources kept from pods for the system and the agent, such as cpu=200m,memory=256Mi")
	fs.StringVar(&f.EvictionHard, "eviction-hard", f.EvictionHard, "hard eviction thresholds, as kubelet's: pods are evicted when one is met, and held back from allocatable (memory.available, nodefs.available); the list replaces the defaults, \"\" for none. Signals: memory.available, nodefs.available, nodefs.inodesFree, imagefs.available, imagefs.inodesFree, pid.available")
	fs.DurationVar(&f.UsageInterval, "usage-interval", f.UsageInterval, "the least time between two reports of the node's and pods' CPU and memory usage to the hub, for kubectl top; also the window of the CPU rates")
	fs.StringVar(&f.NodeUsage, "node-usage", f.NodeUsage, "what the node's usage in kubectl top nodes counts: machine (the whole machine) or agent-cgroup (the agent's pods only, for several agents on one machine)")
	fs.BoolVar(&f.Mesh, "mesh", f.Mesh, "gossip with the other nodes of the node's --site (memberlist, encrypted with the site's key from the hub), so that they see it alive while its uplink is down and drop its pods from routing when it dies")
	fs.BoolVar(&f.MeshRelay, "mesh-relay", f.MeshRelay, "with --mesh: while this node's uplink is down, move its sync session through a site peer whose uplink works, and relay its peers' sessions the same way (the peer sees only encrypted packets; capped at 16 MiB a minute per peer)")
	fs.StringVar(&f.MeshAddr, "mesh-addr", f.MeshAddr, fmt.Sprintf("address[:port] on the site's LAN the mesh listens on, over UDP and TCP (default the node's InternalIP, port %d)", mesh.DefaultPort))
	fs.BoolVar(&f.Supervise, "supervise", f.Supervise, "run the agent as a child process that is restarted when it exits, and whose trial of a new version is reverted when it crashes or hangs past its health window (over-the-air updates); as systemd does with Restart=always")
	fs.StringVar(&f.OTABandwidth, "ota-bandwidth", f.OTABandwidth, "cap of over-the-air downloads, per second (such as 512KiB): auto for half the uplink measured at the start of each download, 0 for none")
	fs.StringVar(&f.InstallHook, "install-hook", f.InstallHook, "absolute path of the executable the file components of releases (device firmware, config bundles) are handed to: run with the verified artifact's path as its only argument, then with commit or revert")
	fs.DurationVar(&f.EvictionPressureTransitionPeriod, "eviction-pressure-transition-period", f.EvictionPressureTransitionPeriod, "how long a pressure condition (MemoryPressure, DiskPressure, PIDPressure) stays after its threshold was last met, so that it does not flap")
}

// Config returns the agent configuration of the flags, with the runtime
// they name.
func (f *Flags) Config(log *slog.Logger) (agent.Config, error) {
	cfg := agent.DefaultConfig()
	cfg.NodeName, cfg.Site, cfg.DataDir = f.NodeName, f.Site, f.DataDir
	cfg.TimeZone = f.TimeZone
	if cfg.TimeZone == "" {
		cfg.TimeZone = agent.LocalTimeZone()
	}
	cfg.HubAddr, cfg.Token, cfg.CAHash = f.Hub, f.Token, f.CAHash
	cfg.Logger = log
	if f.MaxPods < 1 {
		return agent.Config{}, fmt.Errorf("--max-pods %d: want at least 1", f.MaxPods)
	}
	cfg.Capacity = status.HostCapacity()
	cfg.Capacity.Pods = f.MaxPods
	if f.UsageInterval <= 0 {
		return agent.Config{}, fmt.Errorf("--usage-interval %v: want a positive duration", f.UsageInterval)
	}
	cfg.Sync.UsageInterval = f.UsageInterval
	switch f.NodeUsage {
	case "machine":
		cfg.NodeUsage = usage.Machine
	case "agent-cgroup":
		cfg.NodeUsage = usage.AgentCgroup
	default:
		return agent.Config{}, fmt.Errorf("--node-usage %q: want machine or agent-cgroup", f.NodeUsage)
	}
	if f.Mesh {
		mc := agent.DefaultMeshConfig()
		mc.Relay = f.MeshRelay
		if f.MeshAddr != "" {
			a, err := ParseMeshAddr(f.MeshAddr)
			if err != nil {
				return agent.Config{}, err
			}
			mc.Addr = a
		}
		cfg.Mesh = &mc
	}
	if f.Runtime == "containerd" {
		return f.containerd(cfg)
	}
	rt, version, err := NewRuntime(f.Runtime, log)
	if err != nil {
		return agent.Config{}, err
	}
	cfg.Runtime, cfg.RuntimeVersion = rt, version
	return cfg, nil
}

// ParseMeshAddr reads --mesh-addr: an IP address, with a port or without
// one for mesh.DefaultPort.
func ParseMeshAddr(s string) (netip.AddrPort, error) {
	ap, err := netip.ParseAddrPort(s)
	if a, aerr := netip.ParseAddr(s); aerr == nil {
		ap, err = netip.AddrPortFrom(a, mesh.DefaultPort), nil
	}
	if err != nil || ap.Addr().IsUnspecified() || ap.Addr().Zone() != "" {
		return netip.AddrPort{}, fmt.Errorf("--mesh-addr %q: want the node's IP address on the site's LAN, with a port or without (%d), such as 192.168.1.10 or 192.168.1.10:7946", s, mesh.DefaultPort)
	}
	return ap, nil
}

// containerd fills cfg for pods on containerd.
func (f *Flags) containerd(cfg agent.Config) (agent.Config, error) {
	if os.Geteuid() != 0 {
		return agent.Config{}, errors.New("pods on containerd need root (network namespaces, cgroups, mounts): run as root, or use --runtime fake to simulate pods")
	}
	cc := agent.DefaultContainerdConfig()
	switch {
	case f.ContainerdAddress != "":
		cc.Address = f.ContainerdAddress
	case f.Containerd == "external":
		return agent.Config{}, errors.New("--containerd external needs --containerd-address")
	case f.Containerd != "managed":
		return agent.Config{}, fmt.Errorf("--containerd %q: want managed or external", f.Containerd)
	}
	cc.Binary, cc.OCIRuntime, cc.ShimPerNode = f.ContainerdBinary, f.OCIRuntime, f.ShimPerNode
	cc.InsecureRegistries = f.InsecureRegistries
	if cc.OCIRuntime != "runc" && cc.OCIRuntime != "crun" {
		return agent.Config{}, fmt.Errorf("--oci-runtime %q: want runc or crun", cc.OCIRuntime)
	}
	pc := agent.DefaultPodsConfig()
	pc.Bridge, pc.ClusterDomain = f.Bridge, f.ClusterDomain
	var err error
	if pc.ClusterCIDR, err = netip.ParsePrefix(f.ClusterCIDR); err != nil {
		return agent.Config{}, fmt.Errorf("--cluster-cidr: %w", err)
	}
	if pc.ServiceCIDR, err = netip.ParsePrefix(f.ServiceCIDR); err != nil {
		return agent.Config{}, fmt.Errorf("--service-cidr: %w", err)
	}
	switch f.ClusterDNS {
	case "":
		pc.ClusterDNS = wire.ClusterDNSAddr(pc.ServiceCIDR)
	case "none":
		pc.ClusterDNS = netip.Addr{}
	default:
		if pc.ClusterDNS, err = netip.ParseAddr(f.ClusterDNS); err != nil {
			return agent.Config{}, fmt.Errorf("--cluster-dns: %w", err)
		}
	}
	pc.ResolvConf, pc.ServiceRouting, pc.BPFFS, pc.SiteOverlay = f.ResolvConf, f.ServiceRouting, f.BPFFS, f.SiteOverlay
	if pc.SystemReserved, err = parseResources(f.SystemReserved); err != nil {
		return agent.Config{}, fmt.Errorf("--system-reserved: %w", err)
	}
	ec := eviction.DefaultConfig()
	if ec.Thresholds, err = eviction.ParseThresholds(f.EvictionHard); err != nil {
		return agent.Config{}, fmt.Errorf("--eviction-hard: %w", err)
	}
	ec.PressureTransitionPeriod = f.EvictionPressureTransitionPeriod
	if err := ec.Validate(); err != nil {
		return agent.Config{}, fmt.Errorf("--eviction-hard, --eviction-pressure-transition-period: %w", err)
	}
	cfg.Containerd, cfg.Pods, cfg.Eviction = &cc, &pc, &ec
	return cfg, nil
}

// parseResources parses name=quantity pairs, such as cpu=200m,memory=256Mi.
func parseResources(s string) (corev1.ResourceList, error) {
	if s == "" {
		return nil, nil
	}
	out := corev1.ResourceList{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("%q is not name=quantity", kv)
		}
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		out[corev1.ResourceName(k)] = q
	}
	return out, nil
}

// NewRuntime returns the runtime of a --runtime value and its version for
// the node's info.
func NewRuntime(name string, log *slog.Logger) (runtime.Runtime, string, error) {
	switch name {
	case "fake":
		log.Warn("pods run on the fake runtime: they are simulated in memory, no container runs")
		return fake.New(fake.Config{Behavior: fake.ByImage}), "fake://0.1", nil
	}
	return nil, "", fmt.Errorf("unknown runtime %q: use containerd or fake", name)
}

// Run runs the agent of the flags until ctx is done, logging through
// slog.Default(). With --supervise it runs it as a child instead. The
// agent first runs the binary its updates chose (firmware/updater's Boot),
// execing into it if it is not this one, and execs into another after an
// update or a failed trial.
func (f *Flags) Run(ctx context.Context) error {
	bw, err := transfer.ParseBandwidth(f.OTABandwidth)
	if err != nil {
		return fmt.Errorf("--ota-bandwidth: %w", err)
	}
	ucfg := updater.DefaultConfig(filepath.Join(f.DataDir, agent.FirmwareDir))
	ucfg.Hook, ucfg.InstalledArgs, ucfg.Logger = f.InstallHook, f.InstalledArgs, slog.Default()
	if err := ucfg.Validate(); err != nil {
		return fmt.Errorf("--install-hook: %w", err)
	}
	if f.Supervise {
		scfg := updater.DefaultSuperviseConfig(ucfg.Dir, updater.ChildArgs(f.Args))
		scfg.Updater, scfg.Logger = ucfg, slog.Default()
		return updater.Supervise(ctx, scfg)
	}
	if err := os.MkdirAll(f.DataDir, 0o700); err != nil {
		return fmt.Errorf("create data directory: %w", err)
	}
	u, err := updater.New(ucfg)
	if err != nil {
		return err
	}
	d, err := u.Boot()
	switch {
	case errors.Is(err, updater.ErrCorruptState):
		slog.Error("the firmware state was corrupt; running the installed agent", "err", err)
	case err != nil:
		return fmt.Errorf("firmware: %w", err)
	}
	if !d.RunsHere() {
		slog.Info("running the agent the firmware state names", "binary", d.Binary, "version", d.Version, "trial", d.Trial != nil)
		return u.Exec(f.Args, os.Environ())
	}
	if err := u.RecoverFiles(ctx, d); err != nil {
		slog.Error("revert the file components of a failed trial", "err", err)
	}
	cfg, err := f.Config(slog.Default())
	if err != nil {
		return err
	}
	fc := &agent.FirmwareConfig{Slots: agent.UpdaterSlots(u), Bandwidth: bw}
	// A revert, by this start or by the supervisor's before it, is
	// reported with its reason.
	if o := d.LastOutcome; o != nil && o.State == fwv1.StateReverted {
		fc.Boot = &agent.FirmwareOutcome{Release: o.Release, Version: o.Version, Reason: string(o.Reason), Message: o.Message, At: o.At}
	}
	cfg.Firmware = fc
	a, err := agent.New(cfg)
	if err != nil {
		return err
	}
	gc, from := GCPercent(os.LookupEnv)
	if from == "default" {
		debug.SetGCPercent(gc)
	}
	slog.Info("edge agent starting", "node", f.NodeName, "hub", f.Hub, "data_dir", f.DataDir, "gogc", gc, "gogc_from", from)
	start := time.Now()
	err = a.Run(ctx)
	slog.Info("edge agent stopped", "after", time.Since(start).Round(time.Second), "err", err)
	if errors.Is(err, agent.ErrRestart) {
		return u.Exec(f.Args, os.Environ())
	}
	return err
}

// DefaultGCPercent is the agent's GOGC unless the environment sets one:
// the heap grows by half its live size between collections, not by all
// of it as Go's default lets it. On a gateway memory is scarcer than CPU,
// and the agent allocates in bursts (a rebuild of its service routing
// and DNS zone at each change of a large cluster) over a live heap that
// holds what it routes. With 10,000 Services created through the hub,
// the agent's peak RSS was 95.3 MB (mean of three runs of `outpost bench
// services`) at 100 and 89.2 MB at 50, its CPU time within the runs'
// noise.
const DefaultGCPercent = 50

// GCPercent returns the agent's GOGC and where it comes from: the GOGC
// environment variable as the Go runtime read it ("GOGC"), or
// DefaultGCPercent ("default"), which the agent sets. lookup is
// os.LookupEnv.
func GCPercent(lookup func(string) (string, bool)) (int, string) {
	if v, ok := lookup("GOGC"); ok {
		if v == "off" {
			return -1, "GOGC"
		}
		if n, err := strconv.Atoi(v); err == nil {
			return n, "GOGC"
		}
		return 100, "GOGC" // the runtime takes what it cannot parse as 100
	}
	return DefaultGCPercent, "default"
}

// The edge command's help.
const (
	Short = "Run the edge agent of one node: its pods, online or not"
	Long  = `Run the edge agent of one node. The first start joins the hub with a
bootstrap token, verifying the hub by the hash of its CA; later starts use
the node certificate kept in --data-dir. Pods keep running, and restart,
while the hub cannot be reached, and come back from the checkpoint after a
restart without it. Static pods in DATA-DIR/manifests run even if the hub
was never reached.`
	Example = `  outpost-edge --hub hub.example.com:7443 --token abcdef.0123456789abcdef \
    --ca-cert-hash sha256:... --node-name gw-17 --site store-17`
)
