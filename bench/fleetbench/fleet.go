package fleetbench

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outpost-mesh/outpost/edge/agent"
	"github.com/outpost-mesh/outpost/edge/checkpoint"
	"github.com/outpost-mesh/outpost/edge/runtime/fake"

	"github.com/outpost-mesh/outpost/bench/internal/relay"
	"github.com/outpost-mesh/outpost/bench/report"
)

// fleet is the simulated nodes, each an edge agent on a fake runtime of
// its own, reaching the hub through a relay of its own.
type fleet struct {
	nodes []*simNode
	logs  *logCounter

	cancel context.CancelFunc
	wg     sync.WaitGroup
	exited atomic.Int64 // agents whose Run returned

	mu   sync.Mutex
	errs report.ErrorSet // what agents' Run returned
}

// simNode is one simulated node.
type simNode struct {
	name  string
	agent *agent.Agent
	rt    *fake.Runtime
	relay *relay.Relay
}

// nodeName returns the name of node i.
func nodeName(i int) string { return fmt.Sprintf("edge-%05d", i) }

// simCheckpoint returns the checkpoint configuration of a simulated node:
// on disk like a real node's, but with badger's tables at the smallest
// sizes checkpoint.Config allows. A memtable is allocated whole when
// opened (MemTableSize and room for one batch, 1.3 times it), and the Go
// heap counts it whether its pages are touched or not: at the agent's
// default 8 MiB, a 1,000-node process holds 10 GiB of heap before any pod
// runs, and the collector lets it double before it collects. InMemory
// needs 7 MiB memtables and would not save it. A node's view of ten pods
// is a few tens of KiB, well within the smaller sizes.
func simCheckpoint(logs *slog.Logger) checkpoint.Config {
	c := checkpoint.DefaultConfig()
	c.MemTableSize = 1 << 20     // the least allowed
	c.NumMemtables = 1           // the one being written; a full one is flushed first
	c.BaseTableSize = 64 << 10   // the least allowed
	c.ValueLogFileSize = 4 << 20 // the least allowed
	c.Logger = logs
	return c
}

// newFleet makes the agents and their relays toward hubSync; it starts no
// agent. The caller must call stop, also when newFleet fails.
func newFleet(cfg Config, dir string, hubSync *net.UDPAddr, token, caHash string) (*fleet, error) {
	f := &fleet{logs: &logCounter{}, cancel: func() {}}
	log := slog.New(f.logs)
	for i := range cfg.Nodes {
		r, err := relay.Listen(hubSync)
		if err != nil {
			return f, err
		}
		n := &simNode{name: nodeName(i), rt: fake.New(fake.Config{}), relay: r}
		f.nodes = append(f.nodes, n)
		ac := agent.DefaultConfig()
		ac.NodeName = n.name
		ac.DataDir = filepath.Join(dir, n.name)
		ac.HubAddr = r.Addr()
		ac.Token = token
		ac.CAHash = caHash
		ac.Runtime = n.rt
		ac.RuntimeVersion = "fake://bench"
		// Fixed, so that a thousand agents do not each read /proc.
		ac.Capacity = agent.Capacity{CPUMillis: 4000, MemoryBytes: 4 << 30, Pods: 110}
		ac.Checkpoint = simCheckpoint(log)
		ac.Resync, ac.EventedResync = cfg.AgentResync, cfg.AgentResync
		ac.Logger = log
		// ac.Sync keeps the agent's defaults: the keep-alives and
		// back-off are what the idle traffic and the reconnect storm
		// measure.
		if n.agent, err = agent.New(ac); err != nil {
			return f, fmt.Errorf("agent %s: %w", n.name, err)
		}
	}
	return f, nil
}

// start runs every agent until stop.
func (f *fleet) start(ctx context.Context) {
	ctx, f.cancel = context.WithCancel(ctx)
	for _, n := range f.nodes {
		f.wg.Go(func() {
			err := n.agent.Run(ctx)
			f.exited.Add(1)
			if err != nil {
				f.mu.Lock()
				f.errs.Add(err.Error())
				f.mu.Unlock()
			}
		})
	}
}

// stop stops the agents, waits for them, and closes the relays. It may be
// called more than once.
func (f *fleet) stop() {
	f.cancel()
	f.wg.Wait()
	for _, n := range f.nodes {
		n.relay.Close()
	}
}

// errors returns the distinct errors agents' Run returned.
func (f *fleet) errors() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.errs.List()
}

// traffic returns the relays' counters summed, and the largest node's
// wire bytes since before (nil: since the start).
func (f *fleet) traffic(before []relay.Counts) (sum relay.Counts, maxWire int64, each []relay.Counts) {
	each = make([]relay.Counts, len(f.nodes))
	for i, n := range f.nodes {
		each[i] = n.relay.Counts()
		d := each[i]
		if before != nil {
			d = d.Sub(before[i])
		}
		sum = sum.Add(d)
		maxWire = max(maxWire, d.Wire())
	}
	return sum, maxWire, each
}

// syncTotals is the agents' sync clients' counters, summed.
type syncTotals struct {
	connects, inventories, statusSent, bytesReceived int64
	// resumeBytes sums each agent's resume step of its last session.
	resumeBytes int64
}

func (f *fleet) syncTotals() syncTotals {
	var t syncTotals
	for _, n := range f.nodes {
		s := n.agent.SyncStats()
		if s == nil {
			continue
		}
		t.connects += s.Connects.Load()
		t.inventories += s.Inventories.Load()
		t.statusSent += s.StatusSent.Load()
		t.bytesReceived += s.BytesReceived.Load()
		t.resumeBytes += s.ResumeBytes.Load()
	}
	return t
}

// connects returns each agent's count of sessions started.
func (f *fleet) connects() []int64 {
	out := make([]int64, len(f.nodes))
	for i, n := range f.nodes {
		if s := n.agent.SyncStats(); s != nil {
			out[i] = s.Connects.Load()
		}
	}
	return out
}

// containerRestarts counts the containers the runtimes started more than
// once.
func (f *fleet) containerRestarts(ctx context.Context) (int, error) {
	total := 0
	for _, n := range f.nodes {
		ps, err := n.rt.List(ctx)
		if err != nil {
			return 0, fmt.Errorf("list runtime of %s: %w", n.name, err)
		}
		for _, p := range ps {
			for _, c := range p.Containers {
				total += c.Attempt
			}
		}
	}
	return total, nil
}

func (f *fleet) truncated() int64 {
	var t int64
	for _, n := range f.nodes {
		t += n.relay.Truncated()
	}
	return t
}

// logCounter is the agents' slog handler: it counts records by level and
// message, keeps a few distinct warnings and errors with their err, and
// drops the rest, so that a thousand agents' logs cost little and still
// tell what the agents went through. It is safe for concurrent use.
type logCounter struct {
	warnings atomic.Int64
	mu       sync.Mutex
	counts   map[string]int64 // by "LEVEL message"; agents log constant messages
	s        report.ErrorSet
}

func (l *logCounter) Enabled(_ context.Context, lvl slog.Level) bool { return lvl >= slog.LevelInfo }

func (l *logCounter) Handle(_ context.Context, r slog.Record) error {
	key := r.Level.String() + " " + r.Message
	warn := r.Level >= slog.LevelWarn
	msg := r.Message
	if warn {
		l.warnings.Add(1)
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "err" {
				msg += ": " + a.Value.String()
				return false
			}
			return true
		})
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.counts == nil {
		l.counts = map[string]int64{}
	}
	if _, ok := l.counts[key]; ok || len(l.counts) < maxLogKinds {
		l.counts[key]++
	}
	if warn {
		l.s.Add(msg)
	}
	return nil
}

// maxLogKinds bounds the distinct messages counted.
const maxLogKinds = 100

func (l *logCounter) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logCounter) WithGroup(string) slog.Handler      { return l }

// samples returns some distinct warnings and errors.
func (l *logCounter) samples() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.s.List()
}

// snapshot returns the counts by level and message. The caller owns the
// map.
func (l *logCounter) snapshot() map[string]int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.counts)
}

// waitFor polls cond every interval until it holds, timeout passes or ctx
// ends; it reports whether cond held.
func waitFor(ctx context.Context, timeout, interval time.Duration, cond func() bool) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		if cond() {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-deadline.C:
			return cond()
		case <-tick.C:
		}
	}
}
