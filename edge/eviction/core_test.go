package eviction

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/outpost-mesh/outpost/edge/cgroups"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func memReadings(availMi int64) Readings {
	return Readings{Signals: map[Signal]Observation{
		SignalMemoryAvailable:  {Available: mi(availMi), Capacity: mi(4096)},
		SignalNodeFsAvailable:  {Available: 50 << 30, Capacity: 100 << 30},
		SignalNodeFsInodesFree: {Available: 900, Capacity: 1000},
		SignalPIDAvailable:     {Available: 30000, Capacity: 32768},
	}}
}

func usage(p *corev1.Pod, wsMi int64) PodUsage {
	return PodUsage{Pod: p, HasStats: true, MemoryWorkingSet: mi(wsMi),
		Containers: []ContainerUsage{{Name: "c", MemoryWorkingSet: mi(wsMi)}}}
}

func names(ps []PodUsage) string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Pod.Name)
	}
	return strings.Join(out, " ")
}

func TestRankMemory(t *testing.T) {
	for _, tc := range []struct {
		name string
		pods []PodUsage
		want string
	}{
		{"best effort before burstable under request", []PodUsage{
			usage(pod("burst", "memory=500Mi", ""), 100), usage(pod("be", "", ""), 10)}, "be burst"},
		{"guaranteed at its request last", []PodUsage{
			usage(pod("g", "", "cpu=1,memory=200Mi"), 200), usage(pod("be", "", ""), 1), usage(pod("b", "memory=100Mi", ""), 150)}, "b be g"},
		{"among exceeders, lower priority first", []PodUsage{
			usage(withPriority(pod("hi", "", ""), 1000), 500), usage(withPriority(pod("lo", "", ""), 10), 10)}, "lo hi"},
		{"priority over usage, exceeding first", []PodUsage{
			usage(withPriority(pod("under", "memory=1Gi", ""), 0), 10), usage(withPriority(pod("over", "memory=10Mi", ""), 1000), 20)}, "over under"},
		{"same priority: more above request first", []PodUsage{
			usage(pod("a", "memory=100Mi", ""), 150), usage(pod("b", "memory=10Mi", ""), 100), usage(pod("c", "", ""), 60)}, "b c a"},
		{"no stats first", []PodUsage{
			usage(pod("a", "", ""), 900), {Pod: pod("nostats", "memory=1Gi", "")}}, "nostats a"},
		{"limits stand for requests", []PodUsage{
			usage(pod("static", "", "memory=300Mi"), 200), usage(pod("b", "memory=100Mi", ""), 150)}, "b static"},
	} {
		if got := names(Rank(SignalMemoryAvailable, tc.pods, false)); got != tc.want {
			t.Errorf("%s: Rank = %s, want %s", tc.name, got, tc.want)
		}
	}
}

func TestRankDiskAndPIDs(t *testing.T) {
	d := func(p *corev1.Pod, rootfs, logs, vols int64) PodUsage {
		return PodUsage{Pod: p, HasStats: true, VolumeBytes: vols, VolumeInodes: vols,
			Containers: []ContainerUsage{{Name: "c", RootfsBytes: rootfs, LogsBytes: logs, RootfsInodes: rootfs, LogsInodes: logs}}}
	}
	pods := []PodUsage{
		d(pod("layers", "", ""), 900, 0, 0),
		d(pod("logs", "", ""), 0, 500, 0),
		d(pod("vols", "", ""), 0, 0, 700),
		d(pod("asked", "ephemeral-storage=2000", ""), 1000, 0, 0),
	}
	for _, tc := range []struct {
		signal    Signal
		dedicated bool
		want      string
	}{
		{SignalNodeFsAvailable, false, "layers vols logs asked"},
		{SignalImageFsAvailable, false, "layers vols logs asked"},
		{SignalNodeFsAvailable, true, "vols logs layers asked"},
		{SignalImageFsAvailable, true, "layers logs vols asked"},
		{SignalNodeFsInodesFree, true, "vols logs layers asked"},
	} {
		if got := names(Rank(tc.signal, pods, tc.dedicated)); got != tc.want {
			t.Errorf("Rank(%s, dedicated %v) = %s, want %s", tc.signal, tc.dedicated, got, tc.want)
		}
	}
	pp := []PodUsage{
		{Pod: withPriority(pod("hi", "", ""), 100), HasStats: true, Processes: 900},
		{Pod: pod("few", "", ""), HasStats: true, Processes: 3},
		{Pod: pod("many", "", ""), HasStats: true, Processes: 300},
	}
	if got := names(Rank(SignalPIDAvailable, pp, false)); got != "many few hi" {
		t.Errorf("Rank(pids) = %s, want many few hi", got)
	}
}

func TestCoreMemoryEviction(t *testing.T) {
	cfg := DefaultConfig()
	c := NewCore(&cfg)
	be := usage(pod("be", "", ""), 300)
	b := usage(pod("b", "memory=100Mi", ""), 200)
	g := usage(pod("g", "", "cpu=1,memory=1Gi"), 800)
	pods := []PodUsage{g, b, be}

	d := c.Observe(memReadings(2000), pods, t0)
	if len(d.Pressure) != 0 || d.Evict != nil || len(d.Met) != 0 {
		t.Fatalf("plenty of memory: %+v", d)
	}
	d = c.Observe(memReadings(80), pods, t0.Add(10*time.Second))
	if got := d.Pressure; len(got) != 1 || got[0] != corev1.NodeMemoryPressure {
		t.Errorf("Pressure = %v, want [MemoryPressure]", got)
	}
	if d.Starved != corev1.ResourceMemory || d.NodeEvent == nil || d.NodeEvent.Message != "Attempting to reclaim memory" || d.NodeEvent.Reason != "EvictionThresholdMet" {
		t.Errorf("Starved %q, node event %+v", d.Starved, d.NodeEvent)
	}
	if d.ReclaimImages {
		t.Error("memory pressure asks for image GC")
	}
	e := d.Evict
	if e == nil || e.Pod.Name != "be" {
		t.Fatalf("Evict = %+v, want the best-effort pod", e)
	}
	wantMsg := "The node was low on resource: memory. Threshold quantity: 100Mi, available: 80Mi. " +
		"Container c was using 300Mi, request is 0, has larger consumption of memory. "
	if e.Message != wantMsg || e.Event.Message != wantMsg || e.Condition.Message != wantMsg {
		t.Errorf("message = %q, want %q", e.Message, wantMsg)
	}
	if e.Event.Type != "Warning" || e.Event.Reason != "Evicted" || e.GracePeriod != 0 || e.Signal != SignalMemoryAvailable {
		t.Errorf("eviction = %+v", e)
	}
	if e.Condition.Type != corev1.DisruptionTarget || e.Condition.Reason != "TerminationByKubelet" || e.Condition.Status != corev1.ConditionTrue {
		t.Errorf("condition = %+v", e.Condition)
	}
	if a := e.Event.Annotations; a["offending_containers"] != "c" || a["offending_containers_usage"] != "300Mi" || a["starved_resource"] != "memory" {
		t.Errorf("annotations = %v", a)
	}

	// One pod a round: once be is gone, the burstable pod over its request.
	d = c.Observe(memReadings(90), []PodUsage{g, b}, t0.Add(20*time.Second))
	if d.Evict == nil || d.Evict.Pod.Name != "b" {
		t.Fatalf("second round Evict = %+v, want b", d.Evict)
	}
	if !strings.Contains(d.Evict.Message, "Container c was using 200Mi, request is 100Mi") {
		t.Errorf("message = %q", d.Evict.Message)
	}

	// Relieved: no eviction, but the condition holds for the transition
	// period after the threshold was last met, then clears.
	for _, tc := range []struct {
		after time.Duration
		want  bool
	}{{30 * time.Second, true}, {4 * time.Minute, true}, {5*time.Minute + 19*time.Second, true}, {5*time.Minute + 20*time.Second, false}} {
		d = c.Observe(memReadings(2000), []PodUsage{g}, t0.Add(tc.after))
		if d.Evict != nil {
			t.Errorf("at +%v evicted %s with plenty of memory", tc.after, d.Evict.Pod.Name)
		}
		if got := len(d.Pressure) == 1; got != tc.want {
			t.Errorf("at +%v Pressure = %v, want under pressure %v", tc.after, d.Pressure, tc.want)
		}
	}
}

func TestCoreFlapping(t *testing.T) {
	cfg := DefaultConfig()
	c := NewCore(&cfg)
	pods := []PodUsage{usage(pod("be", "", ""), 1)}
	// Memory dips under the threshold every other round for ten minutes:
	// the condition stays true throughout, never flapping.
	for i := 0; i < 60; i++ {
		avail := int64(2000)
		if i%2 == 0 {
			avail = 50
		}
		d := c.Observe(memReadings(avail), pods, t0.Add(time.Duration(i)*10*time.Second))
		if len(d.Pressure) != 1 {
			t.Fatalf("round %d: Pressure = %v, want MemoryPressure held", i, d.Pressure)
		}
		if (d.Evict != nil) != (i%2 == 0) {
			t.Errorf("round %d: Evict = %v", i, d.Evict)
		}
	}
}

func TestCoreSoftThreshold(t *testing.T) {
	cfg := DefaultConfig()
	v, _ := ParseValue("1Gi")
	cfg.Thresholds = []Threshold{{Signal: SignalMemoryAvailable, Value: v, GracePeriod: time.Minute}}
	cfg.MaxPodGracePeriod = 20 * time.Second
	c := NewCore(&cfg)
	grace := int64(60)
	p := pod("be", "", "")
	p.Spec.TerminationGracePeriodSeconds = &grace
	pods := []PodUsage{usage(p, 10)}

	d := c.Observe(memReadings(500), pods, t0)
	if len(d.Pressure) != 1 || d.Evict != nil {
		t.Fatalf("soft threshold just met: Pressure %v, Evict %v; want pressure, no eviction yet", d.Pressure, d.Evict)
	}
	d = c.Observe(memReadings(500), pods, t0.Add(59*time.Second))
	if d.Evict != nil {
		t.Fatal("evicted before the grace period")
	}
	d = c.Observe(memReadings(500), pods, t0.Add(time.Minute))
	if d.Evict == nil || d.Evict.GracePeriod != 20*time.Second {
		t.Fatalf("after the grace period Evict = %+v, want one with the 20s cap", d.Evict)
	}
	// Recovery resets the clock.
	c.Observe(memReadings(2000), pods, t0.Add(70*time.Second))
	if d = c.Observe(memReadings(500), pods, t0.Add(80*time.Second)); d.Evict != nil {
		t.Error("a fresh dip evicted at once under a soft threshold")
	}
}

func TestCoreMinReclaim(t *testing.T) {
	cfg := DefaultConfig()
	th, _ := ParseThreshold("memory.available<100Mi")
	th.MinReclaim, _ = ParseValue("400Mi")
	cfg.Thresholds = []Threshold{th}
	c := NewCore(&cfg)
	pods := []PodUsage{usage(pod("be", "", ""), 1)}
	for i, tc := range []struct {
		avail int64
		evict bool
	}{{300, false}, {50, true}, {300, true}, {499, true}, {501, false}, {300, false}} {
		d := c.Observe(memReadings(tc.avail), pods, t0.Add(time.Duration(i)*10*time.Second))
		if (d.Evict != nil) != tc.evict {
			t.Errorf("round %d, %dMi available: evict %v, want %v", i, tc.avail, d.Evict != nil, tc.evict)
		}
	}
}

func TestCoreDiskAndOrder(t *testing.T) {
	cfg := DefaultConfig()
	c := NewCore(&cfg)
	r := memReadings(2000)
	r.Signals[SignalNodeFsAvailable] = Observation{Available: 5 << 30, Capacity: 100 << 30}
	r.Signals[SignalImageFsAvailable] = Observation{Available: 5 << 30, Capacity: 100 << 30}
	pods := []PodUsage{
		{Pod: pod("small", "", ""), HasStats: true, Containers: []ContainerUsage{{Name: "c", RootfsBytes: 1 << 20}}},
		{Pod: pod("big", "", ""), HasStats: true, Containers: []ContainerUsage{{Name: "c", RootfsBytes: 3 << 30, LogsBytes: 1 << 30}}},
	}
	d := c.Observe(r, pods, t0)
	if len(d.Pressure) != 1 || d.Pressure[0] != corev1.NodeDiskPressure {
		t.Errorf("Pressure = %v, want [DiskPressure]", d.Pressure)
	}
	if d.Starved != corev1.ResourceEphemeralStorage || !d.ReclaimImages {
		t.Errorf("Starved %q, ReclaimImages %v; want ephemeral-storage and image GC first", d.Starved, d.ReclaimImages)
	}
	if d.Evict == nil || d.Evict.Pod.Name != "big" {
		t.Fatalf("Evict = %+v, want big", d.Evict)
	}
	// 10% of 100Gi through kubelet's float32 percentage.
	want := "The node was low on resource: ephemeral-storage. Threshold quantity: 10737418400, available: 5Gi. " +
		"Container c was using 4Gi, request is 0, has larger consumption of ephemeral-storage. "
	if d.Evict.Message != want {
		t.Errorf("message = %q, want %q", d.Evict.Message, want)
	}
	if !Resolved(d.Met, memReadings(2000)) {
		t.Error("Resolved = false with disk freed")
	}
	if Resolved(d.Met, r) {
		t.Error("Resolved = true with disk still short")
	}

	// Memory and disk both short: memory is reclaimed first.
	r.Signals[SignalMemoryAvailable] = Observation{Available: mi(10), Capacity: mi(4096)}
	d = c.Observe(r, append(pods, usage(pod("hog", "", ""), 3000)), t0.Add(10*time.Second))
	if len(d.Pressure) != 2 || d.Starved != corev1.ResourceMemory || d.Evict == nil || d.Evict.Pod.Name != "hog" {
		t.Errorf("both short: Pressure %v, Starved %q, Evict %v; want memory reclaimed from hog", d.Pressure, d.Starved, d.Evict)
	}

	// With a dedicated imagefs, nodefs pressure is not the images' to relieve.
	c = NewCore(&cfg)
	r = memReadings(2000)
	r.DedicatedImageFs = true
	r.Signals[SignalNodeFsAvailable] = Observation{Available: 5 << 30, Capacity: 100 << 30}
	if d = c.Observe(r, pods, t0); d.ReclaimImages {
		t.Error("nodefs pressure with a dedicated imagefs asks for image GC")
	}
	r.Signals[SignalNodeFsInodesFree] = Observation{Available: 10, Capacity: 1000}
	if d = c.Observe(r, pods, t0.Add(time.Second)); d.Starved != corev1.ResourceEphemeralStorage && d.Starved != ResourceInodes {
		t.Errorf("inodes short: Starved %q", d.Starved)
	}
}

func TestCoreSparesCritical(t *testing.T) {
	cfg := DefaultConfig()
	c := NewCore(&cfg)
	static := pod("static", "", "")
	static.Annotations = map[string]string{cgroups.AnnotationConfigSource: "file"}
	critical := withPriority(pod("critical", "", ""), cgroups.SystemCriticalPriority)
	d := c.Observe(memReadings(10), []PodUsage{usage(static, 3000), usage(critical, 2000)}, t0)
	if d.Evict != nil {
		t.Errorf("evicted critical pod %s", d.Evict.Pod.Name)
	}
	if len(d.Pressure) != 1 || d.Starved != corev1.ResourceMemory {
		t.Errorf("Pressure %v, Starved %q", d.Pressure, d.Starved)
	}
	d = c.Observe(memReadings(10), []PodUsage{usage(static, 3000), usage(pod("g", "", "cpu=1,memory=4Gi"), 10)}, t0.Add(10*time.Second))
	if d.Evict == nil || d.Evict.Pod.Name != "g" {
		t.Errorf("Evict = %v, want the one non-critical pod", d.Evict)
	}
	// No pods at all: pressure, nothing to evict.
	if d = c.Observe(memReadings(10), nil, t0.Add(20*time.Second)); d.Evict != nil || len(d.Pressure) != 1 {
		t.Errorf("no pods: %+v", d)
	}
}

func TestCorePIDPressure(t *testing.T) {
	cfg := DefaultConfig()
	th, _ := ParseThreshold("pid.available<1000")
	cfg.Thresholds = append(cfg.Thresholds, th)
	c := NewCore(&cfg)
	r := memReadings(2000)
	r.Signals[SignalPIDAvailable] = Observation{Available: 500, Capacity: 32768}
	d := c.Observe(r, []PodUsage{{Pod: pod("a", "", ""), HasStats: true, Processes: 5}, {Pod: pod("fork", "", ""), HasStats: true, Processes: 20000}}, t0)
	if len(d.Pressure) != 1 || d.Pressure[0] != corev1.NodePIDPressure || d.Evict == nil || d.Evict.Pod.Name != "fork" {
		t.Fatalf("PID pressure: %+v", d)
	}
	if want := "The node was low on resource: pids. Threshold quantity: 1k, available: 500. "; d.Evict.Message != want {
		t.Errorf("message = %q, want %q", d.Evict.Message, want)
	}
}

func TestNodeConditions(t *testing.T) {
	got := NodeConditions([]corev1.NodeConditionType{corev1.NodeDiskPressure}, nil, t0)
	want := []struct{ typ, status, reason, msg string }{
		{"MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"},
		{"DiskPressure", "True", "KubeletHasDiskPressure", "kubelet has disk pressure"},
		{"PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"},
	}
	if len(got) != 3 {
		t.Fatalf("NodeConditions = %v", got)
	}
	for i, w := range want {
		g := got[i]
		if string(g.Type) != w.typ || string(g.Status) != w.status || g.Reason != w.reason || g.Message != w.msg || !g.LastTransitionTime.Time.Equal(t0) {
			t.Errorf("condition %d = %+v, want %+v", i, g, w)
		}
	}
	later := t0.Add(time.Minute)
	next := NodeConditions([]corev1.NodeConditionType{corev1.NodeMemoryPressure}, got, later)
	if !next[0].LastTransitionTime.Time.Equal(later) || next[0].Reason != "KubeletHasInsufficientMemory" || next[0].Message != "kubelet has insufficient memory available" {
		t.Errorf("memory condition after turning true = %+v", next[0])
	}
	if !next[1].LastTransitionTime.Time.Equal(later) || !next[2].LastTransitionTime.Time.Equal(t0) || !next[2].LastHeartbeatTime.Time.Equal(later) {
		t.Errorf("transition times: disk %v (changed), pid %v (kept), heartbeat %v", next[1].LastTransitionTime, next[2].LastTransitionTime, next[2].LastHeartbeatTime)
	}
}
