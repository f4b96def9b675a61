package storebench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/outpost-mesh/outpost/bench/report"
)

// workerEnv makes the test binary act as a worker for TestExecRunner.
const workerEnv = "STOREBENCH_TEST_WORKER"

func TestMain(m *testing.M) {
	if spec := os.Getenv(workerEnv); spec != "" {
		os.Exit(testWorker(spec))
	}
	code := m.Run()
	if code == 0 {
		// Every goroutine a phase starts, the store's and etcd's included,
		// must have exited when Run returns.
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "leaked goroutines: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// testWorker runs "backend/phase/dir" with tinyConfig and prints the
// result as JSON, like `outpost bench store worker --json`.
func testWorker(spec string) int {
	parts := strings.SplitN(spec, "/", 3)
	cfg := tinyConfig(parts[2])
	res, err := Run(context.Background(), cfg, Backend(parts[0]), Phase(parts[1]))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// tinyConfig measures little, so tests are quick; its numbers mean nothing.
func tinyConfig(dir string) Config {
	c := QuickConfig()
	c.Dir = dir
	c.Writers = []int{1, 4, 16}
	c.Duration = 200 * time.Millisecond
	c.Warmup = 50 * time.Millisecond
	c.Watchers = 20
	c.WatchDuration = 200 * time.Millisecond
	c.Keys = 500
	c.KeyWriters = 16
	c.Settle = 400 * time.Millisecond
	return c
}

func TestRunBadger(t *testing.T) {
	dir := t.TempDir()
	cfg := tinyConfig(dir)
	res, err := Run(t.Context(), cfg, Badger)
	if err != nil {
		t.Fatalf("Run(badger) = %v", err)
	}
	checkResult(t, cfg, Badger, res)
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("Run left %d entries in %s, want its data dirs removed", len(left), dir)
	}
}

// TestRunEtcd runs the etcd backend against a server embedded as the
// command runs it, with fsync on.
func TestRunEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three etcd servers with fsync on; skipped in -short")
	}
	dir := t.TempDir()
	cfg := tinyConfig(dir)
	res, err := Run(t.Context(), cfg, Etcd)
	if err != nil {
		t.Fatalf("Run(etcd) = %v", err)
	}
	checkResult(t, cfg, Etcd, res)
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("Run left %d entries in %s, want its data dirs removed", len(left), dir)
	}
}

// checkResult checks that every phase filled res with plausible numbers,
// never asserting timings.
func checkResult(t *testing.T, cfg Config, b Backend, res *Result) {
	t.Helper()
	if res.Backend != b || res.Setup == "" {
		t.Errorf("Result = %q, setup %q", res.Backend, res.Setup)
	}
	if len(res.Writes) != len(cfg.Writers) {
		t.Fatalf("len(Writes) = %d, want %d", len(res.Writes), len(cfg.Writers))
	}
	for i, w := range res.Writes {
		if w.Writers != cfg.Writers[i] || w.Writes < 1 || w.PerSec <= 0 || w.Seconds != cfg.Duration.Seconds() ||
			w.Latency.Count != w.Writes || w.Latency.P50 <= 0 || w.Latency.P99 < w.Latency.P50 || w.Latency.Max < w.Latency.P99 {
			t.Errorf("Writes[%d] = %+v, not plausible", i, w)
		}
	}

	w := res.Watch
	if w == nil {
		t.Fatal("Watch = nil")
	}
	wantWrites := cfg.WatchRate * int(cfg.WatchDuration/time.Millisecond) / 1000
	if w.Watchers != cfg.Watchers || w.Writes != wantWrites || w.Expected != cfg.Watchers*wantWrites {
		t.Errorf("Watch = %+v, want %d watchers of %d writes", w, cfg.Watchers, wantWrites)
	}
	if w.Delivered != w.Expected || w.Missing != 0 || w.Extra != 0 || w.OutOfOrder != 0 || len(w.Errors) != 0 {
		t.Errorf("Watch delivered %d of %d (missing %d, extra %d, out of order %d, errors %q)",
			w.Delivered, w.Expected, w.Missing, w.Extra, w.OutOfOrder, w.Errors)
	}
	if w.Latency.Count != w.Delivered || w.Latency.P50 <= 0 || w.Latency.P99 < w.Latency.P50 {
		t.Errorf("Watch.Latency = %+v, not plausible", w.Latency)
	}

	m := res.Memory
	if m == nil {
		t.Fatal("Memory = nil")
	}
	if m.Keys != cfg.Keys || m.WriteSeconds <= 0 || m.BaselineRSSBytes == 0 || m.RSSBytes == 0 ||
		m.HWMBytes < m.RSSBytes || m.RSSAnonBytes == 0 || m.GoHeapBytes == 0 ||
		m.DiskBytes == 0 || m.DiskApparentBytes == 0 ||
		m.SettledRSSBytes == 0 || m.SettleSeconds <= 0 || m.SettleSeconds > 2*cfg.Settle.Seconds()+1 {
		t.Errorf("Memory = %+v, not plausible", m)
	}
	// The data written (500 keys of 1 KiB) must be on disk.
	if want := uint64(cfg.Keys * cfg.ValueSize); m.DiskApparentBytes < want {
		t.Errorf("Memory.DiskApparentBytes = %d, want at least the %d bytes written", m.DiskApparentBytes, want)
	}
}

func TestExecRunner(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	run := ExecRunner(func(Backend, Phase) []string { return []string{exe} })
	// The worker inherits the environment, which says what it measures.
	t.Setenv(workerEnv, string(Badger)+"/"+string(PhaseMemory)+"/"+dir)
	res, err := run(t.Context(), Badger, PhaseMemory)
	if err != nil {
		t.Fatalf("run(badger, memory) = %v", err)
	}
	if res.Backend != Badger || res.Memory == nil || res.Memory.Keys != 500 || res.Memory.RSSBytes == 0 || res.Writes != nil {
		t.Errorf("run(badger, memory) = %+v, want a memory result only", res)
	}

	// A worker that fails reports its stderr.
	t.Setenv(workerEnv, "nosuch/memory/"+dir)
	if _, err := run(t.Context(), Badger, PhaseMemory); err == nil || !strings.Contains(err.Error(), `unknown backend "nosuch"`) {
		t.Errorf("run with a failing worker = %v, want its stderr in the error", err)
	}
}

func TestReportTable(t *testing.T) {
	cfg := DefaultConfig()
	lat := func(p50, p99 time.Duration) report.Latency {
		return report.Latency{Count: 1000, P50: p50, P90: p99, P99: p99, Max: p99}
	}
	badger := &Result{Backend: Badger, Setup: setup(Badger),
		Writes: []WriteResult{
			{Writers: 1, Writes: 2500, Seconds: 5, PerSec: 500, Latency: lat(2*time.Millisecond, 4*time.Millisecond)},
			{Writers: 16, Writes: 40000, Seconds: 5, PerSec: 8000, Latency: lat(2*time.Millisecond, 5*time.Millisecond)},
			{Writers: 64, Writes: 100000, Seconds: 5, PerSec: 20000, Latency: lat(3*time.Millisecond, 9*time.Millisecond)},
		},
		Watch: &WatchResult{Watchers: 100, Writes: 2500, Expected: 250000, Delivered: 250000,
			Latency: lat(2500*time.Microsecond, 6*time.Millisecond)},
		Memory: &MemoryResult{Keys: 100000, RSSBytes: 120_000_000, RSSFileBytes: 40_000_000, SettledRSSBytes: 100_000_000,
			SettleSeconds: 12, HWMBytes: 180_000_000, DiskBytes: 130_000_000},
	}
	etcd := &Result{Backend: Etcd, Setup: setup(Etcd),
		Writes: []WriteResult{
			{Writers: 1, Writes: 1000, Seconds: 5, PerSec: 200, Latency: lat(5*time.Millisecond, 8*time.Millisecond)},
			{Writers: 16, Writes: 25000, Seconds: 5, PerSec: 5000, Latency: lat(3*time.Millisecond, 7*time.Millisecond)},
			{Writers: 64, Writes: 50000, Seconds: 5, PerSec: 10000, Latency: lat(6*time.Millisecond, 12*time.Millisecond)},
		},
		Watch: &WatchResult{Watchers: 100, Writes: 2500, Expected: 250000, Delivered: 249900, Missing: 100,
			Latency: lat(5*time.Millisecond, 10*time.Millisecond)},
		Memory: &MemoryResult{Keys: 100000, RSSBytes: 240_000_000, RSSFileBytes: 30_000_000, SettledRSSBytes: 200_000_000,
			SettleSeconds: 6, HWMBytes: 300_000_000, DiskBytes: 260_000_000},
	}
	rep := NewReport(cfg, badger, etcd)

	want := strings.Join([]string{
		"metric                              badger             etcd  badger/etcd  target",
		"-------------------------  ---------------  ---------------  -----------  ----------------------------------------",
		"writes/s, 1 writer                   500/s            200/s        2.50x",
		"writes/s, 16 writers               8.00k/s          5.00k/s        1.60x",
		"writes/s, 64 writers               20.0k/s          10.0k/s        2.00x  badger >= etcd at 64 writers: met",
		"write p50, 64 writers               3.00ms           6.00ms        0.50x",
		"write p99, 64 writers               9.00ms           12.0ms        0.75x",
		"watch p50, 100 watchers             2.50ms           5.00ms        0.50x",
		"watch p99, 100 watchers             6.00ms           10.0ms        0.60x",
		"watch deliveries           250,000/250,000  249,900/250,000            -  every watcher gets every event: MISSED",
		"RSS at 100,000 keys                 120 MB           240 MB        0.50x  badger RSS < 150 MB at 100,000 keys: met",
		"  of which file-backed             40.0 MB          30.0 MB        1.33x",
		"RSS settled (idle <= 30s)           100 MB           200 MB        0.50x",
		"peak RSS (VmHWM)                    180 MB           300 MB        0.60x",
		"disk at 100,000 keys                130 MB           260 MB        0.50x",
		"",
	}, "\n")
	if got := rep.Table().String(); got != want {
		t.Errorf("Table() =\n%s\nwant\n%s", got, want)
	}

	var b strings.Builder
	if err := rep.Render(&b); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{
		"durable writes by concurrency",
		"     64          20.0k/s  3.00ms  9.00ms        10.0k/s  6.00ms  12.0ms",
		"over loopback gRPC",
		`target "every watcher gets every event" MISSED: etcd: 249,900 of 250,000 delivered`,
		"machine\ncpu:",
	} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("Render() lacks %q:\n%s", s, b.String())
		}
	}
}

func TestReportTargetsNotApplicable(t *testing.T) {
	cfg := QuickConfig()
	rep := NewReport(cfg, &Result{Backend: Badger, Memory: &MemoryResult{Keys: cfg.Keys, RSSBytes: 1}})
	for _, tg := range rep.Targets {
		if tg.Status != TargetNA {
			t.Errorf("target %q = %s (%s), want %s for a quick badger-only run", tg.Goal, tg.Status, tg.Detail, TargetNA)
		}
	}
	// A table with a backend missing renders "-" in its cells.
	s := rep.Table().String()
	squeeze := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	for _, want := range []string{
		"writes/s, 64 writers - - - badger >= etcd at 64 writers: n/a (not measured at 64 writers)",
		"RSS at 10,000 keys 1 B - - badger RSS < 150 MB at 100,000 keys: n/a (measured at 10,000 keys)",
	} {
		if !strings.Contains(squeeze(s), want) {
			t.Errorf("Table() lacks %q:\n%s", want, s)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	for _, cfg := range []Config{DefaultConfig(), QuickConfig()} {
		if err := cfg.Validate(); err != nil {
			t.Errorf("Validate(%+v) = %v", cfg, err)
		}
	}
	bad := DefaultConfig()
	bad.ValueSize = 8
	if err := bad.Validate(); err == nil {
		t.Error("Validate(ValueSize 8) = nil, want an error")
	}
	bad = DefaultConfig()
	bad.Writers = []int{1, 0}
	if err := bad.Validate(); err == nil {
		t.Error("Validate(Writers [1 0]) = nil, want an error")
	}
}
