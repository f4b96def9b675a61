// Package queue holds the pods waiting for the scheduler, as upstream's
// scheduling queue does: an active queue ordered by priority then time, a
// back-off queue for pods whose attempt failed (1s doubling to 10s), and
// the unschedulable pods, which wait for a change in the cluster that may
// help them (or the five-minute flush), never a poll. Only hub/scheduler
// imports it.
package queue

import (
	"container/heap"
	"context"
	"maps"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/utils/clock"

	"github.com/outpost-mesh/outpost/hub/scheduler/core"
)

// Config tunes a Queue; DefaultConfig has upstream's values.
type Config struct {
	InitialBackoff time.Duration // a pod's first back-off, doubled per attempt
	MaxBackoff     time.Duration // the longest back-off
	// MaxUnschedulable is how long a pod waits for a cluster change at
	// most before it is tried again anyway.
	MaxUnschedulable time.Duration
	// BackoffFlush and UnschedulableFlush are how often Run looks for
	// pods whose wait is over.
	BackoffFlush, UnschedulableFlush time.Duration
}

// DefaultConfig returns upstream's queue settings.
func DefaultConfig() Config {
	return Config{
		InitialBackoff:     time.Second,      // podInitialBackoffSeconds
		MaxBackoff:         10 * time.Second, // podMaxBackoffSeconds
		MaxUnschedulable:   5 * time.Minute,  // podMaxInUnschedulablePodsDuration
		BackoffFlush:       time.Second,
		UnschedulableFlush: 30 * time.Second,
	}
}

type state int

const (
	stateActive state = iota
	stateBackoff
	stateUnschedulable
	stateGated
	stateInFlight
)

type entry struct {
	pod       *corev1.Pod
	state     state
	index     int       // in its heap
	timestamp time.Time // when it last (re)entered the queue
	attempts  int
	waitFor   core.ClusterEvent // while unschedulable
	movesAt   uint64            // q.moves when it was popped
	updated   bool              // changed while in flight
	deleted   bool              // deleted while in flight
}

// Queue is safe for concurrent use.
type Queue struct {
	cfg   Config
	clock clock.WithTicker
	wake  chan struct{}

	mu      sync.Mutex
	pods    map[types.UID]*entry
	active  entryHeap
	backoff entryHeap
	unsched map[types.UID]*entry
	moves   uint64 // cluster events seen, to tell an attempt that raced one
}

// New returns an empty queue on clk.
func New(cfg Config, clk clock.WithTicker) *Queue {
	q := &Queue{cfg: cfg, clock: clk, wake: make(chan struct{}, 1),
		pods: map[types.UID]*entry{}, unsched: map[types.UID]*entry{}}
	q.active.less = func(a, b *entry) bool {
		pa, pb := corev1helpers.PodPriority(a.pod), corev1helpers.PodPriority(b.pod)
		return pa > pb || pa == pb && a.timestamp.Before(b.timestamp)
	}
	q.backoff.less = func(a, b *entry) bool { return q.backoffExpiry(a).Before(q.backoffExpiry(b)) }
	return q
}

func (q *Queue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func gated(pod *corev1.Pod) bool { return len(pod.Spec.SchedulingGates) > 0 }

// Add queues a pod waiting to be scheduled, or updates it if queued.
func (q *Queue) Add(pod *corev1.Pod) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if e := q.pods[pod.UID]; e != nil {
		q.update(e, pod)
		return
	}
	e := &entry{pod: pod, timestamp: q.clock.Now()}
	q.pods[pod.UID] = e
	if gated(pod) {
		e.state = stateGated
		return
	}
	q.push(e, stateActive)
}

// Update replaces a queued pod with its newer version. A pod waiting as
// unschedulable whose spec, labels or annotations changed is tried again.
func (q *Queue) Update(pod *corev1.Pod) { q.Add(pod) }

func (q *Queue) update(e *entry, pod *corev1.Pod) {
	old := e.pod
	e.pod = pod
	switch e.state {
	case stateInFlight:
		e.updated = true
	case stateActive:
		heap.Fix(&q.active, e.index)
	case stateBackoff:
		heap.Fix(&q.backoff, e.index)
	case stateGated:
		if !gated(pod) {
			q.push(e, stateActive)
		}
	case stateUnschedulable:
		if !equality.Semantic.DeepEqual(old.Spec, pod.Spec) || !maps.Equal(old.Labels, pod.Labels) || !maps.Equal(old.Annotations, pod.Annotations) {
			delete(q.unsched, e.pod.UID)
			q.requeue(e)
		}
	}
}

// Delete forgets the pod with uid.
func (q *Queue) Delete(uid types.UID) {
	q.mu.Lock()
	defer q.mu.Unlock()
	e := q.pods[uid]
	if e == nil {
		return
	}
	switch e.state {
	case stateInFlight:
		e.deleted = true
		return
	case stateActive:
		heap.Remove(&q.active, e.index)
	case stateBackoff:
		heap.Remove(&q.backoff, e.index)
	case stateUnschedulable:
		delete(q.unsched, uid)
	}
	delete(q.pods, uid)
}

// Pop waits for the next pod to schedule and hands it out with its
// attempt number (1 for the first). The pod is in flight until Done,
// Unschedulable or Error is called for it.
func (q *Queue) Pop(ctx context.Context) (*corev1.Pod, int, error) {
	for {
		q.mu.Lock()
		if q.active.Len() > 0 {
			e := heap.Pop(&q.active).(*entry)
			e.state = stateInFlight
			e.attempts++
			e.movesAt = q.moves
			e.updated = false
			more := q.active.Len() > 0
			q.mu.Unlock()
			if more {
				q.signal()
			}
			return e.pod, e.attempts, nil
		}
		q.mu.Unlock()
		select {
		case <-q.wake:
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		}
	}
}

// inFlight returns the entry of a pod in flight, dropping it if it was
// deleted meanwhile.
func (q *Queue) inFlight(uid types.UID) *entry {
	e := q.pods[uid]
	if e == nil || e.state != stateInFlight {
		return nil
	}
	if e.deleted {
		delete(q.pods, uid)
		return nil
	}
	return e
}

// Done forgets a pod that was placed.
func (q *Queue) Done(uid types.UID) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if e := q.pods[uid]; e != nil && e.state == stateInFlight {
		delete(q.pods, uid)
	}
}

// Unschedulable parks a pod no node fits until one of the events in
// waitFor happens. If such a change, or one to the pod, came while it
// was being scheduled, it is retried after its back-off instead, since
// the attempt may have missed it.
func (q *Queue) Unschedulable(uid types.UID, waitFor core.ClusterEvent) {
	q.mu.Lock()
	defer q.mu.Unlock()
	e := q.inFlight(uid)
	if e == nil {
		return
	}
	e.timestamp = q.clock.Now()
	if e.updated || q.moves != e.movesAt {
		q.requeue(e)
		return
	}
	e.state = stateUnschedulable
	e.waitFor = waitFor
	q.unsched[uid] = e
}

// Error retries a pod whose attempt failed for a reason other than the
// cluster (an API error, a pod that cannot be parsed) after its back-off.
func (q *Queue) Error(uid types.UID) {
	q.mu.Lock()
	defer q.mu.Unlock()
	e := q.inFlight(uid)
	if e == nil {
		return
	}
	e.timestamp = q.clock.Now()
	q.push(e, stateBackoff)
}

// Move retries the unschedulable pods that ev may help, each after what
// is left of its back-off.
func (q *Queue) Move(ev core.ClusterEvent) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.moves++
	for uid, e := range q.unsched {
		if e.waitFor&ev != 0 {
			delete(q.unsched, uid)
			q.requeue(e)
		}
	}
}

// requeue puts e in the back-off queue, or straight into the active one
// if its back-off is over.
func (q *Queue) requeue(e *entry) {
	if q.clock.Now().Before(q.backoffExpiry(e)) {
		q.push(e, stateBackoff)
	} else {
		q.push(e, stateActive)
	}
}

func (q *Queue) push(e *entry, s state) {
	e.state = s
	switch s {
	case stateActive:
		heap.Push(&q.active, e)
		q.signal()
	case stateBackoff:
		heap.Push(&q.backoff, e)
	}
}

// backoffDuration is InitialBackoff doubled per attempt past the first,
// at most MaxBackoff.
func (q *Queue) backoffDuration(e *entry) time.Duration {
	d := q.cfg.InitialBackoff
	for i := 1; i < e.attempts; i++ {
		if d > q.cfg.MaxBackoff-d {
			return q.cfg.MaxBackoff
		}
		d += d
	}
	return min(d, q.cfg.MaxBackoff)
}

func (q *Queue) backoffExpiry(e *entry) time.Time { return e.timestamp.Add(q.backoffDuration(e)) }

// FlushBackoff moves the pods whose back-off is over to the active queue.
func (q *Queue) FlushBackoff() {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.clock.Now()
	for q.backoff.Len() > 0 {
		e := q.backoff.items[0]
		if now.Before(q.backoffExpiry(e)) {
			return
		}
		heap.Pop(&q.backoff)
		q.push(e, stateActive)
	}
}

// FlushUnschedulable retries the pods that have waited longer than
// MaxUnschedulable for a change that would help them.
func (q *Queue) FlushUnschedulable() {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.clock.Now()
	for uid, e := range q.unsched {
		if now.Sub(e.timestamp) > q.cfg.MaxUnschedulable {
			delete(q.unsched, uid)
			q.requeue(e)
		}
	}
}

// Run flushes the back-off queue and the unschedulable pods on their
// schedules until ctx ends.
func (q *Queue) Run(ctx context.Context) {
	b := q.clock.NewTicker(q.cfg.BackoffFlush)
	defer b.Stop()
	u := q.clock.NewTicker(q.cfg.UnschedulableFlush)
	defer u.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-b.C():
			q.FlushBackoff()
		case <-u.C():
			q.FlushUnschedulable()
		}
	}
}

// Counts are how many pods wait where.
type Counts struct {
	Active, Backoff, Unschedulable, Gated, InFlight int
}

// Counts returns how many pods wait where.
func (q *Queue) Counts() Counts {
	q.mu.Lock()
	defer q.mu.Unlock()
	var c Counts
	for _, e := range q.pods {
		switch e.state {
		case stateActive:
			c.Active++
		case stateBackoff:
			c.Backoff++
		case stateUnschedulable:
			c.Unschedulable++
		case stateGated:
			c.Gated++
		case stateInFlight:
			c.InFlight++
		}
	}
	return c
}

// entryHeap is a heap of entries under less, tracking each one's index.
type entryHeap struct {
	items []*entry
	less  func(a, b *entry) bool
}

func (h *entryHeap) Len() int           { return len(h.items) }
func (h *entryHeap) Less(i, j int) bool { return h.less(h.items[i], h.items[j]) }
func (h *entryHeap) Swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	h.items[i].index = i
	h.items[j].index = j
}
func (h *entryHeap) Push(x any) {
	e := x.(*entry)
	e.index = len(h.items)
	h.items = append(h.items, e)
}
func (h *entryHeap) Pop() any {
	last := len(h.items) - 1
	e := h.items[last]
	h.items[last] = nil
	h.items = h.items[:last]
	e.index = -1
	return e
}
