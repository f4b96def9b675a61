package fanout

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/outpost-mesh/outpost/hub/store"
)

func ev(rev int64) store.Event {
	return store.Event{Type: store.EventPut, KV: store.KeyValue{Key: "/k", ModRevision: rev}}
}

// drain reads q until it closes and returns the revisions and final error.
func drain(t *testing.T, q *Queue) ([]int64, error) {
	t.Helper()
	var revs []int64
	var err error
	timeout := time.After(time.Minute)
	for {
		select {
		case resp, ok := <-q.Out():
			if !ok {
				return revs, err
			}
			for _, e := range resp.Events {
				revs = append(revs, e.Revision())
			}
			if resp.Err != nil {
				err = resp.Err
			}
		case <-timeout:
			t.Fatal("queue not closed")
		}
	}
}

func TestEventsThenError(t *testing.T) {
	q := New(Limits{MaxEvents: 10})
	go q.Run(context.Background())
	for i := int64(1); i <= 5; i++ {
		if !q.Push(ev(i)) {
			t.Fatalf("Push(%d) = false under the limit", i)
		}
	}
	boom := errors.New("boom")
	q.Fail(boom)
	q.Fail(errors.New("second")) // ignored
	if q.Push(ev(6)) {
		t.Fatal("Push after Fail = true")
	}
	revs, err := drain(t, q)
	if len(revs) != 5 || revs[4] != 5 || err != boom {
		t.Fatalf("got %v, %v; want 1..5 then boom", revs, err)
	}
}

func TestOverflowCutsOff(t *testing.T) {
	q := New(Limits{MaxEvents: 3})
	// Nobody runs the queue yet: the producer must never block.
	for i := int64(1); i <= 3; i++ {
		q.Push(ev(i))
	}
	if q.Push(ev(4)) {
		t.Fatal("Push over the limit = true")
	}
	if q.Len() != 0 {
		t.Fatalf("backlog of %d kept after overflow, want it dropped", q.Len())
	}
	go q.Run(context.Background())
	revs, err := drain(t, q)
	if len(revs) != 0 || !errors.Is(err, store.ErrWatcherTooSlow) {
		t.Fatalf("got %v, %v; want ErrWatcherTooSlow", revs, err)
	}
}

func TestByteLimit(t *testing.T) {
	q := New(Limits{MaxEvents: 100, MaxBytes: 1000})
	big := ev(1)
	big.KV.Value = make([]byte, 2000)
	if q.Push(big) {
		t.Fatal("Push over the byte limit = true")
	}
}

func TestCancelCloses(t *testing.T) {
	q := New(Limits{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { q.Run(ctx); close(done) }()
	q.Push(ev(1)) // never read
	cancel()
	<-done
	if _, err := drain(t, q); err != nil {
		t.Fatalf("error %v after cancel, want a plain close", err)
	}
}
