package metrics

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/outpost-mesh/outpost/hub/store"
	"github.com/outpost-mesh/outpost/hub/store/badgerstore"

	"github.com/outpost-mesh/outpost/internal/wait"
)

func openStore(t *testing.T, m *Metrics) store.Store {
	t.Helper()
	bs, err := badgerstore.Open(badgerstore.DefaultConfig(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	return m.InstrumentStore(bs)
}

// drain reads ch until it is closed, failing t if that takes too long.
func drain(t *testing.T, ch <-chan store.WatchResponse) {
	t.Helper()
	deadline := time.After(testTimeout)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatal("watch channel not closed")
		}
	}
}

func TestInstrumentStore(t *testing.T) {
	m := New()
	s := openStore(t, m)
	ctx := t.Context()

	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	events, err := s.Watch(watchCtx, "/pods/", 0)
	if err != nil {
		t.Fatal(err)
	}
	scrape(t, m).expect(t, "outpost_store_watchers", "", 1)

	kv, err := s.Create(ctx, "/pods/a", []byte("1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, "/pods/a", []byte("1")); !errors.Is(err, store.ErrKeyExists) {
		t.Fatalf("Create existing = %v, want ErrKeyExists", err)
	}
	if _, err := s.Get(ctx, "/pods/a", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "/pods/missing", 0); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get missing = %v, want ErrNotFound", err)
	}
	if _, err := s.Get(ctx, "no-slash", 0); !errors.Is(err, store.ErrInvalidKey) {
		t.Fatalf("Get bad key = %v, want ErrInvalidKey", err)
	}
	if _, err := s.Update(ctx, "/pods/a", []byte("2"), kv.ModRevision+100); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("Update stale = %v, want ErrConflict", err)
	}
	if _, err := s.Update(ctx, "/pods/a", []byte("2"), kv.ModRevision); err != nil {
		t.Fatal(err)
	}
	if res, err := s.List(ctx, "/pods/", store.ListOptions{}); err != nil || len(res.KVs) != 1 {
		t.Fatalf("List = %v, %v; want one key", res.KVs, err)
	}

	// The watch forwards the changes in order.
	var got []store.Event
	deadline := time.After(testTimeout)
	for len(got) < 2 {
		select {
		case resp, ok := <-events:
			if !ok || resp.Err != nil {
				t.Fatalf("watch ended early: %v", resp.Err)
			}
			got = append(got, resp.Events...)
		case <-deadline:
			t.Fatalf("watch delivered %d events, want 2", len(got))
		}
	}
	if !got[0].IsCreate() || got[1].Type != store.EventPut || got[1].IsCreate() {
		t.Errorf("watch events = %+v, want a create then an update", got)
	}

	if _, _, err := s.Delete(ctx, "/pods/a", 0); err != nil {
		t.Fatal(err)
	}
	rev, err := s.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Compact(ctx, rev); err != nil {
		t.Fatal(err)
	}

	// The gauge is lowered once the watch's context ends, by a goroutine
	// of its own: as soon as the channel closes, or a moment after.
	stopWatch()
	drain(t, events)
	wait.For(t, 10*time.Second, "the watchers gauge back to 0", func() (bool, string) {
		v, ok := scrape(t, m).value("outpost_store_watchers", "")
		return ok && v == 0, fmt.Sprintf("%v (present %v)", v, ok)
	})
	fams := scrape(t, m)

	// A watch that fails to start is never counted.
	if _, err := s.Watch(ctx, "/pods/", 1); !errors.Is(err, store.ErrCompacted) {
		t.Fatalf("Watch compacted = %v, want ErrCompacted", err)
	}
	scrape(t, m).expect(t, "outpost_store_watchers", "", 0)

	const dur, errs = "outpost_store_request_duration_seconds", "outpost_store_request_errors_total"
	for _, c := range []struct {
		op           string
		calls, fails float64
	}{
		{opGet, 3, 1}, // the bad key; not-found is not an error
		{opList, 1, 0},
		{opCreate, 2, 0}, // the existing key is a conflict
		{opUpdate, 2, 0}, // the stale update is a conflict
		{opDelete, 1, 0},
		{opRevision, 1, 0},
		{opCompact, 1, 0},
	} {
		fams.expect(t, dur, "operation="+c.op, c.calls)
		fams.expect(t, errs, "operation="+c.op, c.fails)
	}

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestInstrumentStoreCloseEndsWatches: closing the store ends the watches
// opened through it, read or not, and their goroutines (goleak checks).
func TestInstrumentStoreCloseEndsWatches(t *testing.T) {
	m := New()
	s := openStore(t, m)
	ctx := t.Context()
	idle, err := s.Watch(ctx, "/pods/", 0) // nothing to forward
	if err != nil {
		t.Fatal(err)
	}
	unread, err := s.Watch(ctx, "/pods/", 0) // never read
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, "/pods/a", []byte("1")); err != nil {
		t.Fatal(err)
	}
	scrape(t, m).expect(t, "outpost_store_watchers", "", 2)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	drain(t, idle)
	drain(t, unread)
	scrape(t, m).expect(t, "outpost_store_watchers", "", 0)
}

// TestInstrumentStoreAbandonedWatch: a consumer that cancels its watch and
// stops reading leaves no goroutine behind, even with a response pending.
func TestInstrumentStoreAbandonedWatch(t *testing.T) {
	m := New()
	s := openStore(t, m)
	defer s.Close()
	ctx := t.Context()
	watchCtx, stopWatch := context.WithCancel(ctx)
	events, err := s.Watch(watchCtx, "/pods/", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, "/pods/a", []byte("1")); err != nil {
		t.Fatal(err)
	}
	stopWatch()
	// Poll the gauge rather than read the channel: reading is what an
	// abandoning consumer does not do.
	deadline := time.Now().Add(testTimeout)
	for gaugeValue(t, m.storeWatchers) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("outpost_store_watchers = %v after the watch was cancelled, want 0", gaugeValue(t, m.storeWatchers))
		}
		runtime.Gosched()
	}
	_ = events // abandoned
}

func gaugeValue(t *testing.T, g prometheus.Gauge) float64 {
	t.Helper()
	var out dto.Metric
	if err := g.Write(&out); err != nil {
		t.Fatal(err)
	}
	return out.GetGauge().GetValue()
}
