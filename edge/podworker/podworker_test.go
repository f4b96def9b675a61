package podworker_test

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/edge/pods"
	"github.com/outpost-mesh/outpost/edge/podworker"
	"github.com/outpost-mesh/outpost/edge/runtime"
	"github.com/outpost-mesh/outpost/edge/runtime/fake"
	"github.com/outpost-mesh/outpost/edge/status"
	"github.com/outpost-mesh/outpost/internal/wait"
)

type source []*corev1.Pod

func (s source) Desired() (podworker.Desired, bool) { return podworker.Desired{Pods: s}, true }

// memStore is an in-memory podworker.Store, for this test alone.
type memStore struct {
	mu sync.Mutex
	m  map[string][]byte
}

func (s *memStore) PutLocal(k string, v []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[k] = v
	return nil
}

func (s *memStore) DeleteLocal(k string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, k)
	return nil
}

// rounds is a podworker.Status that counts the rounds it is handed.
type rounds struct {
	mu sync.Mutex
	n  int
}

func (r *rounds) Observe(status.Round) { r.mu.Lock(); r.n++; r.mu.Unlock() }
func (r *rounds) count() int           { r.mu.Lock(); defer r.mu.Unlock(); return r.n }
func (r *rounds) Terminated(context.Context, *corev1.Pod, pods.Record) error {
	return nil
}
func (r *rounds) Forget(string) {}

type noEvents struct{}

func (noEvents) Pod(runtime.PodRef, *corev1.Pod, string, string, string, string) {}

// TestEventsDriveRounds: with a runtime that reports its changes, a
// container that exits is seen, and restarted, at once, not at the next
// relist (an hour away here).
func TestEventsDriveRounds(t *testing.T) {
	rt := fake.New(fake.Config{})
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "u1"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox"}}},
	}
	st := &rounds{}
	cfg := podworker.DefaultConfig()
	cfg.Runtime, cfg.Source, cfg.Store, cfg.Status, cfg.Events = rt, source{pod}, &memStore{m: map[string][]byte{}}, st, noEvents{}
	cfg.EventedRelist = time.Hour
	w, err := podworker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	}()
	attempt := func() (int, bool) {
		l, _ := rt.List(context.Background())
		for _, p := range l {
			if c := p.Container("main"); c != nil && c.State == runtime.StateRunning {
				return c.Attempt, true
			}
		}
		return -1, false
	}
	wait.For(t, 10*time.Second, "main running", func() (bool, string) {
		a, ok := attempt()
		return ok && a == 0, "not yet"
	})
	if err := rt.Exit("u1", "main", 0); err != nil {
		t.Fatal(err)
	}
	// The plan restarts it once its back-off (none for a first exit)
	// allows; only the exit's event can have started that round.
	wait.For(t, 20*time.Second, "main restarted", func() (bool, string) {
		a, ok := attempt()
		return ok && a == 1, "not yet"
	})
	if n := st.count(); n < 3 {
		t.Errorf("%d rounds, want at least 3 (start, exit, restart)", n)
	}
}
