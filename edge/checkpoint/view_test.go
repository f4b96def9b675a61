package checkpoint

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outpost-mesh/outpost/sync/wire"
)

// checkView checks every read of the view against want, which is sorted.
func checkView(t *testing.T, s *Store, want []Object) {
	t.Helper()
	var inv []wire.InventoryEntry
	byResource := map[string][]Object{}
	for _, o := range want {
		inv = append(inv, wire.InventoryEntry{Key: o.Key, Revision: o.Revision})
		byResource[o.Key.Resource] = append(byResource[o.Key.Resource], o)
	}
	got, err := s.Inventory()
	if err != nil || !reflect.DeepEqual(got, inv) {
		t.Errorf("Inventory() = %v, %v, want %v", got, err, inv)
	}
	for _, r := range []string{wire.ResourcePods, wire.ResourceConfigMaps, wire.ResourceNodes, wire.ResourceSecrets} {
		got, err := s.List(r)
		if err != nil || !reflect.DeepEqual(got, byResource[r]) {
			t.Errorf("List(%s) = %v, %v, want %v", r, got, err, byResource[r])
		}
		var scanned []Object
		err = s.Scan(r, func(o Object) { o.Raw = clone(o.Raw); scanned = append(scanned, o) })
		if err != nil || !reflect.DeepEqual(scanned, byResource[r]) {
			t.Errorf("Scan(%s) gave %v, %v, want %v", r, scanned, err, byResource[r])
		}
	}
	for _, o := range want {
		got, ok, err := s.Get(o.Key)
		if err != nil || !ok || !reflect.DeepEqual(got, o) {
			t.Errorf("Get(%v) = %v, %v, %v, want %v", o.Key, got, ok, err, o)
		}
	}
}

func TestApplyBatch(t *testing.T) {
	a, b := podKey("ns", "a"), podKey("ns", "b")
	ax := podKey("ns-x", "a") // sorts after namespace "ns", whatever the separator
	cm := wire.Key{Resource: wire.ResourceConfigMaps, Namespace: "ns", Name: "c"}
	node := wire.Key{Resource: wire.ResourceNodes, Name: "edge-1"}
	obj := func(k wire.Key, rev int64, raw string) Object { return Object{Key: k, Revision: rev, Raw: []byte(raw)} }

	s := memT(t)
	for _, step := range []struct {
		name    string
		changes []wire.Change
		rev     int64
		wantErr error // nil: success; errAny: some error
		want    []Object
	}{
		{
			name:    "create",
			changes: []wire.Change{put(ax, 1, "ax1"), put(a, 2, "a2"), put(b, 3, "b3"), put(cm, 4, "c4"), put(node, 5, "n5")},
			rev:     5,
			want:    []Object{obj(cm, 4, "c4"), obj(node, 5, "n5"), obj(a, 2, "a2"), obj(b, 3, "b3"), obj(ax, 1, "ax1")},
		},
		{
			name:    "update and delete",
			changes: []wire.Change{put(a, 6, "a6"), del(b, 7), del(podKey("ns", "never"), 7)},
			rev:     7,
			want:    []Object{obj(cm, 4, "c4"), obj(node, 5, "n5"), obj(a, 6, "a6"), obj(ax, 1, "ax1")},
		},
		{
			name:    "put then delete in one batch",
			changes: []wire.Change{put(b, 8, "b8"), del(b, 9), del(node, 9), put(node, 10, "n10")},
			rev:     10,
			want:    []Object{obj(cm, 4, "c4"), obj(node, 10, "n10"), obj(a, 6, "a6"), obj(ax, 1, "ax1")},
		},
		{
			name:    "the same batch again",
			changes: []wire.Change{put(b, 8, "b8"), del(b, 9), del(node, 9), put(node, 10, "n10")},
			rev:     10,
			want:    []Object{obj(cm, 4, "c4"), obj(node, 10, "n10"), obj(a, 6, "a6"), obj(ax, 1, "ax1")},
		},
		{
			name: "revision only",
			rev:  12,
			want: []Object{obj(cm, 4, "c4"), obj(node, 10, "n10"), obj(a, 6, "a6"), obj(ax, 1, "ax1")},
		},
		{
			name:    "stale revision",
			changes: []wire.Change{del(a, 11)},
			rev:     11,
			wantErr: ErrStaleRevision,
		},
		{
			name:    "invalid key after a valid change",
			changes: []wire.Change{del(a, 13), put(podKey("ns", "x/y"), 13, "x")},
			rev:     13,
			wantErr: wire.ErrInvalidKey,
		},
		{
			name:    "NUL in a key",
			changes: []wire.Change{put(podKey("ns", "x\x00y"), 13, "x")},
			rev:     13,
			wantErr: wire.ErrInvalidKey,
		},
		{
			name:    "value too large",
			changes: []wire.Change{del(a, 13), {Op: wire.OpPut, Key: b, Revision: 13, Object: make([]byte, MaxValueSize+1)}},
			rev:     13,
			wantErr: ErrTooLarge,
		},
		{
			name:    "put without an object",
			changes: []wire.Change{{Op: wire.OpPut, Key: b, Revision: 13}},
			rev:     13,
			wantErr: errAny,
		},
		{
			name:    "unknown op",
			changes: []wire.Change{{Op: 9, Key: b, Revision: 13}},
			rev:     13,
			wantErr: errAny,
		},
		{
			name:    "negative revision",
			changes: []wire.Change{del(a, 13)},
			rev:     -1,
			wantErr: errAny,
		},
	} {
		before := s.LastRevision()
		err := s.ApplyBatch(step.changes, step.rev)
		if step.wantErr == nil {
			if err != nil {
				t.Fatalf("%s: ApplyBatch(%v, %d) = %v", step.name, step.changes, step.rev, err)
			}
			if got := s.LastRevision(); got != step.rev {
				t.Errorf("%s: LastRevision() = %d, want %d", step.name, got, step.rev)
			}
			checkView(t, s, step.want)
			continue
		}
		if err == nil || (step.wantErr != errAny && !errors.Is(err, step.wantErr)) {
			t.Errorf("%s: ApplyBatch(%d) = %v, want %v", step.name, step.rev, err, step.wantErr)
		}
		if got := s.LastRevision(); got != before {
			t.Errorf("%s: LastRevision() = %d after a failed batch, want %d", step.name, got, before)
		}
		if _, ok, _ := s.Get(a); !ok {
			t.Errorf("%s: a failed batch deleted %v", step.name, a)
		}
	}
}

// errAny stands for any error in tables.
var errAny = errors.New("any error")

func TestGetAbsentAndInvalid(t *testing.T) {
	s := memT(t)
	if o, ok, err := s.Get(podKey("ns", "a")); ok || err != nil {
		t.Errorf("Get(absent) = %v, %v, %v, want not found", o, ok, err)
	}
	if _, _, err := s.Get(wire.Key{Resource: wire.ResourcePods, Namespace: "ns"}); !errors.Is(err, wire.ErrInvalidKey) {
		t.Errorf("Get(no name) = %v, want ErrInvalidKey", err)
	}
	if _, err := s.List(""); !errors.Is(err, wire.ErrInvalidKey) {
		t.Errorf(`List("") = %v, want ErrInvalidKey`, err)
	}
	if err := s.Scan("", func(Object) {}); !errors.Is(err, wire.ErrInvalidKey) {
		t.Errorf(`Scan("") = %v, want ErrInvalidKey`, err)
	}
	if got, err := s.List(wire.ResourcePods); got != nil || err != nil {
		t.Errorf("List(pods) of an empty store = %v, %v, want nil, nil", got, err)
	}
}

func TestReplaceAll(t *testing.T) {
	s := openT(t, t.TempDir(), DefaultConfig())
	if err := s.ApplyBatch([]wire.Change{put(podKey("ns", "a"), 3, "a"), put(podKey("ns", "b"), 4, "b")}, 20); err != nil {
		t.Fatal(err)
	}
	want := []Object{
		{Key: podKey("ns", "b"), Revision: 7, Raw: []byte("b7")},
		{Key: podKey("ns", "c"), Revision: 8, Raw: []byte("c8")},
	}
	if err := s.ReplaceAll(want, 9); err != nil {
		t.Fatalf("ReplaceAll() = %v", err)
	}
	if got := s.LastRevision(); got != 9 {
		t.Errorf("LastRevision() = %d, want 9 (ReplaceAll may go backwards)", got)
	}
	checkView(t, s, want)
	if err := s.ReplaceAll([]Object{{Key: podKey("ns", "d")}}, 10); err == nil {
		t.Error("ReplaceAll(object without bytes) = nil, want an error")
	}
	checkView(t, s, want)
}

// TestLargeWritesSplit: a batch over badger's transaction limit is written
// in several transactions, with the same result.
func TestLargeWritesSplit(t *testing.T) {
	s := openT(t, t.TempDir(), DefaultConfig())
	raw := strings.Repeat("x", 4<<10) // kept in the tree: counts in full against the limit
	var changes []wire.Change
	var want []Object
	for i := range 600 { // 2.4 MiB, twice the limit
		k := podKey("ns", fmt.Sprintf("p%04d", i))
		changes = append(changes, put(k, int64(i+1), raw))
		want = append(want, Object{Key: k, Revision: int64(i + 1), Raw: []byte(raw)})
	}
	ops := make([]op, len(changes))
	for i, c := range changes {
		ops[i] = op{key: objectKey(c.Key), value: encodeObject(objectKey(c.Key), c.Revision, c.Object)}
	}
	if n, err := s.commit(ops, true); n != 0 || err == nil {
		t.Fatalf("commit(%d ops, whole) = %d, %v; want the batch to exceed one transaction", len(ops), n, err)
	}
	if err := s.ApplyBatch(changes, 600); err != nil {
		t.Fatalf("ApplyBatch(600 changes) = %v", err)
	}
	checkView(t, s, want)
	if err := s.ReplaceAll(want[100:], 601); err != nil { // 2 MiB: split too
		t.Fatalf("ReplaceAll(500 objects) = %v", err)
	}
	if s.LastRevision() != 601 {
		t.Errorf("LastRevision() = %d, want 601", s.LastRevision())
	}
	checkView(t, s, want[100:])
}

func TestValueLimits(t *testing.T) {
	s := openT(t, t.TempDir(), DefaultConfig())
	big := bytes.Repeat([]byte{7}, MaxValueSize) // goes to the value log
	k := podKey("ns", "big")
	if err := s.ApplyBatch([]wire.Change{{Op: wire.OpPut, Key: k, Revision: 1, Object: big}}, 1); err != nil {
		t.Fatalf("ApplyBatch(%d bytes) = %v", len(big), err)
	}
	if o, ok, err := s.Get(k); err != nil || !ok || !bytes.Equal(o.Raw, big) {
		t.Errorf("Get(%v) = %d bytes, %v, %v, want %d bytes", k, len(o.Raw), ok, err, len(big))
	}
	if err := s.PutLocal("big", big); err != nil {
		t.Errorf("PutLocal(%d bytes) = %v", len(big), err)
	}
	if _, err := s.Enqueue(wire.KindPodStatus, k, big); err != nil {
		t.Errorf("Enqueue(%d bytes) = %v", len(big), err)
	}
	if err := s.CollectGarbage(); err != nil {
		t.Errorf("CollectGarbage() = %v", err)
	}

	m := memT(t)
	if err := m.PutLocal("big", big); !errors.Is(err, ErrTooLarge) {
		t.Errorf("PutLocal(%d bytes) in memory = %v, want ErrTooLarge", len(big), err)
	}
	if err := m.PutLocal("big", big[:m.maxValue]); err != nil {
		t.Errorf("PutLocal(%d bytes) in memory = %v", m.maxValue, err)
	}
	if err := m.CollectGarbage(); err != nil {
		t.Errorf("CollectGarbage() in memory = %v", err)
	}
}

// TestReopenKeepsEverything: the view, revision, outbox and local records
// survive Close and Open, and seqs continue.
func TestReopenKeepsEverything(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir, DefaultConfig())
	want := []Object{
		{Key: podKey("ns", "a"), Revision: 1, Raw: []byte("a")},
		{Key: wire.Key{Resource: wire.ResourceSecrets, Namespace: "ns", Name: "s"}, Revision: 2, Raw: []byte("s")},
	}
	if err := s.ApplyBatch([]wire.Change{put(want[1].Key, 2, "s"), put(want[0].Key, 1, "a")}, 5); err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	for _, kind := range []wire.StatusKind{wire.KindPodStatus, wire.KindEvent, wire.KindNodeStatus} {
		seq, err := s.Enqueue(kind, podKey("ns", "a"), []byte{byte(kind)})
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, seq)
	}
	if err := s.PutLocal("restarts/a", []byte("3")); err != nil {
		t.Fatal(err)
	}
	pending, err := s.Pending(0)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}

	s = openT(t, dir, DefaultConfig())
	if got := s.LastRevision(); got != 5 {
		t.Errorf("LastRevision() after reopen = %d, want 5", got)
	}
	checkView(t, s, want)
	if got, err := s.Pending(0); err != nil || !reflect.DeepEqual(got, pending) {
		t.Errorf("Pending(0) after reopen = %v, %v, want %v", got, err, pending)
	}
	if v, ok, err := s.GetLocal("restarts/a"); err != nil || !ok || string(v) != "3" {
		t.Errorf(`GetLocal("restarts/a") after reopen = %q, %v, %v, want "3"`, v, ok, err)
	}
	seq, err := s.Enqueue(wire.KindEvent, podKey("ns", "a"), nil)
	if err != nil || seq <= slices.Max(seqs) {
		t.Errorf("Enqueue() after reopen = %d, %v, want a seq above %d", seq, err, slices.Max(seqs))
	}
}

func TestClose(t *testing.T) {
	s, err := Open(t.TempDir(), DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ApplyBatch(nil, 3); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close() = %v, want nil", err)
	}
	if got := s.LastRevision(); got != 3 {
		t.Errorf("LastRevision() after Close = %d, want 3", got)
	}
	k := podKey("ns", "a")
	for name, call := range map[string]func() error{
		"ApplyBatch":     func() error { return s.ApplyBatch(nil, 4) },
		"ReplaceAll":     func() error { return s.ReplaceAll(nil, 4) },
		"Get":            func() error { _, _, err := s.Get(k); return err },
		"List":           func() error { _, err := s.List(wire.ResourcePods); return err },
		"Scan":           func() error { return s.Scan(wire.ResourcePods, func(Object) {}) },
		"Inventory":      func() error { _, err := s.Inventory(); return err },
		"Enqueue":        func() error { _, err := s.Enqueue(wire.KindEvent, k, nil); return err },
		"Pending":        func() error { _, err := s.Pending(0); return err },
		"Ack":            func() error { return s.Ack(1) },
		"OutboxLen":      func() error { _, err := s.OutboxLen(); return err },
		"PutLocal":       func() error { return s.PutLocal("a", nil) },
		"GetLocal":       func() error { _, _, err := s.GetLocal("a"); return err },
		"DeleteLocal":    func() error { return s.DeleteLocal("a") },
		"ListLocal":      func() error { _, err := s.ListLocal(""); return err },
		"CollectGarbage": func() error { return s.CollectGarbage() },
		"DropCorrupt":    func() error { _, err := s.DropCorrupt(); return err },
	} {
		if err := call(); !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", name, err)
		}
	}
}

// TestConcurrentUse runs every kind of call at once, for the race detector,
// then checks that seqs were unique and the view complete.
func TestConcurrentUse(t *testing.T) {
	s := memT(t)
	const n = 50
	var wg sync.WaitGroup
	seqs := make(chan uint64, 4*n)
	wg.Go(func() {
		for i := 1; i <= n; i++ {
			if err := s.ApplyBatch([]wire.Change{put(podKey("ns", fmt.Sprint(i)), int64(i), "x")}, int64(i)); err != nil {
				t.Errorf("ApplyBatch(%d) = %v", i, err)
			}
		}
	})
	for w := range 3 {
		wg.Go(func() {
			var last uint64
			for i := range n {
				kind := wire.KindPodStatus
				if i%2 == 0 {
					kind = wire.KindEvent
				}
				seq, err := s.Enqueue(kind, podKey("ns", fmt.Sprint(w)), nil)
				if err != nil || seq <= last {
					t.Errorf("Enqueue() = %d, %v, want a seq above %d", seq, err, last)
				}
				last = seq
				seqs <- seq
			}
		})
	}
	wg.Go(func() {
		for i := range n {
			items, err := s.Pending(5)
			if err != nil {
				t.Errorf("Pending(5) = %v", err)
			}
			for _, it := range items {
				if err := s.Ack(it.Seq); err != nil {
					t.Errorf("Ack(%d) = %v", it.Seq, err)
				}
			}
			if _, err := s.Inventory(); err != nil {
				t.Errorf("Inventory() = %v", err)
			}
			if err := s.PutLocal(fmt.Sprint(i), nil); err != nil {
				t.Errorf("PutLocal() = %v", err)
			}
		}
	})
	wg.Wait()
	close(seqs)
	seen := map[uint64]bool{}
	for seq := range seqs {
		if seen[seq] {
			t.Errorf("seq %d handed out twice", seq)
		}
		seen[seq] = true
	}
	if inv, err := s.Inventory(); err != nil || len(inv) != n || s.LastRevision() != n {
		t.Errorf("Inventory() = %d entries, %v at revision %d, want %d at %d", len(inv), err, s.LastRevision(), n, n)
	}
}

// TestRewind: a hub restored from a backup has lower revisions; after
// Rewind they apply, the objects are kept, and it lasts across a reopen.
func TestRewind(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir, DefaultConfig())
	if err := s.ApplyBatch([]wire.Change{put(podKey("ns", "a"), 90, "a")}, 100); err != nil {
		t.Fatal(err)
	}
	if err := s.ApplyBatch(nil, 50); !errors.Is(err, ErrStaleRevision) {
		t.Fatalf("ApplyBatch(50) after 100 = %v, want ErrStaleRevision", err)
	}
	if err := s.Rewind(); err != nil {
		t.Fatal(err)
	}
	if got := s.LastRevision(); got != 0 {
		t.Fatalf("LastRevision() after Rewind = %d, want 0", got)
	}
	if _, ok, err := s.Get(podKey("ns", "a")); !ok || err != nil {
		t.Fatalf("Get after Rewind = %v, %v; want the object kept", ok, err)
	}
	s.Close()
	s = openT(t, dir, DefaultConfig())
	if got := s.LastRevision(); got != 0 {
		t.Fatalf("LastRevision() after reopen = %d, want 0", got)
	}
	if err := s.ApplyBatch(nil, 50); err != nil {
		t.Fatalf("ApplyBatch(50) after Rewind = %v", err)
	}
}

// TestViewGeneration: the generation moves with every write of the view,
// a failed one too, and with nothing else.
func TestViewGeneration(t *testing.T) {
	s := memT(t)
	last := s.ViewGeneration()
	step := func(name string, wantMoved bool, write func() error) {
		t.Helper()
		err := write()
		g := s.ViewGeneration()
		if moved := g != last; moved != wantMoved {
			t.Errorf("%s (err %v): generation %d -> %d, want moved %v", name, err, last, g, wantMoved)
		}
		last = g
	}
	step("ApplyBatch", true, func() error { return s.ApplyBatch([]wire.Change{put(podKey("ns", "a"), 5, "a")}, 10) })
	step("stale ApplyBatch", true, func() error { return s.ApplyBatch(nil, 3) })
	step("ReplaceAll", true, func() error {
		return s.ReplaceAll([]Object{{Key: podKey("ns", "b"), Revision: 6, Raw: []byte("b")}}, 11)
	})
	step("PutLocal", false, func() error { return s.PutLocal("k", []byte("v")) })
	step("Enqueue", false, func() error {
		_, err := s.Enqueue(wire.KindPodStatus, podKey("ns", "b"), []byte("st"))
		return err
	})
	step("Rewind", false, s.Rewind)
	step("DropCorrupt", true, func() error {
		_, err := s.DropCorrupt()
		return err
	})
}

// TestResourceGeneration: the generation of some resources moves with the
// writes that touch them, with those that may touch any (ReplaceAll,
// DropCorrupt), and not with the writes of other resources.
func TestResourceGeneration(t *testing.T) {
	s := memT(t)
	cm := wire.Key{Resource: wire.ResourceConfigMaps, Namespace: "ns", Name: "cfg"}
	vols := []string{wire.ResourceConfigMaps, wire.ResourceSecrets}
	last := s.ResourceGeneration(vols...)
	step := func(name string, wantMoved bool, write func() error) {
		t.Helper()
		if err := write(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		g := s.ResourceGeneration(vols...)
		if moved := g != last; moved != wantMoved {
			t.Errorf("%s: generation of %v %d -> %d, want moved %v", name, vols, last, g, wantMoved)
		}
		last = g
	}
	step("a pod's ApplyBatch", false, func() error { return s.ApplyBatch([]wire.Change{put(podKey("ns", "a"), 5, "a")}, 10) })
	step("a ConfigMap's ApplyBatch", true, func() error { return s.ApplyBatch([]wire.Change{put(cm, 6, "c")}, 11) })
	step("a pod's and a ConfigMap's", true, func() error {
		return s.ApplyBatch([]wire.Change{put(podKey("ns", "a"), 7, "a2"), {Key: cm, Op: wire.OpDelete}}, 12)
	})
	step("ReplaceAll of pods", true, func() error {
		return s.ReplaceAll([]Object{{Key: podKey("ns", "b"), Revision: 13, Raw: []byte("b")}}, 13)
	})
	step("DropCorrupt", true, func() error {
		_, err := s.DropCorrupt()
		return err
	})
	if got := s.ResourceGeneration(); got != 2 { // the two writes of any resource
		t.Errorf("ResourceGeneration() of no resource = %d, want 2", got)
	}
}

// TestCompactsItself: without badger's compactors, the store compacts the
// tree itself, so writes many times the memtable never stall on a full
// first level, and the tree holds about the live data.
func TestCompactsItself(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MemTableSize = 1 << 20 // the least: a flush every MiB
	cfg.BaseTableSize = 64 << 10
	if cfg.NumCompactors != 0 {
		t.Fatalf("DefaultConfig().NumCompactors = %d, want 0", cfg.NumCompactors)
	}
	// Not closed if the writes stall: Close would wait for them.
	s, err := Open(t.TempDir(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	value := bytes.Repeat([]byte("v"), 8<<10)
	done := make(chan error, 1)
	go func() {
		// 48 MiB over 64 keys: 48 memtables, where badger stalls writes
		// at 8 tables in the first level.
		rev := int64(0)
		for range 384 {
			var changes []wire.Change
			for range 16 {
				rev++
				changes = append(changes, wire.Change{Op: wire.OpPut, Key: podKey("ns", fmt.Sprint("p", rev%64)), Revision: rev, Object: value})
			}
			if err := s.ApplyBatch(changes, rev); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		t.Cleanup(func() { s.Close() })
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("writes stalled: the first level filled up")
	}
	var size int64
	for _, l := range s.db.Levels() {
		size += l.Size
	}
	t.Logf("after 48 MiB of writes: %d tables in the first level, %d KiB in the tree", s.db.Levels()[0].NumTables, size>>10)
	if size > 8<<20 {
		t.Errorf("the tree holds %d KiB for 512 KiB of live data: it is not compacted", size>>10)
	}
	objs, err := s.List(wire.ResourcePods)
	if err != nil || len(objs) != 64 {
		t.Fatalf("List after the writes = %d objects, %v; want 64", len(objs), err)
	}
}
