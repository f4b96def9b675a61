package densitybench

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// image is the pods' image, imported into the node's containerd before
// any pod: no registry is ever asked.
const image = "outpost.dev/bench/busybox:1"

// podName returns the name of the i-th pod.
func podName(i int) string { return fmt.Sprintf("density-%03d", i) }

// newPod returns the i-th pod, bound to node: one busybox sleeping, with
// requests small enough for 250 of them on any node.
func newPod(namespace, node string, i int) *corev1.Pod {
	zero := int64(0)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: podName(i), Namespace: namespace, Labels: map[string]string{"app": "density"}},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			TerminationGracePeriodSeconds: &zero,
			Containers: []corev1.Container{{
				Name:            "sleep",
				Image:           image,
				ImagePullPolicy: corev1.PullIfNotPresent,
				Command:         []string{"sleep", "3600"},
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU:    resource.MustParse("1m"),
					corev1.ResourceMemory: resource.MustParse("1Mi"),
				}},
			}},
		},
	}
}

// runningAndReady reports whether p is Running with its Ready condition
// true.
func runningAndReady(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// tracker times pods from their Create call to a watch seeing them
// Running and Ready. All its methods are safe for concurrent use.
type tracker struct {
	mu      sync.Mutex
	created map[string]time.Time     // by name: when its Create was called
	ready   map[string]time.Duration // by name: from created to seen Ready
	ips     map[string]string        // by name: the pod IP seen Ready, by UID below
	uids    map[string]string        // by name
	changed chan struct{}            // closed and replaced on every new Ready
}

func newTracker() *tracker {
	return &tracker{created: map[string]time.Time{}, ready: map[string]time.Duration{}, ips: map[string]string{}, uids: map[string]string{}, changed: make(chan struct{})}
}

// creating records that name's Create is called now.
func (t *tracker) creating(name string, now time.Time) {
	t.mu.Lock()
	t.created[name] = now
	t.mu.Unlock()
}

// seen records p as the watch saw it at now.
func (t *tracker) seen(p *corev1.Pod, now time.Time) {
	if !runningAndReady(p) {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	start, ok := t.created[p.Name]
	if _, done := t.ready[p.Name]; !ok || done {
		return
	}
	t.ready[p.Name] = now.Sub(start)
	t.ips[p.Name], t.uids[p.Name] = p.Status.PodIP, string(p.UID)
	close(t.changed)
	t.changed = make(chan struct{})
}

// waitReady waits until every pod of names was seen Ready, and returns
// their times in the order of names.
func (t *tracker) waitReady(ctx context.Context, names []string, timeout time.Duration) ([]time.Duration, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		t.mu.Lock()
		out := make([]time.Duration, 0, len(names))
		for _, n := range names {
			if d, ok := t.ready[n]; ok {
				out = append(out, d)
			}
		}
		changed := t.changed
		t.mu.Unlock()
		if len(out) == len(names) {
			return out, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-deadline.C:
			return nil, fmt.Errorf("%d of %d pods Running and Ready within %v", len(out), len(names), timeout)
		}
	}
}

// podIPs returns the IP of every pod seen Ready, by UID.
func (t *tracker) podIPs() map[string]string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]string, len(t.uids))
	for name, uid := range t.uids {
		out[uid] = t.ips[name]
	}
	return out
}

// watchPods feeds t every pod event of namespace from rv on until ctx
// ends, watching again from the last revision seen whenever the watch
// closes.
func watchPods(ctx context.Context, c kubernetes.Interface, namespace, rv string, t *tracker) {
	for ctx.Err() == nil {
		w, err := c.CoreV1().Pods(namespace).Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
			continue
		}
		for ev := range w.ResultChan() {
			now := time.Now()
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			if ev.Type != watch.Error {
				rv = p.ResourceVersion
			}
			if ev.Type == watch.Added || ev.Type == watch.Modified {
				t.seen(p, now)
			}
		}
		w.Stop()
	}
}

// createdAt returns when name's Create was called.
func (t *tracker) createdAt(name string) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.created[name]
}

// createBatch creates pods from..to-1 at once, bound to node, and waits
// for them to run; it returns their names and each one's time from Create
// to Ready.
func createBatch(ctx context.Context, c kubernetes.Interface, t *tracker, namespace, node string, from, to int, timeout time.Duration) ([]string, []time.Duration, error) {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	names := make([]string, 0, to-from)
	for i := from; i < to; i++ {
		p := newPod(namespace, node, i)
		names = append(names, p.Name)
		wg.Go(func() {
			t.creating(p.Name, time.Now())
			if _, err := c.CoreV1().Pods(namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
				mu.Lock()
				if first == nil {
					first = fmt.Errorf("create pod %s: %w", p.Name, err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if first != nil {
		return nil, nil, first
	}
	d, err := t.waitReady(ctx, names, timeout)
	return names, d, err
}
