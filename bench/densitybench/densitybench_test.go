package densitybench

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/api/types/task"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/outpost-mesh/outpost/bench/report"
)

func TestValidate(t *testing.T) {
	ok := DefaultConfig()
	ok.Binary, ok.EdgeBinary = "/bin/outpost", "/bin/outpost-edge"
	if err := ok.Validate(); err != nil {
		t.Fatalf("DefaultConfig with binaries: %v", err)
	}
	q := QuickConfig()
	q.Binary, q.EdgeBinary = ok.Binary, ok.EdgeBinary
	if err := q.Validate(); err != nil {
		t.Fatalf("QuickConfig with binaries: %v", err)
	}
	for name, mod := range map[string]func(*Config){
		"no binary":       func(c *Config) { c.Binary = "" },
		"no edge binary":  func(c *Config) { c.EdgeBinary = "" },
		"descending pods": func(c *Config) { c.Pods = []int{50, 10} },
		"too many pods":   func(c *Config) { c.Pods = []int{300} },
		"zero pods":       func(c *Config) { c.Pods = []int{0} },
		"bad mode":        func(c *Config) { c.Modes = []string{"pod", "cluster"} },
		"mode twice":      func(c *Config) { c.Modes = []string{"pod", "pod"} },
		"no modes":        func(c *Config) { c.Modes = nil },
		"bad OCI runtime": func(c *Config) { c.OCIRuntimes = []string{"runc", "kata"} },
		"runtime twice":   func(c *Config) { c.OCIRuntimes = []string{"crun", "crun"} },
		"no OCI runtime":  func(c *Config) { c.OCIRuntimes = nil },
		"batch 0":         func(c *Config) { c.Batch = 0 },
		"bad reboot mode": func(c *Config) { c.RebootMode = "x" },
		"nothing to do":   func(c *Config) { c.Pods, c.RebootPods = nil, 0 },
		"no timeout":      func(c *Config) { c.BatchTimeout = 0 },
	} {
		c := ok
		mod(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("Validate(%s) = nil, want an error", name)
		}
	}
	// The reboot alone needs no mode.
	c := ok
	c.Pods, c.Modes = nil, nil
	if err := c.Validate(); err != nil {
		t.Errorf("Validate(reboot only) = %v", err)
	}
}

func TestPerPodOverhead(t *testing.T) {
	idle := Memory{AgentPSS: 30e6, ContainerdPSS: 40e6}
	for _, tc := range []struct {
		at   Memory
		n    int
		want int64
	}{
		// agent +10 MB, containerd +5 MB, shims 85 MB over 100 pods.
		{Memory{AgentPSS: 40e6, ContainerdPSS: 45e6, ShimPSS: 85e6}, 100, 1e6},
		// The agent shrank by 2 MB; one shim of 12 MB.
		{Memory{AgentPSS: 28e6, ContainerdPSS: 40e6, ShimPSS: 12e6}, 10, 1e6},
		// Less than idle in all: negative.
		{Memory{AgentPSS: 20e6, ContainerdPSS: 40e6}, 10, -1e6},
		{Memory{AgentPSS: 40e6}, 0, 0},
	} {
		if got := PerPodOverhead(idle, tc.at, tc.n); got != tc.want {
			t.Errorf("PerPodOverhead(%+v, %+v, %d) = %d, want %d", idle, tc.at, tc.n, got, tc.want)
		}
	}
	if got := (Memory{AgentPSS: 1, ContainerdPSS: 2, ShimPSS: 4, AgentRSS: 100}).TotalPSS(); got != 7 {
		t.Errorf("TotalPSS = %d, want 7", got)
	}
}

func TestRunningPods(t *testing.T) {
	want := map[string]string{"u1": "10.42.0.2", "u2": "10.42.0.3", "u3": "10.42.0.4"}
	containerPod := map[string]string{"c1": "u1", "c1-old": "u1", "c2": "u2", "c3": "u3", "other": "u9"}
	ts := []*task.Process{
		{ContainerID: "c1-old", Status: task.Status_STOPPED},
		{ContainerID: "c1", Status: task.Status_RUNNING},
		{ID: "c2", Status: task.Status_RUNNING}, // containerd 1.6 lists the container's ID as ID
		{ContainerID: "c3", Status: task.Status_CREATED},
		{ContainerID: "other", Status: task.Status_RUNNING},
		{ContainerID: "unknown", Status: task.Status_RUNNING},
	}
	got := runningPods(want, containerPod, ts)
	if len(got) != 2 || !got["u1"] || !got["u2"] {
		t.Errorf("runningPods = %v, want u1 and u2", got)
	}
}

func readyPod(name, uid, ip string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(uid)},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, Conditions: []corev1.PodCondition{
			{Type: corev1.PodReady, Status: corev1.ConditionTrue},
		}},
	}
}

func TestTracker(t *testing.T) {
	tr := newTracker()
	t0 := time.Unix(1000, 0)
	tr.creating("a", t0)
	tr.creating("b", t0.Add(time.Second))
	notReady := readyPod("a", "ua", "")
	notReady.Status.Conditions[0].Status = corev1.ConditionFalse
	tr.seen(notReady, t0.Add(100*time.Millisecond))
	tr.seen(readyPod("a", "ua", "10.42.0.2"), t0.Add(300*time.Millisecond))
	tr.seen(readyPod("a", "ua", "10.42.0.2"), t0.Add(900*time.Millisecond)) // seen again: the first counts
	tr.seen(readyPod("x", "ux", "10.42.0.9"), t0)                           // not created by the run
	go tr.seen(readyPod("b", "ub", "10.42.0.3"), t0.Add(1500*time.Millisecond))
	got, err := tr.waitReady(t.Context(), []string{"a", "b"}, time.Minute)
	if err != nil || len(got) != 2 || got[0] != 300*time.Millisecond || got[1] != 500*time.Millisecond {
		t.Fatalf("waitReady = %v, %v; want [300ms 500ms]", got, err)
	}
	if ips := tr.podIPs(); len(ips) != 2 || ips["ua"] != "10.42.0.2" || ips["ub"] != "10.42.0.3" {
		t.Errorf("podIPs = %v", ips)
	}
	if _, err := tr.waitReady(t.Context(), []string{"a", "never"}, time.Millisecond); err == nil || !strings.Contains(err.Error(), "1 of 2") {
		t.Errorf("waitReady with a pod never Ready = %v, want 1 of 2", err)
	}
}

func TestNewPod(t *testing.T) {
	p := newPod("density", "n1", 7)
	c := p.Spec.Containers[0]
	if p.Name != "density-007" || p.Spec.NodeName != "n1" || c.Image != image || c.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("newPod = %s on %s, image %s %s", p.Name, p.Spec.NodeName, c.Image, c.ImagePullPolicy)
	}
	if c.Resources.Requests.Cpu().MilliValue()*maxPods > 1000 {
		t.Errorf("%d pods request more than a CPU", maxPods)
	}
}

// sampleResult is a full run's result, as Run would return it.
func sampleResult() *Result {
	idle := Memory{AgentRSS: 30e6, AgentAnon: 12e6, AgentPSS: 29e6, ContainerdRSS: 40e6, ContainerdPSS: 39e6}
	step := func(n int, shims int, shimPSS uint64, p99 time.Duration) Step {
		m := idle
		m.AgentPSS += uint64(n) * 100e3
		m.Shims, m.ShimChildren, m.ShimPSS = shims, n, shimPSS
		return Step{Pods: n, Start: report.Latency{Count: n, P50: p99 / 2, P99: p99}, Memory: m, PerPodOverhead: PerPodOverhead(idle, m, n)}
	}
	return &Result{
		Modes: []ModeResult{
			{Mode: ModePod, Idle: idle, Steps: []Step{step(10, 10, 30e6, 800*time.Millisecond), step(200, 200, 600e6, 900*time.Millisecond)},
				Start: report.Latency{Count: 200, P99: 900 * time.Millisecond}},
			{Mode: ModeNode, Idle: idle, Steps: []Step{step(10, 1, 12e6, 2*time.Second), step(200, 1, 40e6, 2*time.Second)},
				Start: report.Latency{Count: 200, P99: 2 * time.Second}},
		},
		Reboot: &Reboot{Mode: ModePod, Pods: 100, Recovered: true, RecoverySeconds: 12.5, ContainerdSeconds: 1, FirstPodSeconds: 2, Running: 100, SameIP: 100},
		Load:   []report.LoadAvg{{Phase: "start", Load: [3]float64{1, 2, 3}}},
	}
}

func TestEvaluate(t *testing.T) {
	cfg := DefaultConfig()
	got := map[string]report.Target{}
	for _, tg := range evaluate(cfg, sampleResult()) {
		got[tg.Goal] = tg
	}
	for goal, want := range map[string]string{
		"agent idle RSS < 35.0 MB (shim per pod)":        report.TargetMet,
		"agent idle anon < 20.0 MB (shim per node)":      report.TargetMet,
		"per-pod overhead < 4.00 MB PSS (shim per pod)":  report.TargetMet,    // 3.1 MB
		"per-pod overhead < 1.00 MB PSS (shim per node)": report.TargetMet,    // 0.3 MB
		"pod start p99 < 1.00s (shim per pod)":           report.TargetMet,    // 900ms
		"pod start p99 < 1.00s (shim per node)":          report.TargetMissed, // 2s
		"reboot recovery of 100 pods < 10.0s":            report.TargetMissed, // 12.5s
		"agent idle RSS < 35.0 MB (shim per node)":       report.TargetMet,
		"agent idle anon < 20.0 MB (shim per pod)":       report.TargetMet,
	} {
		if tg, ok := got[goal]; !ok || tg.Status != want {
			t.Errorf("target %q = %+v, want %s (all: %v)", goal, tg, want, got)
		}
	}
	if d := got["per-pod overhead < 4.00 MB PSS (shim per pod)"].Detail; d != "3.10 MB at 200 pods" {
		t.Errorf("per-pod detail %q", d)
	}

	// A run short of the targets' workload: the per-pod and reboot
	// targets are n/a, saying why.
	res := sampleResult()
	res.Modes[0].Steps = res.Modes[0].Steps[:1]
	res.Reboot.Pods = 20
	for _, tg := range evaluate(cfg, res) {
		if strings.HasPrefix(tg.Goal, "per-pod overhead < 4.00") || strings.HasPrefix(tg.Goal, "reboot") {
			if tg.Status != report.TargetNA || !strings.Contains(tg.Detail, "the target is for") {
				t.Errorf("short run: %+v, want n/a with the reason", tg)
			}
		}
	}
	// A reboot that did not recover misses.
	res.Reboot = &Reboot{Pods: 100, Running: 40, Mismatch: "40 of 100 pods running"}
	for _, tg := range evaluate(cfg, res) {
		if strings.HasPrefix(tg.Goal, "reboot") && (tg.Status != report.TargetMissed || !strings.Contains(tg.Detail, "40 of 100")) {
			t.Errorf("unrecovered reboot: %+v", tg)
		}
	}
}

func TestRender(t *testing.T) {
	rep := &Report{Machine: report.Machine{CPU: "test cpu", CPUs: 2}, Config: DefaultConfig(), Result: sampleResult(), References: references}
	rep.Targets = evaluate(rep.Config, rep.Result)
	var b strings.Builder
	if err := rep.Render(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"shim per pod   0 (idle)", "shim per node", "200", "3.10 MB", "900ms",
		"12.50s", "reboot recovery of 100 pods < 10.0s", "MISSED", "KubeEdge EdgeCore idles at 89.5 MB",
		"K3s documents 275 MB", "OpenYurt took 49.9 s", "test cpu", "start          1.00 2.00 3.00",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("Render lacks %q:\n%s", want, out)
		}
	}

	// The JSON round-trips.
	path := filepath.Join(t.TempDir(), "density.json")
	if err := report.WriteJSON(path, rep); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(mustRead(t, path), &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Result.Modes) != 2 || back.Result.Modes[1].Steps[1].Memory.ShimPSS != 40e6 || back.Result.Reboot.RecoverySeconds != 12.5 {
		t.Errorf("JSON round trip: %+v", back.Result)
	}

	// The chart: four parts per mode, a point per step and idle.
	c := rep.Chart()
	if len(c.Series) != 8 {
		t.Fatalf("Chart has %d series, want 8", len(c.Series))
	}
	for _, s := range c.Series {
		if len(s.Points) != 3 || s.Points[0].X != 0 || s.Points[2].X != 200 {
			t.Errorf("series %s: points %v", s.Name, s.Points)
		}
		if s.Dashed != strings.HasSuffix(s.Name, "shim per node") {
			t.Errorf("series %s dashed=%v", s.Name, s.Dashed)
		}
	}
	total := c.Series[3]
	if total.Name != "total, shim per pod" || total.Points[2].Y != float64(rep.Result.Modes[0].Steps[1].Memory.TotalPSS()) {
		t.Errorf("total series %+v", total)
	}
	if svg := c.SVG(); !strings.Contains(svg, "<polyline") {
		t.Errorf("chart SVG has no lines")
	}

	// crun beside runc: its rows, targets and series say so, in colors
	// of their own; where it was left out, the report says why.
	crun := rep.Result.Modes[0]
	crun.OCIRuntime = RuntimeCrun
	rep.Result.Modes = append(rep.Result.Modes, crun)
	rep.Config.CrunSkipped = "no crun here"
	rep.Targets = evaluate(rep.Config, rep.Result)
	b.Reset()
	if err := rep.Render(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"shim per pod, crun  0 (idle)", "pod start p99 < 1.00s (shim per pod, crun)", "crun not measured: no crun here"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("Render with crun lacks %q:\n%s", want, b.String())
		}
	}
	c = rep.Chart()
	if got := c.Series[len(c.Series)-1]; got.Name != "total, shim per pod, crun" || got.Color == c.Series[3].Color {
		t.Errorf("crun's total series %q, color %q (runc's %q)", got.Name, got.Color, c.Series[3].Color)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSetCPU(t *testing.T) {
	var m Memory
	m.setCPU(cpuTimes{agent: 1, containerd: 2, shims: 3}, cpuTimes{agent: 1.5, containerd: 2.25, shims: 2}, 5*time.Second)
	if m.AgentCPU != 0.1 || m.ContainerdCPU != 0.05 || m.ShimCPU != 0 {
		t.Errorf("setCPU = %v %v %v, want 0.1 0.05 0 (shims that went count none)", m.AgentCPU, m.ContainerdCPU, m.ShimCPU)
	}
	m = Memory{}
	m.setCPU(cpuTimes{}, cpuTimes{agent: 1}, 0)
	if m.AgentCPU != 0 {
		t.Errorf("setCPU over no time = %v", m.AgentCPU)
	}
}
