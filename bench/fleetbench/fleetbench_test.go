package fleetbench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/outpost-mesh/outpost/bench/report"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		// Every agent, relay, watch and process waiter Run starts must
		// have exited when it returns.
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "leaked goroutines: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// buildOutpost builds the outpost binary into a temporary directory.
func buildOutpost(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		t.Fatal("go env GOMOD: not inside the module")
	}
	bin := filepath.Join(t.TempDir(), "outpost")
	// The Makefile's GOTAGS, as `make build` builds it.
	cmd := exec.Command("go", "build", "-tags=grpcnotrace", "-o", bin, "./cmd/outpost")
	cmd.Dir = filepath.Dir(gomod)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/outpost: %v\n%s", err, out)
	}
	return bin
}

// TestRunQuick runs a fleet of five nodes end to end against a real hub,
// restart included, and checks that the result adds up. Timings are only
// checked to be there.
func TestRunQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the outpost binary and a small fleet")
	}
	cfg := QuickConfig()
	cfg.Nodes = 5
	cfg.PodsPerNode = 2
	cfg.Workers = 4
	// Keep-alives come every 5s after the last packet: a window from the
	// pods' start to 6s later sees some.
	cfg.Settle = 0
	cfg.Idle = 12 * time.Second // over one keep-alive period (10s) of every node
	cfg.Binary = buildOutpost(t)
	cfg.Dir = t.TempDir()
	cfg.AgentDir = t.TempDir()
	cfg.ProfileDir = t.TempDir()
	cfg.ProfilePhase = PhasePods
	cfg.ProfileDuration = time.Second
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	rep, err := Run(ctx, cfg, &progress)
	if err != nil {
		t.Fatalf("Run = %v\nprogress:\n%s", err, progress.String())
	}
	t.Logf("progress:\n%s", progress.String())
	for _, name := range []string{"hub.cpu.pprof", "fleet.cpu.pprof"} {
		if fi, err := os.Stat(filepath.Join(cfg.ProfileDir, name)); err != nil || fi.Size() == 0 {
			t.Errorf("profile %s: %v, want a non-empty file", name, err)
		}
	}
	for _, d := range []string{cfg.Dir, cfg.AgentDir} {
		if left, _ := os.ReadDir(d); len(left) != 0 {
			t.Errorf("Run left %d entries in %s, want its directories removed", len(left), d)
		}
	}

	r := rep.Result
	n, total := cfg.Nodes, cfg.Nodes*cfg.PodsPerNode
	if j := r.Join; j.Nodes != n || j.Ready != n || j.Latency.Count != n || j.Seconds <= 0 || len(j.AgentErrors) != 0 {
		t.Errorf("join = %+v, want all %d nodes Ready", j, n)
	}
	p := r.Pods
	if p.Created != total || p.Failed != 0 || p.Running != total || p.Start.Count != total || p.Start.P99 <= 0 || p.CreatesPerSec <= 0 ||
		p.AfterCreate.Count != total || p.AfterCreate.P99 > p.Start.P99 {
		t.Errorf("pods = %+v, want %d created and seen Running", p, total)
	}
	id := r.Idle
	if id.Seconds < cfg.Idle.Seconds() || id.Datagrams == 0 || id.SmallDatagrams == 0 || id.KbitPerNode <= 0 || id.WireBytesPerNodeMin <= id.PayloadBytesPerNodeMin {
		t.Errorf("idle = %+v, want keep-alives counted over %v", id, cfg.Idle)
	}
	rs := r.Restart
	if !rs.Converged || rs.Sessions != n || rs.Probes != n || rs.ProbesRunning != n || rs.ConvergedSeconds <= rs.HubReadySeconds || rs.Reconnect.Count != n {
		t.Errorf("restart = %+v, want every agent back and every probe Running", rs)
	}
	if rs.LeasesRenewed != n || rs.PodsRunning != total || rs.ContainerRestarts != 0 || rs.CheckError != "" {
		t.Errorf("after restart: %d leases renewed, %d pods Running, %d restarts, %q; want %d, %d, 0", rs.LeasesRenewed, rs.PodsRunning, rs.ContainerRestarts, rs.CheckError, n, total)
	}
	if got := len(r.CPU); got != 4 {
		t.Errorf("CPU phases = %+v, want join, pods, idle, restart", r.CPU)
	}
	if r.Hub.Exit != "exit status 0" || r.Hub.ReadySeconds <= 0 {
		t.Errorf("hub ready after %.2fs, exit %q: want a positive time and exit status 0", r.Hub.ReadySeconds, r.Hub.Exit)
	}
	if runtime.GOOS == "linux" {
		if r.Hub.ProcError != "" || r.Hub.RSSBytes == 0 || r.Hub.CPUSeconds <= 0 || r.Hub.RestartRSSBytes == 0 || r.Fleet.RSSBytes == 0 {
			t.Errorf("hub = %+v, fleet = %+v: want memory read from /proc", r.Hub, r.Fleet)
		}
		for _, pc := range r.CPU {
			if pc.Seconds <= 0 || pc.Fleet <= 0 {
				t.Errorf("CPU of phase %+v: want time and the fleet's CPU", pc)
			}
		}
	}
	if r.Fleet.AgentLogs["INFO joined the hub"] != int64(n) || r.Fleet.RelayTruncated != 0 {
		t.Errorf("fleet = %+v, want %d joins logged and no datagram truncated", r.Fleet, n)
	}

	// A small fleet is not held to the targets, only to correctness.
	for _, tg := range rep.Targets {
		want := TargetNA
		if tg.Row == intactRow {
			want = TargetMet
		}
		if tg.Status != want {
			t.Errorf("target %q = %s (%s), want %s", tg.Goal, tg.Status, tg.Detail, want)
		}
	}
	var out strings.Builder
	if err := rep.Render(&out); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{startP99Row, idleKbitRow, convergedRow, "hub RSS, steady state", "machine"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("Render() has no %q:\n%s", s, out.String())
		}
	}
	t.Logf("report:\n%s", out.String())
	path := filepath.Join(t.TempDir(), "fleet.json")
	if err := report.WriteJSON(path, rep); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil || back.Result == nil || back.Result.Pods.Running != p.Running {
		t.Errorf("JSON round trip = %+v, %v", back.Result, err)
	}
}

func TestRunHubFails(t *testing.T) {
	cfg := QuickConfig()
	cfg.Binary = "/bin/false"
	cfg.Dir = t.TempDir()
	if _, err := Run(t.Context(), cfg, nil); err == nil || !strings.Contains(err.Error(), "hub exited before it was ready") {
		t.Errorf("Run with a hub that exits = %v, want it reported", err)
	}
	if left, _ := os.ReadDir(cfg.Dir); len(left) != 0 {
		t.Errorf("Run left %d entries in %s", len(left), cfg.Dir)
	}
}

func TestValidate(t *testing.T) {
	ok := QuickConfig()
	ok.Binary = "outpost"
	if err := ok.Validate(); err != nil {
		t.Fatalf("Validate(quick) = %v", err)
	}
	d := DefaultConfig()
	d.Binary = "outpost"
	if err := d.Validate(); err != nil {
		t.Fatalf("Validate(default) = %v", err)
	}
	for name, mod := range map[string]func(*Config){
		"no binary":       func(c *Config) { c.Binary = "" },
		"no namespace":    func(c *Config) { c.Namespace = "" },
		"no nodes":        func(c *Config) { c.Nodes = 0 },
		"too many nodes":  func(c *Config) { c.Nodes = maxNodes + 1 },
		"no pods":         func(c *Config) { c.PodsPerNode = 0 },
		"too many pods":   func(c *Config) { c.PodsPerNode = maxPodsPerNode + 1 },
		"no workers":      func(c *Config) { c.Workers = 0 },
		"too many probes": func(c *Config) { c.ProbeNodes = c.Nodes + 1 },
		"short idle":      func(c *Config) { c.Idle = time.Millisecond },
		"no resync":       func(c *Config) { c.AgentResync = 0 },
		"no timeout":      func(c *Config) { c.ConvergeTimeout = 0 },
		"bad phase":       func(c *Config) { c.ProfileDir = "p"; c.ProfilePhase = "lunch" },
	} {
		c := ok
		mod(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("Validate(%s) = nil, want an error", name)
		}
	}
}

func TestPodNames(t *testing.T) {
	cfg := Config{Nodes: 3, PodsPerNode: 2, ProbeNodes: 2}
	got := podNames(cfg)
	want := []string{
		"edge-00000-p000", "edge-00001-p000", "edge-00002-p000",
		"edge-00000-p001", "edge-00001-p001", "edge-00002-p001",
		"probe-edge-00000", "probe-edge-00001",
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("podNames(%+v) = %v, want %v", cfg, got, want)
	}
	for k, name := range got {
		node := nodeName(nodeOfSlot(cfg, k))
		if !strings.Contains(name, node) {
			t.Errorf("nodeOfSlot(%d) = %s, not the node of %s", k, node, name)
		}
	}
	if n := (Config{Nodes: 7}).probes(); n != 7 {
		t.Errorf("probes() with ProbeNodes 0 = %d, want every node", n)
	}
}

func TestSlots(t *testing.T) {
	s := newSlots([]string{"a", "b", "c"})
	s.start(0, 10)
	s.ret(0, 12)
	s.start(1, 20)
	s.reach("a", 15)
	s.reach("a", 99) // only the first time counts
	s.reach("c", 40) // reached, never started
	s.reach("zz", 50)
	lat, last := s.latencies(0, 3)
	if len(lat) != 1 || lat[0] != 5 || last != 40 || s.count.Load() != 2 || s.reachedIn(0, 3) != 2 || s.reachedIn(1, 2) != 0 {
		t.Errorf("latencies = %v, %v; count %d; want [5], 40, 2", lat, last, s.count.Load())
	}
	if got := s.sinceReturn(0, 3); len(got) != 1 || got[0] != 3 {
		t.Errorf("sinceReturn = %v, want [3]", got)
	}
}

func TestParseMachineBusy(t *testing.T) {
	stat := []byte("cpu  100 5 50 1000 30 2 3 4 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n")
	// user+nice+system+irq+softirq+steal = 100+5+50+2+3+4 = 164 ticks.
	if got, err := parseMachineBusy(stat); err != nil || got != 1.64 {
		t.Errorf("parseMachineBusy = %v, %v; want 1.64", got, err)
	}
	for _, bad := range []string{"", "intr 1 2 3\n", "cpu 1 2 x 4 5 6 7 8\n"} {
		if _, err := parseMachineBusy([]byte(bad)); err == nil {
			t.Errorf("parseMachineBusy(%q) = nil error", bad)
		}
	}
	start := cpuSample{at: time.Unix(100, 0), hub: 10, self: 20, machine: 100}
	end := cpuSample{at: time.Unix(110, 0), hub: 15, self: 30, machine: 120}
	if got, want := phaseCPU("x", start, end, false), (PhaseCPU{Phase: "x", Seconds: 10, Hub: 0.5, Fleet: 1, Others: 0.5}); got != want {
		t.Errorf("phaseCPU = %+v, want %+v", got, want)
	}
	// A restarted hub's CPU counts from 0.
	if got := phaseCPU("x", start, end, true); got.Hub != 1.5 || got.Others != 0 {
		t.Errorf("phaseCPU after a restart = %+v, want hub 1.5 and others clamped to 0", got)
	}
}

func TestLogCounter(t *testing.T) {
	l := &logCounter{}
	log := slog.New(l).With("node", "edge-1")
	log.Info("connected to hub")
	log.Info("connected to hub")
	log.Warn("queue node status", "err", "disk full")
	log.Debug("chatter")
	got := l.snapshot()
	if got["INFO connected to hub"] != 2 || got["WARN queue node status"] != 1 || len(got) != 2 {
		t.Errorf("counts = %v", got)
	}
	if l.warnings.Load() != 1 || strings.Join(l.samples(), "|") != "queue node status: disk full" {
		t.Errorf("warnings = %d, samples %q", l.warnings.Load(), l.samples())
	}
}

func TestEvaluate(t *testing.T) {
	cfg := DefaultConfig()
	total := cfg.Nodes * cfg.PodsPerNode
	good := &Result{
		Pods:    PodsResult{Created: total, Running: total, Start: report.Latency{P99: time.Second}},
		Idle:    IdleResult{Seconds: 60, KbitPerNode: 0.05},
		Restart: RestartResult{Converged: true, ConvergedSeconds: 20, PodsRunning: total, LeasesRenewed: cfg.Nodes},
	}
	bad := &Result{
		Pods:    PodsResult{Created: total, Running: total - 1, Start: report.Latency{P99: 3 * time.Second}},
		Idle:    IdleResult{Seconds: 60, KbitPerNode: 0.2},
		Restart: RestartResult{Converged: true, ConvergedSeconds: 40, PodsRunning: total, LeasesRenewed: cfg.Nodes, ContainerRestarts: 1},
	}
	statuses := func(ts []Target) string {
		var s []string
		for _, t := range ts {
			s = append(s, t.Status)
		}
		return strings.Join(s, ",")
	}
	quick := QuickConfig()
	for _, tc := range []struct {
		name string
		cfg  Config
		res  *Result
		want string
	}{
		{"met", cfg, good, "met,met,met,met"},
		{"missed", cfg, bad, "MISSED,MISSED,MISSED,MISSED"},
		{"quick", quick, bad, "n/a,n/a,n/a,MISSED"},
	} {
		if got := statuses(evaluate(tc.cfg, tc.res)); got != tc.want {
			t.Errorf("evaluate(%s) = %s, want %s", tc.name, got, tc.want)
		}
	}
}
