// Package storetest is the conformance suite every store.Store backend must
// pass: CRUD, compare-and-swap, consistent paging, ordered and complete
// watches, compaction, slow watchers, restart and a linearizability check.
// Only tests import it.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outpost-mesh/outpost/hub/store"
)

// Harness opens the backend under test.
type Harness struct {
	// New opens a fresh, empty store; the harness closes it with t.Cleanup.
	New func(t *testing.T) store.Store
	// Reopen closes s and opens the same data again, as after a restart.
	Reopen func(t *testing.T, s store.Store) store.Store
	// SlowWatcherEvents is a number of events that certainly overflows the
	// backlog of a watcher that does not read (the backend's watch limit
	// plus a margin).
	SlowWatcherEvents int
}

// Run runs the suite.
func Run(t *testing.T, h Harness) {
	tests := []struct {
		name string
		fn   func(*testing.T, Harness)
	}{
		{"CRUD", testCRUD},
		{"CompareAndSwap", testCAS},
		{"BadInput", testBadInput},
		{"GetAtRevision", testGetAtRevision},
		{"ListPrefix", testListPrefix},
		{"PagingConsistency", testPaging},
		{"CountRemaining", testCountRemaining},
		{"WatchOrderConcurrent", testWatchConcurrent},
		{"WatchFromPast", testWatchFromPast},
		{"WatchCancel", testWatchCancel},
		{"Compaction", testCompaction},
		{"SlowWatcher", testSlowWatcher},
		{"Restart", testRestart},
		{"Linearizable", testLinearizable},
		{"Closed", testClosed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, h) })
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func mustCreate(t *testing.T, s store.Store, key, val string) store.KeyValue {
	t.Helper()
	kv, err := s.Create(ctxT(t), key, []byte(val))
	if err != nil {
		t.Fatalf("Create(%q) = %v", key, err)
	}
	return kv
}

func testCRUD(t *testing.T, h Harness) {
	s := h.New(t)
	ctx := ctxT(t)
	rev0, err := s.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	kv := mustCreate(t, s, "/registry/pods/default/web-1", "v1")
	if kv.ModRevision <= rev0 || kv.CreateRevision != kv.ModRevision || kv.Key != "/registry/pods/default/web-1" || string(kv.Value) != "v1" {
		t.Fatalf("Create = %+v, want a fresh revision after %d", kv, rev0)
	}
	if rev, _ := s.Revision(ctx); rev != kv.ModRevision {
		t.Fatalf("Revision after create = %d, want %d", rev, kv.ModRevision)
	}
	got, err := s.Get(ctx, kv.Key, 0)
	if err != nil || string(got.Value) != "v1" || got.ModRevision != kv.ModRevision || got.CreateRevision != kv.CreateRevision {
		t.Fatalf("Get = %+v, %v; want %+v", got, err, kv)
	}
	up, err := s.Update(ctx, kv.Key, []byte("v2"), kv.ModRevision)
	if err != nil {
		t.Fatalf("Update = %v", err)
	}
	if up.ModRevision != kv.ModRevision+1 || up.CreateRevision != kv.CreateRevision || string(up.Value) != "v2" {
		t.Fatalf("Update = %+v, want mod %d create %d", up, kv.ModRevision+1, kv.CreateRevision)
	}
	prev, drev, err := s.Delete(ctx, kv.Key, up.ModRevision)
	if err != nil {
		t.Fatalf("Delete = %v", err)
	}
	if drev != up.ModRevision+1 || string(prev.Value) != "v2" || prev.ModRevision != up.ModRevision {
		t.Fatalf("Delete = %+v, %d; want prev %+v at %d", prev, drev, up, up.ModRevision+1)
	}
	if _, err := s.Get(ctx, kv.Key, 0); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get after delete = %v, want ErrNotFound", err)
	}
	// A re-created key is a new incarnation.
	again := mustCreate(t, s, kv.Key, "v3")
	if again.CreateRevision != drev+1 {
		t.Fatalf("re-Create CreateRevision = %d, want %d", again.CreateRevision, drev+1)
	}
	if _, _, err := s.Delete(ctx, "/registry/pods/default/missing", 0); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Delete(missing) = %v, want ErrNotFound", err)
	}
	if _, err := s.Update(ctx, "/registry/pods/default/missing", []byte("x"), 0); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Update(missing) = %v, want ErrNotFound", err)
	}
	// Unconditional update and delete.
	if _, err := s.Update(ctx, kv.Key, []byte("v4"), 0); err != nil {
		t.Fatalf("Update(modRev 0) = %v", err)
	}
	if _, _, err := s.Delete(ctx, kv.Key, 0); err != nil {
		t.Fatalf("Delete(modRev 0) = %v", err)
	}
	// Values are returned exactly, including empty and large ones.
	big := strings.Repeat("x", store.MaxValueSize)
	for _, v := range []string{"", big} {
		k := fmt.Sprintf("/registry/cm/len-%d", len(v))
		mustCreate(t, s, k, v)
		got, err := s.Get(ctx, k, 0)
		if err != nil || string(got.Value) != v {
			t.Fatalf("Get(%q) = %d bytes, %v; want %d", k, len(got.Value), err, len(v))
		}
	}
}

func testCAS(t *testing.T, h Harness) {
	s := h.New(t)
	ctx := ctxT(t)
	kv := mustCreate(t, s, "/registry/cm/a", "1")
	_, err := s.Create(ctx, kv.Key, []byte("again"))
	var ce *store.ConflictError
	if !errors.Is(err, store.ErrKeyExists) || !errors.As(err, &ce) || ce.Current.ModRevision != kv.ModRevision || string(ce.Current.Value) != "1" {
		t.Fatalf("Create(existing) = %v, want *ConflictError matching ErrKeyExists with current %+v", err, kv)
	}
	if errors.Is(err, store.ErrConflict) {
		t.Fatalf("Create(existing) error %v must not match ErrConflict", err)
	}
	up, err := s.Update(ctx, kv.Key, []byte("2"), kv.ModRevision)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Update(ctx, kv.Key, []byte("stale"), kv.ModRevision)
	if !errors.Is(err, store.ErrConflict) || !errors.As(err, &ce) || ce.Current.ModRevision != up.ModRevision || string(ce.Current.Value) != "2" || ce.Expected != kv.ModRevision {
		t.Fatalf("Update(stale) = %v, want ErrConflict with current mod %d", err, up.ModRevision)
	}
	if _, _, err := s.Delete(ctx, kv.Key, kv.ModRevision); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("Delete(stale) = %v, want ErrConflict", err)
	}
	got, _ := s.Get(ctx, kv.Key, 0)
	if string(got.Value) != "2" {
		t.Fatalf("value after failed writes = %q, want 2", got.Value)
	}
	// A failed precondition takes no revision.
	rev, _ := s.Revision(ctx)
	if rev != up.ModRevision {
		t.Fatalf("Revision = %d after failed writes, want %d", rev, up.ModRevision)
	}
	// Concurrent CAS increments: exactly one wins each round; no update is lost.
	const workers, rounds = 8, 10
	var wg sync.WaitGroup
	var mu sync.Mutex
	wins := 0
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds; {
				cur, err := s.Get(ctx, kv.Key, 0)
				if err != nil {
					t.Error(err)
					return
				}
				var n int
				fmt.Sscan(string(cur.Value), &n)
				_, err = s.Update(ctx, kv.Key, []byte(fmt.Sprint(n+1)), cur.ModRevision)
				if errors.Is(err, store.ErrConflict) {
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				wins++
				mu.Unlock()
				i++
			}
		}()
	}
	wg.Wait()
	got, _ = s.Get(ctx, kv.Key, 0)
	if want := fmt.Sprint(2 + workers*rounds); string(got.Value) != want || wins != workers*rounds {
		t.Fatalf("counter = %s after %d wins, want %s", got.Value, wins, want)
	}
}

func testBadInput(t *testing.T, h Harness) {
	s := h.New(t)
	ctx := ctxT(t)
	kv := mustCreate(t, s, "/registry/cm/ok", "v")
	cur, _ := s.Revision(ctx)
	tooBig := make([]byte, store.MaxValueSize+1)
	keys := []string{"", "registry/x", "/a//b", "/a/", "/a\x00b", "/a\nb", "/\xff\xfe", "/" + strings.Repeat("k", store.MaxKeySize)}
	for _, k := range keys {
		if _, err := s.Get(ctx, k, 0); !errors.Is(err, store.ErrInvalidKey) {
			t.Errorf("Get(%q) = %v, want ErrInvalidKey", k, err)
		}
		if _, err := s.Create(ctx, k, nil); !errors.Is(err, store.ErrInvalidKey) {
			t.Errorf("Create(%q) = %v, want ErrInvalidKey", k, err)
		}
		if _, err := s.Update(ctx, k, nil, 0); !errors.Is(err, store.ErrInvalidKey) {
			t.Errorf("Update(%q) = %v, want ErrInvalidKey", k, err)
		}
		if _, _, err := s.Delete(ctx, k, 0); !errors.Is(err, store.ErrInvalidKey) {
			t.Errorf("Delete(%q) = %v, want ErrInvalidKey", k, err)
		}
	}
	for _, p := range []string{"", "/a", "a/", "/a//"} {
		if _, err := s.List(ctx, p, store.ListOptions{}); !errors.Is(err, store.ErrInvalidKey) {
			t.Errorf("List(%q) = %v, want ErrInvalidKey", p, err)
		}
		if _, err := s.Watch(ctx, p, 0); !errors.Is(err, store.ErrInvalidKey) {
			t.Errorf("Watch(%q) = %v, want ErrInvalidKey", p, err)
		}
	}
	if _, err := s.Create(ctx, "/registry/cm/big", tooBig); !errors.Is(err, store.ErrValueTooLarge) {
		t.Errorf("Create(too big) = %v, want ErrValueTooLarge", err)
	}
	if _, err := s.Update(ctx, kv.Key, tooBig, 0); !errors.Is(err, store.ErrValueTooLarge) {
		t.Errorf("Update(too big) = %v, want ErrValueTooLarge", err)
	}
	if _, err := s.Get(ctx, kv.Key, cur+1000); !errors.Is(err, store.ErrFutureRevision) {
		t.Errorf("Get(future) = %v, want ErrFutureRevision", err)
	}
	if _, err := s.List(ctx, "/registry/", store.ListOptions{Revision: cur + 1000}); !errors.Is(err, store.ErrFutureRevision) {
		t.Errorf("List(future) = %v, want ErrFutureRevision", err)
	}
	if _, err := s.Watch(ctx, "/registry/", cur+1000); !errors.Is(err, store.ErrFutureRevision) {
		t.Errorf("Watch(future) = %v, want ErrFutureRevision", err)
	}
	if err := s.Compact(ctx, cur+1000); !errors.Is(err, store.ErrFutureRevision) {
		t.Errorf("Compact(future) = %v, want ErrFutureRevision", err)
	}
	for name, fn := range map[string]func() error{
		"Get(-1)":        func() error { _, err := s.Get(ctx, kv.Key, -1); return err },
		"List(rev -1)":   func() error { _, err := s.List(ctx, "/registry/", store.ListOptions{Revision: -1}); return err },
		"List(limit -1)": func() error { _, err := s.List(ctx, "/registry/", store.ListOptions{Limit: -1}); return err },
		"List(continue outside)": func() error {
			_, err := s.List(ctx, "/registry/cm/", store.ListOptions{Continue: "/registry/pods/x"})
			return err
		},
		"Update(modRev -1)": func() error { _, err := s.Update(ctx, kv.Key, nil, -1); return err },
		"Watch(-1)":         func() error { _, err := s.Watch(ctx, "/registry/", -1); return err },
		"Compact(-1)":       func() error { return s.Compact(ctx, -1) },
	} {
		if err := fn(); !errors.Is(err, store.ErrInvalidArgument) {
			t.Errorf("%s = %v, want ErrInvalidArgument", name, err)
		}
	}
	// Nothing above changed the store.
	if rev, _ := s.Revision(ctx); rev != cur {
		t.Errorf("Revision = %d after rejected input, want %d", rev, cur)
	}
}

func testGetAtRevision(t *testing.T, h Harness) {
	s := h.New(t)
	ctx := ctxT(t)
	k := "/registry/cm/h"
	var revs []int64
	kv := mustCreate(t, s, k, "0")
	revs = append(revs, kv.ModRevision)
	for i := 1; i < 5; i++ {
		kv2, err := s.Update(ctx, k, []byte(fmt.Sprint(i)), 0)
		if err != nil {
			t.Fatal(err)
		}
		revs = append(revs, kv2.ModRevision)
		mustCreate(t, s, fmt.Sprintf("/registry/cm/other-%d", i), "x") // interleave another key
	}
	_, drev, err := s.Delete(ctx, k, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range revs {
		ats := []int64{r}
		if i > 0 {
			ats = append(ats, r+1) // the other key's write
		}
		for _, at := range ats {
			got, err := s.Get(ctx, k, at)
			if err != nil || string(got.Value) != fmt.Sprint(i) || got.ModRevision != r || got.CreateRevision != revs[0] {
				t.Errorf("Get(%q, %d) = %+v, %v; want value %d mod %d", k, at, got, err, i, r)
			}
		}
	}
	if _, err := s.Get(ctx, k, revs[0]-1); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Get before create = %v, want ErrNotFound", err)
	}
	if _, err := s.Get(ctx, k, drev); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Get at delete = %v, want ErrNotFound", err)
	}
}

func testListPrefix(t *testing.T, h Harness) {
	s := h.New(t)
	ctx := ctxT(t)
	for _, k := range []string{"/a/b/1", "/a/b/2", "/a/bc/1", "/a/b/sub/3", "/a/c", "/b/1"} {
		mustCreate(t, s, k, k)
	}
	res, err := s.List(ctx, "/a/b/", store.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := keysOf(res.KVs), "/a/b/1 /a/b/2 /a/b/sub/3"; got != want || res.More {
		t.Fatalf("List(/a/b/) = %s (more %v), want %s", got, res.More, want)
	}
	for _, kv := range res.KVs {
		if string(kv.Value) != kv.Key || kv.ModRevision == 0 || kv.CreateRevision == 0 {
			t.Fatalf("List item %+v lacks value or revisions", kv)
		}
	}
	if cur, _ := s.Revision(ctx); res.Revision != cur {
		t.Fatalf("List revision = %d, want current %d", res.Revision, cur)
	}
	empty, err := s.List(ctx, "/none/", store.ListOptions{})
	if err != nil || len(empty.KVs) != 0 || empty.More {
		t.Fatalf("List(/none/) = %+v, %v; want empty", empty, err)
	}
	// Deleted keys vanish from lists.
	if _, _, err := s.Delete(ctx, "/a/b/2", 0); err != nil {
		t.Fatal(err)
	}
	res, _ = s.List(ctx, "/a/", store.ListOptions{})
	if got, want := keysOf(res.KVs), "/a/b/1 /a/b/sub/3 /a/bc/1 /a/c"; got != want {
		t.Fatalf("List(/a/) = %s, want %s", got, want)
	}
}

func keysOf(kvs []store.KeyValue) string {
	var ks []string
	for _, kv := range kvs {
		ks = append(ks, kv.Key)
	}
	return strings.Join(ks, " ")
}

func testPaging(t *testing.T, h Harness) {
	s := h.New(t)
	ctx := ctxT(t)
	for i := 0; i < 20; i++ {
		mustCreate(t, s, fmt.Sprintf("/registry/pods/ns/p%02d", i), fmt.Sprint(i))
	}
	snap, err := s.List(ctx, "/registry/pods/", store.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var paged []store.KeyValue
	opts := store.ListOptions{Limit: 3}
	for page := 0; ; page++ {
		res, err := s.List(ctx, "/registry/pods/", opts)
		if err != nil {
			t.Fatalf("page %d: %v", page, err)
		}
		if page == 0 && res.Revision != snap.Revision {
			t.Fatalf("first page revision %d, want %d", res.Revision, snap.Revision)
		}
		if int64(len(res.KVs)) > opts.Limit {
			t.Fatalf("page %d has %d keys, limit %d", page, len(res.KVs), opts.Limit)
		}
		paged = append(paged, res.KVs...)
		// Writes between pages: updates, deletes and creates before and
		// after the cursor must not leak into this list.
		i := page * 3
		if _, err := s.Update(ctx, fmt.Sprintf("/registry/pods/ns/p%02d", 19-i%20), []byte("changed"), 0); err != nil && !errors.Is(err, store.ErrNotFound) {
			t.Fatal(err)
		}
		if _, _, err := s.Delete(ctx, fmt.Sprintf("/registry/pods/ns/p%02d", (i+4)%20), 0); err != nil && !errors.Is(err, store.ErrNotFound) {
			t.Fatal(err)
		}
		mustCreate(t, s, fmt.Sprintf("/registry/pods/ns/p%02d-new", (i+5)%20), "new")
		if !res.More {
			break
		}
		if res.Continue == "" {
			t.Fatalf("page %d: More without Continue", page)
		}
		opts.Revision, opts.Continue = res.Revision, res.Continue
	}
	if got, want := dump(paged), dump(snap.KVs); got != want {
		t.Fatalf("paged list differs from the snapshot:\n got %s\nwant %s", got, want)
	}
}

// testCountRemaining checks the count of the keys after a limited page, at
// the latest revision and at an older one, with deleted keys, updated keys
// and keys of a neighbouring prefix left out.
func testCountRemaining(t *testing.T, h Harness) {
	s := h.New(t)
	ctx := ctxT(t)
	for i := 0; i < 12; i++ {
		mustCreate(t, s, fmt.Sprintf("/registry/pods/ns/p%02d", i), "v")
	}
	mustCreate(t, s, "/registry/podsx/ns/other", "v")
	old, err := s.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{5, 9} {
		if _, _, err := s.Delete(ctx, fmt.Sprintf("/registry/pods/ns/p%02d", i), 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Update(ctx, "/registry/pods/ns/p07", []byte("w"), 0); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		opts     store.ListOptions
		want     int64
		wantMore bool
	}{
		{"latest", store.ListOptions{Limit: 3, CountRemaining: true}, 7, true},
		{"latest, continued", store.ListOptions{Limit: 3, Continue: "/registry/pods/ns/p06", CountRemaining: true}, 2, true},
		{"old revision", store.ListOptions{Revision: old, Limit: 3, CountRemaining: true}, 9, true},
		{"last page", store.ListOptions{Limit: 20, CountRemaining: true}, 0, false},
	} {
		res, err := s.List(ctx, "/registry/pods/", tc.opts)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if res.More != tc.wantMore || res.Remaining != tc.want {
			t.Errorf("%s: More %v Remaining %d, want %v %d", tc.name, res.More, res.Remaining, tc.wantMore, tc.want)
		}
	}
}

func dump(kvs []store.KeyValue) string {
	var b strings.Builder
	for _, kv := range kvs {
		fmt.Fprintf(&b, "%s=%s@%d/%d ", kv.Key, kv.Value, kv.CreateRevision, kv.ModRevision)
	}
	return b.String()
}

// collect reads events from ch until n have arrived.
func collect(t *testing.T, ch <-chan store.WatchResponse, n int) []store.Event {
	t.Helper()
	var evs []store.Event
	deadline := time.After(time.Minute)
	for len(evs) < n {
		select {
		case resp, ok := <-ch:
			if !ok {
				t.Fatalf("watch closed after %d of %d events", len(evs), n)
			}
			if resp.Err != nil {
				t.Fatalf("watch error after %d of %d events: %v", len(evs), n, resp.Err)
			}
			evs = append(evs, resp.Events...)
		case <-deadline:
			t.Fatalf("timed out with %d of %d events", len(evs), n)
		}
	}
	return evs
}

func testWatchConcurrent(t *testing.T, h Harness) {
	s := h.New(t)
	ctx := ctxT(t)
	start, _ := s.Revision(ctx)
	ch, err := s.Watch(ctx, "/registry/", start)
	if err != nil {
		t.Fatal(err)
	}
	other, err := s.Watch(ctx, "/registry/secrets/", 0)
	if err != nil {
		t.Fatal(err)
	}
	const writers, per = 8, 25
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < per; i++ {
				k := fmt.Sprintf("/registry/cm/w%d-%d", w, i%5)
				var err error
				switch {
				case i < 5:
					_, err = s.Create(ctx, k, []byte(fmt.Sprintf("%d-%d", w, i)))
				case i%7 == 0:
					_, _, err = s.Delete(ctx, k, 0)
					if errors.Is(err, store.ErrNotFound) {
						err = nil
					}
				default:
					_, err = s.Update(ctx, k, []byte(fmt.Sprintf("%d-%d", w, i)), 0)
					if errors.Is(err, store.ErrNotFound) {
						_, err = s.Create(ctx, k, []byte(fmt.Sprintf("%d-%d", w, i)))
					}
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	end, _ := s.Revision(ctx)
	evs := collect(t, ch, int(end-start))
	// Replay the events onto a model and check every invariant on the way.
	state := map[string]store.KeyValue{}
	for i, ev := range evs {
		if want := start + int64(i) + 1; ev.Revision() != want {
			t.Fatalf("event %d has revision %d, want %d (order or completeness broken)", i, ev.Revision(), want)
		}
		prev, had := state[ev.KV.Key]
		switch {
		case ev.Type == store.EventPut && !had:
			if !ev.IsCreate() || ev.PrevKV != nil {
				t.Fatalf("create event %+v: IsCreate %v, PrevKV %v", ev, ev.IsCreate(), ev.PrevKV)
			}
			state[ev.KV.Key] = ev.KV
		case ev.Type == store.EventPut:
			if ev.IsCreate() || ev.PrevKV == nil || dump([]store.KeyValue{*ev.PrevKV}) != dump([]store.KeyValue{prev}) || ev.KV.CreateRevision != prev.CreateRevision {
				t.Fatalf("update event %+v (prev %+v), want prev %+v", ev.KV, ev.PrevKV, prev)
			}
			state[ev.KV.Key] = ev.KV
		case ev.Type == store.EventDelete && had:
			if ev.PrevKV == nil || dump([]store.KeyValue{*ev.PrevKV}) != dump([]store.KeyValue{prev}) || ev.KV.Value != nil || ev.KV.CreateRevision != prev.CreateRevision {
				t.Fatalf("delete event %+v (prev %+v), want prev %+v", ev.KV, ev.PrevKV, prev)
			}
			delete(state, ev.KV.Key)
		default:
			t.Fatalf("event %d %+v on a key the model does not have", i, ev)
		}
	}
	res, err := s.List(ctx, "/registry/", store.ListOptions{Revision: end})
	if err != nil {
		t.Fatal(err)
	}
	var model []store.KeyValue
	for _, kv := range state {
		model = append(model, kv)
	}
	if got, want := sortedDump(res.KVs), sortedDump(model); got != want {
		t.Fatalf("list at %d differs from the watched model:\n list %s\nmodel %s", end, got, want)
	}
	// The watch on another prefix saw nothing.
	select {
	case resp := <-other:
		t.Fatalf("watch on /registry/secrets/ got %+v", resp)
	default:
	}
}

func sortedDump(kvs []store.KeyValue) string {
	parts := strings.Fields(dump(kvs))
	sortStrings(parts)
	return strings.Join(parts, " ")
}

func sortStrings(a []string) {
	for i := 1; i < len(a); i++ {
		for j := i; j > 0 && a[j] < a[j-1]; j-- {
			a[j], a[j-1] = a[j-1], a[j]
		}
	}
}

func testWatchFromPast(t *testing.T, h Harness) {
	s := h.New(t)
	ctx := ctxT(t)
	mustCreate(t, s, "/registry/secrets/before", "b") // so that first-1 is not 0 ("now")
	first := mustCreate(t, s, "/registry/cm/a", "1")
	for i := 0; i < 30; i++ {
		mustCreate(t, s, fmt.Sprintf("/registry/cm/x%02d", i), "x")
		if _, err := s.Update(ctx, "/registry/cm/a", []byte(fmt.Sprint(i+2)), 0); err != nil {
			t.Fatal(err)
		}
	}
	cur, _ := s.Revision(ctx)
	// From before everything, and from the middle.
	for _, from := range []int64{first.ModRevision - 1, first.ModRevision + 10} {
		ch, err := s.Watch(ctx, "/registry/cm/", from)
		if err != nil {
			t.Fatal(err)
		}
		evs := collect(t, ch, int(cur-from))
		for i, ev := range evs {
			if ev.Revision() != from+int64(i)+1 {
				t.Fatalf("watch from %d: event %d at revision %d", from, i, ev.Revision())
			}
		}
		// And live events keep coming after the history.
		live := mustCreate(t, s, fmt.Sprintf("/registry/cm/live-%d", from), "l")
		if evs := collect(t, ch, 1); evs[0].Revision() != live.ModRevision {
			t.Fatalf("live event at %d, want %d", evs[0].Revision(), live.ModRevision)
		}
		cur = live.ModRevision
	}
}

func testWatchCancel(t *testing.T, h Harness) {
	s := h.New(t)
	ctx, cancel := context.WithCancel(ctxT(t))
	ch, err := s.Watch(ctx, "/registry/", 0)
	if err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, "/registry/cm/a", "1")
	collect(t, ch, 1)
	cancel()
	deadline := time.After(time.Minute)
	for {
		select {
		case resp, ok := <-ch:
			if !ok {
				return
			}
			if resp.Err != nil && !errors.Is(resp.Err, context.Canceled) {
				t.Fatalf("watch ended with %v, want a plain close", resp.Err)
			}
		case <-deadline:
			t.Fatal("watch channel not closed after cancel")
		}
	}
}

func testCompaction(t *testing.T, h Harness) {
	s := h.New(t)
	ctx := ctxT(t)
	old := mustCreate(t, s, "/registry/cm/a", "1")
	gone := mustCreate(t, s, "/registry/cm/gone", "g")
	mid, err := s.Update(ctx, "/registry/cm/a", []byte("2"), 0)
	if err != nil {
		t.Fatal(err)
	}
	_, delRev, err := s.Delete(ctx, gone.Key, 0)
	if err != nil {
		t.Fatal(err)
	}
	keep := mustCreate(t, s, "/registry/cm/b", "b")
	if err := s.Compact(ctx, delRev); err != nil {
		t.Fatalf("Compact(%d) = %v", delRev, err)
	}
	// Compacting again at or below is a no-op.
	if err := s.Compact(ctx, old.ModRevision); err != nil {
		t.Fatalf("Compact(older) = %v, want nil", err)
	}
	var ce *store.CompactedError
	if _, err := s.Get(ctx, "/registry/cm/a", old.ModRevision); !errors.Is(err, store.ErrCompacted) || !errors.As(err, &ce) {
		t.Fatalf("Get at compacted revision = %v, want *CompactedError", err)
	}
	if _, err := s.List(ctx, "/registry/cm/", store.ListOptions{Revision: old.ModRevision}); !errors.Is(err, store.ErrCompacted) {
		t.Fatalf("List at compacted revision = %v, want ErrCompacted", err)
	}
	if err := watchErr(t, s, old.ModRevision); !errors.Is(err, store.ErrCompacted) {
		t.Fatalf("Watch from compacted revision = %v, want ErrCompacted", err)
	}
	// State at and after the compaction point is intact.
	got, err := s.Get(ctx, "/registry/cm/a", delRev)
	if err != nil || string(got.Value) != "2" || got.ModRevision != mid.ModRevision {
		t.Fatalf("Get at compaction point = %+v, %v", got, err)
	}
	if _, err := s.Get(ctx, gone.Key, delRev); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("deleted key at compaction point = %v, want ErrNotFound", err)
	}
	res, err := s.List(ctx, "/registry/cm/", store.ListOptions{Revision: delRev})
	if err != nil || keysOf(res.KVs) != "/registry/cm/a" {
		t.Fatalf("List at compaction point = %s, %v", keysOf(res.KVs), err)
	}
	res, err = s.List(ctx, "/registry/cm/", store.ListOptions{})
	if err != nil || keysOf(res.KVs) != "/registry/cm/a /registry/cm/b" {
		t.Fatalf("List latest = %s, %v", keysOf(res.KVs), err)
	}
	ch, err := s.Watch(ctx, "/registry/cm/", delRev)
	if err != nil {
		t.Fatalf("Watch from compaction point = %v", err)
	}
	if evs := collect(t, ch, 1); evs[0].Revision() != keep.ModRevision {
		t.Fatalf("watch from compaction point got revision %d, want %d", evs[0].Revision(), keep.ModRevision)
	}
}

// watchErr returns the error of a watch from rev, at the call or as its
// first response.
func watchErr(t *testing.T, s store.Store, rev int64) error {
	t.Helper()
	ch, err := s.Watch(ctxT(t), "/registry/", rev)
	if err != nil {
		return err
	}
	select {
	case resp, ok := <-ch:
		if !ok {
			return errors.New("closed without error")
		}
		if resp.Err == nil {
			return fmt.Errorf("got events %+v, want an error", resp.Events)
		}
		return resp.Err
	case <-time.After(time.Minute):
		return errors.New("no error within a minute")
	}
}

func testSlowWatcher(t *testing.T, h Harness) {
	s := h.New(t)
	ctx := ctxT(t)
	ch, err := s.Watch(ctx, "/registry/", 0)
	if err != nil {
		t.Fatal(err)
	}
	// Nobody reads ch while writers write far more than its backlog may
	// hold: the writers must finish (not wait for the watcher).
	n := h.SlowWatcherEvents
	var wg sync.WaitGroup
	const writers = 16
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += writers {
				if _, err := s.Create(ctx, fmt.Sprintf("/registry/cm/k%06d", i), []byte("0123456789abcdef")); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	// The watcher is cut off: it receives some events, then ErrWatcherTooSlow,
	// then its channel closes.
	var got int
	var final error
	deadline := time.After(time.Minute)
loop:
	for {
		select {
		case resp, ok := <-ch:
			if !ok {
				break loop
			}
			got += len(resp.Events)
			if resp.Err != nil {
				final = resp.Err
			}
		case <-deadline:
			t.Fatalf("watch not ended after overflow (got %d events)", got)
		}
	}
	if !errors.Is(final, store.ErrWatcherTooSlow) || got >= n {
		t.Fatalf("slow watcher got %d of %d events and error %v, want ErrWatcherTooSlow", got, n, final)
	}
	// It recovers by listing and watching from the list's revision.
	res, err := s.List(ctx, "/registry/cm/", store.ListOptions{})
	if err != nil || len(res.KVs) != n {
		t.Fatalf("re-list = %d keys, %v; want %d", len(res.KVs), err, n)
	}
	ch, err = s.Watch(ctx, "/registry/", res.Revision)
	if err != nil {
		t.Fatal(err)
	}
	kv := mustCreate(t, s, "/registry/cm/after", "x")
	if evs := collect(t, ch, 1); evs[0].Revision() != kv.ModRevision {
		t.Fatalf("re-watch got revision %d, want %d", evs[0].Revision(), kv.ModRevision)
	}
}

func testRestart(t *testing.T, h Harness) {
	s := h.New(t)
	ctx := ctxT(t)
	var last store.KeyValue
	for i := 0; i < 10; i++ {
		last = mustCreate(t, s, fmt.Sprintf("/registry/cm/r%d", i), fmt.Sprint(i))
	}
	mid := last.ModRevision - 5
	if _, _, err := s.Delete(ctx, "/registry/cm/r0", 0); err != nil {
		t.Fatal(err)
	}
	before, _ := s.Revision(ctx)
	s = h.Reopen(t, s)
	after, err := s.Revision(ctx)
	if err != nil || after < before {
		t.Fatalf("Revision after restart = %d, %v; want >= %d", after, err, before)
	}
	res, err := s.List(ctx, "/registry/cm/", store.ListOptions{})
	if err != nil || len(res.KVs) != 9 {
		t.Fatalf("List after restart = %d keys, %v; want 9", len(res.KVs), err)
	}
	kv := mustCreate(t, s, "/registry/cm/new", "n")
	if kv.ModRevision <= before {
		t.Fatalf("write after restart got revision %d, want > %d", kv.ModRevision, before)
	}
	// A watcher resumes from a revision before the restart.
	ch, err := s.Watch(ctx, "/registry/cm/", mid)
	if err != nil {
		t.Fatal(err)
	}
	evs := collect(t, ch, 7) // creates mid+1..last, the delete, the new key
	if evs[0].Revision() != mid+1 || evs[len(evs)-1].Revision() != kv.ModRevision {
		t.Fatalf("resumed watch revisions %d..%d, want %d..%d", evs[0].Revision(), evs[len(evs)-1].Revision(), mid+1, kv.ModRevision)
	}
	if _, err := s.Get(ctx, "/registry/cm/r3", 0); err != nil {
		t.Fatalf("Get after restart = %v", err)
	}
}

func testClosed(t *testing.T, h Harness) {
	s := h.New(t)
	ctx := ctxT(t)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
	if _, err := s.Get(ctx, "/a", 0); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Get after Close = %v, want ErrClosed", err)
	}
	if _, err := s.Create(ctx, "/a", nil); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Create after Close = %v, want ErrClosed", err)
	}
	if _, err := s.Watch(ctx, "/a/", 0); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Watch after Close = %v, want ErrClosed", err)
	}
}
