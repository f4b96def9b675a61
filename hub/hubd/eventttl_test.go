package hubd

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/outpost-mesh/outpost/hub/store"
	"github.com/outpost-mesh/outpost/hub/store/badgerstore"
)

func TestExpiredThrough(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	samples := []revisionAt{{10, t0}, {20, t0.Add(time.Minute)}, {30, t0.Add(2 * time.Minute)}}
	for _, tc := range []struct {
		now      time.Duration
		want     int64
		wantKept int
	}{
		{59 * time.Minute, 0, 3},  // none is an hour old
		{60 * time.Minute, 10, 3}, // the first just is
		{61*time.Minute + time.Second, 20, 2},
		{5 * time.Hour, 30, 1}, // the last sample stays: it is the cutoff
	} {
		got, kept := expiredThrough(samples, t0.Add(tc.now), time.Hour)
		if got != tc.want || len(kept) != tc.wantKept {
			t.Errorf("expiredThrough(at +%v) = %d, %d samples kept; want %d, %d", tc.now, got, len(kept), tc.want, tc.wantKept)
		}
	}
}

// TestEventExpiry: an event is deleted a TTL after its last write, in
// either API group's storage, and one written again is kept.
func TestEventExpiry(t *testing.T) {
	ctx := context.Background()
	st, err := badgerstore.Open(badgerstore.DefaultConfig(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	mustCreate := func(key string) {
		t.Helper()
		if _, err := st.Create(ctx, key, []byte("e")); err != nil {
			t.Fatal(err)
		}
	}
	exists := func(key string) bool {
		t.Helper()
		_, err := st.Get(ctx, key, 0)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			t.Fatal(err)
		}
		return err == nil
	}
	e := &eventExpiry{st: st, ttl: time.Hour}
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	old, oldV1, repeated := "/registry/events/default/a.1", "/registry/events.k8s.io/events/default/b.1", "/registry/events/default/c.1"
	mustCreate(old)
	mustCreate(oldV1)
	mustCreate(repeated)
	mustCreate("/registry/configmaps/default/not-an-event")
	if n, err := e.sweep(ctx, t0); err != nil || n != 0 {
		t.Fatalf("first sweep = %d, %v; want nothing deleted", n, err)
	}
	// The repeated event is written again, after the first sweep's sample.
	if _, err := st.Update(ctx, repeated, []byte("e x2"), 0); err != nil {
		t.Fatal(err)
	}
	if n, err := e.sweep(ctx, t0.Add(30*time.Minute)); err != nil || n != 0 {
		t.Fatalf("sweep at +30m = %d, %v; want nothing deleted", n, err)
	}
	if n, err := e.sweep(ctx, t0.Add(time.Hour)); err != nil || n != 2 {
		t.Fatalf("sweep at +1h = %d, %v; want the two events untouched since the first sweep deleted", n, err)
	}
	if exists(old) || exists(oldV1) || !exists(repeated) || !exists("/registry/configmaps/default/not-an-event") {
		t.Errorf("after +1h: %s %v, %s %v, %s %v; want only the repeated event left", old, exists(old), oldV1, exists(oldV1), repeated, exists(repeated))
	}
	if n, err := e.sweep(ctx, t0.Add(90*time.Minute)); err != nil || n != 1 || exists(repeated) {
		t.Errorf("sweep at +1h30 = %d, %v; want the repeated event deleted an hour after its last write", n, err)
	}
}
