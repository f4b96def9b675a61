package densitybench

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outpost-mesh/outpost/internal/netnstest"
)

// TestQuickRun runs the quick benchmark end to end, real containerd and
// runc, in a network namespace of its own; set OUTPOST_BENCH_DENSITY=1 to
// run it (a minute or two: too heavy for every test run). It builds
// outpost and outpost-edge first.
func TestQuickRun(t *testing.T) {
	if os.Getenv("OUTPOST_BENCH_DENSITY") == "" {
		t.Skip("set OUTPOST_BENCH_DENSITY=1 to run the density benchmark")
	}
	if os.Geteuid() != 0 {
		t.Skip(ErrNotRoot)
	}
	if !netnstest.Enter(t) {
		return
	}
	bin := t.TempDir()
	// The Makefile's GOTAGS, as `make build` builds them.
	build := exec.Command("go", "build", "-tags=grpcnotrace", "-o", bin+"/", "github.com/outpost-mesh/outpost/cmd/outpost", "github.com/outpost-mesh/outpost/cmd/outpost-edge")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the binaries: %v\n%s", err, out)
	}
	cfg := QuickConfig()
	cfg.Binary, cfg.EdgeBinary = filepath.Join(bin, "outpost"), filepath.Join(bin, "outpost-edge")
	if err := Check(cfg); err != nil {
		t.Skip(err)
	}
	var progress strings.Builder
	rep, err := Run(t.Context(), cfg, &progress)
	t.Logf("progress:\n%s", progress.String())
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := rep.Render(&b); err != nil {
		t.Fatal(err)
	}
	t.Logf("report:\n%s", b.String())
	if len(rep.Result.Modes) != 2 {
		t.Fatalf("%d modes measured, want 2", len(rep.Result.Modes))
	}
	for _, m := range rep.Result.Modes {
		if m.Idle.AgentRSS == 0 || m.Idle.ContainerdRSS == 0 || m.Idle.Shims != 0 {
			t.Errorf("%s idle: %+v, want the agent and containerd measured, no shim", m.Mode, m.Idle)
		}
		last := m.Steps[len(m.Steps)-1].Memory
		wantShims := 20
		if m.Mode == ModeNode {
			wantShims = 1
		}
		if last.Shims != wantShims || last.ShimChildren != 20 || m.Start.Count != 20 {
			t.Errorf("%s at 20 pods: %d shims with %d children, %d starts; want %d shims, 20 children, 20 starts", m.Mode, last.Shims, last.ShimChildren, m.Start.Count, wantShims)
		}
	}
	if rb := rep.Result.Reboot; rb == nil || !rb.Recovered || rb.SameIP != cfg.RebootPods {
		t.Errorf("reboot: %+v, want every pod back with its IP", rb)
	}
	if len(rep.Result.Baselines) != 1 {
		t.Fatalf("%d baselines, want runc's", len(rep.Result.Baselines))
	}
	if b := rep.Result.Baselines[0]; b.Start.Count != 20 || b.Reboot == nil || b.Reboot.Containers != cfg.RebootPods || b.Reboot.Seconds <= 0 {
		t.Errorf("baseline: %+v, want 20 starts and a reboot of %d", b, cfg.RebootPods)
	}
	for _, tg := range rep.Targets {
		if tg.Status == "" {
			t.Errorf("target %q not judged", tg.Goal)
		}
	}
	// Nothing of the run is left: processes, cgroups, mounts.
	left, _ := filepath.Glob("/sys/fs/cgroup/*/outpost-density-*")
	baseline, _ := filepath.Glob("/sys/fs/cgroup/*/outpost-baseline")
	if left = append(left, baseline...); len(left) > 0 {
		t.Errorf("cgroups left: %v", left)
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(mounts), "/density") {
		t.Errorf("mounts left under the run's directory")
	}
}
