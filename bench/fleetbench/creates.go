package fleetbench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/bench/report"
)

// podName returns the name of pod j of node i.
func podName(i, j int) string { return fmt.Sprintf("%s-p%03d", nodeName(i), j) }

// probeName returns the name of the probe pod of node i.
func probeName(i int) string { return "probe-" + nodeName(i) }

// podNames returns the pods of the run in slot order: the workload's pods
// interleaved across nodes (pod j of every node before pod j+1 of any), so
// that every node gets work from the start, then the probes.
func podNames(cfg Config) []string {
	names := make([]string, 0, cfg.Nodes*cfg.PodsPerNode+cfg.probes())
	for j := range cfg.PodsPerNode {
		for i := range cfg.Nodes {
			names = append(names, podName(i, j))
		}
	}
	for i := range cfg.probes() {
		names = append(names, probeName(i))
	}
	return names
}

// nodeOfSlot returns the node index of pod slot k (see podNames).
func nodeOfSlot(cfg Config, k int) int {
	if w := cfg.Nodes * cfg.PodsPerNode; k >= w {
		return k - w
	}
	return k % cfg.Nodes
}

// newPod returns a minimal pod bound to node: one container, which the fake
// runtime runs until stopped.
func newPod(namespace, name, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: corev1.PodSpec{
			NodeName:   node,
			Containers: []corev1.Container{{Name: "main", Image: "busybox"}},
		},
	}
}

// createResult is the outcome of createPods.
type createResult struct {
	created, failed int
	errs            report.ErrorSet
	latency         []time.Duration
	seconds         float64
}

// createPods creates the pods of slots [from, to) with workers concurrent
// workers sharing c, storing in pods each pod's start just before its
// Create call and, once it succeeded, its return. It returns when every pod was tried or ctx ended.
func createPods(ctx context.Context, c *client, cfg Config, pods *slots, from, to int, clk clock) createResult {
	api := c.CoreV1().Pods(cfg.Namespace)
	var (
		next    atomic.Int64
		mu      sync.Mutex // guards r
		r       createResult
		wg      sync.WaitGroup
		started = clk.now()
	)
	next.Store(int64(from))
	for range cfg.Workers {
		wg.Go(func() {
			var mine createResult
			for ctx.Err() == nil {
				k := int(next.Add(1) - 1)
				if k >= to {
					break
				}
				pod := newPod(cfg.Namespace, pods.names[k], nodeName(nodeOfSlot(cfg, k)))
				t := clk.now()
				pods.start(k, t)
				_, err := api.Create(ctx, pod, metav1.CreateOptions{})
				done := clk.now()
				d := done - t
				if err != nil {
					mine.failed++
					mine.errs.Add(err.Error())
					continue
				}
				pods.ret(k, done)
				mine.created++
				mine.latency = append(mine.latency, d)
			}
			mu.Lock()
			defer mu.Unlock()
			r.created += mine.created
			r.failed += mine.failed
			r.errs.Merge(mine.errs)
			r.latency = append(r.latency, mine.latency...)
		})
	}
	wg.Wait()
	r.seconds = (clk.now() - started).Seconds()
	return r
}
