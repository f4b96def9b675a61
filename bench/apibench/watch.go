package apibench

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/metadata"

	"github.com/outpost-mesh/outpost/bench/report"
)

// watcher is one watch on the namespace's pods that records, for each pod
// created, when its ADDED event arrived. Its run goroutine owns every field
// but delivered, which others may read at any time; read the others once
// run has returned.
type watcher struct {
	pods  typedcorev1.PodInterface
	meta  metadata.ResourceInterface // set for metadata-only watches
	clk   clock
	sent  sendTimes
	n     int      // pods that may be created
	seen  []uint64 // bit i set once pod i was seen
	rv    string   // the last resourceVersion seen
	first watch.Interface

	delivered  atomic.Int64
	duplicates int
	foreign    int
	latency    []time.Duration
	restarts   int
	errs       report.ErrorSet
}

// startWatch opens a watch from resourceVersion rv and returns a watcher
// reading it, which counts no event before the watch was open. Call run
// next.
func startWatch(ctx context.Context, c *client, namespace, rv string, clk clock, sent sendTimes, metadataOnly bool) (*watcher, error) {
	w := &watcher{
		pods: c.CoreV1().Pods(namespace),
		clk:  clk,
		sent: sent,
		n:    len(sent),
		seen: make([]uint64, (len(sent)+63)/64),
		rv:   rv,
	}
	if metadataOnly {
		w.meta = c.meta.Resource(corev1.SchemeGroupVersion.WithResource("pods")).Namespace(namespace)
	}
	var err error
	if w.first, err = w.open(ctx); err != nil {
		return nil, err
	}
	return w, nil
}

func (w *watcher) open(ctx context.Context) (watch.Interface, error) {
	opts := metav1.ListOptions{ResourceVersion: w.rv, AllowWatchBookmarks: true}
	var wi watch.Interface
	var err error
	if w.meta != nil {
		wi, err = w.meta.Watch(ctx, opts)
	} else {
		wi, err = w.pods.Watch(ctx, opts)
	}
	if err != nil {
		return nil, fmt.Errorf("watch pods: %w", err)
	}
	return wi, nil
}

// restartDelay is the pause before reopening a watch that could not be
// opened.
const restartDelay = 100 * time.Millisecond

// run reads events until ctx ends. A watch that ends early, such as one
// the hub cuts off for falling behind, is reopened from the last
// resourceVersion seen, or from the current state when that is too old.
func (w *watcher) run(ctx context.Context) {
	wi := w.first
	w.first = nil
	for {
		w.consume(ctx, wi)
		wi.Stop()
		if ctx.Err() != nil {
			return
		}
		w.restarts++
		for {
			var err error
			if wi, err = w.open(ctx); err == nil {
				break
			}
			if ctx.Err() != nil {
				return
			}
			w.errs.Add(err.Error())
			t := time.NewTimer(restartDelay)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
	}
}

// consume reads wi until it ends.
func (w *watcher) consume(ctx context.Context, wi watch.Interface) {
	progressed := false
	for ev := range wi.ResultChan() {
		if ev.Type == watch.Error {
			if ctx.Err() != nil {
				return // client-go's report of the cancellation
			}
			err := apierrors.FromObject(ev.Object)
			w.errs.Add("watch: " + err.Error())
			if !progressed && (apierrors.IsResourceExpired(err) || apierrors.IsGone(err)) {
				// Not even one event from rv on: it is too old to resume
				// from. Start from the current state instead.
				w.rv = ""
			}
			continue
		}
		progressed = true
		if m, err := meta.Accessor(ev.Object); err == nil && m.GetResourceVersion() != "" {
			w.rv = m.GetResourceVersion()
		}
		if ev.Type != watch.Added {
			continue
		}
		at := w.clk.now()
		var name string
		switch o := ev.Object.(type) {
		case *corev1.Pod:
			name = o.Name
		case *metav1.PartialObjectMetadata:
			name = o.Name
		default:
			w.foreign++
			continue
		}
		i, ok := podIndex(name, w.n)
		if !ok {
			w.foreign++
			continue
		}
		word, bit := i/64, uint64(1)<<(i%64)
		if w.seen[word]&bit != 0 {
			w.duplicates++
			continue
		}
		w.seen[word] |= bit
		w.delivered.Add(1)
		if sent := time.Duration(w.sent[i].Load()); sent > 0 {
			w.latency = append(w.latency, at-sent)
		}
	}
}
