package apibench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/bench/report"
)

// clock measures time on the monotonic clock from a fixed base, so that
// instants fit in an atomic integer.
type clock struct{ base time.Time }

func (c clock) now() time.Duration { return time.Since(c.base) }

// sendTimes maps each pod, by the index in its name, to the instant just
// before its Create was called (clock.now, never 0 once set). Creators
// write it and watchers read it concurrently: it is the send-time map
// keyed by name, as a lock-free array since the names are numbered.
type sendTimes []atomic.Int64

// podPrefix starts the name of every pod created; the rest is its index.
const podPrefix = "pod-"

// podName returns the name of the pod with index i.
func podName(i int) string { return fmt.Sprintf("%s%07d", podPrefix, i) }

// podIndex returns the index in a name podName made, or false for other
// names or indexes of n pods or more.
func podIndex(name string, n int) (int, bool) {
	digits, ok := strings.CutPrefix(name, podPrefix)
	if !ok || len(digits) != 7 {
		return 0, false
	}
	i, err := strconv.Atoi(digits)
	if err != nil || i < 0 || i >= n {
		return 0, false
	}
	return i, true
}

// newPod returns the minimal valid pod named name: one busybox container,
// not bound to a node.
func newPod(namespace, name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "main", Image: "busybox"}},
		},
	}
}

// createPods creates cfg.Pods pods in cfg.Namespace with cfg.Workers
// concurrent workers sharing c, storing each pod's send time in sent just
// before its Create call. It returns when every pod was tried or ctx ended.
func createPods(ctx context.Context, c *client, cfg Config, clk clock, sent sendTimes) CreateResult {
	pods := c.CoreV1().Pods(cfg.Namespace)
	var (
		next    atomic.Int64
		mu      sync.Mutex // guards the fields below
		lat     = make([]time.Duration, 0, cfg.Pods)
		failed  int
		errs    report.ErrorSet
		wg      sync.WaitGroup
		started = clk.now()
	)
	for range cfg.Workers {
		wg.Go(func() {
			mine := make([]time.Duration, 0, cfg.Pods/cfg.Workers+1)
			var bad int
			var myErrs report.ErrorSet
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= cfg.Pods {
					break
				}
				pod := newPod(cfg.Namespace, podName(i))
				t := clk.now()
				sent[i].Store(int64(t))
				_, err := pods.Create(ctx, pod, metav1.CreateOptions{})
				d := clk.now() - t
				if err != nil {
					bad++
					myErrs.Add(err.Error())
					continue
				}
				mine = append(mine, d)
			}
			mu.Lock()
			defer mu.Unlock()
			lat = append(lat, mine...)
			failed += bad
			errs.Merge(myErrs)
		})
	}
	wg.Wait()
	secs := (clk.now() - started).Seconds()
	r := CreateResult{
		Created: len(lat),
		Failed:  failed,
		Errors:  errs.List(),
		Seconds: secs,
		Latency: report.Summarize(lat),
	}
	if secs > 0 {
		r.PerSec = float64(r.Created) / secs
	}
	return r
}
