// Package fanout is the bounded per-watcher queue both store backends use to
// hand events to a watch consumer: the producer never blocks, and a consumer
// that falls too far behind is cut off with store.ErrWatcherTooSlow instead of
// making the process grow.
package fanout

import (
	"context"
	"sync"

	"github.com/outpost-mesh/outpost/hub/store"
)

// Limits bound one watcher's backlog. A watcher holds at most about twice
// these: the batch Run is handing over plus a full queue behind it.
type Limits struct {
	// MaxEvents is the most events queued for a consumer; 0 means 10,000.
	MaxEvents int
	// MaxBytes bounds the queued keys and values; 0 means 64 MiB.
	MaxBytes int
}

func (l Limits) withDefaults() Limits {
	if l.MaxEvents <= 0 {
		l.MaxEvents = 10000
	}
	if l.MaxBytes <= 0 {
		l.MaxBytes = 64 << 20
	}
	return l
}

// Queue holds the events not yet taken by one watch consumer. Push and Fail
// may be called from any goroutine and never block; Run delivers.
type Queue struct {
	limits Limits
	out    chan store.WatchResponse

	mu     sync.Mutex
	events []store.Event
	bytes  int
	err    error // set once; delivered after the queued events (or at once on overflow)
	wake   chan struct{}
}

// New returns a queue whose consumer reads from Out.
func New(limits Limits) *Queue {
	return &Queue{
		limits: limits.withDefaults(),
		out:    make(chan store.WatchResponse),
		wake:   make(chan struct{}, 1),
	}
}

// Out is the consumer's channel; Run closes it when it returns.
func (q *Queue) Out() <-chan store.WatchResponse { return q.out }

// Push queues events. It reports false when the queue is already failed or
// has just overflowed: the producer should then forget this queue.
func (q *Queue) Push(events ...store.Event) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.err != nil {
		return false
	}
	for _, ev := range events {
		q.events = append(q.events, ev)
		q.bytes += eventSize(ev)
	}
	if len(q.events) > q.limits.MaxEvents || q.bytes > q.limits.MaxBytes {
		// Drop the backlog: the consumer must re-list anyway.
		q.events, q.bytes = nil, 0
		q.err = store.ErrWatcherTooSlow
		q.signal()
		return false
	}
	q.signal()
	return true
}

// Fail ends the watch with err after the events already queued. Only the
// first call has effect.
func (q *Queue) Fail(err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.err == nil {
		q.err = err
		q.signal()
	}
}

// Len returns the number of queued events.
func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.events)
}

func (q *Queue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// Send delivers resp to the consumer directly, blocking until it is taken or
// ctx ends (then it reports false). It serves history that precedes the
// queued events, so it may be called only before Run, from the goroutine
// that will call Run.
func (q *Queue) Send(ctx context.Context, resp store.WatchResponse) bool {
	select {
	case q.out <- resp:
		return true
	case <-ctx.Done():
		return false
	}
}

// Close closes Out without running; for a watch that ends before Run (for
// instance while it was still sending history with Send).
func (q *Queue) Close() { close(q.out) }

// Run delivers queued events to Out until ctx ends or an error has been
// delivered, then closes Out. Run blocks; one goroutine calls it once.
func (q *Queue) Run(ctx context.Context) {
	defer close(q.out)
	for {
		q.mu.Lock()
		events, err := q.events, q.err
		q.events, q.bytes = nil, 0
		q.mu.Unlock()
		if len(events) > 0 {
			// Deliver in slices of bounded size so one response does not
			// hold the whole backlog twice.
			for len(events) > 0 {
				n := min(len(events), 256)
				select {
				case q.out <- store.WatchResponse{Events: events[:n:n]}:
				case <-ctx.Done():
					return
				}
				events = events[n:]
			}
			continue
		}
		if err != nil {
			select {
			case q.out <- store.WatchResponse{Err: err}:
			case <-ctx.Done():
			}
			return
		}
		select {
		case <-q.wake:
		case <-ctx.Done():
			return
		}
	}
}

func eventSize(ev store.Event) int {
	n := 64 + len(ev.KV.Key) + len(ev.KV.Value)
	if ev.PrevKV != nil {
		n += len(ev.PrevKV.Key) + len(ev.PrevKV.Value)
	}
	return n
}
