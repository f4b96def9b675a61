package probes

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/outpost-mesh/outpost/edge/runtime"
)

// Config configures a Manager.
type Config struct {
	// Exec runs exec probes: the runtime, if it implements
	// runtime.Execer. Nil if it does not: exec probes then error with
	// ErrExecNotSupported's words in the Result's Message, and the
	// container stays unready (readiness), unstarted (startup) or is
	// left running (liveness).
	Exec runtime.Execer

	// OnChange is called with a pod's UID when the Result of one of its
	// containers changed, so that the agent re-plans; or nil. Calls come
	// from one goroutine of Run, one at a time, coalesced per pod: a pod
	// whose results change again while OnChange runs is named once more
	// after it returns. It holds no lock of the Manager's, so it may call
	// the Manager's methods; probes go on while it runs.
	OnChange func(podUID string)

	// Jitter returns how long a probe worker started within one period
	// of Run waits before its first probe, so that the probes of an
	// agent that just restarted do not all run at once, as kubelet's;
	// nil for uniformly random in [0, period).
	Jitter func(period time.Duration) time.Duration

	Logger *slog.Logger // non-nil
}

// DefaultConfig returns a Config with Logger slog.Default(), kubelet's
// random jitter, no Exec and no OnChange.
func DefaultConfig() Config {
	return Config{Logger: slog.Default()}
}

// Validate says what is wrong with c, or nil.
func (c *Config) Validate() error {
	if c.Logger == nil {
		return errors.New("probes config: Logger is nil")
	}
	return nil
}

// Target is what the runtime says of a pod: where its probes connect and
// which instance of each container runs.
type Target struct {
	IP string // the pod's IP, the host of probes without one; "" if none yet
	// Containers holds the newest instance of each container by name; a
	// container not in it has not been created.
	Containers map[string]ContainerTarget
}

// ContainerTarget is the newest instance of one container.
type ContainerTarget struct {
	ID      string // another ID is another instance: its probes start afresh
	Running bool
	// StartedAt is when it started, from which initial delays count;
	// zero for when Sync first sees it running.
	StartedAt time.Time
}

// TargetOf returns the Target of a pod as the runtime lists it. A
// container in state unknown counts as not running.
func TargetOf(ps *runtime.PodStatus) Target {
	t := Target{IP: ps.IP, Containers: make(map[string]ContainerTarget, len(ps.Containers))}
	for _, c := range ps.Containers {
		t.Containers[c.Name] = ContainerTarget{ID: c.ID, Running: c.State == runtime.StateRunning, StartedAt: c.StartedAt}
	}
	return t
}

// Manager runs the probes of the containers of running pods: one worker
// per probe of each running container instance, as kubelet's prober
// manager. New starts nothing; Run runs the workers. All methods are safe
// for concurrent use, and none waits for a probe.
type Manager struct {
	cfg    Config
	prober *prober

	mu      sync.Mutex
	pods    map[string]*podEntry
	ctx     context.Context // Run's while it runs; nil otherwise
	started time.Time       // when Run started
	wg      sync.WaitGroup  // Run's goroutines
	dirty   map[string]bool // pods whose results changed, for OnChange
	notify  chan struct{}   // buffered 1: dirty is not empty
	workers int             // worker goroutines running
}

type podEntry struct {
	uid         string
	ref         runtime.PodRef
	ip          string
	terminating bool
	containers  map[string]*containerEntry
}

// containerEntry is the newest instance of a container of a pod.
type containerEntry struct {
	spec    *corev1.Container // a copy, read-only
	id      string
	running bool
	core    *Container         // nil when not running
	cancel  context.CancelFunc // stops its workers; nil when none run
	trigger [numKinds]chan struct{}
}

// New returns a Manager. It starts nothing.
func New(cfg Config) (*Manager, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Jitter == nil {
		cfg.Jitter = func(period time.Duration) time.Duration {
			return time.Duration(rand.Int64N(int64(max(period, 1))))
		}
	}
	return &Manager{
		cfg:    cfg,
		prober: newProber(cfg.Exec),
		pods:   make(map[string]*podEntry),
		dirty:  make(map[string]bool),
		notify: make(chan struct{}, 1),
	}, nil
}

// Run runs the probe workers of the pods given to Sync, and calls
// OnChange, until ctx is done. It returns after every goroutine it
// started has exited. Results stay readable after; Sync goes on recording
// containers, whose probes run only when Run is called again.
func (m *Manager) Run(ctx context.Context) error {
	m.mu.Lock()
	if m.ctx != nil {
		m.mu.Unlock()
		return errors.New("probes: Run is already running")
	}
	m.ctx, m.started = ctx, time.Now()
	for _, pe := range m.pods {
		for _, ce := range pe.containers {
			m.startWorkersLocked(pe, ce)
		}
	}
	m.mu.Unlock()
	m.wg.Go(func() { m.notifyLoop(ctx) })

	<-ctx.Done()
	m.mu.Lock()
	for _, pe := range m.pods {
		for _, ce := range pe.containers {
			ce.stop()
		}
	}
	m.ctx = nil
	m.mu.Unlock()
	m.wg.Wait()
	return nil
}

// Sync records what the runtime says of pod: workers start for containers
// that run anew (another ID, or running again), stop for those that
// stopped or left, and, if the pod is being deleted, its liveness and
// startup probes stop, as kubelet's do. Containers of the pod's spec and
// its sidecars (init containers that restart always) are probed; other
// init containers are not. A nil pod or one without a UID is ignored.
func (m *Manager) Sync(pod *corev1.Pod, t Target) {
	if pod == nil || pod.UID == "" {
		return
	}
	uid := string(pod.UID)
	m.mu.Lock()
	defer m.mu.Unlock()
	pe := m.pods[uid]
	if pe == nil {
		pe = &podEntry{uid: uid, containers: make(map[string]*containerEntry)}
		m.pods[uid] = pe
	}
	before := pe.results()
	pe.ref = runtime.PodRef{UID: uid, Namespace: pod.Namespace, Name: pod.Name}
	pe.ip = t.IP
	pe.terminating = pod.DeletionTimestamp != nil

	specs := probedContainers(pod)
	for _, c := range specs {
		ct := t.Containers[c.Name]
		running := ct.Running && ct.ID != ""
		ce := pe.containers[c.Name]
		if ce != nil && ce.id == ct.ID && ce.running == running {
			if pe.terminating && ce.core != nil {
				ce.core.SetTerminating()
			}
			continue
		}
		if ce != nil {
			ce.stop()
		}
		ce = &containerEntry{spec: c.DeepCopy(), id: ct.ID, running: running}
		if running {
			start := ct.StartedAt
			if start.IsZero() {
				start = time.Now()
			}
			ce.core = NewContainer(ct.ID, ce.spec, start)
			if st := reportedStatus(pod, c.Name); st != nil && st.ContainerID == ct.ID && st.State.Running != nil {
				// The node reported this very instance before: the
				// agent restarted under it.
				ce.core.Resume(st.Started != nil && *st.Started, st.Ready)
			}
			if pe.terminating {
				ce.core.SetTerminating()
			}
			m.startWorkersLocked(pe, ce)
		}
		pe.containers[c.Name] = ce
	}
	for name, ce := range pe.containers {
		if !slices.ContainsFunc(specs, func(c *corev1.Container) bool { return c.Name == name }) {
			ce.stop()
			delete(pe.containers, name)
		}
	}
	if !resultsEqual(before, pe.results()) {
		m.markDirtyLocked(uid)
	}
}

// Remove stops the probes of the pod with UID podUID and forgets it.
// Its workers exit soon after, a probe under way being cancelled.
func (m *Manager) Remove(podUID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	pe := m.pods[podUID]
	if pe == nil {
		return
	}
	for _, ce := range pe.containers {
		ce.stop()
	}
	delete(m.pods, podUID)
	delete(m.dirty, podUID)
}

// Results returns the Result of each probed container of the pod with UID
// podUID by name, or nil for a pod Sync was not given. A container not
// running has a zero Result but for its ContainerID. The caller owns the
// map.
func (m *Manager) Results(podUID string) map[string]Result {
	m.mu.Lock()
	defer m.mu.Unlock()
	pe := m.pods[podUID]
	if pe == nil {
		return nil
	}
	return pe.results()
}

func (pe *podEntry) results() map[string]Result {
	r := make(map[string]Result, len(pe.containers))
	for name, ce := range pe.containers {
		if ce.core != nil {
			r[name] = ce.core.Result()
		} else {
			r[name] = Result{ContainerID: ce.id}
		}
	}
	return r
}

func resultsEqual(a, b map[string]Result) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || v != w {
			return false
		}
	}
	return true
}

// probedContainers returns pod's app containers and sidecars.
func probedContainers(pod *corev1.Pod) []*corev1.Container {
	var cs []*corev1.Container
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			cs = append(cs, c)
		}
	}
	for i := range pod.Spec.Containers {
		cs = append(cs, &pod.Spec.Containers[i])
	}
	return cs
}

// reportedStatus returns the status of the pod's container name as the
// pod's status shows it (what the node reported), or nil.
func reportedStatus(pod *corev1.Pod, name string) *corev1.ContainerStatus {
	for _, l := range [][]corev1.ContainerStatus{pod.Status.ContainerStatuses, pod.Status.InitContainerStatuses} {
		for i := range l {
			if l[i].Name == name {
				return &l[i]
			}
		}
	}
	return nil
}

func probeOf(c *corev1.Container, k Kind) *corev1.Probe {
	switch k {
	case Startup:
		return c.StartupProbe
	case Liveness:
		return c.LivenessProbe
	}
	return c.ReadinessProbe
}

func (ce *containerEntry) stop() {
	if ce.cancel != nil {
		ce.cancel()
		ce.cancel = nil
	}
}

func (m *Manager) markDirtyLocked(uid string) {
	m.dirty[uid] = true
	select {
	case m.notify <- struct{}{}:
	default:
	}
}

// startWorkersLocked starts the workers of ce's probes if Run runs and
// they do not yet.
func (m *Manager) startWorkersLocked(pe *podEntry, ce *containerEntry) {
	if m.ctx == nil || ce.core == nil || ce.cancel != nil {
		return
	}
	ctx, cancel := context.WithCancel(m.ctx)
	ce.cancel = cancel
	now := time.Now()
	for k := range numKinds {
		t, ok := ce.core.Timing(k)
		if !ok {
			continue
		}
		ce.trigger[k] = make(chan struct{}, 1)
		var jitter time.Duration
		if now.Sub(m.started) < t.Period {
			jitter = m.cfg.Jitter(t.Period)
		}
		m.workers++
		trig := ce.trigger[k]
		m.wg.Go(func() { m.work(ctx, pe, ce, k, t, jitter, trig) })
	}
}

// work runs ce's probe of kind k until ctx is done.
// A send on trigger makes it check at once whether the probe is due.
func (m *Manager) work(ctx context.Context, pe *podEntry, ce *containerEntry, k Kind, t Timing, jitter time.Duration, trigger <-chan struct{}) {
	defer func() {
		m.mu.Lock()
		m.workers--
		m.mu.Unlock()
	}()
	tm := time.NewTimer(jitter)
	defer tm.Stop()
	if jitter > 0 {
		select {
		case <-ctx.Done():
			return
		case <-tm.C:
		}
	}
	spec := probeOf(ce.spec, k)
	for {
		now := time.Now()
		m.mu.Lock()
		if ctx.Err() != nil {
			m.mu.Unlock()
			return
		}
		run, next := ce.core.Due(k, now)
		tg := target{pod: pe.ref, container: ce.spec, podIP: pe.ip}
		m.mu.Unlock()

		if run {
			o := m.prober.probe(ctx, spec, t.Timeout, tg)
			m.mu.Lock()
			if ctx.Err() != nil {
				m.mu.Unlock()
				return
			}
			wasStarted := ce.core.Result().Started
			changed := ce.core.Observe(k, now, o)
			r := ce.core.Result()
			if changed {
				m.markDirtyLocked(pe.uid)
				if !wasStarted && r.Started {
					// The other probes wait for this: run them now.
					for _, tr := range ce.trigger {
						if tr != nil {
							select {
							case tr <- struct{}{}:
							default:
							}
						}
					}
				}
			}
			m.mu.Unlock()
			if changed {
				m.cfg.Logger.Debug("probe result changed", "pod", tg.pod.String(), "container", ce.spec.Name, "probe", k.String(),
					"started", r.Started, "ready", r.Ready, "livenessFailed", r.LivenessFailed, "message", r.Message)
			}
			continue
		}

		var wake <-chan time.Time
		if !next.IsZero() {
			tm.Reset(next.Sub(now))
			wake = tm.C
		}
		select {
		case <-ctx.Done():
			return
		case <-wake:
		case <-trigger:
		}
		tm.Stop()
	}
}

// notifyLoop calls OnChange for the pods marked dirty until ctx is done.
func (m *Manager) notifyLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.notify:
		}
		m.mu.Lock()
		uids := make([]string, 0, len(m.dirty))
		for uid := range m.dirty {
			uids = append(uids, uid)
		}
		clear(m.dirty)
		m.mu.Unlock()
		slices.Sort(uids)
		for _, uid := range uids {
			if ctx.Err() != nil {
				return
			}
			if m.cfg.OnChange != nil {
				m.cfg.OnChange(uid)
			}
		}
	}
}
