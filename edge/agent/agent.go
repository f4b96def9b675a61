package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/outpost-mesh/outpost/edge/checkpoint"
	"github.com/outpost-mesh/outpost/edge/events"
	"github.com/outpost-mesh/outpost/edge/eviction"
	"github.com/outpost-mesh/outpost/edge/images"
	"github.com/outpost-mesh/outpost/edge/mesh"
	"github.com/outpost-mesh/outpost/edge/netsvc"
	"github.com/outpost-mesh/outpost/edge/podworker"
	"github.com/outpost-mesh/outpost/edge/relay"
	"github.com/outpost-mesh/outpost/edge/runtime"
	"github.com/outpost-mesh/outpost/edge/status"
	"github.com/outpost-mesh/outpost/edge/usage"
	"github.com/outpost-mesh/outpost/internal/version"
	"github.com/outpost-mesh/outpost/sync/client"
	"github.com/outpost-mesh/outpost/sync/session"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// Paths under Config.DataDir.
const (
	CheckpointDir = "checkpoint"
	ManifestsDir  = "manifests"
)

// Config configures an agent.
type Config struct {
	NodeName string // required
	Site     string
	// TimeZone is the IANA name of the site's time zone, such as
	// "Europe/Berlin", which the node reports on its Node
	// (wire.AnnotationTimeZone) for rollouts' maintenance windows; empty
	// reports none, and the node is taken to be on UTC. LocalTimeZone
	// names the machine's own.
	TimeZone string
	DataDir  string // required; created with mode 0700
	// HubAddr is the hub's sync endpoint, host:port. Token and CAHash
	// join the node the first time; later starts use the certificate in
	// DataDir.
	HubAddr string
	Token   string
	CAHash  string

	// Runtime runs the pods; nil has the agent run them on containerd as
	// Containerd says. One of the two is required.
	Runtime        runtime.Runtime
	RuntimeVersion string // reported in the node's info, e.g. "containerd://1.7.24"; containerd's own is asked
	Containerd     *ContainerdConfig
	// Capacity is what the node offers; zero reads this machine's.
	Capacity Capacity
	// Pods, for a runtime of real containers, configures what a pod's
	// containers share (network, volumes, cgroup), their probes and
	// hooks, and admission; nil on the fake runtime's nodes, whose pods
	// share nothing, run no probe or hook, and are all admitted.
	Pods *PodsConfig
	// Eviction configures node-pressure eviction, as kubelet's eviction
	// manager: its thresholds, pressure transition period and readings.
	// nil on a node on containerd is eviction.DefaultConfig(); nil on
	// the fake runtime's nodes runs none (they measure nothing of the
	// machine they share), as tests may set it, with a Memory source of
	// their own. The agent fills in the directories, max pods, system
	// reserve, image GC and what carries out evictions. Only hard
	// thresholds are supported.
	Eviction *eviction.Config
	// Mesh, if not nil, has a node of a site run its site's mesh
	// (edge/mesh) with the keys the hub sends it: its peers see it
	// alive while its uplink is down, and drop its pods from routing
	// when it dies. nil runs none.
	Mesh *MeshConfig
	// Firmware, if not nil, has the node take the over-the-air updates
	// its rollouts offer it; nil takes none.
	Firmware *FirmwareConfig
	// Checkpoint configures the local store.
	Checkpoint checkpoint.Config
	// Sync tunes the hub connection (back-off, keep-alives); the agent
	// fills in the rest.
	Sync client.Config
	// Tunnels serve the streams the hub opens (logs, exec, ...), by
	// kind, over those the agent serves itself through edge/streams
	// (each kind its runtime supports); nil adds none.
	Tunnels map[string]client.TunnelHandler
	// NodeUsage says what the node's own usage in metrics.k8s.io (kubectl
	// top nodes) counts on a runtime of real containers: usage.Machine,
	// the whole machine (the default, a gateway), or usage.AgentCgroup,
	// the agent's cgroup tree, for several agents on one machine. Reports
	// go at most every Sync.UsageInterval (15s). The fake runtime's nodes
	// report synthetic usage.
	NodeUsage usage.NodeScope

	// Resync is how often the agent lists the runtime when nothing told
	// it to, for a runtime that reports no events: 1s. EventedResync is
	// that for one that does (runtime.Watcher), a safety net: 30s.
	Resync        time.Duration
	EventedResync time.Duration
	// NodeStatusInterval is how often the node reports its status when
	// nothing changed: 5m, kubelet's nodeStatusReportFrequency. It also
	// reports it at each connection to the hub, which may have set its
	// conditions Unknown while it was away.
	NodeStatusInterval time.Duration
	// StatusResync is the least time between two reports of a pod's (or
	// the node's) status made again because the hub's copy differed from
	// the agent's, as when another writer keeps setting it back: 10s,
	// kubelet's status manager's sync period. The first is made at once.
	StatusResync time.Duration
	// JoinRetry bounds the back-off of join attempts while the hub cannot
	// be reached: 30s.
	JoinRetry time.Duration
	// GCInterval is how often the checkpoint's value log is rid of
	// overwritten large configmaps and secrets: 1h.
	GCInterval time.Duration

	Logger *slog.Logger
	Clock  func() time.Time // or nil for the wall clock
}

// DefaultConfig returns the defaults above; the required fields are left
// empty.
func DefaultConfig() Config {
	return Config{
		Checkpoint:         checkpoint.DefaultConfig(),
		Sync:               client.DefaultConfig(),
		Resync:             time.Second,
		EventedResync:      30 * time.Second,
		NodeStatusInterval: 5 * time.Minute,
		StatusResync:       10 * time.Second,
		JoinRetry:          30 * time.Second,
		GCInterval:         time.Hour,
	}
}

// Validate reports the first invalid field. What joins the node (hub
// address, token, CA hash, node name, site) is checked for form here, so
// that a mistyped flag stops the agent at once instead of being taken for
// a hub that cannot be reached; the messages name the flags of
// cmd/internal/edgecmd.
func (c *Config) Validate() error {
	switch {
	case c.NodeName == "":
		return errors.New("node name is required: set --node-name")
	case c.DataDir == "":
		return errors.New("data directory is required: set --data-dir")
	case c.Runtime == nil && c.Containerd == nil:
		return errors.New("runtime is required")
	case c.HubAddr == "":
		return errors.New("hub address is required: set --hub to the host:port of the hub's sync endpoint, such as hub.example.com:7443")
	case c.Resync <= 0 || c.EventedResync <= 0 || c.NodeStatusInterval <= 0 || c.StatusResync <= 0 || c.JoinRetry <= 0 || c.GCInterval <= 0:
		return errors.New("resyncs, node status interval, status resync, join retry and GC interval must be positive")
	}
	if err := checkHubAddr(c.HubAddr); err != nil {
		return err
	}
	if errs := validation.IsDNS1123Subdomain(c.NodeName); len(errs) > 0 {
		return fmt.Errorf("invalid --node-name %q: %s; such as gw-17", c.NodeName, strings.Join(errs, "; "))
	}
	if errs := validation.IsValidLabelValue(c.Site); c.Site != "" && len(errs) > 0 {
		return fmt.Errorf("invalid --site %q: %s; such as store-17", c.Site, strings.Join(errs, "; "))
	}
	if c.TimeZone != "" {
		if err := wire.ValidTimeZone(c.TimeZone); err != nil {
			return fmt.Errorf("invalid --timezone: %w", err)
		}
	}
	if c.Token != "" {
		if _, _, err := wire.ParseToken(c.Token); err != nil {
			return fmt.Errorf("invalid --token: %w; use the token outpost token create prints", err)
		}
	}
	if c.CAHash != "" {
		if err := wire.CheckPin(c.CAHash); err != nil {
			return fmt.Errorf("invalid --ca-cert-hash: %w", err)
		}
	}
	return c.Checkpoint.Validate()
}

// checkHubAddr checks that addr is host:port with a host and a port number.
func checkHubAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err == nil && host == "" {
		err = errors.New("no host")
	}
	if err == nil {
		if n, perr := strconv.ParseUint(port, 10, 16); perr != nil || n == 0 {
			err = fmt.Errorf("port %q is not a number from 1 to 65535", port)
		}
	}
	if err != nil {
		return fmt.Errorf("invalid --hub %q (%v): want the host:port of the hub's sync endpoint, such as hub.example.com:7443", addr, err)
	}
	return nil
}

// Capacity is what the node offers to pods.
type Capacity = status.Capacity

// Agent runs one edge node. Start it with Run.
type Agent struct {
	cfg Config
	log *slog.Logger
	now func() time.Time
	rt  runtime.Runtime

	cp     *checkpoint.Store
	open   atomic.Pointer[checkpoint.Store] // cp while Run has it open, for other goroutines (TokenFor)
	id     *identity
	events *events.Recorder
	status *status.Reporter
	pods   *podworker.Workers
	usage  *usage.Meter
	real   *realPods // nil on the fake runtime's nodes
	// netsvc is the node's service routing, DNS server and site overlay;
	// nil on the fake runtime's nodes.
	netsvc *netsvc.Services
	// pressure is node-pressure eviction; nil when Config.Eviction is.
	pressure *pressure
	// closeRuntime closes the runtime the agent made itself, if it did,
	// and images is its image service.
	closeRuntime func() error
	images       *images.Service
	imagesRoot   string // containerd's root, the image file system; "" if not known
	// share is how the node shares images with its site; nil on a node
	// of no mesh or not on its own containerd.
	share *imageShare

	clientMu sync.Mutex
	client   *client.Client // nil until joined
	tunnels  map[string]client.TunnelHandler

	// The pod workers' round's own (Desired).
	view viewPods // the view's pods decoded, as of a checkpoint view generation
	// site is the node's site mesh while it runs; meshSaid is what the
	// node last said of it on its Node (meshAnnotations), under meshMu.
	site     atomic.Pointer[mesh.Site]
	meshMu   sync.Mutex
	meshSaid map[string]string
	// meta is what the node says of itself to its site (sayMeta), under
	// metaMu.
	metaMu sync.Mutex
	meta   mesh.Meta
	// relay is the site peers' relay while runRelay serves it, for its
	// counters in the usage report (relayUsage).
	relay atomic.Pointer[relay.Relay]

	// fw drives the node's updates; nil when Config.Firmware is. restart
	// stops Run to restart into another slot (ErrRestart), once Run has
	// started.
	fw          *firmware
	restartOnce sync.Once
	restarting  atomic.Bool
	stopRun     context.CancelFunc

	// badManifests holds why each manifest that could not be used was
	// not, as last logged.
	badManifests map[string]string
}

// New checks cfg and returns an agent; it starts nothing.
func New(cfg Config) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("agent config: %w", err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Containerd != nil && cfg.Pods == nil {
		pc := DefaultPodsConfig()
		cfg.Pods = &pc
	}
	if cfg.Containerd != nil && cfg.Eviction == nil {
		ec := eviction.DefaultConfig()
		cfg.Eviction = &ec
	}
	if cfg.Capacity == (Capacity{}) {
		cfg.Capacity = status.HostCapacity()
	}
	return &Agent{cfg: cfg, log: cfg.Logger, now: cfg.Clock, rt: cfg.Runtime}, nil
}

// maxJoinRetryAfter bounds the wait a hub may ask of a joining node, so
// that a hub's mistake cannot keep it away for long.
const maxJoinRetryAfter = 10 * time.Minute

// ErrJoinRefused is returned (wrapped) by Run when the hub refused to
// admit the node: a wrong, expired or deleted token.
var ErrJoinRefused = errors.New("hub refused to admit this node")

// Run starts the agent in the order that keeps pods running without the
// hub: open the checkpoint, adopt what the runtime runs and reconcile it to
// the checkpointed desired state, then connect to the hub in the
// background (joining first if the node never did). It returns nil when
// ctx ends, after everything it started has stopped, or an error wrapping
// ErrJoinRefused when the hub refuses the node.
func (a *Agent) Run(ctx context.Context) error {
	if err := os.MkdirAll(a.cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("create data directory: %w", err)
	}
	cp, err := a.openCheckpoint()
	if err != nil {
		return err
	}
	defer cp.Close()
	a.cp = cp
	a.open.Store(cp)
	defer a.open.Store(nil)

	// containerd, if the agent runs its own, stops last, once nothing
	// uses it; it starts before anything that does.
	var rtWG sync.WaitGroup
	defer rtWG.Wait()
	rtStop, stopRuntime := context.WithCancel(context.Background())
	defer stopRuntime()
	if a.rt == nil {
		if err := a.startContainerd(ctx, rtStop, &rtWG); err != nil {
			return err
		}
		defer a.closeRuntime()
	}
	if err := a.build(); err != nil {
		return err
	}
	id, joined, err := loadIdentity(a.cfg.DataDir, a.cfg.NodeName)
	if err != nil {
		return err
	}
	a.id = id

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	a.stopRun = cancel
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	if objs, err := cp.List(wire.ResourcePods); err == nil {
		a.log.Info("agent starting from its checkpoint", "pods", len(objs), "revision", cp.LastRevision(), "joined", joined)
	}
	if a.real != nil {
		wg.Go(func() { a.real.prober.Run(ctx) })
	}
	if a.netsvc != nil {
		wg.Go(func() { _ = a.netsvc.Run(ctx) })
	}
	if a.images != nil && a.cfg.Containerd.Address == "" {
		wg.Go(func() { a.images.RunGC(ctx, a.imagesInUse) })
	}
	wg.Go(func() { a.pods.Run(ctx) })
	wg.Go(func() { a.status.Run(ctx) })
	if a.pressure != nil {
		wg.Go(func() { a.pressure.run(ctx) })
	}
	wg.Go(func() { a.collectGarbage(ctx) })
	wg.Go(func() { a.usage.Run(ctx) })
	if a.cfg.Mesh != nil {
		wg.Go(func() { a.runMesh(ctx) })
		wg.Go(func() { a.runRelay(ctx) })
	}
	if a.share != nil {
		wg.Go(func() { a.runImageShare(ctx) })
	}
	if a.fw != nil {
		wg.Go(func() { a.fw.run(ctx) })
	}

	errc := make(chan error, 1)
	wg.Go(func() { errc <- a.connect(ctx, joined) })
	select {
	case <-ctx.Done():
	case err := <-errc:
		if ctx.Err() == nil {
			return err
		}
	}
	if a.restarting.Load() {
		return ErrRestart
	}
	return nil
}

// restart stops Run, which returns ErrRestart once everything it
// started has stopped: the pods go on running in their shims.
func (a *Agent) restart() {
	a.restartOnce.Do(func() {
		a.restarting.Store(true)
		a.stopRun()
	})
}

// connect joins the node if it never did, then keeps the hub connection
// until ctx ends.
func (a *Agent) connect(ctx context.Context, joined bool) error {
	if !joined {
		if err := a.join(ctx); err != nil {
			return err
		}
	}
	cfg := a.cfg.Sync
	cfg.HubAddr = a.cfg.HubAddr
	cfg.NodeName = a.cfg.NodeName
	cfg.AgentVersion = version.Version
	cfg.Certificate = a.id.certificate
	cfg.RootCAs = a.id.roots()
	cfg.Store = repairing{a.cp, a}
	cfg.Outbox = repairing{a.cp, a}
	cfg.HeldTokens = a.heldTokens
	nodeKey := wire.Key{Resource: wire.ResourceNodes, Name: a.cfg.NodeName}
	cfg.Applied = func(changes []wire.Change) {
		for _, c := range changes {
			if c.Key == nodeKey {
				a.status.NodeViewed()
			}
			if a.fw != nil && (c.Key == nodeKey || c.Key == wire.FirmwareTrustKey) {
				a.fw.Kick()
			}
		}
		a.pods.Kick()
		if a.netsvc != nil {
			a.netsvc.Kick()
		}
	}
	cfg.Connected = func() {
		a.status.NodeDue()
		if a.fw != nil {
			a.fw.Kick() // a trial waits for the connection
		}
	}
	cfg.Renew = func() ([]byte, func([]byte) error, error) {
		csr, commit, err := a.id.newCSR()
		if err != nil {
			return nil, nil, err
		}
		return csr, func(cert []byte) error { return commit(cert, nil) }, nil
	}
	cfg.Tunnels = a.tunnels
	cfg.Usage = a.usage.Next
	cfg.Logger = a.log.With("component", "sync")
	cfg.Relays = a.peerRelays
	c, err := client.New(cfg)
	if err != nil {
		return err
	}
	a.clientMu.Lock()
	a.client = c
	a.clientMu.Unlock()
	c.NotifyOutbox() // whatever piled up before the connection
	return c.Run(ctx)
}

// join admits the node, retrying while the hub cannot be reached or
// cannot admit it now; a refusal ends it.
func (a *Agent) join(ctx context.Context) error {
	if a.cfg.Token == "" || a.cfg.CAHash == "" {
		return fmt.Errorf("%w: node %s has not joined and no --token and --ca-cert-hash were given", ErrJoinRefused, a.cfg.NodeName)
	}
	backoff := session.Backoff{Min: time.Second, Max: a.cfg.JoinRetry}
	for {
		csr, commit, err := a.id.newCSR()
		if err != nil {
			return err
		}
		cert, ca, err := client.Join(ctx, client.JoinConfig{
			HubAddr: a.cfg.HubAddr, Token: a.cfg.Token, CAHash: a.cfg.CAHash,
			NodeName: a.cfg.NodeName, Site: a.cfg.Site, CSR: csr,
		})
		if err == nil {
			if err := commit(cert, ca); err != nil {
				return fmt.Errorf("store node certificate: %w", err)
			}
			a.log.Info("joined the hub", "hub", a.cfg.HubAddr)
			return nil
		}
		// A refusal ends it; a hub that cannot admit the node now
		// (Unavailable, Internal) is tried again, as one not reached, but
		// not before the wait it asked for (it refuses joins from an
		// address or with a token that failed too often).
		var we *wire.Error
		if errors.As(err, &we) && we.Code != wire.CodeUnavailable && we.Code != wire.CodeInternal || errors.Is(err, wire.ErrPinMismatch) || errors.Is(err, wire.ErrPinMalformed) {
			return fmt.Errorf("%w: %w", ErrJoinRefused, err)
		}
		wait := backoff.Next(0)
		if we != nil && we.RetryAfter > wait {
			wait = min(we.RetryAfter, maxJoinRetryAfter)
		}
		if we != nil {
			a.log.Info("hub cannot admit the node now; pods run meanwhile", "err", err, "retry_in", wait.Round(time.Millisecond))
		} else {
			a.log.Info("hub not reachable to join; pods run meanwhile", "err", err, "retry_in", wait.Round(time.Millisecond))
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// notify tells the sync client the outbox has news, once there is one.
func (a *Agent) notify() {
	a.clientMu.Lock()
	c := a.client
	a.clientMu.Unlock()
	if c != nil {
		c.NotifyOutbox()
	}
}

// Connected reports whether the agent has a session with the hub.
func (a *Agent) Connected() bool {
	a.clientMu.Lock()
	c := a.client
	a.clientMu.Unlock()
	return c != nil && c.Connected()
}

// SyncStats returns the sync client's counters, nil before the node
// joined.
func (a *Agent) SyncStats() *client.Stats {
	a.clientMu.Lock()
	defer a.clientMu.Unlock()
	if a.client == nil {
		return nil
	}
	return a.client.Stats()
}

// collectGarbage reclaims the checkpoint's disk space every GCInterval
// until ctx ends.
func (a *Agent) collectGarbage(ctx context.Context) {
	t := time.NewTicker(a.cfg.GCInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := a.cp.CollectGarbage(); err != nil {
				a.log.Warn("reclaim checkpoint space", "err", err)
			}
		}
	}
}

// volumeSources are the resources of the view that the pods' volumes
// read: a change of one has the workers refresh every pod's volumes.
var volumeSources = []string{wire.ResourceConfigMaps, wire.ResourceSecrets, wire.ResourceServiceAccounts, wire.ResourcePodTokens}

// source is the agent as the pod workers' podworker.Source.
type source struct{ a *Agent }

// Desired returns the pods bound to this node: those of the view, then
// the static pods. It is called from the pod workers' loop alone.
func (s source) Desired() (podworker.Desired, bool) {
	a := s.a
	bound, err := a.view.bound(a.cp, a.cfg.NodeName, a.log)
	if err != nil {
		a.log.Error("read pods from the checkpoint", "err", err)
		if a.dropCorrupt(err) {
			a.pods.Kick() // read again what is left
		}
		return podworker.Desired{}, false
	}
	d := podworker.Desired{Pods: bound, Static: map[string]*corev1.Pod{}, Generation: a.cp.ResourceGeneration(volumeSources...)}
	ms, err := readManifests(filepath.Join(a.cfg.DataDir, ManifestsDir), a.cfg.NodeName)
	if err != nil {
		a.log.Warn("read static pod manifests", "err", err)
	}
	bad := map[string]string{}
	for _, m := range ms {
		if m.err != nil {
			// Once per manifest and error, not at every round.
			bad[m.path] = m.err.Error()
			if a.badManifests[m.path] != bad[m.path] {
				a.log.Warn("static pod manifest not used", "path", m.path, "err", m.err)
			}
			continue
		}
		d.Static[string(m.pod.UID)] = m.pod
		d.Pods = append(d.Pods, m.pod)
	}
	a.badManifests = bad
	// Until the view is complete (revision 0: the node never synced, or
	// dropped damaged records, or its hub was restored from a backup,
	// and a resume from its inventory is due), a pod the view lacks may
	// well still be bound to the node. The manifests are always
	// complete: a static pod whose manifest went is stopped all the same.
	if a.cp.LastRevision() == 0 {
		d.Partial = true
		d.Known = a.status.Mirrored()
	}
	return d, true
}

// build makes the subsystems that run the pods, on the checkpoint just
// opened, and reads what they recorded before.
func (a *Agent) build() error {
	a.events = events.NewRecorder(a.cfg.NodeName, a.cp, a.now, a.log)
	capacity, allocatable, reserved := a.nodeResources()
	if a.cfg.Eviction != nil {
		p, err := a.buildPressure(capacity, allocatable)
		if err != nil {
			return err
		}
		a.pressure = p
	}
	scfg := status.DefaultConfig()
	scfg.NodeName, scfg.Site = a.cfg.NodeName, a.cfg.Site
	if p := a.cfg.Pods; p != nil {
		scfg.NotNodeAddresses = []netip.Prefix{p.ClusterCIDR, p.ServiceCIDR}
	}
	scfg.Capacity, scfg.RuntimeVersion = a.cfg.Capacity, a.cfg.RuntimeVersion
	if a.pressure != nil {
		scfg.Machine = a.pressure
	}
	scfg.Store, scfg.Events, scfg.MirrorOf = a.cp, a.events, mirrorOf
	scfg.Notify, scfg.Lister = a.notify, a.rt
	scfg.Kick = func() { a.pods.Kick() } // a.pods is set below, before anything runs
	scfg.Annotations = a.nodeAnnotations // a.netsvc too
	scfg.NodeStatusInterval, scfg.StatusResync = a.cfg.NodeStatusInterval, a.cfg.StatusResync
	scfg.Logger, scfg.Clock = a.log.With("component", "status"), a.now
	st, err := status.New(scfg)
	if err != nil {
		return err
	}
	if err := st.Load(a.listLocal); err != nil {
		return err
	}
	wcfg := podworker.DefaultConfig()
	wcfg.Runtime, wcfg.Source, wcfg.Store, wcfg.Env = a.rt, source{a}, a.cp, env{a}
	wcfg.Status, wcfg.Events = st, a.events
	ad := admitter{}
	if a.pressure != nil {
		wcfg.Status = roundTee{st, a.pressure}
		ad.pressure = a.pressure.admitUnderPressure
		wcfg.Admitter = ad
	}
	wcfg.Relist, wcfg.EventedRelist = a.cfg.Resync, a.cfg.EventedResync
	wcfg.Logger, wcfg.Clock = a.log, a.now
	var kick func()
	if a.cfg.Pods != nil {
		rp, err := a.buildRealPods(func() { kick() }, allocatable, reserved)
		if err != nil {
			return err
		}
		a.real = rp
		exec, _ := a.rt.(runtime.Execer)
		ad.allocatable = allocatable
		wcfg.Sandbox, wcfg.Prober, wcfg.Hooks, wcfg.Admitter = rp.sandbox, prober{rp.prober}, hooks{exec}, ad
	}
	w, err := podworker.New(wcfg)
	if err != nil {
		return err
	}
	kick = w.Kick
	if err := w.Load(a.listLocal); err != nil {
		return err
	}
	a.status, a.pods = st, w
	if a.real != nil {
		if a.netsvc, err = a.buildNetServices(a.real.net); err != nil {
			return err
		}
	}
	if err := a.buildTunnels(); err != nil {
		return err
	}
	if err := a.buildFirmware(); err != nil {
		return err
	}
	return a.buildUsage()
}
