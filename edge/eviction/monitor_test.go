package eviction

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
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
