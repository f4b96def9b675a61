package eviction

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/outpost-mesh/outpost/internal/wait"
)

type podList []PodUsage

func (p podList) ActivePods(context.Context) ([]PodUsage, error) { return p, nil }

type countingGC struct {
	mu    sync.Mutex
	calls int
}

func (g *countingGC) DeleteUnusedImages(context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.calls++
	return nil
}

func TestMonitor(t *testing.T) {
	cfg := DefaultConfig()
	// 50 MiB available of 1 GiB: under memory.available<100Mi.
	cfg.ProcDir = fakeProc(t, "MemTotal: 1048576 kB\nMemFree: 40960 kB\nInactive(file): 10240 kB\n")
	cfg.DataDir = t.TempDir()
	// The memory threshold alone: the test's disk is as full as it is.
	cfg.Thresholds = cfg.Thresholds[:1]
	cfg.Housekeeping = 20 * time.Millisecond
	gc := &countingGC{}
	cfg.ImageGC = gc
	rounds := make(chan Snapshot, 100)
	cfg.OnRound = func(s Snapshot) {
		select {
		case rounds <- s:
		default:
		}
	}
	m, err := New(cfg, podList{usage(pod("be", "", ""), 30), usage(pod("g", "", "cpu=1,memory=100Mi"), 90)})
	if err != nil {
		t.Fatal(err)
	}
	if s := m.Latest(); s.Decision.Evict != nil || s.Readings.Signals != nil {
		t.Errorf("Latest before Run = %+v, want the zero snapshot", s)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- m.Run(ctx) }()

	var s Snapshot
	select {
	case s = <-rounds:
	case <-time.After(10 * time.Second):
		t.Fatal("no round within 10s")
	}
	if s.ReadErr != nil {
		t.Errorf("ReadErr = %v", s.ReadErr)
	}
	if s.Decision.Evict == nil || s.Decision.Evict.Pod.Name != "be" {
		t.Fatalf("Decision = %+v, want be evicted", s.Decision)
	}
	if len(s.Decision.Pressure) != 1 || s.Decision.Pressure[0] != corev1.NodeMemoryPressure {
		t.Errorf("Pressure = %v", s.Decision.Pressure)
	}
	// More rounds follow, on the ticker.
	wait.For(t, 10*time.Second, "three rounds", func() (bool, string) { return len(rounds) >= 2, "fewer" })
	if got := m.Latest(); got.Decision.Evict == nil {
		t.Errorf("Latest = %+v, want the eviction", got)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Run = %v, want context.Canceled", err)
	}
	gc.mu.Lock()
	if gc.calls != 0 {
		t.Errorf("image GC called %d times for memory pressure", gc.calls)
	}
	gc.mu.Unlock()

	// A broken /proc is reported, not fatal.
	os.Remove(filepath.Join(cfg.ProcDir, "meminfo"))
	m2, err := New(cfg, podList{})
	if err != nil {
		t.Fatal(err)
	}
	m2.round(context.Background(), time.Now())
	if s := m2.Latest(); s.ReadErr == nil || len(s.Decision.Pressure) != 0 {
		t.Errorf("without meminfo: %+v, want a read error and no pressure", s)
	}
	bad := cfg
	bad.MaxPods = 0
	if _, err := New(bad, podList{}); err == nil {
		t.Error("New with an invalid config succeeded")
	}
}

// recordingEvictor records what the Monitor has it do, in order; a pod is
// cleaned up after cleanedAfter calls of PodCleanedUp.
type recordingEvictor struct {
	mu           sync.Mutex
	calls        []string
	evicted      []*Eviction
	cleanedAfter int
	fail         error
}

func (e *recordingEvictor) NodeEvent(ev Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.calls = append(e.calls, "node "+ev.Type+" "+ev.Reason+": "+ev.Message)
}

func (e *recordingEvictor) Evict(_ context.Context, ev *Eviction) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.calls = append(e.calls, "evict "+ev.Pod.Name)
	e.evicted = append(e.evicted, ev)
	return e.fail
}

func (e *recordingEvictor) PodCleanedUp(uid string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.calls = append(e.calls, "cleaned? "+uid)
	e.cleanedAfter--
	return e.cleanedAfter < 0
}

func (e *recordingEvictor) DeleteUnusedImages(context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.calls = append(e.calls, "delete unused images")
	return nil
}

func (e *recordingEvictor) log() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return strings.Join(e.calls, "\n")
}

func TestMonitorEvicts(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ProcDir = fakeProc(t, "MemTotal: 1048576 kB\nMemFree: 40960 kB\nInactive(file): 10240 kB\n")
	cfg.DataDir = t.TempDir()
	cfg.Thresholds = cfg.Thresholds[:1] // memory.available<100Mi; the disk is as full as it is
	ev := &recordingEvictor{cleanedAfter: 2}
	cfg.Evictor, cfg.ImageGC = ev, ev
	var onRound []Snapshot
	cfg.OnRound = func(s Snapshot) {
		if ev.log() != "node Warning EvictionThresholdMet: Attempting to reclaim memory" {
			t.Errorf("OnRound called after the eviction: %q", ev.log())
		}
		onRound = append(onRound, s)
	}
	m, err := New(cfg, podList{usage(pod("g", "cpu=1,memory=100Mi", "cpu=1,memory=100Mi"), 90), usage(pod("be", "", ""), 30)})
	if err != nil {
		t.Fatal(err)
	}
	if conds, ok := m.Pressure(); ok || len(conds) != 0 {
		t.Errorf("Pressure before a round = %v, %v; want none, false", conds, ok)
	}
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		m.round(t.Context(), time.Now())
		// Cleaned up at the third look, a second apart.
		if d := time.Since(start); d != 2*podCleanupPoll {
			t.Errorf("round waited %v for the evicted pod, want %v", d, 2*podCleanupPoll)
		}
	})
	want := "node Warning EvictionThresholdMet: Attempting to reclaim memory\nevict be\ncleaned? uid-be\ncleaned? uid-be\ncleaned? uid-be"
	if got := ev.log(); got != want {
		t.Errorf("the Monitor did:\n%s\nwant:\n%s", got, want)
	}
	e := ev.evicted[0]
	if e.GracePeriod != 0 || e.Resource != "memory" || !strings.HasPrefix(e.Message, "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. ") {
		t.Errorf("eviction = %+v", e)
	}
	if len(onRound) != 1 || onRound[0].Decision.Evict == nil {
		t.Errorf("OnRound got %+v", onRound)
	}
	if conds, ok := m.Pressure(); !ok || len(conds) != 1 || conds[0] != corev1.NodeMemoryPressure {
		t.Errorf("Pressure = %v, %v; want MemoryPressure", conds, ok)
	}

	// An eviction that fails is not waited for.
	ev2 := &recordingEvictor{fail: errors.New("no such pod")}
	cfg.Evictor, cfg.OnRound = ev2, nil
	m, err = New(cfg, podList{usage(pod("be", "", ""), 30)})
	if err != nil {
		t.Fatal(err)
	}
	m.round(context.Background(), time.Now())
	if got, want := ev2.log(), "node Warning EvictionThresholdMet: Attempting to reclaim memory\nevict be"; got != want {
		t.Errorf("the Monitor did:\n%s\nwant:\n%s", got, want)
	}

	// Disk pressure with images on nodefs: unused images go first, and
	// the pod is evicted after if the threshold is still met (any disk
	// is under nodefs.available<100%).
	cfg.ProcDir = fakeProc(t, "MemTotal: 1048576 kB\nMemFree: 900000 kB\nInactive(file): 10240 kB\n")
	full, err := ParseThreshold("nodefs.available<100%")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Thresholds = []Threshold{full}
	ev3 := &recordingEvictor{}
	cfg.Evictor, cfg.ImageGC = ev3, ev3
	m, err = New(cfg, podList{usage(pod("be", "", ""), 30)})
	if err != nil {
		t.Fatal(err)
	}
	m.round(context.Background(), time.Now())
	want = "node Warning EvictionThresholdMet: Attempting to reclaim ephemeral-storage\ndelete unused images\nevict be\ncleaned? uid-be"
	if got := ev3.log(); got != want {
		t.Errorf("the Monitor did:\n%s\nwant:\n%s", got, want)
	}
	if conds, _ := m.Pressure(); len(conds) != 1 || conds[0] != corev1.NodeDiskPressure {
		t.Errorf("Pressure = %v, want DiskPressure", conds)
	}
}

func TestDirUsage(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "a", "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 64<<10)
	for _, f := range []string{"a/one", "a/b/two"} {
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Link(filepath.Join(dir, "a/one"), filepath.Join(dir, "a/link")); err != nil {
		t.Fatal(err)
	}
	b, n, err := DirUsage(dir)
	if err != nil {
		t.Fatal(err)
	}
	// dir, a, b, one, two; the hard link counted once.
	if n != 5 || b < 2*int64(len(data)) || b > 2*int64(len(data))+1<<20 {
		t.Errorf("DirUsage = %d bytes, %d inodes; want two files of 64KiB and five inodes", b, n)
	}
	if b, n, err := DirUsage(filepath.Join(dir, "missing")); b != 0 || n != 0 || err != nil {
		t.Errorf("DirUsage(missing) = %d, %d, %v; want nothing", b, n, err)
	}
}
