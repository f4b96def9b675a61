package eviction

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// PodSource lists the node's active pods with their usage.
type PodSource interface {
	ActivePods(ctx context.Context) ([]PodUsage, error)
}

// Snapshot is one round of the Monitor: its readings and decision.
type Snapshot struct {
	Readings Readings
	// ReadErr says what could not be read this round (those signals are
	// missing from Readings); nil when all was read.
	ReadErr  error
	Decision Decision
}

// Monitor takes the node's readings every Housekeeping interval, runs
// the Core on them with the active pods and offers each round's
// snapshot through Latest and the OnRound callback. It evicts nothing
// itself: the agent carries out Decision.Evict. All methods are safe for
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
	if d.Evict != nil && d.ReclaimImages && m.cfg.ImageGC != nil {
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
}

// Latest returns the latest round's snapshot; the zero Snapshot before
// the first. The caller must not modify what it holds.
func (m *Monitor) Latest() Snapshot {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.latest
}
