package podworker_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

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

// runWorkers runs workers of cfg until the test ends, and fails it unless
// their Run returns nil then. It returns them, to kick.
func runWorkers(t *testing.T, cfg podworker.Config) *podworker.Workers {
	t.Helper()
	w, err := podworker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	bg := wait.Start(t, 10*time.Second, "workers Run", w.Run)
	t.Cleanup(func() {
		if err := bg.Stop(); err != nil {
			t.Errorf("Run = %v", err)
		}
	})
	return w
}

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
	runWorkers(t, cfg)
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
	// The start's round, and the exit's, which the worker's end may join.
	if n := st.count(); n < 2 {
		t.Errorf("%d rounds, want at least 2 (start; exit and restart)", n)
	}
}

// staleListRuntime is the fake runtime whose first start is made while a
// List is under way: the List's listing is taken before the start and
// returned after the start's worker recorded it, as a listing of a real
// runtime can be.
type staleListRuntime struct {
	*fake.Runtime
	recorded <-chan struct{} // a record was saved

	mu       sync.Mutex
	starts   []int         // the attempts asked for
	starting chan struct{} // closed once the first start waits
	done     chan struct{} // closed to end the first start
}

func (r *staleListRuntime) StartContainer(ctx context.Context, pod runtime.PodRef, spec runtime.ContainerSpec, attempt int) error {
	r.mu.Lock()
	first := len(r.starts) == 0
	r.starts = append(r.starts, attempt)
	done := r.done
	r.mu.Unlock()
	if !first {
		return r.Runtime.StartContainer(ctx, pod, spec, attempt)
	}
	if err := r.Runtime.StartContainer(ctx, pod, spec, attempt); err != nil {
		return err
	}
	close(r.starting)
	<-done
	return nil
}

func (r *staleListRuntime) List(ctx context.Context) ([]runtime.PodStatus, error) {
	select {
	case <-r.starting:
	default:
		return r.Runtime.List(ctx)
	}
	r.mu.Lock()
	done := r.done
	r.done = nil
	r.mu.Unlock()
	if done == nil {
		return r.Runtime.List(ctx)
	}
	// The listing from before the start, returned once the start's
	// worker has recorded it.
	l, err := r.Runtime.List(ctx)
	for i := range l {
		l[i].Containers = nil
	}
	close(done)
	select {
	case <-r.recorded:
	case <-time.After(10 * time.Second):
	}
	return l, err
}

func (r *staleListRuntime) attempts() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]int(nil), r.starts...)
}

// signalStore is a memStore that signals each record saved.
type signalStore struct {
	memStore
	saved chan struct{}
}

func (s *signalStore) PutLocal(k string, v []byte) error {
	err := s.memStore.PutLocal(k, v)
	select {
	case s.saved <- struct{}{}:
	default:
	}
	return err
}

// TestStaleListing: a round whose listing of the runtime was taken while
// a pod's actions ran does not decide for that pod with the records its
// worker wrote since, which would start again the container it had just
// started; the next round, with a listing from after, sees it running.
func TestStaleListing(t *testing.T) {
	store := &signalStore{memStore: memStore{m: map[string][]byte{}}, saved: make(chan struct{}, 1)}
	rt := &staleListRuntime{Runtime: fake.New(fake.Config{}), recorded: store.saved, starting: make(chan struct{}), done: make(chan struct{})}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "u1"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox"}}},
	}
	st := &rounds{}
	cfg := podworker.DefaultConfig()
	cfg.Runtime, cfg.Source, cfg.Store, cfg.Status, cfg.Events = rt, source{pod}, store, st, noEvents{}
	cfg.EventedRelist = 10 * time.Millisecond // rounds while the start runs
	runWorkers(t, cfg)
	wait.For(t, 10*time.Second, "the stale listing made and ten rounds after it", func() (bool, string) {
		rt.mu.Lock()
		stale := rt.done == nil
		rt.mu.Unlock()
		return stale && st.count() > 10, fmt.Sprintf("%d rounds", st.count())
	})
	from := st.count()
	wait.For(t, 10*time.Second, "ten more rounds", func() (bool, string) { return st.count() >= from+10, "" })
	if got := rt.attempts(); len(got) != 1 || got[0] != 0 {
		t.Errorf("attempts started %v, want [0]: a start made again from a stale listing", got)
	}
}

// refreshSource is a Source whose pods and generation the test changes.
type refreshSource struct {
	mu   sync.Mutex
	pods []*corev1.Pod
	gen  uint64
}

func (s *refreshSource) Desired() (podworker.Desired, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return podworker.Desired{Pods: s.pods, Generation: s.gen}, true
}

func (s *refreshSource) change(fn func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fn()
}

// refreshCounter is a Sandbox that readies nothing and counts each pod's
// refreshes. A fake.
type refreshCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (*refreshCounter) Container(context.Context, *corev1.Pod, *corev1.Container, int, *runtime.ContainerSpec) error {
	return nil
}
func (*refreshCounter) IP(string) string                               { return "" }
func (*refreshCounter) Release(context.Context, runtime.PodRef) error  { return nil }
func (*refreshCounter) Sweep(context.Context, func(string) bool) error { return nil }
func (c *refreshCounter) Refresh(_ context.Context, pod *corev1.Pod) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[string(pod.UID)]++
	return nil
}

func (c *refreshCounter) counts() (a, b int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n["a"], c.n["b"]
}

// TestRefresh: every pod's volumes are refreshed when the objects they
// read change (the Generation), a pod's alone when its own object does,
// and none at the rounds between: a node of 200 pods used to refresh them
// all at every round, since every status the hub sends back is a change
// of the view.
func TestRefresh(t *testing.T) {
	pod := func(uid, rv string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: uid, Namespace: "default", UID: types.UID(uid), ResourceVersion: rv},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox"}}},
		}
	}
	src := &refreshSource{pods: []*corev1.Pod{pod("a", "1"), pod("b", "1")}, gen: 1}
	sb := &refreshCounter{n: map[string]int{}}
	st := &rounds{}
	cfg := podworker.DefaultConfig()
	cfg.Runtime, cfg.Source, cfg.Store, cfg.Status, cfg.Events = fake.New(fake.Config{}), src, &memStore{m: map[string][]byte{}}, st, noEvents{}
	cfg.Sandbox = sb
	cfg.EventedRelist = time.Hour
	w := runWorkers(t, cfg)
	want := func(what string, wa, wb int) {
		t.Helper()
		wait.For(t, 10*time.Second, what, func() (bool, string) {
			a, b := sb.counts()
			return a == wa && b == wb, fmt.Sprintf("refreshes a %d, b %d; want %d, %d", a, b, wa, wb)
		})
		// Rounds with nothing new refresh nothing.
		from := st.count()
		wait.For(t, 10*time.Second, "three more rounds", func() (bool, string) {
			w.Kick()
			return st.count() >= from+3, fmt.Sprintf("%d rounds", st.count()-from)
		})
		if a, b := sb.counts(); a != wa || b != wb {
			t.Fatalf("after %s and three rounds: refreshes a %d, b %d; want %d, %d", what, a, b, wa, wb)
		}
	}
	want("the first round's refresh of both", 1, 1)
	src.change(func() { src.pods = []*corev1.Pod{pod("a", "2"), pod("b", "1")} })
	w.Kick()
	want("a's refresh after its object changed", 2, 1)
	src.change(func() { src.gen++ })
	w.Kick()
	want("both refreshed after a ConfigMap changed", 3, 2)
}
