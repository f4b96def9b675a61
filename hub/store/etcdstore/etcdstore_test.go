package etcdstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/outpost-mesh/outpost/hub/store"
	"github.com/outpost-mesh/outpost/hub/store/etcdstore"
	"github.com/outpost-mesh/outpost/hub/store/etcdstore/etcdtest"
	"github.com/outpost-mesh/outpost/hub/store/storetest"

	"github.com/outpost-mesh/outpost/internal/wait"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// conformanceWatchEvents is the watch backlog of the stores the conformance
// suite opens: small, so that its slow watcher overflows after a few hundred
// writes rather than ten thousand.
const conformanceWatchEvents = 200

func TestConformance(t *testing.T) {
	var mu sync.Mutex
	servers := map[store.Store]*etcdtest.Server{}
	limit := func(c *etcdstore.Config) { c.Watch.MaxEvents = conformanceWatchEvents }
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) store.Store {
			s, srv := newStore(t, limit)
			mu.Lock()
			servers[s] = srv
			mu.Unlock()
			return s
		},
		Reopen: func(t *testing.T, s store.Store) store.Store {
			mu.Lock()
			srv := servers[s]
			delete(servers, s)
			mu.Unlock()
			if srv == nil {
				t.Fatalf("Reopen of a store the harness did not open")
			}
			if err := s.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			srv.Restart(t)
			s = open(t, srv, limit)
			mu.Lock()
			servers[s] = srv
			mu.Unlock()
			return s
		},
		SlowWatcherEvents: 3 * conformanceWatchEvents,
	})
}

// waitLong bounds every blocking step of a test; nothing here sleeps.
const waitLong = 30 * time.Second

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*waitLong)
	t.Cleanup(cancel)
	return ctx
}

// open connects a store to srv, closed at cleanup.
func open(t *testing.T, srv *etcdtest.Server, mutate ...func(*etcdstore.Config)) *etcdstore.Store {
	t.Helper()
	cfg := etcdstore.DefaultConfig()
	cfg.Endpoints = srv.Endpoints()
	cfg.DialTimeout = waitLong
	for _, m := range mutate {
		m(&cfg)
	}
	s, err := etcdstore.New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// newStore starts a fresh etcd and connects a store to it.
func newStore(t *testing.T, mutate ...func(*etcdstore.Config)) (*etcdstore.Store, *etcdtest.Server) {
	t.Helper()
	srv := etcdtest.Start(t, t.TempDir())
	return open(t, srv, mutate...), srv
}

func mustCreate(t *testing.T, s store.Store, key, value string) store.KeyValue {
	t.Helper()
	kv, err := s.Create(testCtx(t), key, []byte(value))
	if err != nil {
		t.Fatalf("Create(%q): %v", key, err)
	}
	return kv
}

func mustRevision(t *testing.T, s store.Store) int64 {
	t.Helper()
	rev, err := s.Revision(testCtx(t))
	if err != nil {
		t.Fatalf("Revision: %v", err)
	}
	return rev
}

// recv returns the next response on ch, failing t if none comes in time.
// ok is false when ch is closed.
func recv(t *testing.T, ch <-chan store.WatchResponse) (store.WatchResponse, bool) {
	t.Helper()
	timer := time.NewTimer(waitLong)
	defer timer.Stop()
	select {
	case wr, ok := <-ch:
		return wr, ok
	case <-timer.C:
		t.Fatalf("no watch response within %v", waitLong)
		return store.WatchResponse{}, false
	}
}

// recvEvents collects n events from ch, failing t on an error or a close.
func recvEvents(t *testing.T, ch <-chan store.WatchResponse, n int) []store.Event {
	t.Helper()
	var evs []store.Event
	for len(evs) < n {
		wr, ok := recv(t, ch)
		if !ok {
			t.Fatalf("watch closed after %d of %d events", len(evs), n)
		}
		if wr.Err != nil {
			t.Fatalf("watch error after %d of %d events: %v", len(evs), n, wr.Err)
		}
		evs = append(evs, wr.Events...)
	}
	if len(evs) != n {
		t.Fatalf("got %d events, want %d: %v", len(evs), n, evs)
	}
	return evs
}

// finalErr drains ch until it closes and returns the error it ended with.
func finalErr(t *testing.T, ch <-chan store.WatchResponse) error {
	t.Helper()
	var err error
	for {
		wr, ok := recv(t, ch)
		if !ok {
			return err
		}
		if wr.Err != nil {
			if err != nil {
				t.Fatalf("second error after %v: %v", err, wr.Err)
			}
			err = wr.Err
		}
	}
}

func TestCRUD(t *testing.T) {
	s, _ := newStore(t)
	ctx := testCtx(t)

	c, err := s.Create(ctx, "/a/x", []byte("v1"))
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if c.Key != "/a/x" || string(c.Value) != "v1" || c.CreateRevision == 0 || c.CreateRevision != c.ModRevision {
		t.Fatalf("Create = %+v, want key /a/x, value v1, CreateRevision == ModRevision > 0", c)
	}
	if rev := mustRevision(t, s); rev != c.ModRevision {
		t.Fatalf("Revision() = %d, want %d", rev, c.ModRevision)
	}
	g, err := s.Get(ctx, "/a/x", 0)
	if err != nil || !equalKV(g, c) {
		t.Fatalf("Get = %+v, %v, want %+v", g, err, c)
	}

	u, err := s.Update(ctx, "/a/x", []byte("v2"), c.ModRevision)
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	if string(u.Value) != "v2" || u.CreateRevision != c.CreateRevision || u.ModRevision <= c.ModRevision {
		t.Fatalf("Update = %+v, want value v2, CreateRevision %d, ModRevision > %d", u, c.CreateRevision, c.ModRevision)
	}
	u2, err := s.Update(ctx, "/a/x", []byte("v3"), 0)
	if err != nil || u2.ModRevision <= u.ModRevision || u2.CreateRevision != c.CreateRevision {
		t.Fatalf("Update(any) = %+v, %v", u2, err)
	}
	if old, err := s.Get(ctx, "/a/x", c.ModRevision); err != nil || string(old.Value) != "v1" {
		t.Fatalf("Get at %d = %+v, %v, want v1", c.ModRevision, old, err)
	}

	prev, rev, err := s.Delete(ctx, "/a/x", u2.ModRevision)
	if err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if !equalKV(prev, u2) || rev <= u2.ModRevision {
		t.Fatalf("Delete = %+v, %d, want %+v and a revision > %d", prev, rev, u2, u2.ModRevision)
	}
	if _, err := s.Get(ctx, "/a/x", 0); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get after delete: %v, want ErrNotFound", err)
	}
	if _, err := s.Get(ctx, "/a/x", rev-1); err != nil {
		t.Fatalf("Get before delete at %d: %v", rev-1, err)
	}
	again := mustCreate(t, s, "/a/x", "")
	if again.CreateRevision <= rev || len(again.Value) != 0 {
		t.Fatalf("re-Create = %+v, want a new CreateRevision > %d and an empty value", again, rev)
	}
}

func TestConflicts(t *testing.T) {
	s, _ := newStore(t)
	ctx := testCtx(t)
	c := mustCreate(t, s, "/k/a", "one")

	_, err := s.Create(ctx, "/k/a", []byte("two"))
	var ce *store.ConflictError
	if !errors.As(err, &ce) || !errors.Is(err, store.ErrKeyExists) || errors.Is(err, store.ErrConflict) {
		t.Fatalf("Create existing: %v, want a *ConflictError matching only ErrKeyExists", err)
	}
	if !ce.Exists || ce.Key != "/k/a" || !equalKV(ce.Current, c) {
		t.Fatalf("Create existing: %+v, want Exists and Current %+v", ce, c)
	}

	u := must(s.Update(ctx, "/k/a", []byte("two"), c.ModRevision))(t)
	for _, op := range []struct {
		name string
		call func() error
	}{
		{"Update", func() error { _, err := s.Update(ctx, "/k/a", []byte("x"), c.ModRevision); return err }},
		{"Delete", func() error { _, _, err := s.Delete(ctx, "/k/a", c.ModRevision); return err }},
	} {
		err := op.call()
		ce = nil
		if !errors.As(err, &ce) || !errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrKeyExists) {
			t.Fatalf("%s stale: %v, want a *ConflictError matching only ErrConflict", op.name, err)
		}
		if ce.Exists || ce.Expected != c.ModRevision || !equalKV(ce.Current, u) {
			t.Fatalf("%s stale: %+v, want Expected %d, Current %+v", op.name, ce, c.ModRevision, u)
		}
	}
	if g := must(s.Get(ctx, "/k/a", 0))(t); !equalKV(g, u) {
		t.Fatalf("a failed write changed the key: %+v, want %+v", g, u)
	}

	for _, modRev := range []int64{0, u.ModRevision} {
		if _, err := s.Update(ctx, "/k/missing", []byte("x"), modRev); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Update missing (modRev %d): %v, want ErrNotFound", modRev, err)
		}
		if _, _, err := s.Delete(ctx, "/k/missing", modRev); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Delete missing (modRev %d): %v, want ErrNotFound", modRev, err)
		}
	}
	if _, err := s.Get(ctx, "/k/missing", 0); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Get missing: %v, want ErrNotFound", err)
	}
}

func TestListPagingIsConsistentAcrossWrites(t *testing.T) {
	s, _ := newStore(t)
	ctx := testCtx(t)
	var want []string
	for i := range 10 {
		k := fmt.Sprintf("/p/%02d", i)
		mustCreate(t, s, k, "v")
		want = append(want, k)
	}
	// Outside the prefix: a sibling sharing its bytes, and a parent.
	mustCreate(t, s, "/pq/x", "v")
	mustCreate(t, s, "/p", "v")

	all := must(s.List(ctx, "/p/", store.ListOptions{}))(t)
	if got := keys(all.KVs); strings.Join(got, ",") != strings.Join(want, ",") || all.More || all.Continue != "" {
		t.Fatalf("List(/p/) = %v more=%v continue=%q, want %v", got, all.More, all.Continue, want)
	}
	if all.Revision != mustRevision(t, s) {
		t.Fatalf("List revision %d, want current %d", all.Revision, mustRevision(t, s))
	}

	var got []string
	opts := store.ListOptions{Limit: 3}
	for page := 0; ; page++ {
		res := must(s.List(ctx, "/p/", opts))(t)
		if page == 0 {
			opts.Revision = res.Revision
		} else if res.Revision != opts.Revision {
			t.Fatalf("page %d at revision %d, want %d", page, res.Revision, opts.Revision)
		}
		got = append(got, keys(res.KVs)...)
		if !res.More {
			if res.Continue != "" {
				t.Fatalf("last page has Continue %q", res.Continue)
			}
			break
		}
		if len(res.KVs) != 3 || res.Continue <= res.KVs[len(res.KVs)-1].Key {
			t.Fatalf("page %d = %v continue %q, want 3 keys and the next key", page, keys(res.KVs), res.Continue)
		}
		opts.Continue = res.Continue
		// Writes between pages, to keys not read yet, must not show.
		mustCreate(t, s, fmt.Sprintf("/p/%02da", page*3+4), "new")
		if _, _, err := s.Delete(ctx, fmt.Sprintf("/p/%02d", 9-page), 0); err != nil {
			t.Fatalf("Delete between pages: %v", err)
		}
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("paged list = %v, want %v", got, want)
	}

	// An exact fit has no More.
	res := must(s.List(ctx, "/p/", store.ListOptions{Revision: opts.Revision, Limit: 10}))(t)
	if len(res.KVs) != 10 || res.More {
		t.Fatalf("List(limit 10 of 10) = %d keys more=%v", len(res.KVs), res.More)
	}
	if res := must(s.List(ctx, "/none/", store.ListOptions{}))(t); len(res.KVs) != 0 || res.More {
		t.Fatalf("List(/none/) = %+v, want empty", res)
	}
}

func TestWatchOrderAndPrevKV(t *testing.T) {
	s, _ := newStore(t)
	ctx := testCtx(t)
	mustCreate(t, s, "/w/before", "old")
	start := mustRevision(t, s)

	live, err := s.Watch(ctx, "/w/", 0)
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	c := mustCreate(t, s, "/w/a", "1")
	mustCreate(t, s, "/wx/ignored", "x") // shares bytes with the prefix, not under it
	u := must(s.Update(ctx, "/w/a", []byte("2"), c.ModRevision))(t)
	prev, drev, err := s.Delete(ctx, "/w/a", 0)
	if err != nil {
		t.Fatalf("Delete: %v", err)
	}
	c2 := mustCreate(t, s, "/w/a", "3")

	want := []store.Event{
		{Type: store.EventPut, KV: c},
		{Type: store.EventPut, KV: u, PrevKV: &c},
		{Type: store.EventDelete, KV: store.KeyValue{Key: "/w/a", CreateRevision: c.CreateRevision, ModRevision: drev}, PrevKV: &prev},
		{Type: store.EventPut, KV: c2},
	}
	checkEvents(t, "live watch", recvEvents(t, live, len(want)), want)

	// Replayed from history: the same events, and not the one at start.
	replay, err := s.Watch(ctx, "/w/", start)
	if err != nil {
		t.Fatalf("Watch(%d): %v", start, err)
	}
	checkEvents(t, "replay", recvEvents(t, replay, len(want)), want)

	// A watch at the revision of the first event skips it.
	from := must(s.Watch(ctx, "/w/", c.ModRevision))(t)
	checkEvents(t, "watch from first event", recvEvents(t, from, len(want)-1), want[1:])
}

func checkEvents(t *testing.T, name string, got, want []store.Event) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d events %v, want %d", name, len(got), got, len(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.Type != w.Type || !equalKV(g.KV, w.KV) || (g.PrevKV == nil) != (w.PrevKV == nil) ||
			(g.PrevKV != nil && !equalKV(*g.PrevKV, *w.PrevKV)) {
			t.Fatalf("%s: event %d = %s, want %s", name, i, fmtEvent(g), fmtEvent(w))
		}
		if g.IsCreate() != w.IsCreate() {
			t.Fatalf("%s: event %d IsCreate = %v, want %v", name, i, g.IsCreate(), w.IsCreate())
		}
	}
}

func TestCompaction(t *testing.T) {
	s, srv := newStore(t)
	ctx := testCtx(t)
	first := mustCreate(t, s, "/c/a", "1")
	mid := must(s.Update(ctx, "/c/a", []byte("2"), 0))(t)
	last := must(s.Update(ctx, "/c/a", []byte("3"), 0))(t)

	if err := s.Compact(ctx, mid.ModRevision); err != nil {
		t.Fatalf("Compact(%d): %v", mid.ModRevision, err)
	}
	checkCompacted := func(name string, s store.Store) {
		t.Helper()
		for _, op := range []struct {
			name string
			call func() error
		}{
			{"Get", func() error { _, err := s.Get(ctx, "/c/a", first.ModRevision); return err }},
			{"List", func() error {
				_, err := s.List(ctx, "/c/", store.ListOptions{Revision: first.ModRevision})
				return err
			}},
			{"Watch", func() error { _, err := s.Watch(ctx, "/c/", first.ModRevision); return err }},
		} {
			err := op.call()
			var ce *store.CompactedError
			if !errors.As(err, &ce) || !errors.Is(err, store.ErrCompacted) {
				t.Fatalf("%s: %s at %d: %v, want a *CompactedError", name, op.name, first.ModRevision, err)
			}
			if ce.Requested != first.ModRevision || ce.Compacted != mid.ModRevision {
				t.Fatalf("%s: %s: %+v, want Requested %d, Compacted %d", name, op.name, ce, first.ModRevision, mid.ModRevision)
			}
		}
	}
	checkCompacted("same store", s)
	// A second client learns the compacted revision from etcd itself.
	checkCompacted("other store", open(t, srv))

	if g, err := s.Get(ctx, "/c/a", mid.ModRevision); err != nil || string(g.Value) != "2" {
		t.Fatalf("Get at the compacted revision = %+v, %v, want value 2", g, err)
	}
	w := must(s.Watch(ctx, "/c/", mid.ModRevision))(t)
	checkEvents(t, "watch from compacted revision", recvEvents(t, w, 1), []store.Event{{Type: store.EventPut, KV: last, PrevKV: &mid}})

	for _, rev := range []int64{0, first.ModRevision, mid.ModRevision} {
		if err := s.Compact(ctx, rev); err != nil {
			t.Fatalf("Compact(%d) at or below the compacted revision: %v, want nil", rev, err)
		}
	}
	if err := s.Compact(ctx, last.ModRevision); err != nil {
		t.Fatalf("Compact(current): %v", err)
	}
}

func TestFutureRevision(t *testing.T) {
	s, _ := newStore(t)
	ctx := testCtx(t)
	mustCreate(t, s, "/f/a", "1")
	future := mustRevision(t, s) + 5
	for _, op := range []struct {
		name string
		call func() error
	}{
		{"Get", func() error { _, err := s.Get(ctx, "/f/a", future); return err }},
		{"List", func() error { _, err := s.List(ctx, "/f/", store.ListOptions{Revision: future}); return err }},
		{"Watch", func() error { _, err := s.Watch(ctx, "/f/", future); return err }},
		{"Compact", func() error { return s.Compact(ctx, future) }},
	} {
		if err := op.call(); !errors.Is(err, store.ErrFutureRevision) {
			t.Errorf("%s at %d: %v, want ErrFutureRevision", op.name, future, err)
		}
	}
}

func TestBadInputIsRejectedWithoutEtcd(t *testing.T) {
	s, srv := newStore(t)
	// With etcd gone, a call that went to it would block until ctx ends.
	srv.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	big := make([]byte, store.MaxValueSize+1)
	for _, tc := range []struct {
		name string
		call func() error
		want error
	}{
		{"Get empty key", func() error { _, err := s.Get(ctx, "", 0); return err }, store.ErrInvalidKey},
		{"Get relative key", func() error { _, err := s.Get(ctx, "a/b", 0); return err }, store.ErrInvalidKey},
		{"Get trailing slash", func() error { _, err := s.Get(ctx, "/a/", 0); return err }, store.ErrInvalidKey},
		{"Get negative rev", func() error { _, err := s.Get(ctx, "/a", -1); return err }, store.ErrInvalidArgument},
		{"List no slash", func() error { _, err := s.List(ctx, "/a", store.ListOptions{}); return err }, store.ErrInvalidKey},
		{"List negative limit", func() error { _, err := s.List(ctx, "/a/", store.ListOptions{Limit: -1}); return err }, store.ErrInvalidArgument},
		{"List foreign continue", func() error { _, err := s.List(ctx, "/a/", store.ListOptions{Continue: "/b/x"}); return err }, store.ErrInvalidArgument},
		{"Create control char", func() error { _, err := s.Create(ctx, "/a\n", nil); return err }, store.ErrInvalidKey},
		{"Create too large", func() error { _, err := s.Create(ctx, "/a", big); return err }, store.ErrValueTooLarge},
		{"Update empty segment", func() error { _, err := s.Update(ctx, "/a//b", nil, 0); return err }, store.ErrInvalidKey},
		{"Update too large", func() error { _, err := s.Update(ctx, "/a", big, 0); return err }, store.ErrValueTooLarge},
		{"Update negative rev", func() error { _, err := s.Update(ctx, "/a", nil, -2); return err }, store.ErrInvalidArgument},
		{"Delete bad key", func() error { _, _, err := s.Delete(ctx, "a", 0); return err }, store.ErrInvalidKey},
		{"Delete negative rev", func() error { _, _, err := s.Delete(ctx, "/a", -1); return err }, store.ErrInvalidArgument},
		{"Watch key as prefix", func() error { _, err := s.Watch(ctx, "/a", 0); return err }, store.ErrInvalidKey},
		{"Watch negative rev", func() error { _, err := s.Watch(ctx, "/a/", -1); return err }, store.ErrInvalidArgument},
		{"Compact negative", func() error { return s.Compact(ctx, -1) }, store.ErrInvalidArgument},
	} {
		if err := tc.call(); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if ctx.Err() != nil {
		t.Fatalf("bad input waited for etcd")
	}
}

func TestLargestValue(t *testing.T) {
	s, _ := newStore(t)
	ctx := testCtx(t)
	v := bytes.Repeat([]byte{'x'}, store.MaxValueSize)
	c, err := s.Create(ctx, "/big/"+strings.Repeat("k", store.MaxKeySize-5), v)
	if err != nil {
		t.Fatalf("Create(%d bytes): %v", len(v), err)
	}
	if g := must(s.Get(ctx, c.Key, 0))(t); !bytes.Equal(g.Value, v) {
		t.Fatalf("Get returned %d bytes, want %d", len(g.Value), len(v))
	}
}

func TestSlowWatcherIsCutOffWithoutBlockingWriters(t *testing.T) {
	s, _ := newStore(t, func(c *etcdstore.Config) { c.Watch.MaxEvents = 10 })
	ctx := testCtx(t)
	slow := must(s.Watch(ctx, "/s/", 0))(t)
	const n = 100
	for i := range n {
		// Each write returns although the watcher reads nothing.
		mustCreate(t, s, fmt.Sprintf("/s/%03d", i), "v")
	}
	// The overflow cancelled the etcd watch at once: only the goroutine
	// holding the error for the consumer is left.
	wait.For(t, waitLong, "the etcd watch pump to exit", func() (bool, string) {
		g := watchGoroutines()
		return len(g) == 1 && strings.Contains(g[0], "fanout.(*Queue).Run"), fmt.Sprintf("%d watch goroutines", len(g))
	})
	var got int
	var err error
	for {
		wr, ok := recv(t, slow)
		if !ok {
			break
		}
		got += len(wr.Events)
		if wr.Err != nil {
			err = wr.Err
		}
	}
	if !errors.Is(err, store.ErrWatcherTooSlow) || got >= n {
		t.Fatalf("slow watcher: %d events then %v, want fewer than %d and ErrWatcherTooSlow", got, err, n)
	}
	// Its etcd watch was cancelled and its goroutines are gone, though the
	// store and the watch's context live on.
	wait.For(t, waitLong, "watch goroutines to exit", func() (bool, string) {
		g := watchGoroutines()
		return len(g) == 0, fmt.Sprintf("%d watch goroutines", len(g))
	})
}

func TestWatchEndsWithContext(t *testing.T) {
	s, _ := newStore(t)
	ctx, cancel := context.WithCancel(testCtx(t))
	w := must(s.Watch(ctx, "/x/", 0))(t)
	cancel()
	if err := finalErr(t, w); err != nil {
		t.Fatalf("watch ended by its context with %v, want no error", err)
	}
}

func TestCloseEndsWatchesAndLeaksNothing(t *testing.T) {
	srv := etcdtest.Start(t, t.TempDir())
	// The running server's goroutines are not ours to check.
	warm := open(t, srv)
	mustCreate(t, warm, "/warm", "v")
	warm.Close()
	ignore := goleak.IgnoreCurrent()

	cfg := etcdstore.DefaultConfig()
	cfg.Endpoints = srv.Endpoints()
	s, err := etcdstore.New(testCtx(t), cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	ctx := testCtx(t)
	idle := must(s.Watch(ctx, "/l/", 0))(t)
	busy := must(s.Watch(ctx, "/l/", 0))(t) // never read: its queue holds events
	c := mustCreate(t, s, "/l/a", "v")
	checkEvents(t, "idle", recvEvents(t, idle, 1), []store.Event{{Type: store.EventPut, KV: c}})
	_ = busy

	if g := watchGoroutines(); len(g) != 4 {
		t.Fatalf("%d watch goroutines for two watches, want 4:\n%s", len(g), strings.Join(g, "\n\n"))
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	// At once, with no retry: Close returns only after they have exited.
	if g := watchGoroutines(); len(g) > 0 {
		t.Fatalf("watch goroutines running after Close returned:\n%s", strings.Join(g, "\n\n"))
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	for name, ch := range map[string]<-chan store.WatchResponse{"idle": idle, "busy": busy} {
		select {
		case _, ok := <-ch:
			for ok {
				_, ok = <-ch
			}
		default:
			t.Fatalf("%s watch channel not closed after Close returned", name)
		}
	}
	goleak.VerifyNone(t, ignore)

	calls := map[string]func() error{
		"Get":      func() error { _, err := s.Get(ctx, "/l/a", 0); return err },
		"List":     func() error { _, err := s.List(ctx, "/l/", store.ListOptions{}); return err },
		"Revision": func() error { _, err := s.Revision(ctx); return err },
		"Create":   func() error { _, err := s.Create(ctx, "/l/b", nil); return err },
		"Update":   func() error { _, err := s.Update(ctx, "/l/a", nil, 0); return err },
		"Delete":   func() error { _, _, err := s.Delete(ctx, "/l/a", 0); return err },
		"Watch":    func() error { _, err := s.Watch(ctx, "/l/", 0); return err },
		"Compact":  func() error { return s.Compact(ctx, 1) },
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, store.ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
}

func TestRevisionsIncreaseAcrossRestart(t *testing.T) {
	srv := etcdtest.Start(t, t.TempDir())
	s := open(t, srv)
	c := mustCreate(t, s, "/r/a", "v")
	s.Close()

	srv.Restart(t)
	s = open(t, srv)
	if g, err := s.Get(testCtx(t), "/r/a", 0); err != nil || !equalKV(g, c) {
		t.Fatalf("Get after restart = %+v, %v, want %+v", g, err, c)
	}
	if rev := mustRevision(t, s); rev < c.ModRevision {
		t.Fatalf("Revision after restart = %d, want >= %d", rev, c.ModRevision)
	}
	if c2 := mustCreate(t, s, "/r/b", "v"); c2.ModRevision <= c.ModRevision {
		t.Fatalf("Create after restart at %d, want > %d", c2.ModRevision, c.ModRevision)
	}
}

func TestNewFailsWhenEtcdIsUnreachable(t *testing.T) {
	srv := etcdtest.Start(t, t.TempDir())
	eps := srv.Endpoints()
	srv.Stop()
	cfg := etcdstore.DefaultConfig()
	cfg.Endpoints = eps
	cfg.DialTimeout = 200 * time.Millisecond
	if s, err := etcdstore.New(context.Background(), cfg); err == nil {
		s.Close()
		t.Fatalf("New with etcd stopped succeeded")
	}
}

func TestConfigValidate(t *testing.T) {
	if err := etcdstore.DefaultConfig().Validate(); err != nil {
		t.Fatalf("DefaultConfig().Validate() = %v", err)
	}
	for name, mutate := range map[string]func(*etcdstore.Config){
		"no endpoints":   func(c *etcdstore.Config) { c.Endpoints = nil },
		"empty endpoint": func(c *etcdstore.Config) { c.Endpoints = []string{""} },
		"bad scheme":     func(c *etcdstore.Config) { c.Endpoints = []string{"ftp://x:1"} },
		"negative dial":  func(c *etcdstore.Config) { c.DialTimeout = -1 },
		"negative watch": func(c *etcdstore.Config) { c.Watch.MaxEvents = -1 },
	} {
		cfg := etcdstore.DefaultConfig()
		mutate(&cfg)
		if err := cfg.Validate(); err == nil {
			t.Errorf("Validate() with %s = nil, want an error", name)
		}
		if _, err := etcdstore.New(context.Background(), cfg); err == nil {
			t.Errorf("New with %s succeeded", name)
		}
	}
}

// watchGoroutines returns the stacks of the goroutines running the store's
// watch code.
func watchGoroutines() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "hub/store/etcdstore.(*Store)") || strings.Contains(g, "hub/store/internal/fanout.") {
			out = append(out, g)
		}
	}
	return out
}

func must[T any](v T, err error) func(*testing.T) T {
	return func(t *testing.T) T {
		t.Helper()
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return v
	}
}

func equalKV(a, b store.KeyValue) bool {
	return a.Key == b.Key && bytes.Equal(a.Value, b.Value) &&
		a.CreateRevision == b.CreateRevision && a.ModRevision == b.ModRevision
}

func keys(kvs []store.KeyValue) []string {
	out := make([]string, len(kvs))
	for i, kv := range kvs {
		out[i] = kv.Key
	}
	return out
}

func fmtEvent(e store.Event) string {
	s := fmt.Sprintf("%s %s@%d/%d %q", e.Type, e.KV.Key, e.KV.CreateRevision, e.KV.ModRevision, e.KV.Value)
	if e.PrevKV != nil {
		s += fmt.Sprintf(" prev %d/%d %q", e.PrevKV.CreateRevision, e.PrevKV.ModRevision, e.PrevKV.Value)
	}
	return s
}
