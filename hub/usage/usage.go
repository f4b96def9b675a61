package usage

import (
	"errors"
	"sync"
	"time"

	"github.com/outpost-mesh/outpost/sync/wire"
)

// Config configures a Store.
type Config struct {
	// MaxAge drops a node's report this long after the hub received it:
	// 150s, longer than an edge waits before it repeats an unchanged
	// report (see edge/usage's Refresh, 60s), so that the metrics of an
	// idle node stay, and those of a node gone offline or deleted do
	// not stay for long.
	MaxAge time.Duration
	// Now is the clock; nil for time.Now.
	Now func() time.Time
}

// DefaultConfig returns the defaults above.
func DefaultConfig() Config { return Config{MaxAge: 150 * time.Second} }

// Store keeps the latest usage report of each node. Its methods are safe
// for concurrent use.
type Store struct {
	cfg Config

	mu    sync.Mutex
	nodes map[string]report
}

// report is a node's latest usage and when the hub received it: the hub's
// clock dates the metrics, since a gateway's own may be off.
type report struct {
	u   *wire.Usage
	got time.Time
}

// New checks cfg and returns an empty store.
func New(cfg Config) (*Store, error) {
	if cfg.MaxAge <= 0 {
		return nil, errors.New("usage: max age must be positive")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Store{cfg: cfg, nodes: map[string]report{}}, nil
}

// PutUsage replaces node's report with u, which the store keeps and the
// caller must not change; an Unchanged u renews the node's report as it
// is (nothing, if the store holds none). It implements sync/server's
// UsageSink.
func (s *Store) PutUsage(node string, u *wire.Usage) {
	now := s.cfg.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if u.Unchanged {
		if r, ok := s.nodes[node]; ok {
			r.got = now
			s.nodes[node] = r
		}
	} else {
		s.nodes[node] = report{u: u, got: now}
	}
	s.expireLocked(now)
}

// Forget drops node's report, when the node is deleted.
func (s *Store) Forget(node string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.nodes, node)
}

// expireLocked drops the reports older than MaxAge at now.
func (s *Store) expireLocked(now time.Time) {
	for n, r := range s.nodes {
		if now.Sub(r.got) >= s.cfg.MaxAge {
			delete(s.nodes, n)
		}
	}
}

// fresh returns the reports not older than MaxAge, by node, and the time.
// The caller must not change them.
func (s *Store) fresh() (map[string]report, time.Time) {
	now := s.cfg.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expireLocked(now)
	out := make(map[string]report, len(s.nodes))
	for n, r := range s.nodes {
		out[n] = r
	}
	return out, now
}
