package usage

import (
	"context"
	"net/netip"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/outpost-mesh/outpost/sync/wire"
)

var t0 = time.Date(2026, 12, 6, 7, 0, 0, 0, time.UTC)

func pod(ns, name string, cs ...ContainerReading) PodReading {
	return PodReading{Namespace: ns, Name: name, Containers: cs}
}

func ctr(name, id string, cpu time.Duration, mem uint64) ContainerReading {
	return ContainerReading{Name: name, ID: id, Reading: Reading{CPU: cpu, Memory: mem}}
}

func TestReport(t *testing.T) {
	prev := Sample{Time: t0, Node: Reading{CPU: 10 * time.Second, Memory: 100},
		Pods: []PodReading{
			pod("default", "web", ctr("app", "a1", time.Second, 5), ctr("side", "s1", 0, 1)),
			pod("default", "restarted", ctr("app", "r1", 5*time.Second, 5)),
			pod("default", "gone", ctr("app", "g1", time.Second, 5)),
		}}
	cur := Sample{Time: t0.Add(10 * time.Second), Node: Reading{CPU: 15 * time.Second, Memory: 200},
		Pods: []PodReading{
			pod("default", "web", ctr("app", "a1", 3*time.Second, 7<<20), ctr("side", "s1", 10*time.Millisecond, 2)),
			pod("default", "restarted", ctr("app", "r2", time.Second, 5)), // a new instance: no rate yet
			pod("default", "new", ctr("app", "n1", time.Second, 5)),       // no earlier reading
		}}
	want := &wire.Usage{Time: cur.Time, Window: 10 * time.Second,
		Node: wire.ResourceUsage{CPU: 500_000_000, Memory: 200}, // 5s of CPU in 10s: half a core
		Pods: []wire.PodUsage{{Namespace: "default", Name: "web", Containers: []wire.ContainerUsage{
			{Name: "app", ResourceUsage: wire.ResourceUsage{CPU: 200_000_000, Memory: 7 << 20}},
			{Name: "side", ResourceUsage: wire.ResourceUsage{CPU: 1_000_000, Memory: 2}},
		}}},
	}
	if got := Report(prev, cur); !reflect.DeepEqual(got, want) {
		t.Errorf("Report = %+v, want %+v", got, want)
	}
	// A count that went back (the same ID, reset) reads as no rate.
	back := Sample{Time: t0.Add(20 * time.Second), Node: Reading{CPU: 9 * time.Second}, Pods: []PodReading{pod("default", "web", ctr("app", "a1", 0, 1))}}
	if got := Report(cur, back); got.Node.CPU != 0 || len(got.Pods) != 0 {
		t.Errorf("Report(counts going back) = %+v, want no CPU and no pods", got)
	}
	if got := Report(cur, cur); got != nil {
		t.Errorf("Report(same time) = %+v, want nil", got)
	}
}

func TestChanged(t *testing.T) {
	base := func(cpu, mem uint64) *wire.Usage {
		return &wire.Usage{Time: t0, Node: wire.ResourceUsage{CPU: 100e6, Memory: 512 << 20},
			Pods: []wire.PodUsage{{Namespace: "ns", Name: "p", Containers: []wire.ContainerUsage{{Name: "c", ResourceUsage: wire.ResourceUsage{CPU: cpu, Memory: mem}}}}}}
	}
	for _, tc := range []struct {
		name      string
		base, cur *wire.Usage
		want      bool
	}{
		{"first", nil, base(1e6, 1<<20), true},
		{"same", base(1e6, 1<<20), base(1e6, 1<<20), false},
		{"under a millicore", base(1_000_000, 1<<20), base(1_999_999, 1<<20), false},
		{"under a tenth", base(100e6, 100<<20), base(109e6, 109<<20), false},
		{"a tenth more CPU", base(100e6, 100<<20), base(115e6, 100<<20), true},
		{"a tenth less memory", base(100e6, 100<<20), base(100e6, 89<<20), true},
		{"from idle to busy", base(0, 1<<20), base(900e6, 1<<20), true},
		{"another pod", base(1e6, 1<<20), func() *wire.Usage { u := base(1e6, 1<<20); u.Pods[0].Name = "q"; return u }(), true},
		{"a pod fewer", base(1e6, 1<<20), func() *wire.Usage { u := base(1e6, 1<<20); u.Pods = nil; return u }(), true},
		{"node busier", base(1e6, 1<<20), func() *wire.Usage { u := base(1e6, 1<<20); u.Node.CPU *= 2; return u }(), true},
		{"relay started", base(1e6, 1<<20), withRelay(base(1e6, 1<<20), 1), true},
		{"relay the same", withRelay(base(1e6, 1<<20), 1), withRelay(base(1e6, 1<<20), 1), false},
		{"one more byte relayed", withRelay(base(1e6, 1<<20), 1000), withRelay(base(1e6, 1<<20), 1001), true},
	} {
		if got := Changed(tc.base, tc.cur); got != tc.want {
			t.Errorf("%s: Changed = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// withRelay gives u the relay counters of one peer that sent up bytes.
func withRelay(u *wire.Usage, up uint64) *wire.Usage {
	u.Relay = []wire.RelayUsage{{Peer: netip.MustParseAddr("192.168.7.12"), Up: up}}
	return u
}

// scripted is a Source that returns its samples in turn.
type scripted struct{ samples []Sample }

func (s *scripted) Sample(context.Context) (Sample, error) {
	x := s.samples[0]
	s.samples = s.samples[1:]
	return x, nil
}

// TestMeterCoalesces: the meter keeps only its latest report, whatever
// was not sent (the hub away) is replaced and never queued, and a report
// once sent is not offered again.
func TestMeterCoalesces(t *testing.T) {
	now := t0
	src := &scripted{}
	for i := range 4 {
		src.samples = append(src.samples, Sample{Node: Reading{CPU: time.Duration(i) * 10 * time.Second, Memory: uint64(i) << 20}})
	}
	m, err := New(Config{Source: src, Interval: 15 * time.Second, Refresh: time.Minute, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	m.sampleOnce(ctx)
	if u := m.Next(nil); u != nil {
		t.Fatalf("Next after one sample = %+v, want nil: no rate yet", u)
	}
	// Three more samples while nothing is sent: only the latest remains.
	for range 3 {
		now = now.Add(20 * time.Second)
		m.sampleOnce(ctx)
	}
	u := m.Next(nil)
	if u == nil || u.Node.Memory != 3<<20 || u.Node.CPU != 500_000_000 || !u.Time.Equal(now) {
		t.Fatalf("Next = %+v, want the latest report: 10s of CPU in 20s, 3 MiB, at %v", u, now)
	}
	if again := m.Next(u); again != nil {
		t.Errorf("Next(the report just sent) = %+v, want nil", again)
	}
	// A new stream starts with the full report again.
	if again := m.Next(nil); again != u {
		t.Errorf("Next(nil) = %+v, want the latest full report", again)
	}
}

// TestMeterRefresh: an unchanged usage goes as a few-byte Unchanged
// report once the last is Refresh old; a changed one goes in full.
func TestMeterRefresh(t *testing.T) {
	now := t0
	src := &scripted{}
	for i := range 8 {
		mem := uint64(64 << 20)
		if i == 7 {
			mem = 128 << 20
		}
		src.samples = append(src.samples, Sample{Node: Reading{CPU: time.Duration(i) * time.Second, Memory: mem}})
	}
	m, err := New(Config{Source: src, Interval: 15 * time.Second, Refresh: time.Minute, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	step := func() { now = now.Add(15 * time.Second); m.sampleOnce(ctx) }
	m.sampleOnce(ctx)
	step()
	last := m.Next(nil)
	if last == nil || last.Unchanged {
		t.Fatalf("first Next = %+v, want a full report", last)
	}
	var sent []string
	for range 6 {
		step()
		if u := m.Next(last); u != nil {
			last = u
			switch {
			case u.Unchanged:
				sent = append(sent, "unchanged")
			default:
				sent = append(sent, "full")
			}
		} else {
			sent = append(sent, "-")
		}
	}
	// Samples 2-6 unchanged: a refresh after a minute; sample 7 doubles
	// the memory.
	if want := []string{"-", "-", "-", "unchanged", "-", "full"}; !reflect.DeepEqual(sent, want) {
		t.Errorf("sent %v, want %v", sent, want)
	}
	if last.Node.Memory != 128<<20 {
		t.Errorf("last full report %+v, want 128 MiB", last)
	}
}

// relayCounters is a settable Config.Relayed.
type relayCounters struct {
	mu sync.Mutex
	rs []wire.RelayUsage
}

func (c *relayCounters) set(rs ...wire.RelayUsage) { c.mu.Lock(); defer c.mu.Unlock(); c.rs = rs }
func (c *relayCounters) get() []wire.RelayUsage {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rs
}

// TestMeterRelay: the relay's counters go in each report, sorted by peer,
// each peer once, none invalid; a report is never Unchanged while they
// moved since the last full one sent, and is once they stand still.
func TestMeterRelay(t *testing.T) {
	now := t0
	src := &scripted{}
	for i := range 8 {
		src.samples = append(src.samples, Sample{Node: Reading{CPU: time.Duration(i) * time.Second, Memory: 64 << 20}})
	}
	relay := &relayCounters{}
	m, err := New(Config{Source: src, Interval: 15 * time.Second, Refresh: time.Minute, Relayed: relay.get, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	step := func() { now = now.Add(15 * time.Second); m.sampleOnce(ctx) }
	a, b := netip.MustParseAddr("192.168.7.12"), netip.MustParseAddr("192.168.7.9")
	m.sampleOnce(ctx)
	relay.set(wire.RelayUsage{Peer: a, Up: 100}, wire.RelayUsage{}, wire.RelayUsage{Peer: b, Up: 7}, wire.RelayUsage{Peer: a, Up: 100})
	step()
	last := m.Next(nil)
	want := []wire.RelayUsage{{Peer: b, Up: 7}, {Peer: a, Up: 100}}
	if last == nil || !reflect.DeepEqual(last.Relay, want) {
		t.Fatalf("first Next = %+v, want the relay counters %+v", last, want)
	}
	// Every 15s: a peer relays more, twice, then nothing moves.
	var sent []string
	for i := range 6 {
		if i < 2 {
			relay.set(wire.RelayUsage{Peer: a, Up: 200 + uint64(i)}, wire.RelayUsage{Peer: b, Up: 7})
		}
		step()
		switch u := m.Next(last); {
		case u == nil:
			sent = append(sent, "-")
		case u.Unchanged:
			last = u
			sent = append(sent, "unchanged")
			if u.Relay != nil {
				t.Errorf("an Unchanged report carries relay counters %+v", u.Relay)
			}
		default:
			last = u
			sent = append(sent, "full")
		}
	}
	if want := []string{"full", "full", "-", "-", "-", "unchanged"}; !reflect.DeepEqual(sent, want) {
		t.Errorf("sent %v, want %v", sent, want)
	}
	if got := m.base.Relay; len(got) != 2 || got[1].Up != 201 {
		t.Errorf("last full report's relay counters %+v, want peer %v at 201 bytes up", got, a)
	}
}

// TestMeterRelayCap: a report carries the counters of at most
// wire.MaxUsageRelayPeers peers, so that the hub takes it.
func TestMeterRelayCap(t *testing.T) {
	var rs []wire.RelayUsage
	for i := range wire.MaxUsageRelayPeers + 10 {
		rs = append(rs, wire.RelayUsage{Peer: netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}), Up: 1})
	}
	m, err := New(Config{Source: &scripted{}, Interval: time.Second, Refresh: time.Second, Relayed: func() []wire.RelayUsage { return rs }})
	if err != nil {
		t.Fatal(err)
	}
	got := m.relayed()
	if len(got) != wire.MaxUsageRelayPeers {
		t.Fatalf("relayed %d peers, want %d", len(got), wire.MaxUsageRelayPeers)
	}
	if _, err := wire.Unmarshal(wire.TypeUsage, wire.Marshal(&wire.Usage{Relay: got})); err != nil {
		t.Errorf("the hub refuses the report: %v", err)
	}
}
