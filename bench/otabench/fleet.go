package otabench

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/outpost-mesh/outpost/bench/internal/relay"
	"github.com/outpost-mesh/outpost/bench/report"
	"github.com/outpost-mesh/outpost/edge/agent"
	"github.com/outpost-mesh/outpost/edge/checkpoint"
	"github.com/outpost-mesh/outpost/edge/runtime/fake"
)

// The platform the simulated nodes take components for.
const (
	simOS   = "linux"
	simArch = "amd64"
)

// fleet is the simulated nodes: agents on fake runtimes, each reaching
// the hub through a relay of its own, each with SimSlots.
type fleet struct {
	nodes []*simNode
	logs  *logCounter

	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu   sync.Mutex
	errs report.ErrorSet
}

type simNode struct {
	name  string
	agent *agent.Agent
	slots *SimSlots
	relay *relay.Relay
}

func nodeName(i int) string { return fmt.Sprintf("ota-%05d", i) }

// newFleet makes the agents and relays; it starts nothing. The caller
// must call stop, also when newFleet fails.
func newFleet(cfg Config, dir string, hubSync *net.UDPAddr, token, caHash string, bases map[string]string) (*fleet, error) {
	f := &fleet{logs: &logCounter{}, cancel: func() {}}
	log := slog.New(f.logs)
	for i := range cfg.Nodes {
		r, err := relay.Listen(hubSync)
		if err != nil {
			return f, err
		}
		n := &simNode{name: nodeName(i), relay: r, slots: NewSimSlots(bases, nil)}
		f.nodes = append(f.nodes, n)
		ac := agent.DefaultConfig()
		ac.NodeName = n.name
		ac.DataDir = filepath.Join(dir, n.name)
		ac.HubAddr = r.Addr()
		ac.Token = token
		ac.CAHash = caHash
		ac.Runtime = fake.New(fake.Config{})
		ac.RuntimeVersion = "fake://bench"
		ac.Capacity = agent.Capacity{CPUMillis: 4000, MemoryBytes: 4 << 30, Pods: 110}
		ac.Checkpoint = simCheckpoint(log)
		ac.Resync, ac.EventedResync = cfg.AgentResync, cfg.AgentResync
		ac.Logger = log
		// The agent's own source fetches over its sync connection into
		// DataDir/firmware/staging, verifying each chunk; the agent
		// deletes the file once the slots have it, and the slots keep
		// nothing. Bandwidth 0: no uplink cap.
		ac.Firmware = &agent.FirmwareConfig{Slots: n.slots, OS: simOS, Arch: simArch}
		if n.agent, err = agent.New(ac); err != nil {
			return f, fmt.Errorf("agent %s: %w", n.name, err)
		}
	}
	return f, nil
}

// simCheckpoint is a checkpoint at badger's smallest sizes, as
// bench/fleetbench's simulated nodes have: a node's view here is tiny.
func simCheckpoint(logs *slog.Logger) checkpoint.Config {
	c := checkpoint.DefaultConfig()
	c.MemTableSize = 1 << 20
	c.NumMemtables = 1
	c.BaseTableSize = 64 << 10
	c.ValueLogFileSize = 4 << 20
	c.Logger = logs
	return c
}

func (f *fleet) start(ctx context.Context) {
	ctx, f.cancel = context.WithCancel(ctx)
	for _, n := range f.nodes {
		f.wg.Go(func() {
			if err := n.agent.Run(ctx); err != nil && ctx.Err() == nil {
				f.mu.Lock()
				f.errs.Add(err.Error())
				f.mu.Unlock()
			}
		})
	}
}

// stop stops the agents and closes the relays; it may be called more than
// once.
func (f *fleet) stop() {
	f.cancel()
	f.wg.Wait()
	for _, n := range f.nodes {
		n.relay.Close()
	}
}

func (f *fleet) errors() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.errs.List()
}

// wire returns the bytes the relays of the nodes at idx carried, IPv4 and
// UDP headers included.
func (f *fleet) wire(idx []int) int64 {
	var t int64
	for _, i := range idx {
		t += f.nodes[i].relay.Counts().Wire()
	}
	return t
}

// committed counts the nodes that committed version.
func (f *fleet) committed(version string) int {
	c := 0
	for _, n := range f.nodes {
		if t, ok := n.slots.Times(version); ok && !t.Commit.IsZero() {
			c++
		}
	}
	return c
}

// logCounter is the agents' slog handler: it counts warnings and keeps a
// few distinct ones, and drops the rest. It is safe for concurrent use.
type logCounter struct {
	warnings atomic.Int64
	mu       sync.Mutex
	s        report.ErrorSet
}

func (l *logCounter) Enabled(_ context.Context, lvl slog.Level) bool { return lvl >= slog.LevelWarn }

func (l *logCounter) Handle(_ context.Context, r slog.Record) error {
	l.warnings.Add(1)
	msg := r.Message
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "err" {
			msg += ": " + a.Value.String()
			return false
		}
		return true
	})
	l.mu.Lock()
	l.s.Add(msg)
	l.mu.Unlock()
	return nil
}

func (l *logCounter) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logCounter) WithGroup(string) slog.Handler      { return l }

func (l *logCounter) samples() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.s.List()
}
