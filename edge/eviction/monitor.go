package eviction

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// PodSource lists the node's active pods with their usage.
type PodSource interface {
	ActivePods(ctx context.Context) ([]PodUsage, error)
}

// Evictor carries out the Monitor's decisions, as kubelet's eviction
// manager kills pods through the pod workers: the agent's workers and
// event recorder.
type Evictor interface {
	// NodeEvent records e on the node.
	NodeEvent(e Event)
	// Evict stops e.Pod with e.GracePeriod, marks it Failed with reason
	// Reason and e.Message, and records e.Event on it. It returns once
	// that is under way.
	Evict(ctx context.Context, e *Eviction) error
	// PodCleanedUp reports whether nothing of the pod with uid runs.
	PodCleanedUp(uid string) bool
}

// Snapshot is one round of the Monitor: its readings and decision.
type Snapshot struct {
	Readings Readings
	// ReadErr says what could not be read this round (those signals are
	// missing from Readings); nil when all was read.
	ReadErr  error
	Decision Decision
}

// podCleanupTimeout bounds the wait, after an eviction, for the pod to be
// gone before the next round, as kubelet's; podCleanupPoll is how often
// it looks.
const (
	podCleanupTimeout = 30 * time.Second
	podCleanupPoll    = time.Second
)

// Monitor takes the node's readings every Housekeeping interval, runs
// the Core on them with the active pods and offers each round's
// snapshot through Latest and the OnRound callback. With an Evictor, it
// has the round's eviction carried out: the node event recorded, unused
// images deleted first where they may relieve the pressure, then the pod
// evicted and waited for (up to 30s) before the next round, so that at
// most one pod goes per round, as kubelet's. All methods are safe for
// concurrent use.
type Monitor struct {
	cfg  Config
	pods PodSource
	log  *slog.Logger
	core *Core // used by Run's goroutine only

	mu     sync.Mutex
	latest Snapshot
}

// New returns a Monitor reading pods from pods (non-nil). It starts
// nothing; Run does.
func New(cfg Config, pods PodSource) (*Monitor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	cfg.Thresholds = slices.Clone(cfg.Thresholds)
	return &Monitor{cfg: cfg, pods: pods, log: log, core: NewCore(&cfg)}, nil
}

// Run takes a round at once and then every Housekeeping interval until
// ctx is done, and returns ctx's error then.
func (m *Monitor) Run(ctx context.Context) error {
	t := time.NewTicker(m.cfg.Housekeeping)
	defer t.Stop()
	for {
		m.round(ctx, time.Now())
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

func (m *Monitor) round(ctx context.Context, now time.Time) {
	r, rerr := Read(&m.cfg, now)
	if rerr != nil {
		m.log.Warn("eviction readings incomplete", "err", rerr)
	}
	pods, err := m.pods.ActivePods(ctx)
	if err != nil {
		// Without the pods nothing can be ranked; conditions still count.
		m.log.Warn("eviction: list active pods", "err", err)
		pods = nil
	}
	d := m.core.Observe(r, pods, now)
	ev := m.cfg.Evictor
	if ev != nil && d.NodeEvent != nil {
		ev.NodeEvent(*d.NodeEvent)
	}
	if len(d.Met) > 0 && d.ReclaimImages && m.cfg.ImageGC != nil {
		// Node-level resources first, as kubelet reclaims them before it
		// ranks pods.
		if err := m.cfg.ImageGC.DeleteUnusedImages(ctx); err != nil {
			m.log.Warn("eviction: delete unused images", "err", err)
		}
		if after, err := Read(&m.cfg, time.Now()); err == nil && Resolved(d.Met, after) {
			m.log.Info("eviction: pressure relieved by deleting images", "resource", d.Starved)
			d.Evict = nil
			r = after
		}
	}
	if d.Evict != nil {
		m.log.Info("eviction: must evict a pod", "resource", d.Starved, "pod", d.Evict.Pod.Namespace+"/"+d.Evict.Pod.Name)
	}
	s := Snapshot{Readings: r, ReadErr: rerr, Decision: d}
	m.mu.Lock()
	m.latest = s
	m.mu.Unlock()
	if m.cfg.OnRound != nil {
		m.cfg.OnRound(s)
	}
	if ev == nil || d.Evict == nil {
		return
	}
	if err := ev.Evict(ctx, d.Evict); err != nil {
		m.log.Warn("eviction: evict pod", "pod", d.Evict.Pod.Namespace+"/"+d.Evict.Pod.Name, "err", err)
		return
	}
	m.waitCleanup(ctx, string(d.Evict.Pod.UID))
}

// waitCleanup waits until the pod of uid is cleaned up, podCleanupTimeout
// passed or ctx is done.
func (m *Monitor) waitCleanup(ctx context.Context, uid string) {
	deadline := time.NewTimer(podCleanupTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(podCleanupPoll)
	defer tick.Stop()
	for !m.cfg.Evictor.PodCleanedUp(uid) {
		select {
		case <-ctx.Done():
			return
		case <-deadline.C:
			m.log.Warn("eviction: evicted pod not cleaned up in time", "uid", uid, "timeout", podCleanupTimeout)
			return
		case <-tick.C:
		}
	}
}

// Latest returns the latest round's snapshot; the zero Snapshot before
// the first. The caller must not modify what it holds.
func (m *Monitor) Latest() Snapshot {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.latest
}

// Pressure returns the pressure conditions the node is under as of the
// latest round, and ok false before the first. The caller owns the
// slice.
func (m *Monitor) Pressure() (conds []corev1.NodeConditionType, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.latest.Decision.Pressure), !m.latest.Readings.Time.IsZero()
}
