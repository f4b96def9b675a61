package meshbench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/outpost-mesh/outpost/bench/report"
	"github.com/outpost-mesh/outpost/edge/mesh"
	"github.com/outpost-mesh/outpost/edge/proxy"
	"github.com/outpost-mesh/outpost/internal/wait"
)

// TestMain fails the run if a test leaves goroutines behind, but for a
// probe memberlist had in flight when its node was shut down: Shutdown
// does not wait for it, and it ends at its probe timer (up to 8 probe
// intervals while Lifeguard stretches them), which can outlast goleak's
// retries under -race on a loaded machine.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/hashicorp/memberlist.(*Memberlist).probeNode"),
		goleak.IgnoreAnyFunction("github.com/hashicorp/memberlist.(*Memberlist).sendPingAndWaitForAck"))
}

// fastMesh is mesh.DefaultConfig probing and gossiping faster, as
// edge/mesh's tests do, so that a death is found within a couple of
// seconds.
func fastMesh() mesh.Config {
	c := mesh.DefaultConfig()
	c.ProbeInterval, c.ProbeTimeout = 300*time.Millisecond, 150*time.Millisecond
	c.GossipInterval, c.PushPullInterval = 50*time.Millisecond, time.Second
	return c
}

func TestValidate(t *testing.T) {
	for name, c := range map[string]Config{"defaults": DefaultConfig(), "quick": QuickConfig()} {
		if err := c.Validate(); err != nil {
			t.Errorf("%s: Validate() = %v", name, err)
		}
	}
	for name, bad := range map[string]func(*Config){
		"no size":        func(c *Config) { c.Sizes = nil },
		"one node":       func(c *Config) { c.Sizes = []int{1, 10} },
		"too many nodes": func(c *Config) { c.Sizes = []int{maxNodes + 1} },
		"size twice":     func(c *Config) { c.Sizes = []int{3, 10, 3} },
		"no runs":        func(c *Config) { c.Runs = 0 },
		"no idle":        func(c *Config) { c.Idle = 0 },
		"no timeout":     func(c *Config) { c.Timeout = 0 },
		"negative":       func(c *Config) { c.Settle = -time.Second },
		"no sync runs":   func(c *Config) { c.SyncRuns = 0 },
		"tiny objects":   func(c *Config) { c.SyncObjectBytes = 100 },
	} {
		c := DefaultConfig()
		bad(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: Validate() = nil", name)
		}
		if _, err := Run(context.Background(), c, &bytes.Buffer{}); err == nil {
			t.Errorf("%s: Run accepted it", name)
		}
	}
}

// TestCountingTransport counts what two nodes send each other: packets
// from the start, a stream each way once they push and pull.
func TestCountingTransport(t *testing.T) {
	s, err := newSite(fastMesh(), "count")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.close(); err != nil {
			t.Error(err)
		}
	})
	a, err := s.start()
	if err != nil {
		t.Fatal(err)
	}
	if got := a.m.Addr(); got != a.t.Bind(loopback) || got.Addr() != loopback {
		t.Errorf("Addr() = %v, want the transport's %v", got, a.t.Bind(loopback))
	}
	if got := a.t.Sent(); got != (Sent{}) {
		t.Errorf("a node alone sent %+v, want nothing", got)
	}
	b, err := s.start()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.join(b); err != nil {
		t.Fatal(err)
	}
	// The join is a stream b dials and a answers on.
	if got := b.t.Sent(); got.Streams < 1 || got.StreamBytes == 0 {
		t.Errorf("the joiner sent %+v after its join, want a stream written to", got)
	}
	// The joiner may read a's reply before a's Write has returned and
	// been counted.
	wait.For(t, 10*time.Second, "the joined's reply on the stream it accepted", func() (bool, string) {
		got := a.t.Sent()
		return got.StreamBytes > 0, fmt.Sprintf("the joined sent %+v", got)
	})
	for _, n := range []*node{a, b} {
		wait.For(t, 10*time.Second, n.name+" probes and pushes over both", func() (bool, string) {
			got := n.t.Sent()
			return got.UDPPackets > 0 && got.UDPBytes > 0 && got.Streams > 0 && got.Bytes == got.UDPBytes+got.StreamBytes,
				fmt.Sprintf("%s sent %+v", n.name, got)
		})
	}
	if got := a.m.Alive(); len(got) != 1 || got[0] != b.name {
		t.Errorf("%s sees %v, want [%s]", a.name, got, b.name)
	}
	if d := b.t.Sent().sub(b.t.Sent()); d.Bytes > 0 || d.UDPPackets > 0 {
		t.Errorf("a reading less a later one = %+v, want none positive", d)
	}
}

// TestTransportCounts counts exactly what is written through the
// transport: packets, streams dialed and streams accepted.
func TestTransportCounts(t *testing.T) {
	tr, err := newCountingTransport(loopback)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := tr.Shutdown(); err != nil {
			t.Error(err)
		}
		if err := tr.Shutdown(); err != nil {
			t.Errorf("second Shutdown = %v", err)
		}
	}()
	addr := tr.Bind(loopback).String()

	if _, err := tr.WriteTo([]byte("ping"), addr); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-tr.PacketCh():
		if string(p.Buf) != "ping" {
			t.Errorf("received %q, want ping", p.Buf)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the packet sent to itself never came")
	}

	dialed, err := tr.DialTimeout(addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer dialed.Close()
	if _, err := dialed.Write([]byte("abc")); err != nil {
		t.Fatal(err)
	}
	var accepted net.Conn
	select {
	case accepted = <-tr.StreamCh():
	case <-time.After(10 * time.Second):
		t.Fatal("the stream dialed to itself was never accepted")
	}
	defer accepted.Close()
	if _, err := accepted.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	want := Sent{Bytes: 4 + 3 + 5, UDPBytes: 4, UDPPackets: 1, StreamBytes: 3 + 5, Streams: 1}
	if got := tr.Sent(); got != want {
		t.Errorf("Sent() = %+v, want %+v", got, want)
	}
}

// TestRun runs a tiny benchmark with fast timings and checks that every
// figure is there and plausible.
func TestRun(t *testing.T) {
	cfg := Config{Sizes: []int{3}, Runs: 1, Idle: 1500 * time.Millisecond, Settle: 200 * time.Millisecond, Timeout: 15 * time.Second, meshConfig: fastMesh}
	var progress bytes.Buffer
	rep, err := Run(context.Background(), cfg, &progress)
	if err != nil {
		t.Fatalf("Run = %v\n%s", err, progress.String())
	}
	res := rep.Result
	if len(res.Sizes) != 1 || res.Sizes[0].Nodes != 3 {
		t.Fatalf("sizes %+v, want one of 3 nodes", res.Sizes)
	}
	s := res.Sizes[0]
	for name, tm := range map[string]Times{"join": s.Join, "crash": s.Crash, "leave": s.Leave} {
		if len(tm.Runs) != 1 || tm.Runs[0] <= 0 || tm.Median != tm.Runs[0] || tm.Max != tm.Runs[0] || tm.Max > cfg.Timeout {
			t.Errorf("%s %+v, want one positive run, its own median and max", name, tm)
		}
	}
	// A crash is found only after a failed probe and the suspicion.
	if s.Crash.Max < fastMesh().ProbeTimeout+s.SuspicionMin {
		t.Errorf("crash found in %v, before a probe timeout and the suspicion (%v) could pass", s.Crash.Max, s.SuspicionMin)
	}
	// Its endpoint leaves routing only once the mesh found it dead (the
	// crash is timed by polling, up to pollEvery late), and within the
	// proxy's poll and min sync after (kicked, it rebuilds at once unless
	// it rebuilt within min sync), with a second's slack for a loaded
	// machine.
	d, pc := s.Dropped, proxy.DefaultConfig()
	if len(d.Runs) != 1 || d.Median != d.Runs[0] || d.Max != d.Runs[0] ||
		d.Max < s.Crash.Max-pollEvery || d.Max > s.Crash.Max+pc.Poll+pc.MinSync+time.Second {
		t.Errorf("endpoints dropped %+v, want one run between the crash found (%v) and %v after", d, s.Crash.Max, pc.Poll+pc.MinSync)
	}
	fm := fastMesh()
	if lo, hi := suspicionTimeouts(fm.SuspicionMult, fm.SuspicionMaxTimeoutMult, 3, fm.ProbeInterval); s.SuspicionMin != lo || s.SuspicionMax != hi {
		t.Errorf("suspicion %v to %v, want %v to %v", s.SuspicionMin, s.SuspicionMax, lo, hi)
	}
	i := s.Idle
	if len(i.Nodes) != 3 || !i.Converged || i.Duration < cfg.Idle {
		t.Errorf("idle %+v, want 3 nodes, converged, counted at least %v", i, cfg.Idle)
	}
	for _, n := range i.Nodes {
		if n.Sent.UDPPackets == 0 || n.Sent.Bytes < n.Sent.UDPBytes {
			t.Errorf("%s sent %+v idle, want packets", n.Name, n.Sent)
		}
	}
	if i.MeanBytesPerMin <= 0 || i.MaxBytesPerMin < i.MeanBytesPerMin || i.MaxKbits < i.MeanKbits || i.MaxKbitsHeaders <= i.MaxKbits || i.MeanPacketsPerMin <= 0 {
		t.Errorf("idle summary %+v, want positive, max over mean", i)
	}
	if got := i.MeanKbits * 1000 / 8 * 60; got < 0.99*i.MeanBytesPerMin || got > 1.01*i.MeanBytesPerMin {
		t.Errorf("%.2f kbit/s is %.0f bytes a minute, not the %.0f reported", i.MeanKbits, got, i.MeanBytesPerMin)
	}
	if res.Mesh.ProbeInterval != fastMesh().ProbeInterval || len(res.Load) != 3 {
		t.Errorf("mesh timings %+v and %d load readings, want the nodes' and 3", res.Mesh, len(res.Load))
	}
	for _, tg := range rep.Targets {
		if tg.Status != report.TargetNA {
			t.Errorf("target %q is %s on a run without 10 nodes, want n/a", tg.Goal, tg.Status)
		}
	}
	if !strings.Contains(progress.String(), "3 nodes, run 1 of 1") {
		t.Errorf("progress lacks the run:\n%s", progress.String())
	}
	if _, err := json.Marshal(rep); err != nil {
		t.Errorf("the report does not encode: %v", err)
	}
}

// TestMeasureSync sends a few pods to a sync client direct and through a
// relay, and checks the figures and their table.
func TestMeasureSync(t *testing.T) {
	cfg := Config{Timeout: 30 * time.Second, SyncBytes: 256 << 10, SyncObjectBytes: 64 << 10, SyncRuns: 1}
	var progress bytes.Buffer
	logf := func(f string, args ...any) { fmt.Fprintf(&progress, f+"\n", args...) }
	sy, err := measureSync(context.Background(), cfg, logf)
	if err != nil {
		t.Fatalf("measureSync = %v\n%s", err, progress.String())
	}
	if sy.Objects != 4 || sy.Bytes < 255<<10 || sy.Bytes > 257<<10 {
		t.Errorf("%d objects of %d bytes, want 4 of about 256 KiB", sy.Objects, sy.Bytes)
	}
	for name, tm := range map[string]Times{"direct": sy.Direct, "relayed": sy.Relayed} {
		if len(tm.Runs) != 1 || tm.Median <= 0 {
			t.Errorf("%s %+v, want one positive run", name, tm)
		}
	}
	if sy.DirectMBps <= 0 || sy.RelayedMBps <= 0 || sy.Ratio <= 0 {
		t.Errorf("throughputs %.1f and %.1f MB/s, ratio %.2f: want positive", sy.DirectMBps, sy.RelayedMBps, sy.Ratio)
	}
	// The relay carried the pods (random hex, which zstd halves at best)
	// down, and QUIC's acks up.
	if sy.RelayDown < sy.Bytes/2 || sy.RelayUp <= 0 {
		t.Errorf("relay forwarded %d up and %d down, want the %d bytes of pods down", sy.RelayUp, sy.RelayDown, sy.Bytes)
	}
	rep := NewReport(cfg, &Result{Sync: sy})
	var b bytes.Buffer
	if err := rep.Render(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"sync through a site peer's relay: 4 pods", "relayed/direct: ", "MB/s at p50"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("Render lacks %q:\n%s", want, b.String())
		}
	}
}

// TestRunCanceled stops at once when its context is done, closing every
// node it started (goleak checks their goroutines).
func TestRunCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	cfg := Config{Sizes: []int{3}, Runs: 1, Idle: time.Minute, Timeout: time.Minute, meshConfig: fastMesh}
	if _, err := Run(ctx, cfg, &bytes.Buffer{}); err == nil {
		t.Error("Run with a canceled context = nil error")
	}
}

func sampleResult(crashMax, droppedMax time.Duration, kbits float64) *Result {
	times := func(med, max time.Duration) Times {
		return Times{Runs: []time.Duration{med, med, max}, Median: med, P95: max, Max: max}
	}
	size := func(n int) SizeResult {
		return SizeResult{
			Nodes: n, Join: times(200*time.Millisecond, 300*time.Millisecond), Crash: times(4*time.Second, crashMax),
			Dropped: times(4100*time.Millisecond, droppedMax),
			Leave:   times(100*time.Millisecond, 150*time.Millisecond), SuspicionMin: 3 * time.Second, SuspicionMax: 9 * time.Second,
			Idle: IdleResult{Duration: time.Minute, Converged: true, Nodes: []NodeSent{{Name: "n00"}}, MeanBytesPerMin: kbits * 6000,
				MaxBytesPerMin: kbits * 7500, MeanKbits: kbits * 0.8, MaxKbits: kbits, MaxKbitsHeaders: kbits * 1.2},
		}
	}
	return &Result{
		Mesh:  timingsOf(mesh.DefaultConfig()),
		Sizes: []SizeResult{size(3), size(10)},
		Load:  []report.LoadAvg{{Phase: "start", Load: [3]float64{1, 2, 3}}},
	}
}

func TestTargets(t *testing.T) {
	for _, tc := range []struct {
		crash, dropped time.Duration
		kbits          float64
		dead, idle     string
	}{
		{4800 * time.Millisecond, 4900 * time.Millisecond, 1.5, report.TargetMet, report.TargetMet},
		{5 * time.Second, 5 * time.Second, 2.5, report.TargetMet, report.TargetMissed},
		{4800 * time.Millisecond, 5100 * time.Millisecond, 1.5, report.TargetMissed, report.TargetMet}, // found, not dropped in time
		{7 * time.Second, 7 * time.Second, 1.9, report.TargetMissed, report.TargetMet},
		{4 * time.Second, 0, 1.5, report.TargetMissed, report.TargetMet}, // not measured
	} {
		got := evaluate(sampleResult(tc.crash, tc.dropped, tc.kbits))
		if len(got) != 2 || got[0].Status != tc.dead || got[1].Status != tc.idle {
			t.Errorf("evaluate(crash %v, dropped %v, %.1f kbit/s) = %+v, want %s, %s", tc.crash, tc.dropped, tc.kbits, got, tc.dead, tc.idle)
		}
	}
	res := sampleResult(time.Second, time.Second, 1)
	res.Sizes = res.Sizes[:1]
	for _, tg := range evaluate(res) {
		if tg.Status != report.TargetNA {
			t.Errorf("without 10 nodes: %+v, want n/a", tg)
		}
	}
}

func TestRender(t *testing.T) {
	rep := NewReport(DefaultConfig(), sampleResult(7*time.Second, 7200*time.Millisecond, 1.5))
	var b bytes.Buffer
	if err := rep.Render(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"membership: median and max of 3 runs",
		"nodes  join p50  join max  crash p50  crash max  dropped p50  dropped max  leave p50  leave max",
		"4.10s        7.20s",
		"service proxy (edge/proxy: poll 500ms, min sync 500ms",
		"idle gossip sent per node",
		"bytes/min mean  bytes/min max  kbit/s mean  kbit/s max",
		"a crashed node found dead and its endpoints dropped by every peer within 5.00s at 10 nodes",
		"endpoints dropped: p95 7.20s of 3 runs (median 4.10s, max 7.20s); found dead: p95 7.00s (median 4.00s, max 7.00s)",
		"idle gossip under 2 kbit/s per node at 10 nodes",
		"max 1.50 kbit/s over the nodes",
		"MISSED",
		`target "a crashed node found dead and its endpoints dropped by every peer within 5.00s at 10 nodes" MISSED`,
		"3.00s to 9.00s",
		"load average",
		"machine\ncpu:",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("Render lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, `target "idle gossip`) {
		t.Errorf("Render lists a met target among those missed:\n%s", out)
	}
}

// TestSuspicionTimeouts checks the figures against memberlist's formula:
// SuspicionMult probe intervals, times log10 of the nodes over 10, up to
// the max multiplier while SuspicionMult-2 confirmations are awaited.
func TestSuspicionTimeouts(t *testing.T) {
	for _, tc := range []struct {
		mult, size int
		lo, hi     time.Duration
	}{
		{3, 3, 3 * time.Second, 9 * time.Second},
		{3, 10, 3 * time.Second, 9 * time.Second},
		{3, 50, 5094 * time.Millisecond, 15282 * time.Millisecond},
		{2, 10, 2 * time.Second, 2 * time.Second}, // no confirmation awaited
		{4, 3, 4 * time.Second, 4 * time.Second},  // 2 awaited, 1 other node to give them
		{4, 4, 4 * time.Second, 12 * time.Second}, // 2 awaited, 2 to give them
		{2, 50, 3396 * time.Millisecond, 3396 * time.Millisecond},
	} {
		lo, hi := suspicionTimeouts(tc.mult, 3, tc.size, time.Second)
		if lo != tc.lo || hi != tc.hi {
			t.Errorf("suspicionTimeouts(%d, 3, %d, 1s) = %v, %v; want %v, %v", tc.mult, tc.size, lo, hi, tc.lo, tc.hi)
		}
	}
}

// TestSummarize checks the median, p95 (nearest rank) and max.
func TestSummarize(t *testing.T) {
	var runs []time.Duration
	for i := 20; i >= 1; i-- {
		runs = append(runs, time.Duration(i)*time.Second)
	}
	got := summarize(runs)
	if got.Median != 10500*time.Millisecond || got.P95 != 19*time.Second || got.Max != 20*time.Second || got.Runs[0] != 20*time.Second {
		t.Errorf("summarize = median %v, p95 %v, max %v, first run %v; want 10.5s, 19s, 20s, 20s", got.Median, got.P95, got.Max, got.Runs[0])
	}
	if three := summarize(runs[:3]); three.P95 != three.Max {
		t.Errorf("p95 of 3 runs %v, want the max %v", three.P95, three.Max)
	}
}
