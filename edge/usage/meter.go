package usage

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/outpost-mesh/outpost/sync/wire"
)

// Source reads the node's usage. Sample fills in everything but Time.
type Source interface {
	Sample(ctx context.Context) (Sample, error)
}

// Config configures a Meter.
type Config struct {
	Source Source // non-nil
	// Interval is how often the meter samples, the window of its CPU
	// rates: 15s, as metrics-server scrapes. The agent sets it to the
	// sync client's UsageInterval, the least time between two reports.
	Interval time.Duration
	// Refresh is how old the last report sent may grow before an
	// unchanged one is sent again: 60s. It must stay under the hub's
	// MaxAge (hub/usage, 150s).
	Refresh time.Duration
	// Relayed returns the counters of the node's relay for its site
	// peers (edge/relay), cumulative since the relay started, taken into
	// each sample; nil, or a func returning none, when the node relays
	// for none. The meter sorts them by peer and keeps the first
	// wire.MaxUsageRelayPeers.
	Relayed func() []wire.RelayUsage
	Logger  *slog.Logger
	Now     func() time.Time // or nil for time.Now
}

// DefaultConfig returns the defaults above; Source is left nil.
func DefaultConfig() Config {
	return Config{Interval: 15 * time.Second, Refresh: time.Minute}
}

// Meter samples a Source every Interval and keeps the latest report. Its
// methods are safe for concurrent use.
type Meter struct {
	cfg Config

	mu     sync.Mutex
	prev   Sample
	have   bool        // prev holds a sample
	latest *wire.Usage // nil until two samples
	base   *wire.Usage // the last full report Next returned
}

// New checks cfg and returns a meter; Run samples.
func New(cfg Config) (*Meter, error) {
	switch {
	case cfg.Source == nil:
		return nil, errors.New("usage meter: no source")
	case cfg.Interval <= 0 || cfg.Refresh < cfg.Interval:
		return nil, errors.New("usage meter: interval must be positive and refresh at least the interval")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Meter{cfg: cfg}, nil
}

// Run samples at once and then every Interval until ctx ends. A sample
// that fails is logged and skipped; the next is taken against the last
// good one, over a longer window.
func (m *Meter) Run(ctx context.Context) {
	t := time.NewTicker(m.cfg.Interval)
	defer t.Stop()
	for {
		m.sampleOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (m *Meter) sampleOnce(ctx context.Context) {
	s, err := m.cfg.Source.Sample(ctx)
	if err != nil {
		if ctx.Err() == nil {
			m.cfg.Logger.Warn("cannot measure the node's usage", "err", err)
		}
		return
	}
	s.Time = m.cfg.Now()
	relayed := m.relayed()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.have {
		if u := Report(m.prev, s); u != nil {
			u.Relay = relayed
			m.latest = u
		}
	}
	m.prev, m.have = s, true
}

// relayed returns the relay's counters by peer, at most
// wire.MaxUsageRelayPeers of them; nil for none.
func (m *Meter) relayed() []wire.RelayUsage {
	if m.cfg.Relayed == nil {
		return nil
	}
	// The wire carries each peer once, as 4 or 16 bytes without a zone:
	// anything else would make the hub refuse the whole report.
	rs := slices.DeleteFunc(slices.Clone(m.cfg.Relayed()), func(r wire.RelayUsage) bool { return !r.Peer.IsValid() })
	if len(rs) == 0 {
		return nil
	}
	for i := range rs {
		rs[i].Peer = rs[i].Peer.WithZone("")
	}
	slices.SortFunc(rs, func(a, b wire.RelayUsage) int { return a.Peer.Compare(b.Peer) })
	rs = slices.CompactFunc(rs, func(a, b wire.RelayUsage) bool { return a.Peer == b.Peer })
	if len(rs) > wire.MaxUsageRelayPeers {
		m.cfg.Logger.Warn("relay counters of too many peers; the report carries the first", "peers", len(rs), "max", wire.MaxUsageRelayPeers)
		rs = rs[:wire.MaxUsageRelayPeers]
	}
	return rs
}

// Next returns what to send after last, the report sent last on the
// stream (nil for none: a new stream starts with a full report), or nil
// for nothing: the latest report when it Changed from the last full one
// sent, else, once last is Refresh old, a report that the usage is
// Unchanged. It implements sync/client's Config.Usage. The report is
// shared: the caller must not change it.
func (m *Meter) Next(last *wire.Usage) *wire.Usage {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.latest == nil || last != nil && !m.latest.Time.After(last.Time):
		return nil // nothing measured since
	case last == nil || Changed(m.base, m.latest):
		m.base = m.latest
		return m.latest
	case m.latest.Time.Sub(last.Time) >= m.cfg.Refresh:
		return &wire.Usage{Time: m.latest.Time, Window: m.latest.Window, Unchanged: true}
	}
	return nil
}
