// Package podworker carries out the edge node's pod plans: it lists what
// the runtime holds when the runtime reports a change (relisting seldom, as
// a safety net, as kubelet's evented PLEG does), plans with edge/pods, runs
// each pod's actions in order on a worker of its own, keeps each pod's
// record on disk, and hands every round to the status reporter. Only
// edge/agent builds Workers.
package podworker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/outpost-mesh/outpost/edge/events"
	"github.com/outpost-mesh/outpost/edge/pods"
	"github.com/outpost-mesh/outpost/edge/runtime"
	"github.com/outpost-mesh/outpost/edge/status"
	"github.com/outpost-mesh/outpost/sync/session"
)

// Source gives the pods bound to the node.
type Source interface {
	// Desired returns the pods the node is to run, deleted ones included
	// until the hub removes them, and ok false if they could not be read
	// now, in which case nothing may be stopped for its absence. The pods
	// are shared with later rounds: nobody may modify them.
	Desired() (d Desired, ok bool)
}

// Desired is what a Source gives.
type Desired struct {
	Pods   []*corev1.Pod
	Static map[string]*corev1.Pod // the static pods of Pods, by UID
	// Partial says Pods may lack some pods still bound to the node (the
	// view never synced, or dropped damaged records, or its hub was
	// restored from a backup): the workers then leave alone, running,
	// what the runtime holds of other pods, and keep their records, as
	// kubelet cleans up no pod before all its sources are ready, except
	// for the pods of Known (static pods known to have run, whose
	// manifests are always complete).
	Partial bool
	Known   map[string]bool
	// Generation changes whenever the objects the pods' volumes read
	// (ConfigMaps, Secrets, ...; not the pods) may have: the sandbox then
	// brings every pod's volumes up to date with them. A pod whose own
	// object changed (its ResourceVersion) is brought up to date alone.
	Generation uint64
}

// Store keeps the pods' records on local disk; the checkpoint is one.
type Store interface {
	PutLocal(key string, value []byte) error
	DeleteLocal(key string) error
}

// Env builds a container's environment from the objects its spec refers
// to. It returns nil, nil when the spec's own values are all there is, and
// an error wrapping pods.ErrContainerConfig when a reference cannot be
// resolved.
type Env interface {
	ResolveEnv(pod *corev1.Pod, container string) ([]runtime.EnvVar, error)
}

// Status is what the workers report to: the status reporter.
type Status interface {
	// Observe takes a round to report; it must not block.
	Observe(status.Round)
	// Terminated sends a pod's final status and tells the hub it may
	// remove the pod.
	Terminated(ctx context.Context, pod *corev1.Pod, rec pods.Record) error
	// Forget forgets a pod that is gone.
	Forget(uid string)
}

// Recorder makes Events about pods; an *events.Recorder is one.
type Recorder interface {
	Pod(ref runtime.PodRef, pod *corev1.Pod, container, typ, reason, msg string)
}

// Sandbox readies what the containers of a pod share before the first of
// them starts (its network namespace and IP, its volumes, its cgroup, its
// /etc/hosts and resolver files) and removes it once the pod is gone. The
// agent builds it from netd, edge/volumes and edge/cgroups.
type Sandbox interface {
	// Container readies pod, if it is not (it is idempotent: a volume
	// whose source changed is updated in place), and fills in spec
	// what container c, about to start as attempt, needs of it. An error
	// that the pod's spec or the objects it refers to cause wraps
	// pods.ErrContainerConfig.
	Container(ctx context.Context, pod *corev1.Pod, c *corev1.Container, attempt int, spec *runtime.ContainerSpec) error
	// IP returns the pod's IP, "" if it has none.
	IP(uid string) string
	// Release removes what was readied for the pod. Releasing a pod
	// that has nothing is not an error.
	Release(ctx context.Context, pod runtime.PodRef) error
	// Sweep releases, once at start-up, what is readied for pods that
	// keep does not keep: what a crash left behind.
	Sweep(ctx context.Context, keep func(uid string) bool) error
	// Refresh brings what was readied for a pod that runs up to date
	// with the objects it refers to (its volumes' content), as kubelet's
	// volume manager does; a pod not readied is left alone.
	Refresh(ctx context.Context, pod *corev1.Pod) error
}

// refreshEvery is how often the sandbox refreshes the pods' volumes when
// nothing told the workers the objects changed: for tokens, which expire,
// and as a safety net, about as often as kubelet's sync of each pod.
const refreshEvery = time.Minute

// TerminationMessages is implemented by a Sandbox that keeps the files
// whose content becomes an exited container's termination message, and
// with fallbackToLogs, when the file is empty, the end of its log.
type TerminationMessages interface {
	TerminationMessage(pod runtime.PodRef, container string, attempt int, fallbackToLogs bool) string
}

// Prober runs the probes of the pods' containers (edge/probes).
type Prober interface {
	// Sync starts, restarts or stops the probe workers of pod as what
	// the runtime holds of it says (nil: nothing).
	Sync(pod *corev1.Pod, actual *runtime.PodStatus, ip string)
	// Forget stops probing a pod that is gone.
	Forget(uid string)
	// Probed returns what the probes of pod uid found.
	Probed(uid string) *pods.Probed
}

// Hooks runs the lifecycle hooks of containers.
type Hooks interface {
	// PostStart runs c's postStart hook, if any, once it started; an
	// error has the container killed, as kubelet does.
	PostStart(ctx context.Context, pod *corev1.Pod, c *corev1.Container, ip string) error
	// PreStop runs c's preStop hook, if any, before it is stopped,
	// within grace.
	PreStop(ctx context.Context, pod *corev1.Pod, c *corev1.Container, ip string, grace time.Duration) error
}

// Admitter decides whether the node takes a pod, as kubelet's admission
// handlers do.
type Admitter interface {
	// Admit returns nil if pod fits beside admitted, the pods already
	// taken that have not ended, or why not.
	Admit(pod *corev1.Pod, admitted []*corev1.Pod) *pods.Rejection
}

// Config configures Workers.
type Config struct {
	Runtime runtime.Runtime // required
	Source  Source          // required
	Store   Store           // required
	Env     Env             // nil: the spec's own values only
	Status  Status          // required
	Events  Recorder        // required
	// Sandbox, Prober, Hooks and Admitter are nil on a node that has
	// none (the fake runtime's): pods share nothing but what the
	// runtime makes, no probe runs and a running container is ready,
	// no hook runs, every pod is taken.
	Sandbox  Sandbox
	Prober   Prober
	Hooks    Hooks
	Admitter Admitter

	// Relist is how often the runtime is listed when nothing told the
	// workers to, for a runtime that reports no events: 1s.
	Relist time.Duration
	// EventedRelist is that for a runtime that reports its changes
	// (runtime.Watcher): a safety net for a change its stream missed,
	// 30s (kubelet's evented PLEG relists every 5 minutes, but edge
	// runtimes restart more often than a data center's).
	EventedRelist time.Duration
	// RoundGap is the least time from the start of a round to the start
	// of the next: 50ms. Each round lists the runtime and plans every
	// pod, so a burst of events is taken in a few rounds, not one each.
	RoundGap time.Duration

	Logger *slog.Logger     // nil discards
	Clock  func() time.Time // nil for the wall clock
}

// DefaultConfig returns the defaults above; the required fields are left
// empty.
func DefaultConfig() Config {
	return Config{Relist: time.Second, EventedRelist: 30 * time.Second, RoundGap: 50 * time.Millisecond}
}

// Validate reports the first invalid field.
func (c *Config) Validate() error {
	switch {
	case c.Runtime == nil || c.Source == nil || c.Store == nil || c.Status == nil || c.Events == nil:
		return errors.New("runtime, source, store, status and event recorder are required")
	case c.Relist <= 0 || c.EventedRelist <= 0:
		return errors.New("relist intervals must be positive")
	case c.RoundGap < 0:
		return errors.New("round gap must not be negative")
	}
	return nil
}

// Workers runs the pods. Build them with New, read the records with Load,
// and run them with Run; Kick may be called from any goroutine.
type Workers struct {
	cfg Config
	log *slog.Logger
	now func() time.Time
	rt  runtime.Runtime

	trigger chan struct{}

	mu      sync.Mutex
	busy    map[string]bool           // pods whose worker runs actions
	records map[string]pods.Record    // by pod UID
	evict   map[string]pods.Rejection // evictions not yet recorded, by pod UID

	// The loop's own.
	swept       bool            // the sandbox's start-up sweep is done
	probing     map[string]bool // pods the prober was told of
	refreshed   time.Time       // when the sandbox last began refreshing every pod
	refreshedAt uint64          // the Desired.Generation it did so at

	// The refresh's, while refreshing is true; handed over by it.
	refreshing    atomic.Bool       // a refresh runs
	refreshMissed atomic.Bool       // a round found one due while it ran
	refreshedRV   map[string]string // by pod UID, the ResourceVersion of its last refresh
}

// New checks cfg and returns Workers; it starts nothing.
func New(cfg Config) (*Workers, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("pod worker config: %w", err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	return &Workers{
		cfg: cfg, log: cfg.Logger, now: cfg.Clock, rt: cfg.Runtime,
		trigger: make(chan struct{}, 1),
		busy:    map[string]bool{},
		records: map[string]pods.Record{},
		evict:   map[string]pods.Rejection{},
		probing: map[string]bool{},

		refreshedRV: map[string]string{},
	}, nil
}

// recordKey names a pod's record among the local records.
func recordKey(uid string) string { return "pod/" + uid }

// Load reads the pods' records from list (the checkpoint's local records
// under a prefix), dropping those that do not decode. Call it before Run.
func (w *Workers) Load(list func(prefix string) (map[string][]byte, error)) error {
	recs, err := list("pod/")
	if err != nil {
		return fmt.Errorf("read pod records: %w", err)
	}
	for k, v := range recs {
		r, err := pods.UnmarshalRecord(v)
		if err != nil {
			w.log.Warn("dropping unreadable pod record", "key", k, "err", err)
			continue
		}
		w.records[k[len("pod/"):]] = r
	}
	return nil
}

// Kick asks for a round now. It never blocks.
func (w *Workers) Kick() {
	select {
	case w.trigger <- struct{}{}:
	default:
	}
}

// Evict has the pod with uid evicted, as kubelet's eviction manager kills
// a pod through its pod worker: its record is marked rejected as rej says
// (rej.Evicted set), so that what runs of it is killed at once, nothing
// of it starts again, and its status is Failed with rej's reason and
// message. That is recorded at the first round in which the pod's worker
// is idle. Evict returns false, and does nothing, when the workers hold no
// record of the pod (never admitted, or gone) or it ended already.
func (w *Workers) Evict(uid string, rej pods.Rejection) bool {
	rej.Evicted = true
	w.mu.Lock()
	rec, ok := w.records[uid]
	ok = ok && !rec.Terminal && rec.Rejected == nil
	if ok {
		w.evict[uid] = rej
	}
	w.mu.Unlock()
	if ok {
		w.Kick()
	}
	return ok
}

// recordEvictions records the evictions asked of pods whose workers are
// idle.
func (w *Workers) recordEvictions() {
	w.mu.Lock()
	marked := map[string]pods.Record{}
	for uid, rej := range w.evict {
		if w.busy[uid] {
			continue // its worker kicks a round when done
		}
		delete(w.evict, uid)
		rec, ok := w.records[uid]
		if !ok || rec.Terminal || rec.Rejected != nil {
			continue
		}
		rec.Rejected = &rej
		w.records[uid] = rec
		marked[uid] = rec
	}
	w.mu.Unlock()
	for uid, rec := range marked {
		w.saveRecord(uid, rec)
		w.log.Info("pod evicted", "uid", uid, "reason", rec.Rejected.Reason, "message", rec.Rejected.Message)
	}
}

// Run runs rounds until ctx ends: at once, when kicked, when the runtime
// reports a change, at the plan's wake time, and every relist interval.
// It returns nil after every worker it started has stopped.
func (w *Workers) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	relist := w.cfg.Relist
	if wt, ok := w.rt.(runtime.Watcher); ok {
		relist = w.cfg.EventedRelist
		wg.Go(func() { w.watch(ctx, wt) })
	}
	var workers sync.WaitGroup
	defer workers.Wait()
	tick := time.NewTimer(relist)
	defer tick.Stop()
	wake := time.NewTimer(time.Hour)
	defer wake.Stop()
	for {
		began := time.Now()
		next := w.round(ctx, &workers)
		if !next.IsZero() {
			wake.Reset(max(next.Sub(w.now()), time.Millisecond))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-w.trigger:
		case <-tick.C:
		case <-wake.C:
		}
		tick.Reset(relist)
		// What comes in the meantime joins the next round: a burst of
		// events (a batch of starts) costs a few listings, not one each.
		if gap := w.cfg.RoundGap - time.Since(began); gap > 0 {
			t := time.NewTimer(gap)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			}
		}
	}
}

// watch kicks a round at each change the runtime reports, and once more
// each time its stream breaks, for what it may have missed, until ctx ends.
func (w *Workers) watch(ctx context.Context, wt runtime.Watcher) {
	// A stream that lasted longer than the longest wait starts the
	// back-off over.
	backoff := session.Backoff{Min: time.Second, Max: 30 * time.Second, Reset: 30 * time.Second}
	for {
		start := time.Now()
		err := wt.Watch(ctx, func(runtime.Event) { w.Kick() })
		if ctx.Err() != nil {
			return
		}
		w.Kick()
		wait := backoff.Next(time.Since(start))
		w.log.Warn("runtime event stream broke; relisting", "err", err, "retry_in", wait.Round(time.Millisecond))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// round plans once, starts the actions of idle pods, and hands the round
// to the status reporter. It returns when the next round is due at the
// latest, or the zero time.
func (w *Workers) round(ctx context.Context, workers *sync.WaitGroup) time.Time {
	des, ok := w.cfg.Source.Desired()
	if !ok {
		return time.Time{}
	}
	// The pods whose actions run while the runtime is listed: the list
	// may predate what their actions did, while their records, read
	// after, do not, and the two together would have Plan redo what was
	// just done. Their decisions wait for the round their worker's end
	// asks for.
	w.mu.Lock()
	listedBusy := maps.Clone(w.busy)
	w.mu.Unlock()
	actual, err := w.rt.List(ctx)
	if err != nil {
		w.log.Warn("list runtime", "err", err)
		return time.Time{}
	}
	now := w.now()
	if sb := w.cfg.Sandbox; sb != nil {
		msgs, _ := sb.(TerminationMessages)
		var specs map[string]*corev1.Pod // by UID, made when first needed
		for i := range actual {
			ps := &actual[i]
			if ps.IP == "" {
				ps.IP = sb.IP(ps.Pod.UID)
			}
			for j := range ps.Containers {
				if c := &ps.Containers[j]; msgs != nil && c.State == runtime.StateExited && c.Message == "" {
					if specs == nil {
						specs = make(map[string]*corev1.Pod, len(des.Pods))
						for _, p := range des.Pods {
							specs[string(p.UID)] = p
						}
					}
					c.Message = msgs.TerminationMessage(ps.Pod, c.Name, c.Attempt, fallbackToLogs(specs[ps.Pod.UID], c))
				}
			}
		}
		if !w.swept && !des.Partial {
			w.sweep(ctx, des, actual)
		}
		w.startRefresh(ctx, workers, des, now)
	}
	w.recordEvictions()
	w.admit(des, now)
	w.mu.Lock()
	records := maps.Clone(w.records)
	w.mu.Unlock()
	if des.Partial {
		actual, records = viewPodsOnly(des, actual, records)
	}
	probed := w.probe(des, actual)
	d := pods.Plan(des.Pods, actual, records, probed, now)
	byUID := make(map[string]*corev1.Pod, len(des.Pods))
	for _, p := range des.Pods {
		byUID[string(p.UID)] = p
	}
	for _, pd := range d.Pods {
		uid := pd.Pod.UID
		w.mu.Lock()
		busy := w.busy[uid] || listedBusy[uid]
		if !busy {
			if pd.Forget && len(pd.Actions) == 0 {
				delete(w.records, uid)
			} else {
				w.records[uid] = pd.Record
			}
			if len(pd.Actions) > 0 {
				w.busy[uid] = true
			}
		}
		w.mu.Unlock()
		if busy {
			continue
		}
		if pd.Forget && len(pd.Actions) == 0 {
			w.forget(uid)
			continue
		}
		w.saveRecord(uid, pd.Record)
		if len(pd.Actions) > 0 {
			pod, static := byUID[uid], des.Static[uid] != nil
			workers.Go(func() { w.work(ctx, pd, pod, static) })
		}
	}

	w.mu.Lock()
	records = maps.Clone(w.records)
	w.mu.Unlock()
	w.cfg.Status.Observe(status.Round{Desired: des.Pods, Static: des.Static, Actual: actual, Records: records, Probed: probed, Now: now})
	return d.NextWake
}

// sweep has the sandbox release, once, what it holds of pods neither
// desired nor held by the runtime.
func (w *Workers) sweep(ctx context.Context, des Desired, actual []runtime.PodStatus) {
	keep := make(map[string]bool, len(des.Pods)+len(actual))
	for _, p := range des.Pods {
		keep[string(p.UID)] = true
	}
	for _, ps := range actual {
		keep[ps.Pod.UID] = true
	}
	if err := w.cfg.Sandbox.Sweep(ctx, func(uid string) bool { return keep[uid] }); err != nil {
		w.log.Warn("sweep what pods gone left behind", "err", err)
		return // and again at the next round
	}
	w.swept = true
}

// startRefresh has the sandbox bring the running pods' volumes up to
// date, beside the round rather than in it, so that a node of many pods
// starts new ones while it runs: every pod when the objects they read
// may have changed, and every refreshEvery for the tokens, which expire;
// else the pods whose own object changed (a downward API volume shows
// its labels). One refresh runs at a time; one due while it runs is
// made by the round its end asks for.
func (w *Workers) startRefresh(ctx context.Context, workers *sync.WaitGroup, des Desired, now time.Time) {
	if !w.refreshing.CompareAndSwap(false, true) {
		w.refreshMissed.Store(true)
		return
	}
	all := des.Generation != w.refreshedAt || now.Sub(w.refreshed) >= refreshEvery
	if all {
		w.refreshed, w.refreshedAt = now, des.Generation
	}
	workers.Go(func() {
		w.refresh(ctx, des.Pods, all)
		w.refreshing.Store(false)
		if w.refreshMissed.Swap(false) {
			w.Kick()
		}
	})
}

// refresh brings up to date the volumes of the pods of list, of all or
// of those changed since their last refresh; one that fails is tried
// again at the next refresh of all, as kubelet's volume manager retries
// at its next sync. It runs in one goroutine at a time.
func (w *Workers) refresh(ctx context.Context, list []*corev1.Pod, all bool) {
	seen := make(map[string]bool, len(list))
	for _, p := range list {
		if ctx.Err() != nil {
			return
		}
		uid := string(p.UID)
		seen[uid] = true
		if p.DeletionTimestamp != nil || terminal(p) {
			continue
		}
		if rv, ok := w.refreshedRV[uid]; ok && rv == p.ResourceVersion && !all {
			continue
		}
		if err := w.cfg.Sandbox.Refresh(ctx, p); err != nil {
			w.log.Warn("refresh pod volumes", "pod", p.Namespace+"/"+p.Name, "err", err)
		}
		w.refreshedRV[uid] = p.ResourceVersion
	}
	for uid := range w.refreshedRV {
		if !seen[uid] {
			delete(w.refreshedRV, uid)
		}
	}
}

// admit decides, for each desired pod seen for the first time, whether
// the node takes it, beside those it took that have not ended; a refusal
// is recorded, reported as an Event, and final.
func (w *Workers) admit(des Desired, now time.Time) {
	if w.cfg.Admitter == nil {
		return
	}
	w.mu.Lock()
	var admitted, fresh []*corev1.Pod
	for _, p := range des.Pods {
		rec, ok := w.records[string(p.UID)]
		switch {
		case !ok && p.DeletionTimestamp == nil && !terminal(p):
			fresh = append(fresh, p)
		case ok && !rec.Terminal && rec.Rejected == nil:
			admitted = append(admitted, p)
		}
	}
	w.mu.Unlock()
	for _, p := range fresh {
		rej := w.cfg.Admitter.Admit(p, admitted)
		if rej == nil {
			admitted = append(admitted, p)
			continue
		}
		uid := string(p.UID)
		rec := pods.Record{FirstSeen: now.UTC().Round(0), Rejected: rej}
		w.mu.Lock()
		w.records[uid] = rec
		w.mu.Unlock()
		w.saveRecord(uid, rec)
		ref := runtime.PodRef{UID: uid, Namespace: p.Namespace, Name: p.Name}
		w.cfg.Events.Pod(ref, p, "", corev1.EventTypeWarning, rej.Reason, rej.Message)
		w.log.Info("pod rejected", "pod", p.Namespace+"/"+p.Name, "reason", rej.Reason, "message", rej.Message)
	}
}

// terminal reports whether the hub has the pod in a terminal phase.
func terminal(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// probe tells the prober what runs of each desired pod, forgets the pods
// gone, and returns what the probes found, by pod UID; nil without a
// prober.
func (w *Workers) probe(des Desired, actual []runtime.PodStatus) map[string]*pods.Probed {
	pr := w.cfg.Prober
	if pr == nil {
		return nil
	}
	byUID := make(map[string]*runtime.PodStatus, len(actual))
	for i := range actual {
		byUID[actual[i].Pod.UID] = &actual[i]
	}
	out := make(map[string]*pods.Probed, len(des.Pods))
	seen := make(map[string]bool, len(des.Pods))
	for _, p := range des.Pods {
		uid := string(p.UID)
		seen[uid] = true
		ps := byUID[uid]
		ip := ""
		if ps != nil {
			ip = ps.IP
		}
		pr.Sync(p, ps, ip)
		w.probing[uid] = true
		out[uid] = pr.Probed(uid)
	}
	for uid := range w.probing {
		if !seen[uid] {
			pr.Forget(uid)
			delete(w.probing, uid)
		}
	}
	return out
}

// viewPodsOnly returns what of actual and records concerns the desired
// pods and the Known ones, for a partial Desired (see Desired.Partial).
func viewPodsOnly(des Desired, actual []runtime.PodStatus, records map[string]pods.Record) ([]runtime.PodStatus, map[string]pods.Record) {
	keep := make(map[string]bool, len(des.Pods)+len(des.Known))
	for _, p := range des.Pods {
		keep[string(p.UID)] = true
	}
	for uid := range des.Known {
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

// work runs one pod's actions in order, recording their outcomes, then
// asks for another round.
func (w *Workers) work(ctx context.Context, pd pods.PodDecision, pod *corev1.Pod, static bool) {
	defer func() {
		w.mu.Lock()
		delete(w.busy, pd.Pod.UID)
		w.mu.Unlock()
		w.Kick()
	}()
	rec := pd.Record
	for _, act := range pd.Actions {
		err := w.run(ctx, act, pod, static, rec)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			w.log.Info("pod action failed", "action", act.String(), "err", err)
		}
		w.actionEvent(act, pod, err)
		rec = pods.Observe(rec, act, err, w.now())
		w.mu.Lock()
		w.records[pd.Pod.UID] = rec
		w.mu.Unlock()
		w.saveRecord(pd.Pod.UID, rec)
	}
	if pd.Forget {
		w.mu.Lock()
		delete(w.records, pd.Pod.UID)
		w.mu.Unlock()
		// A static pod is forgotten here, once removed from the runtime,
		// the usual way its manifest's removal ends.
		w.forget(pd.Pod.UID)
	}
}

// forget drops a pod's record, on disk too, and has the status reporter
// forget it.
func (w *Workers) forget(uid string) {
	if err := w.cfg.Store.DeleteLocal(recordKey(uid)); err != nil {
		w.log.Warn("delete pod record", "uid", uid, "err", err)
	}
	w.cfg.Status.Forget(uid)
}

// run performs one action; rec is the pod's record as of then.
func (w *Workers) run(ctx context.Context, act pods.Action, pod *corev1.Pod, static bool, rec pods.Record) error {
	switch act.Type {
	case pods.StartContainer:
		spec := act.Spec
		if pod != nil && w.cfg.Env != nil {
			env, err := w.cfg.Env.ResolveEnv(pod, act.Container)
			if err != nil {
				return err
			}
			if env != nil {
				// The whole environment in kubelet's order, the spec's
				// literal values in their place among the others.
				spec.Env = env
			}
		}
		c := containerOf(pod, act.Container)
		if w.cfg.Sandbox != nil && c != nil {
			if err := w.cfg.Sandbox.Container(ctx, pod, c, act.Attempt, &spec); err != nil {
				return err
			}
		}
		if err := w.rt.StartContainer(ctx, act.Pod, spec, act.Attempt); err != nil {
			return err
		}
		w.log.Info("container started", "pod", act.Pod.Namespace+"/"+act.Pod.Name, "container", act.Container, "attempt", act.Attempt)
		if w.cfg.Hooks != nil && c != nil && c.Lifecycle != nil && c.Lifecycle.PostStart != nil {
			w.postStart(ctx, act, pod, c, rec)
		}
		return nil
	case pods.StopContainer:
		grace := act.Grace
		if c := containerOf(pod, act.Container); w.cfg.Hooks != nil && c != nil && c.Lifecycle != nil && c.Lifecycle.PreStop != nil && grace > 0 {
			start := w.now()
			if err := w.cfg.Hooks.PreStop(ctx, pod, c, w.ip(act.Pod.UID), grace); err != nil {
				w.cfg.Events.Pod(act.Pod, pod, act.Container, corev1.EventTypeWarning, events.FailedPreStopHook, err.Error())
			}
			// What the hook took comes off the grace, as kubelet's does,
			// but at least 2s for the signal.
			grace = max(grace-w.now().Sub(start), 2*time.Second)
		}
		return w.rt.StopContainer(ctx, act.Pod, act.Container, grace)
	case pods.RemovePod:
		if err := w.rt.RemovePod(ctx, act.Pod); err != nil {
			return err
		}
		if w.cfg.Sandbox != nil {
			return w.cfg.Sandbox.Release(ctx, act.Pod)
		}
		return nil
	case pods.ConfirmTerminated:
		if pod == nil || static {
			return nil
		}
		return w.cfg.Status.Terminated(ctx, pod, rec)
	}
	return fmt.Errorf("unknown action %v", act.Type)
}

// postStart runs c's postStart hook once it started; a hook that fails
// has the container killed with the pod's grace, as kubelet does, and it
// restarts as its restart policy says.
func (w *Workers) postStart(ctx context.Context, act pods.Action, pod *corev1.Pod, c *corev1.Container, rec pods.Record) {
	err := w.cfg.Hooks.PostStart(ctx, pod, c, w.ip(act.Pod.UID))
	if err == nil || ctx.Err() != nil {
		return
	}
	w.cfg.Events.Pod(act.Pod, pod, act.Container, corev1.EventTypeWarning, events.FailedPostStartHook, err.Error())
	if serr := w.rt.StopContainer(ctx, act.Pod, act.Container, rec.Grace); serr != nil {
		w.log.Warn("kill container whose postStart hook failed", "pod", act.Pod.Namespace+"/"+act.Pod.Name, "container", act.Container, "err", serr)
	}
}

// ip returns the pod's IP as the sandbox has it.
func (w *Workers) ip(uid string) string {
	if w.cfg.Sandbox == nil {
		return ""
	}
	return w.cfg.Sandbox.IP(uid)
}

// containerOf returns the spec of pod's container (init or app) named
// name, or nil.
func containerOf(pod *corev1.Pod, name string) *corev1.Container {
	if pod == nil {
		return nil
	}
	for _, l := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range l {
			if l[i].Name == name {
				return &l[i]
			}
		}
	}
	return nil
}

func (w *Workers) saveRecord(uid string, r pods.Record) {
	b, err := pods.MarshalRecord(r)
	if err == nil {
		err = w.cfg.Store.PutLocal(recordKey(uid), b)
	}
	if err != nil {
		w.log.Warn("save pod record", "uid", uid, "err", err)
	}
}

// fallbackToLogs reports whether exited container c of pod takes its
// termination message from its log when its file is empty: when its
// policy says FallbackToLogsOnError and it failed, as kubelet.
func fallbackToLogs(pod *corev1.Pod, c *runtime.ContainerStatus) bool {
	if pod == nil || c.ExitCode == 0 && c.Reason != "OOMKilled" {
		return false
	}
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			if cs[i].Name == c.Name {
				return cs[i].TerminationMessagePolicy == corev1.TerminationMessageFallbackToLogsOnError
			}
		}
	}
	return false
}
