package usage

import (
	"context"
	"reflect"
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

func TestWorth(t *testing.T) {
	base := func(cpu, mem uint64) *wire.Usage {
		return &wire.Usage{Time: t0, Node: wire.ResourceUsage{CPU: 100e6, Memory: 512 << 20},
			Pods: []wire.PodUsage{{Namespace: "ns", Name: "p", Containers: []wire.ContainerUsage{{Name: "c", ResourceUsage: wire.ResourceUsage{CPU: cpu, Memory: mem}}}}}}
	}
	later := func(u *wire.Usage, d time.Duration) *wire.Usage { u.Time = u.Time.Add(d); return u }
	const refresh = time.Minute
	for _, tc := range []struct {
		name      string
		last, cur *wire.Usage
		want      bool
	}{
		{"nothing to send", base(1e6, 1<<20), nil, false},
		{"first", nil, base(1e6, 1<<20), true},
		{"same as shown", base(1_000_000, 1<<20), later(base(1_999_999, 1<<20+1000), 15*time.Second), false},
		{"a millicore more", base(1_000_000, 1<<20), later(base(2_000_000, 1<<20), 15*time.Second), true},
		{"a MiB more", base(1e6, 1<<20), later(base(1e6, 2<<20), 15*time.Second), true},
		{"refresh due", base(1e6, 1<<20), later(base(1e6, 1<<20), refresh), true},
		{"another pod", base(1e6, 1<<20), func() *wire.Usage { u := later(base(1e6, 1<<20), time.Second); u.Pods[0].Name = "q"; return u }(), true},
		{"a pod fewer", base(1e6, 1<<20), func() *wire.Usage { u := later(base(1e6, 1<<20), time.Second); u.Pods = nil; return u }(), true},
	} {
		if got := Worth(tc.last, tc.cur, refresh); got != tc.want {
			t.Errorf("%s: Worth = %v, want %v", tc.name, got, tc.want)
		}
	}
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
}
