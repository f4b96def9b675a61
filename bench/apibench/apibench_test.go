package apibench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
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
		// Every watcher, client connection and process waiter Run starts
		// must have exited when it returns.
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

// TestRunQuick runs the quick workload end to end against a real hub and
// checks that the result adds up. Timings are only checked to be there.
func TestRunQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the outpost binary")
	}
	cfg := QuickConfig()
	cfg.Binary = buildOutpost(t)
	cfg.Dir = t.TempDir()
	cfg.ProfileDir = t.TempDir()
	cfg.ProfileDuration = time.Second
	ctx, cancel := context.WithTimeout(t.Context(), 45*time.Second)
	defer cancel()
	var progress bytes.Buffer
	rep, err := Run(ctx, cfg, &progress)
	if err != nil {
		t.Fatalf("Run = %v\nprogress:\n%s", err, progress.String())
	}
	t.Logf("progress:\n%s", progress.String())
	for _, name := range []string{"hub.cpu.pprof", "client.cpu.pprof"} {
		if fi, err := os.Stat(filepath.Join(cfg.ProfileDir, name)); err != nil || fi.Size() == 0 {
			t.Errorf("profile %s: %v, want a non-empty file", name, err)
		}
	}
	if left, _ := os.ReadDir(cfg.Dir); len(left) != 0 {
		t.Errorf("Run left %d entries in %s, want the hub's data dir removed", len(left), cfg.Dir)
	}

	r := rep.Result
	c := r.Creates
	if c.Created != cfg.Pods || c.Failed != 0 || len(c.Errors) != 0 {
		t.Errorf("creates: created %d, failed %d (%q), want %d created", c.Created, c.Failed, c.Errors, cfg.Pods)
	}
	if c.Seconds <= 0 || c.PerSec <= 0 || c.Latency.Count != c.Created || c.Latency.P99 <= 0 || c.Latency.P50 > c.Latency.P99 {
		t.Errorf("creates: %.3fs, %.0f/s, latency %+v: want positive timings, one sample per pod", c.Seconds, c.PerSec, c.Latency)
	}

	pages := (cfg.Pods + cfg.PageSize - 1) / cfg.PageSize
	for _, l := range []struct {
		name      string
		got       ListResult
		minPages  int
		maxPages  int
		wantItems int
	}{
		{"full list", r.List, 1, 1, cfg.Pods},
		{"paged list", r.PagedList, pages, pages + 1, cfg.Pods}, // a last, empty page is allowed
	} {
		if l.got.Error != "" || l.got.Items != l.wantItems || l.got.Pages < l.minPages || l.got.Pages > l.maxPages || l.got.Duration <= 0 {
			t.Errorf("%s = %+v, want %d items in %d..%d pages", l.name, l.got, l.wantItems, l.minPages, l.maxPages)
		}
	}

	w := r.Watch
	want := cfg.Watchers * cfg.Pods
	if w.Watchers != cfg.Watchers || w.Expected != want || w.Delivered != want || w.Missing != 0 || w.Duplicates != 0 || w.Foreign != 0 {
		t.Errorf("watch = %+v, want every one of %d watchers to see each of %d pods once", w, cfg.Watchers, cfg.Pods)
	}
	if len(w.Errors) != 0 {
		t.Errorf("watch errors: %q", w.Errors)
	}
	if w.Latency.Count != want || w.Latency.P99 <= 0 {
		t.Errorf("watch latency = %+v, want %d positive samples", w.Latency, want)
	}

	h := r.Hub
	if h.ReadySeconds <= 0 || h.Exit != "exit status 0" {
		t.Errorf("hub ready after %.2fs, exit %q: want a positive time and exit status 0", h.ReadySeconds, h.Exit)
	}
	if runtime.GOOS == "linux" {
		if h.ProcError != "" || h.StartRSSBytes == 0 || h.RSSBytes == 0 || h.HWMBytes < h.RSSBytes || h.CPUSeconds < h.StartCPUSeconds || h.CPUSeconds <= 0 {
			t.Errorf("hub = %+v, want memory and cpu read from /proc", h)
		}
	}

	// Quick runs are not held to the targets, only to correctness.
	for _, tg := range rep.Targets {
		want := TargetNA
		if tg.Goal == "every watcher sees every pod" {
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
	for _, s := range []string{"creates/s", "create p99", "watch delivery p99", "hub RSS at end", "machine"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("Render() has no %q:\n%s", s, out.String())
		}
	}
	path := filepath.Join(t.TempDir(), "api.json")
	if err := report.WriteJSON(path, rep); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil || back.Result == nil || back.Result.Creates.Created != c.Created {
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
	for name, mod := range map[string]func(*Config){
		"no binary":     func(c *Config) { c.Binary = "" },
		"no namespace":  func(c *Config) { c.Namespace = "" },
		"no pods":       func(c *Config) { c.Pods = 0 },
		"too many pods": func(c *Config) { c.Pods = maxPods + 1 },
		"no workers":    func(c *Config) { c.Workers = 0 },
		"neg watchers":  func(c *Config) { c.Watchers = -1 },
		"no page size":  func(c *Config) { c.PageSize = 0 },
		"no deadline":   func(c *Config) { c.DeliveryTimeout = 0 },
	} {
		c := ok
		mod(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("Validate(%s) = nil, want an error", name)
		}
	}
}

func TestPodIndex(t *testing.T) {
	for _, i := range []int{0, 7, 9_999, maxPods - 1} {
		if got, ok := podIndex(podName(i), maxPods); !ok || got != i {
			t.Errorf("podIndex(podName(%d)) = %d, %v", i, got, ok)
		}
	}
	for _, name := range []string{"pod-12", "pod-00000010", "other-0000001", "pod-00000x1", "pod-0000500"} {
		if i, ok := podIndex(name, 500); ok {
			t.Errorf("podIndex(%q, 500) = %d, true; want false", name, i)
		}
	}
}

func TestEvaluate(t *testing.T) {
	good := &Result{
		Creates: CreateResult{Created: 10_000, PerSec: 2000, Latency: report.Latency{P99: 50 * time.Millisecond}},
		Watch:   WatchResult{Expected: 1_000_000, Delivered: 1_000_000},
		Hub:     HubResult{RSSBytes: 200_000_000},
	}
	slow := &Result{
		Creates: CreateResult{Created: 10_000, PerSec: 1000, Latency: report.Latency{P99: 150 * time.Millisecond}},
		Watch:   WatchResult{Expected: 1_000_000, Delivered: 999_999, Missing: 1},
		Hub:     HubResult{RSSBytes: 300_000_000},
	}
	statuses := func(ts []Target) string {
		var s []string
		for _, t := range ts {
			s = append(s, t.Status)
		}
		return strings.Join(s, ",")
	}
	for _, tc := range []struct {
		name string
		cfg  Config
		res  *Result
		want string
	}{
		{"met", DefaultConfig(), good, "met,met,met,met"},
		{"missed", DefaultConfig(), slow, "MISSED,MISSED,MISSED,MISSED"},
		{"quick", QuickConfig(), slow, "n/a,n/a,n/a,MISSED"},
		{"no proc", DefaultConfig(), &Result{Creates: good.Creates, Watch: good.Watch, Hub: HubResult{ProcError: "no /proc"}}, "met,met,n/a,met"},
	} {
		if got := statuses(evaluate(tc.cfg, tc.res)); got != tc.want {
			t.Errorf("evaluate(%s) = %s, want %s", tc.name, got, tc.want)
		}
	}
}

func TestMedianReport(t *testing.T) {
	rep := func(perSec float64) *Report {
		return &Report{Result: &Result{Creates: CreateResult{PerSec: perSec}}}
	}
	one := rep(5)
	if got := medianReport([]*Report{one}); got != one || got.Runs != nil {
		t.Fatalf("one run: got %+v, want it unchanged", got)
	}
	for _, tc := range []struct {
		rates []float64
		want  int // index of the median run
	}{
		{[]float64{900, 1500, 1200}, 2},
		{[]float64{1500, 900, 1200, 1300}, 2}, // the lower median
		{[]float64{1000, 1000, 1000}, 1},
	} {
		var reps []*Report
		for _, r := range tc.rates {
			reps = append(reps, rep(r))
		}
		got := medianReport(reps)
		if got != reps[tc.want] {
			t.Errorf("rates %v: median is the run of %v/s, want run %d", tc.rates, got.Result.Creates.PerSec, tc.want)
		}
		if len(got.Runs) != len(tc.rates) {
			t.Fatalf("rates %v: %d runs summarized, want %d", tc.rates, len(got.Runs), len(tc.rates))
		}
		for i, s := range got.Runs {
			if s.CreatesPerSec != tc.rates[i] || s.Median != (i == tc.want) {
				t.Errorf("rates %v: run %d = %+v", tc.rates, i, s)
			}
		}
	}
}

// TestRunCompare runs a small workload as the admin and as RBACUser: the
// user's run creates and sees every pod through RBAC, and the comparison
// reports both.
func TestRunCompare(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the outpost binary")
	}
	cfg := QuickConfig()
	cfg.Pods, cfg.Workers, cfg.Watchers = 100, 4, 2
	cfg.Binary = buildOutpost(t)
	cfg.Dir = t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	var progress bytes.Buffer
	cmp, err := RunCompare(ctx, cfg, 1, &progress)
	if err != nil {
		t.Fatalf("RunCompare = %v\nprogress:\n%s", err, progress.String())
	}
	for _, rep := range []*Report{cmp.Admin, cmp.RBAC} {
		c, w := rep.Result.Creates, rep.Result.Watch
		if c.Created != cfg.Pods || c.Failed != 0 || w.Delivered != cfg.Pods*cfg.Watchers {
			t.Errorf("run as %s: created %d, failed %d %q, delivered %d; want %d pods seen by every watcher", rep.Config.subject(), c.Created, c.Failed, c.Errors, w.Delivered, cfg.Pods)
		}
	}
	if !cmp.RBAC.Config.RBAC || cmp.Admin.Config.RBAC || cmp.CreatesRatio <= 0 || len(cmp.Targets) != 1 {
		t.Errorf("comparison %+v: want an admin and an RBAC run, a ratio and a target", cmp)
	}
	var out bytes.Buffer
	if err := cmp.Render(&out); err != nil || !strings.Contains(out.String(), "rbac/admin") {
		t.Errorf("Render = %v:\n%s", err, out.String())
	}
}
