package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/outpost-mesh/outpost/edge/checkpoint"
	"github.com/outpost-mesh/outpost/edge/events"
	"github.com/outpost-mesh/outpost/edge/objects"
	"github.com/outpost-mesh/outpost/edge/pods"
	"github.com/outpost-mesh/outpost/edge/runtime"
	"github.com/outpost-mesh/outpost/internal/version"
	"github.com/outpost-mesh/outpost/sync/client"
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
	DataDir  string // required; created with mode 0700
	// HubAddr is the hub's sync endpoint, host:port. Token and CAHash
	// join the node the first time; later starts use the certificate in
	// DataDir.
	HubAddr string
	Token   string
	CAHash  string

	Runtime        runtime.Runtime // required
	RuntimeVersion string          // reported in the node's info, e.g. "containerd://1.7.24"
	// Capacity is what the node offers; zero reads this machine's.
	Capacity Capacity
	// Checkpoint configures the local store.
	Checkpoint checkpoint.Config
	// Sync tunes the hub connection (back-off, keep-alives); the agent
	// fills in the rest.
	Sync client.Config
	// Tunnels serve the streams the hub opens (logs, exec, ...).
	Tunnels map[string]client.TunnelHandler

	// Resync is how often the agent looks at the runtime even when nothing
	// told it to: 1s.
	Resync time.Duration
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
	case c.Runtime == nil:
		return errors.New("runtime is required")
	case c.HubAddr == "":
		return errors.New("hub address is required: set --hub to the host:port of the hub's sync endpoint, such as hub.example.com:7443")
	case c.Resync <= 0 || c.NodeStatusInterval <= 0 || c.StatusResync <= 0 || c.JoinRetry <= 0 || c.GCInterval <= 0:
		return errors.New("resync, node status interval, status resync, join retry and GC interval must be positive")
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

// Agent runs one edge node. Start it with Run.
type Agent struct {
	cfg Config
	log *slog.Logger
	now func() time.Time
	rt  runtime.Runtime

	cp     *checkpoint.Store
	open   atomic.Pointer[checkpoint.Store] // cp while Run has it open, for other goroutines (TokenFor)
	id     *identity
	client *client.Client // nil until joined

	trigger chan struct{}

	mu       sync.Mutex
	busy     map[string]bool         // pods whose worker runs actions
	records  map[string]pods.Record  // by pod UID
	reported map[string]sentStatus   // the last status sent, by pod UID
	resync   map[string]*pods.Resync // what the hub has not shown back of them, by pod UID
	mirrored map[string]string       // static pod UID -> mirror key sent; on disk too

	addrs []corev1.NodeAddress // the node's addresses, looked up with each node status

	node     *corev1.Node // the last node status sent; the loop's own
	nodeSent time.Time
	// nodeDue is set when the node's status is to be reported at the next
	// round, whenever the last was: a session with the hub began.
	nodeDue atomic.Bool
	// nodeViewed is set, as the sync client applies a batch, when the
	// hub's copy of the node in the view changed since the loop last
	// compared it with the last report; nodeResent is when that last led
	// to a report, the loop's own.
	nodeViewed atomic.Bool
	nodeResent time.Time
	// view holds the view's pods decoded, as of a checkpoint view
	// generation; the loop's own.
	view viewPods
	// badManifests holds why each manifest that could not be used was
	// not, as last logged; the loop's own.
	badManifests map[string]string
	// events queues the Events about pods; set by Run.
	events *events.Recorder
	// computed holds, by pod UID, what each pod's status was last computed
	// from; the loop's own.
	computed map[string]statusInputs

	clientMu sync.Mutex
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
	if cfg.Capacity == (Capacity{}) {
		cfg.Capacity = hostCapacity()
	}
	return &Agent{
		cfg: cfg, log: cfg.Logger, now: cfg.Clock, rt: cfg.Runtime,
		trigger:  make(chan struct{}, 1),
		busy:     map[string]bool{},
		records:  map[string]pods.Record{},
		reported: map[string]sentStatus{},
		resync:   map[string]*pods.Resync{},
		mirrored: map[string]string{},
		computed: map[string]statusInputs{},
	}, nil
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
	a.events = events.NewRecorder(a.cfg.NodeName, cp, a.now, a.log)
	a.open.Store(cp)
	defer a.open.Store(nil)
	if err := a.loadRecords(); err != nil {
		return err
	}
	id, joined, err := loadIdentity(a.cfg.DataDir, a.cfg.NodeName)
	if err != nil {
		return err
	}
	a.id = id

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	if objs, err := cp.List(wire.ResourcePods); err == nil {
		a.log.Info("agent starting from its checkpoint", "pods", len(objs), "revision", cp.LastRevision(), "joined", joined)
	}
	wg.Go(func() { a.loop(ctx) })
	wg.Go(func() { a.collectGarbage(ctx) })

	errc := make(chan error, 1)
	wg.Go(func() { errc <- a.connect(ctx, joined) })
	select {
	case <-ctx.Done():
		return nil
	case err := <-errc:
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
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
				a.nodeViewed.Store(true)
			}
		}
		a.kick()
	}
	cfg.Connected = func() {
		a.nodeDue.Store(true)
		a.kick()
	}
	cfg.Renew = func() ([]byte, func([]byte) error, error) {
		csr, commit, err := a.id.newCSR()
		if err != nil {
			return nil, nil, err
		}
		return csr, func(cert []byte) error { return commit(cert, nil) }, nil
	}
	cfg.Tunnels = a.cfg.Tunnels
	cfg.Logger = a.log.With("component", "sync")
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
	backoff := time.Second
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
		wait := backoff/2 + rand.N(backoff/2+1)
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
		backoff = min(backoff*2, a.cfg.JoinRetry)
	}
}

// kick asks the loop to reconcile now. It never blocks.
func (a *Agent) kick() {
	select {
	case a.trigger <- struct{}{}:
	default:
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

// loop reconciles until ctx ends: at once, when kicked, at the decision's
// wake time, and every Resync.
func (a *Agent) loop(ctx context.Context) {
	var workers sync.WaitGroup
	defer workers.Wait()
	resync := time.NewTicker(a.cfg.Resync)
	defer resync.Stop()
	wake := time.NewTimer(time.Hour)
	defer wake.Stop()
	for {
		next := a.reconcile(ctx, &workers)
		if !next.IsZero() {
			wake.Reset(max(next.Sub(a.now()), time.Millisecond))
		}
		select {
		case <-ctx.Done():
			return
		case <-a.trigger:
		case <-resync.C:
		case <-wake.C:
		}
	}
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

// recordKey, statusKey and mirrorKey name the agent's local records of a
// pod.
func recordKey(uid string) string { return "pod/" + uid }
func statusKey(uid string) string { return "status/" + uid }
func mirrorKey(uid string) string { return "mirror/" + uid }

// loadRecords reads the pods' records and last reported statuses.
func (a *Agent) loadRecords() error {
	recs, err := a.listLocal("pod/")
	if err != nil {
		return fmt.Errorf("read pod records: %w", err)
	}
	for k, v := range recs {
		r, err := pods.UnmarshalRecord(v)
		if err != nil {
			a.log.Warn("dropping unreadable pod record", "key", k, "err", err)
			continue
		}
		a.records[k[len("pod/"):]] = r
	}
	sts, err := a.listLocal("status/")
	if err != nil {
		return fmt.Errorf("read pod statuses: %w", err)
	}
	for k, v := range sts {
		var s corev1.PodStatus
		if err := json.Unmarshal(v, &s); err != nil {
			continue
		}
		w, err := s.Marshal()
		if err != nil {
			continue
		}
		a.reported[k[len("status/"):]] = sentStatus{s, w}
	}
	// The mirrors sent, so that a static pod whose manifest goes away
	// after a restart still has its mirror removed.
	ms, err := a.listLocal("mirror/")
	if err != nil {
		return fmt.Errorf("read mirror pods: %w", err)
	}
	for k, v := range ms {
		a.mirrored[k[len("mirror/"):]] = string(v)
	}
	return nil
}

// desiredPods returns the pods bound to this node: those of the view, then
// the static pods; it returns ok false if the view could not be read, in
// which case nothing may be stopped for its absence. The pods returned are
// shared with later rounds: nobody may modify them.
func (a *Agent) desiredPods() (desired []*corev1.Pod, static map[string]*corev1.Pod, ok bool) {
	bound, err := a.view.bound(a.cp, a.cfg.NodeName, a.log)
	if err != nil {
		a.log.Error("read pods from the checkpoint", "err", err)
		if a.dropCorrupt(err) {
			a.kick() // read again what is left
		}
		return nil, nil, false
	}
	desired = append(desired, bound...)
	static = map[string]*corev1.Pod{}
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
		static[string(m.pod.UID)] = m.pod
		desired = append(desired, m.pod)
	}
	a.badManifests = bad
	return desired, static, true
}

// reconcile runs one round: plan, start the actions of idle pods, and
// report statuses. It returns when the next round is due at the latest.
func (a *Agent) reconcile(ctx context.Context, workers *sync.WaitGroup) time.Time {
	desired, static, ok := a.desiredPods()
	if !ok {
		return time.Time{}
	}
	var wake time.Time // when a held-back report of a pod's status is due
	actual, err := a.rt.List(ctx)
	if err != nil {
		a.log.Warn("list runtime", "err", err)
		return time.Time{}
	}
	now := a.now()
	a.mu.Lock()
	records := make(map[string]pods.Record, len(a.records))
	for k, v := range a.records {
		records[k] = v
	}
	a.mu.Unlock()
	if a.cp.LastRevision() == 0 {
		a.mu.Lock()
		mirrored := maps.Clone(a.mirrored)
		a.mu.Unlock()
		actual, records = viewPodsOnly(desired, mirrored, actual, records)
	}

	d := pods.Plan(desired, actual, records, now)
	byUID := map[string]*corev1.Pod{}
	for _, p := range desired {
		byUID[string(p.UID)] = p
	}
	for _, pd := range d.Pods {
		uid := pd.Pod.UID
		a.mu.Lock()
		busy := a.busy[uid]
		if !busy {
			if pd.Forget && len(pd.Actions) == 0 {
				delete(a.records, uid)
				delete(a.reported, uid)
				delete(a.resync, uid)
			} else {
				a.records[uid] = pd.Record
			}
			if len(pd.Actions) > 0 {
				a.busy[uid] = true
			}
		}
		a.mu.Unlock()
		if busy {
			continue
		}
		if pd.Forget && len(pd.Actions) == 0 {
			a.cp.DeleteLocal(recordKey(uid))
			a.cp.DeleteLocal(statusKey(uid))
			a.forgetMirror(uid)
			continue
		}
		a.saveRecord(uid, pd.Record)
		if len(pd.Actions) > 0 {
			workers.Go(func() { a.work(ctx, pd, byUID[uid], static[uid] != nil) })
		}
	}

	byActual := map[string]*runtime.PodStatus{}
	for i := range actual {
		byActual[actual[i].Pod.UID] = &actual[i]
	}
	hostIP := a.internalIP()
	for uid := range a.computed {
		if byUID[uid] == nil {
			delete(a.computed, uid)
		}
	}
	for _, p := range desired {
		uid := string(p.UID)
		a.mu.Lock()
		rec := a.records[uid]
		last, had := a.reported[uid]
		a.mu.Unlock()
		inputs := statusInputs{pod: p, act: byActual[uid], rec: rec, hostIP: hostIP}
		if had && a.computed[uid].same(inputs, last.wire) {
			continue // the status would be the one last reported
		}
		isStatic := static[uid] != nil
		in := p
		if had {
			// Status reads its pod and keeps none of it: a shallow copy
			// does. It starts from the last report, with what others
			// own of the status as the hub has it now; a static pod's
			// hub copy is its mirror, which the agent alone writes.
			withLast := *p
			withLast.Status = last.status
			if !isStatic {
				withLast.Status = pods.MergeHub(&last.status, &p.Status)
			}
			in = &withLast
		}
		st := pods.Status(in, byActual[uid], rec, now)
		fillIPs(&st, hostIP)
		wireSt, err := st.Marshal()
		if err != nil {
			a.log.Warn("encode pod status", "pod", p.Namespace+"/"+p.Name, "err", err)
			continue
		}
		a.computed[uid] = inputs.keep(wireSt)
		if had && bytes.Equal(wireSt, last.wire) {
			if isStatic || !a.resyncDue(p, &last.status, now, &wake) {
				continue
			}
			a.log.Info("pod status on the hub differs from the agent's; reporting it again", "pod", p.Namespace+"/"+p.Name)
		}
		if had {
			a.backOffEvents(p, &last.status, &st)
		} else {
			a.backOffEvents(p, nil, &st)
		}
		a.report(p, sentStatus{st, wireSt}, static[uid] != nil)
	}
	a.reportNode(now)
	a.notify()
	if d.NextWake.IsZero() || !wake.IsZero() && wake.Before(d.NextWake) {
		return wake
	}
	return d.NextWake
}

// resyncDue reports whether pod's status, last reported as last and
// computed the same again, is to be reported again because the hub's copy
// (the pod's) differs; if that is held back, it forgets the computation,
// so that the next round checks again, and sets *wake to when it may be
// made if that is sooner.
func (a *Agent) resyncDue(pod *corev1.Pod, last *corev1.PodStatus, now time.Time, wake *time.Time) bool {
	uid := string(pod.UID)
	a.mu.Lock()
	r := a.resync[uid]
	if r == nil {
		r = &pods.Resync{}
		a.resync[uid] = r
	}
	resend, retry := r.Check(&pod.Status, last, now, a.cfg.StatusResync)
	a.mu.Unlock()
	if !retry.IsZero() {
		delete(a.computed, uid)
		if wake.IsZero() || retry.Before(*wake) {
			*wake = retry
		}
	}
	return resend
}

// viewPodsOnly returns what of actual and records concerns the desired
// pods and the static pods known to have run (the keys of mirrored). Until the
// view is complete (revision 0: the node never synced, or dropped damaged
// records, or its hub was restored from a backup, and a resume from its
// inventory is due), a pod the view lacks may well still be bound to the
// node: the agent leaves it running and keeps its record, as kubelet
// cleans up no pod before all its sources are ready. The manifests are
// always complete: a static pod whose manifest went is stopped all the
// same.
func viewPodsOnly(desired []*corev1.Pod, mirrored map[string]string, actual []runtime.PodStatus, records map[string]pods.Record) ([]runtime.PodStatus, map[string]pods.Record) {
	keep := make(map[string]bool, len(desired)+len(mirrored))
	for _, p := range desired {
		keep[string(p.UID)] = true
	}
	for uid := range mirrored {
		keep[uid] = true
	}
	var acts []runtime.PodStatus
	for _, ps := range actual {
		if keep[ps.Pod.UID] {
			acts = append(acts, ps)
		}
	}
	maps.DeleteFunc(records, func(uid string, _ pods.Record) bool { return !keep[uid] })
	return acts, records
}

// fillIPs sets the host IPs to the node's internal IP ip, which the
// runtime does not know.
func fillIPs(st *corev1.PodStatus, ip string) {
	if ip != "" {
		st.HostIP = ip
		st.HostIPs = []corev1.HostIP{{IP: ip}}
	}
}

// internalIP returns the node's internal IP, "" if it has none.
func (a *Agent) internalIP() string {
	ip := ""
	for _, addr := range a.addresses() {
		if addr.Type == corev1.NodeInternalIP {
			ip = addr.Address
		}
	}
	return ip
}

// statusInputs is what a round computed a pod's status from. pods.Status
// reads the time only for what changed since the status it starts from
// (the last reported), so the same inputs give the same status again: a
// round skips the pods whose inputs are unchanged, most of them, rather
// than compute and encode every status to find it the same.
type statusInputs struct {
	pod    *corev1.Pod // shared and never modified, so the same pointer is the same pod
	act    *runtime.PodStatus
	rec    pods.Record
	hostIP string
	// from is the encoding of the status computed, which the pod's last
	// report must be for the next computation to start from it again.
	from []byte
}

// keep returns in as remembered, with the status computed from it: what it
// points into that a later round changes is copied.
func (in statusInputs) keep(computed []byte) statusInputs {
	if in.act != nil {
		act := in.act.Clone()
		in.act = &act
	}
	in.rec = in.rec.Clone()
	in.from = computed
	return in
}

// same reports whether a status computed from in, starting from the last
// report (encoded as last), is the one computed from c.
func (c statusInputs) same(in statusInputs, last []byte) bool {
	switch {
	case c.pod == nil || c.pod != in.pod || c.hostIP != in.hostIP || !bytes.Equal(c.from, last):
		return false
	case (c.act == nil) != (in.act == nil) || c.act != nil && !c.act.Equal(in.act):
		return false
	}
	return c.rec.Equal(in.rec)
}

// work runs one pod's actions in order, recording their outcomes, then
// asks for another round.
func (a *Agent) work(ctx context.Context, pd pods.PodDecision, pod *corev1.Pod, static bool) {
	defer func() {
		a.mu.Lock()
		delete(a.busy, pd.Pod.UID)
		a.mu.Unlock()
		a.kick()
	}()
	rec := pd.Record
	for _, act := range pd.Actions {
		err := a.run(ctx, act, pod, static)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			a.log.Info("pod action failed", "action", act.String(), "err", err)
		}
		a.actionEvent(act, pod, err)
		rec = pods.Observe(rec, act, err, a.now())
		a.mu.Lock()
		a.records[pd.Pod.UID] = rec
		a.mu.Unlock()
		a.saveRecord(pd.Pod.UID, rec)
	}
	if pd.Forget {
		a.mu.Lock()
		delete(a.records, pd.Pod.UID)
		delete(a.reported, pd.Pod.UID)
		delete(a.resync, pd.Pod.UID)
		a.mu.Unlock()
		a.cp.DeleteLocal(recordKey(pd.Pod.UID))
		a.cp.DeleteLocal(statusKey(pd.Pod.UID))
		// A static pod is forgotten here, once removed from the runtime,
		// the usual way its manifest's removal ends.
		a.forgetMirror(pd.Pod.UID)
	}
}

// run performs one action.
func (a *Agent) run(ctx context.Context, act pods.Action, pod *corev1.Pod, static bool) error {
	switch act.Type {
	case pods.StartContainer:
		spec := act.Spec
		if pod != nil {
			env, err := a.resolveEnv(pod, act.Container)
			if err != nil {
				return err
			}
			if env != nil {
				// The whole environment in kubelet's order, the spec's
				// literal values in their place among the others.
				spec.Env = env
			}
		}
		if err := a.rt.StartContainer(ctx, act.Pod, spec, act.Attempt); err != nil {
			return err
		}
		a.log.Info("container started", "pod", act.Pod.Namespace+"/"+act.Pod.Name, "container", act.Container, "attempt", act.Attempt)
		return nil
	case pods.StopContainer:
		return a.rt.StopContainer(ctx, act.Pod, act.Container, act.Grace)
	case pods.RemovePod:
		return a.rt.RemovePod(ctx, act.Pod)
	case pods.ConfirmTerminated:
		if pod == nil || static {
			return nil
		}
		return a.confirmTerminated(pod)
	}
	return fmt.Errorf("unknown action %v", act.Type)
}

// confirmTerminated sends the pod's final status, then tells the hub it
// may remove the pod.
func (a *Agent) confirmTerminated(pod *corev1.Pod) error {
	actual, err := a.rt.List(context.Background())
	if err != nil {
		return err
	}
	var ps *runtime.PodStatus
	for i := range actual {
		if actual[i].Pod.UID == string(pod.UID) {
			ps = &actual[i]
		}
	}
	a.mu.Lock()
	rec := a.records[string(pod.UID)]
	a.mu.Unlock()
	st := pods.Status(pod, ps, rec, a.now())
	fillIPs(&st, a.internalIP())
	w, err := st.Marshal()
	if err != nil {
		return err
	}
	a.report(pod, sentStatus{st, w}, false)
	raw, err := objects.Encode(podForHub(pod, st))
	if err != nil {
		return err
	}
	if _, err := a.cp.Enqueue(wire.KindPodTerminated, podKey(pod), raw); err != nil {
		return err
	}
	a.notify()
	return nil
}

func podKey(p *corev1.Pod) wire.Key {
	return wire.Key{Resource: wire.ResourcePods, Namespace: p.Namespace, Name: p.Name}
}

// podForHub returns what is sent of a pod with status st: its identity and
// the status.
func podForHub(p *corev1.Pod, st corev1.PodStatus) *corev1.Pod {
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID},
		Status:     st,
	}
}

// sentStatus is a pod status as reported, with its protobuf encoding: two
// statuses are the same to the hub when their encodings are, which drop
// the times' fractions of a second as the hub's storage does.
type sentStatus struct {
	status corev1.PodStatus
	wire   []byte
}

// report queues a pod's status for the hub and remembers it.
func (a *Agent) report(p *corev1.Pod, sent sentStatus, static bool) {
	uid := string(p.UID)
	st := sent.status
	var err error
	if static {
		m := mirrorOf(p)
		m.Status = st
		var raw []byte
		if raw, err = objects.Encode(m); err == nil {
			_, err = a.cp.Enqueue(wire.KindMirrorPod, podKey(p), raw)
		}
		if err == nil {
			key := podKey(p).String()
			a.mu.Lock()
			known := a.mirrored[uid] == key
			a.mirrored[uid] = key
			a.mu.Unlock()
			if !known {
				a.cp.PutLocal(mirrorKey(uid), []byte(key))
			}
		}
	} else {
		var raw []byte
		if raw, err = objects.Encode(podForHub(p, st)); err == nil {
			_, err = a.cp.Enqueue(wire.KindPodStatus, podKey(p), raw)
		}
	}
	if err != nil {
		a.log.Warn("queue pod status", "pod", p.Namespace+"/"+p.Name, "err", err)
		return
	}
	a.mu.Lock()
	a.reported[uid] = sent
	if !static {
		r := a.resync[uid]
		if r == nil {
			r = &pods.Resync{}
			a.resync[uid] = r
		}
		r.Sent(&sent.status)
	}
	a.mu.Unlock()
	if b, err := json.Marshal(st); err == nil {
		a.cp.PutLocal(statusKey(uid), b)
	}
}

// forgetMirror forgets the mirror of a static pod that is gone, if one
// was sent, and queues its removal, unless the static pod of a changed
// manifest, the same pod to the hub, has sent its own since: the hub
// replaces a mirror by itself, and the removal would take the new one.
func (a *Agent) forgetMirror(uid string) {
	a.mu.Lock()
	key, ok := a.mirrored[uid]
	delete(a.mirrored, uid)
	replaced := false
	for _, k := range a.mirrored {
		replaced = replaced || k == key
	}
	a.mu.Unlock()
	if !ok {
		return
	}
	if !replaced {
		a.enqueueMirrorDelete(key)
	}
	a.cp.DeleteLocal(mirrorKey(uid))
}

func (a *Agent) enqueueMirrorDelete(key string) {
	k, err := wire.ParseKey(key)
	if err != nil {
		return
	}
	if _, err := a.cp.Enqueue(wire.KindMirrorPodDelete, k, nil); err != nil {
		a.log.Warn("queue mirror pod removal", "pod", key, "err", err)
	}
}

// reportNode queues the node's status when it is due: at the first round,
// at the first after each connection to the hub (which sets the
// conditions of a node it lost Unknown, and has them back from the
// report within seconds of the return rather than at the next interval),
// then every NodeStatusInterval. What the status holds is looked up only
// then, so between two reports it cannot have changed.
func (a *Agent) reportNode(now time.Time) {
	due := a.nodeDue.Swap(false)
	if !due && a.node != nil && now.Sub(a.nodeSent) < a.cfg.NodeStatusInterval {
		if !a.nodeChanged(now) {
			return
		}
		a.log.Info("node status on the hub differs from the agent's; reporting it again")
	}
	addrs := hostAddresses(a.cfg.NodeName)
	a.mu.Lock()
	a.addrs = addrs
	a.mu.Unlock()
	n := nodeObject(a.cfg.NodeName, a.cfg.Site, a.cfg.Capacity, a.cfg.RuntimeVersion, addrs, a.node, now)
	raw, err := objects.Encode(n)
	if err != nil {
		a.log.Warn("encode node status", "err", err)
		return
	}
	if _, err := a.cp.Enqueue(wire.KindNodeStatus, wire.Key{Resource: wire.ResourceNodes, Name: a.cfg.NodeName}, raw); err != nil {
		a.log.Warn("queue node status", "err", err)
		if due {
			a.nodeDue.Store(true) // at the next round, then
		}
		return
	}
	a.node, a.nodeSent = n, now
}

// nodeChanged reports whether the hub's copy of the node, as the view has
// it, shows that another writer changed what the agent reported last
// (nodeNeedsReport), as kubelet compares its node's status with the API's
// copy: the hub's node lifecycle controller sets a node's conditions
// Unknown when it thinks it unreachable, and may yet do so just after the
// node's return, before it has seen the node's Lease renewed. A report so
// made is made at most once per StatusResync, so that a writer that keeps
// setting them back is not answered in a loop.
func (a *Agent) nodeChanged(now time.Time) bool {
	if !a.nodeViewed.Load() {
		return false
	}
	if !a.nodeResent.IsZero() && now.Sub(a.nodeResent) < a.cfg.StatusResync {
		return false // and look again at the next round
	}
	a.nodeViewed.Store(false)
	o, ok, err := a.cp.Get(wire.Key{Resource: wire.ResourceNodes, Name: a.cfg.NodeName})
	if err != nil || !ok {
		return false
	}
	var hub corev1.Node
	if err := objects.Decode(o.Raw, o.Revision, &hub); err != nil {
		return false
	}
	if !nodeNeedsReport(&hub, a.node) {
		return false
	}
	a.nodeResent = now
	return true
}

func (a *Agent) saveRecord(uid string, r pods.Record) {
	b, err := pods.MarshalRecord(r)
	if err == nil {
		err = a.cp.PutLocal(recordKey(uid), b)
	}
	if err != nil {
		a.log.Warn("save pod record", "uid", uid, "err", err)
	}
}

// addresses returns the node's addresses as last looked up: a lookup lists
// the interfaces over netlink, too dear for every pod of every round.
func (a *Agent) addresses() []corev1.NodeAddress {
	a.mu.Lock()
	addrs := a.addrs
	a.mu.Unlock()
	if addrs == nil {
		addrs = hostAddresses(a.cfg.NodeName)
		a.mu.Lock()
		a.addrs = addrs
		a.mu.Unlock()
	}
	return addrs
}
