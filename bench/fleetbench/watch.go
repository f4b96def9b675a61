package fleetbench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/outpost-mesh/outpost/bench/report"
)

// clock measures time on the monotonic clock from a fixed base, so that
// instants fit in an atomic integer.
type clock struct{ base time.Time }

func (c clock) now() time.Duration { return time.Since(c.base) }

// slots records, for each of a fixed set of named objects, instants on a
// clock: when the benchmark started it (a Create call, an agent's start),
// when that call returned, if it is one, and when a watch first saw it in
// the state waited for. Instants are clock.now values, never 0 once set.
// Starters and the watch write it and waiters read it concurrently.
type slots struct {
	index    map[string]int // by name; read-only once built
	names    []string
	started  []atomic.Int64
	returned []atomic.Int64
	reached  []atomic.Int64
	count    atomic.Int64 // slots reached
}

func newSlots(names []string) *slots {
	s := &slots{
		index:    make(map[string]int, len(names)),
		names:    names,
		started:  make([]atomic.Int64, len(names)),
		returned: make([]atomic.Int64, len(names)),
		reached:  make([]atomic.Int64, len(names)),
	}
	for i, n := range names {
		s.index[n] = i
	}
	return s
}

// start records that slot i was started at t.
func (s *slots) start(i int, t time.Duration) { s.started[i].Store(int64(t)) }

// ret records that the call that started slot i returned at t.
func (s *slots) ret(i int, t time.Duration) { s.returned[i].Store(int64(max(t, 1))) }

// reach records that the object named name was seen in the state waited
// for at t, unless it was before; names of no slot are ignored.
func (s *slots) reach(name string, t time.Duration) {
	i, ok := s.index[name]
	if !ok {
		return
	}
	if s.reached[i].CompareAndSwap(0, int64(max(t, 1))) {
		s.count.Add(1)
	}
}

// latencies returns reached-started of the slots in [from, to) that were
// both started and reached, and the latest reached instant among them.
func (s *slots) latencies(from, to int) (lat []time.Duration, last time.Duration) {
	for i := from; i < to; i++ {
		st, re := s.started[i].Load(), s.reached[i].Load()
		if re == 0 {
			continue
		}
		last = max(last, time.Duration(re))
		if st != 0 {
			lat = append(lat, time.Duration(re-st))
		}
	}
	return lat, last
}

// sinceReturn returns reached-returned of the slots in [from, to) that
// were both.
func (s *slots) sinceReturn(from, to int) []time.Duration {
	var lat []time.Duration
	for i := from; i < to; i++ {
		if ret, re := s.returned[i].Load(), s.reached[i].Load(); ret != 0 && re != 0 {
			lat = append(lat, time.Duration(re-ret))
		}
	}
	return lat
}

// reachedIn counts the slots in [from, to) that were reached.
func (s *slots) reachedIn(from, to int) int {
	n := 0
	for i := from; i < to; i++ {
		if s.reached[i].Load() != 0 {
			n++
		}
	}
	return n
}

// listWatch lists and watches one kind of object.
type listWatch struct {
	list  func(ctx context.Context, opts metav1.ListOptions) ([]runtime.Object, string, error)
	watch func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// watcher keeps a list and watch of one kind open until its context ends,
// across hub restarts, and hands every object it sees to seen, from its one
// goroutine. Read restarts and errs once run has returned.
type watcher struct {
	lw   listWatch
	seen func(obj runtime.Object, at time.Duration)
	clk  clock

	rv       string
	restarts int
	errs     report.ErrorSet
}

// retryDelay is the pause before listing or watching again after a
// failure, such as while the hub restarts.
const retryDelay = 100 * time.Millisecond

// startWatcher lists, opens the watch and returns; run reads it until ctx
// ends. Everything listed is handed to seen first.
func startWatcher(ctx context.Context, lw listWatch, clk clock, seen func(runtime.Object, time.Duration)) (*watcher, watch.Interface, error) {
	w := &watcher{lw: lw, seen: seen, clk: clk}
	if err := w.relist(ctx); err != nil {
		return nil, nil, err
	}
	wi, err := w.open(ctx)
	if err != nil {
		return nil, nil, err
	}
	return w, wi, nil
}

func (w *watcher) relist(ctx context.Context) error {
	objs, rv, err := w.lw.list(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list: %w", err)
	}
	at := w.clk.now()
	for _, o := range objs {
		w.seen(o, at)
	}
	w.rv = rv
	return nil
}

func (w *watcher) open(ctx context.Context) (watch.Interface, error) {
	wi, err := w.lw.watch(ctx, metav1.ListOptions{ResourceVersion: w.rv, AllowWatchBookmarks: true})
	if err != nil {
		return nil, fmt.Errorf("watch: %w", err)
	}
	return wi, nil
}

// run reads wi, then reopens the watch from the last resourceVersion seen
// whenever it ends (relisting when that is too old), until ctx ends.
func (w *watcher) run(ctx context.Context, wi watch.Interface) {
	for {
		gone := w.consume(ctx, wi)
		wi.Stop()
		if ctx.Err() != nil {
			return
		}
		w.restarts++
		for {
			var err error
			if gone {
				if err = w.relist(ctx); err == nil {
					gone = false
				}
			}
			if err == nil {
				if wi, err = w.open(ctx); err == nil {
					break
				}
				gone = apierrors.IsResourceExpired(err) || apierrors.IsGone(err)
			}
			if ctx.Err() != nil {
				return
			}
			w.errs.Add(err.Error())
			t := time.NewTimer(retryDelay)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
	}
}

// consume reads wi until it ends; gone reports that it ended because its
// resourceVersion is too old to resume from.
func (w *watcher) consume(ctx context.Context, wi watch.Interface) (gone bool) {
	for ev := range wi.ResultChan() {
		if ev.Type == watch.Error {
			if ctx.Err() != nil {
				return false // client-go's report of the cancellation
			}
			err := apierrors.FromObject(ev.Object)
			if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				return true
			}
			w.errs.Add("watch: " + err.Error())
			continue
		}
		if m, err := meta.Accessor(ev.Object); err == nil && m.GetResourceVersion() != "" {
			w.rv = m.GetResourceVersion()
		}
		if ev.Type == watch.Bookmark || ev.Type == watch.Deleted {
			continue
		}
		w.seen(ev.Object, w.clk.now())
	}
	return false
}

// watches runs the benchmark's watchers; stop ends them and waits.
type watches struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	ws     []*watcher
}

// startWatches opens a watch on the nodes, recording in nodes when each is
// first Ready, and one on the namespace's pods, recording in pods when each
// is first Running. They run until stop.
func startWatches(ctx context.Context, c *client, namespace string, clk clock, nodes, pods *slots) (*watches, error) {
	ctx, cancel := context.WithCancel(ctx)
	ws := &watches{cancel: cancel}
	nodeLW := listWatch{
		list: func(ctx context.Context, opts metav1.ListOptions) ([]runtime.Object, string, error) {
			l, err := c.CoreV1().Nodes().List(ctx, opts)
			if err != nil {
				return nil, "", err
			}
			objs := make([]runtime.Object, len(l.Items))
			for i := range l.Items {
				objs[i] = &l.Items[i]
			}
			return objs, l.ResourceVersion, nil
		},
		watch: c.CoreV1().Nodes().Watch,
	}
	podLW := listWatch{
		list: func(ctx context.Context, opts metav1.ListOptions) ([]runtime.Object, string, error) {
			l, err := c.CoreV1().Pods(namespace).List(ctx, opts)
			if err != nil {
				return nil, "", err
			}
			objs := make([]runtime.Object, len(l.Items))
			for i := range l.Items {
				objs[i] = &l.Items[i]
			}
			return objs, l.ResourceVersion, nil
		},
		watch: c.CoreV1().Pods(namespace).Watch,
	}
	for _, x := range []struct {
		what string
		lw   listWatch
		seen func(runtime.Object, time.Duration)
	}{
		{"nodes", nodeLW, func(o runtime.Object, at time.Duration) {
			if n, ok := o.(*corev1.Node); ok && nodeReady(n) {
				nodes.reach(n.Name, at)
			}
		}},
		{"pods", podLW, func(o runtime.Object, at time.Duration) {
			if p, ok := o.(*corev1.Pod); ok && p.Status.Phase == corev1.PodRunning {
				pods.reach(p.Name, at)
			}
		}},
	} {
		w, wi, err := startWatcher(ctx, x.lw, clk, x.seen)
		if err != nil {
			ws.stop()
			return nil, fmt.Errorf("%s: %w", x.what, err)
		}
		ws.ws = append(ws.ws, w)
		ws.wg.Go(func() { w.run(ctx, wi) })
	}
	return ws, nil
}

// stop ends the watches and waits for them; it may be called more than
// once.
func (ws *watches) stop() {
	ws.cancel()
	ws.wg.Wait()
}

// summary returns the watches' restarts and errors; call it after stop.
func (ws *watches) summary() (restarts int, errs []string) {
	var all report.ErrorSet
	for _, w := range ws.ws {
		restarts += w.restarts
		all.Merge(w.errs)
	}
	return restarts, all.List()
}

// nodeReady reports whether n has condition Ready=True.
func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
