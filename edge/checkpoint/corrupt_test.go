package checkpoint

import (
	"bytes"
	"errors"
	"testing"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/outpost-mesh/outpost/sync/wire"
)

// setRaw writes value under key directly through badger, as damage would.
func setRaw(t *testing.T, s *Store, key, value []byte) {
	t.Helper()
	if err := s.db.Update(func(txn *badger.Txn) error { return txn.Set(key, value) }); err != nil {
		t.Fatalf("badger set %q: %v", key, err)
	}
}

func wantCorrupt(t *testing.T, call string, err error, key string) {
	t.Helper()
	var ce *CorruptError
	if !errors.Is(err, ErrCorrupt) || !errors.As(err, &ce) {
		t.Errorf("%s = %v, want a *CorruptError matching ErrCorrupt", call, err)
		return
	}
	if ce.Key != key {
		t.Errorf("%s: CorruptError.Key = %q, want %q", call, ce.Key, key)
	}
}

func TestCorruptRecords(t *testing.T) {
	s := memT(t)
	good, bad := podKey("ns", "good"), podKey("ns", "bad")
	if err := s.ApplyBatch([]wire.Change{put(good, 1, "g"), put(bad, 2, "b")}, 2); err != nil {
		t.Fatal(err)
	}
	seq, err := s.Enqueue(wire.KindPodStatus, bad, []byte("s"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Enqueue(wire.KindPodStatus, good, []byte("s")); err != nil {
		t.Fatal(err)
	}
	if err := s.PutLocal("x", []byte("v")); err != nil {
		t.Fatal(err)
	}

	// A bit flipped in the object; a valid record of another key for the
	// outbox entry; garbage for the local record.
	rec := encodeObject(objectKey(bad), 2, []byte("b"))
	rec[3] ^= 0x10
	setRaw(t, s, objectKey(bad), rec)
	setRaw(t, s, outboxKey(seq, wire.KindPodStatus, bad), encodeBytes(outboxKey(seq+1, wire.KindPodStatus, good), typeStatus, []byte("s")))
	setRaw(t, s, localKey("x"), []byte("garbage"))

	_, _, err = s.Get(bad)
	wantCorrupt(t, "Get(bad)", err, "object pods/ns/bad")
	if o, ok, err := s.Get(good); err != nil || !ok || string(o.Raw) != "g" {
		t.Errorf("Get(good) = %v, %v, %v, want it intact", o, ok, err)
	}
	_, err = s.List(wire.ResourcePods)
	wantCorrupt(t, "List(pods)", err, "object pods/ns/bad")
	_, err = s.Inventory()
	wantCorrupt(t, "Inventory()", err, "object pods/ns/bad")
	_, err = s.Pending(0)
	wantCorrupt(t, "Pending(0)", err, "outbox 1")
	_, _, err = s.GetLocal("x")
	wantCorrupt(t, "GetLocal(x)", err, `local "x"`)
	_, err = s.ListLocal("")
	wantCorrupt(t, `ListLocal("")`, err, `local "x"`)

	// DropCorrupt removes the three and asks for a resync of the view.
	if n, err := s.DropCorrupt(); err != nil || n != 3 {
		t.Fatalf("DropCorrupt() = %d, %v, want 3", n, err)
	}
	if got := s.LastRevision(); got != 0 {
		t.Errorf("LastRevision() after dropping an object = %d, want 0", got)
	}
	checkView(t, s, []Object{{Key: good, Revision: 1, Raw: []byte("g")}})
	if items, err := s.Pending(0); err != nil || len(items) != 1 || items[0].Key != good {
		t.Errorf("Pending(0) after DropCorrupt = %v, %v, want the good entry", items, err)
	}
	if n, err := s.OutboxLen(); err != nil || n != 1 {
		t.Errorf("OutboxLen() after DropCorrupt = %d, %v, want 1", n, err)
	}
	if v, ok, err := s.GetLocal("x"); err != nil || ok {
		t.Errorf("GetLocal(x) after DropCorrupt = %q, %v, %v, want absent", v, ok, err)
	}
	if n, err := s.DropCorrupt(); err != nil || n != 0 {
		t.Errorf("second DropCorrupt() = %d, %v, want 0", n, err)
	}
	// A corrupt record is overwritten like any other.
	if err := s.ApplyBatch([]wire.Change{put(bad, 3, "b3")}, 3); err != nil {
		t.Fatal(err)
	}
	if o, ok, err := s.Get(bad); err != nil || !ok || string(o.Raw) != "b3" {
		t.Errorf("Get(bad) after a new put = %v, %v, %v", o, ok, err)
	}
}

// TestOpenCorrupt: Open refuses a checkpoint whose revision, seq or layout
// it cannot read, and says which. Repair then makes it open, keeping what
// decodes; a newer layout is not damage, and Repair leaves it alone.
func TestOpenCorrupt(t *testing.T) {
	for _, tc := range []struct {
		name  string
		key   []byte
		value []byte
		want  error
	}{
		{"revision garbage", metaRev, []byte{1, 2, 3}, ErrCorrupt},
		{"revision of another key", metaRev, encodeUint(metaSeq, 5), ErrCorrupt},
		{"seq of the wrong type", metaSeq, encodeBytes(metaSeq, typeLocal, []byte("12345678")), ErrCorrupt},
		{"newer layout", metaFormat, encodeUint(metaFormat, layoutVersion+1), ErrFormat},
		{"outbox key", []byte("q\x00\x00"), encodeBytes([]byte("q\x00\x00"), typeStatus, nil), ErrCorrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s := openT(t, dir, DefaultConfig())
			pod := podKey("ns", "kept")
			if err := s.ApplyBatch([]wire.Change{put(pod, 7, "p")}, 9); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Enqueue(wire.KindPodStatus, pod, []byte("st")); err != nil {
				t.Fatal(err)
			}
			setRaw(t, s, tc.key, tc.value)
			s.Close()
			s, err := Open(dir, DefaultConfig())
			if err == nil {
				s.Close()
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("Open() with %s = %v, want %v", tc.name, err, tc.want)
			}

			n, err := Repair(dir, DefaultConfig())
			if tc.want == ErrFormat {
				if !errors.Is(err, ErrFormat) {
					t.Fatalf("Repair() of a newer layout = %d, %v, want ErrFormat", n, err)
				}
				return
			}
			if err != nil || n != 1 {
				t.Fatalf("Repair() = %d, %v, want 1 record dropped", n, err)
			}
			s = openT(t, dir, DefaultConfig())
			if o, ok, err := s.Get(pod); err != nil || !ok || string(o.Raw) != "p" {
				t.Errorf("Get(kept) after Repair = %v, %v, %v, want it kept", o, ok, err)
			}
			if items, err := s.Pending(0); err != nil || len(items) != 1 || items[0].Key != pod {
				t.Errorf("Pending(0) after Repair = %v, %v, want the status kept", items, err)
			}
			seq, err := s.Enqueue(wire.KindEvent, pod, []byte("ev"))
			if err != nil || seq <= 1 {
				t.Errorf("Enqueue after Repair = %d, %v, want a seq after the kept entry's", seq, err)
			}
			if rev := s.LastRevision(); bytes.Equal(tc.key, metaRev) && rev != 0 || !bytes.Equal(tc.key, metaRev) && rev != 9 {
				t.Errorf("LastRevision() after Repair = %d, want 0 if the revision was dropped, else 9", rev)
			}
		})
	}
}
