package checkpoint

import (
	"reflect"
	"testing"

	"github.com/outpost-mesh/outpost/sync/wire"
)

// enqueue is one Enqueue call of a table.
type enqueue struct {
	kind wire.StatusKind
	key  wire.Key
	obj  string
}

func TestOutboxCoalescing(t *testing.T) {
	a, b := podKey("ns", "a"), podKey("ns", "b")
	ev := wire.Key{Resource: wire.ResourceEvents, Namespace: "ns", Name: "a.1"}
	node := wire.Key{Resource: wire.ResourceNodes, Name: "edge-1"}
	item := func(seq uint64, kind wire.StatusKind, k wire.Key, obj string) wire.StatusItem {
		it := wire.StatusItem{Seq: seq, Kind: kind, Key: k}
		if obj != "" {
			it.Object = []byte(obj)
		}
		return it
	}
	for _, tc := range []struct {
		name string
		in   []enqueue
		want []wire.StatusItem
	}{
		{
			name: "latest status of a pod replaces the pending one",
			in:   []enqueue{{wire.KindPodStatus, a, "a1"}, {wire.KindPodStatus, b, "b1"}, {wire.KindPodStatus, a, "a2"}, {wire.KindPodStatus, a, "a3"}},
			want: []wire.StatusItem{item(2, wire.KindPodStatus, b, "b1"), item(4, wire.KindPodStatus, a, "a3")},
		},
		{
			name: "kinds coalesce apart",
			in: []enqueue{
				{wire.KindPodStatus, a, "s1"}, {wire.KindPodTerminated, a, "t1"}, {wire.KindNodeStatus, node, "n1"},
				{wire.KindPodStatus, a, "s2"}, {wire.KindNodeStatus, node, "n2"},
			},
			want: []wire.StatusItem{item(2, wire.KindPodTerminated, a, "t1"), item(4, wire.KindPodStatus, a, "s2"), item(5, wire.KindNodeStatus, node, "n2")},
		},
		{
			name: "mirror create and delete keep their order",
			in:   []enqueue{{wire.KindMirrorPod, a, "m1"}, {wire.KindMirrorPodDelete, a, ""}, {wire.KindMirrorPod, a, "m2"}, {wire.KindMirrorPodDelete, a, ""}},
			want: []wire.StatusItem{item(3, wire.KindMirrorPod, a, "m2"), item(4, wire.KindMirrorPodDelete, a, "")},
		},
		{
			name: "events are not coalesced",
			in:   []enqueue{{wire.KindEvent, ev, "e1"}, {wire.KindPodStatus, a, "s"}, {wire.KindEvent, ev, "e2"}, {wire.KindEvent, ev, "e3"}},
			want: []wire.StatusItem{item(1, wire.KindEvent, ev, "e1"), item(2, wire.KindPodStatus, a, "s"), item(3, wire.KindEvent, ev, "e2"), item(4, wire.KindEvent, ev, "e3")},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := memT(t)
			for i, e := range tc.in {
				seq, err := s.Enqueue(e.kind, e.key, []byte(e.obj))
				if err != nil || seq != uint64(i+1) {
					t.Fatalf("Enqueue(%d, %v) = %d, %v, want %d", e.kind, e.key, seq, err, i+1)
				}
			}
			got, err := s.Pending(0)
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Pending(0) = %v, %v, want %v", got, err, tc.want)
			}
			if n, err := s.OutboxLen(); err != nil || n != len(tc.want) {
				t.Errorf("OutboxLen() = %d, %v, want %d", n, err, len(tc.want))
			}
			if len(tc.want) > 1 {
				if got, err := s.Pending(1); err != nil || !reflect.DeepEqual(got, tc.want[:1]) {
					t.Errorf("Pending(1) = %v, %v, want %v", got, err, tc.want[:1])
				}
			}
		})
	}
}

func TestOutboxEventCap(t *testing.T) {
	dir := t.TempDir()
	cfg := DefaultConfig()
	cfg.MaxOutboxEvents = 3
	s := openT(t, dir, cfg)
	ev := wire.Key{Resource: wire.ResourceEvents, Namespace: "ns", Name: "e"}
	if _, err := s.Enqueue(wire.KindPodStatus, podKey("ns", "a"), []byte("s")); err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		if _, err := s.Enqueue(wire.KindEvent, ev, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	seqsOf := func() []uint64 {
		t.Helper()
		items, err := s.Pending(0)
		if err != nil {
			t.Fatalf("Pending(0) = %v", err)
		}
		var seqs []uint64
		for _, it := range items {
			seqs = append(seqs, it.Seq)
		}
		return seqs
	}
	// The status stays; of the events (seqs 2-7) the last three do.
	if got, want := seqsOf(), []uint64{1, 5, 6, 7}; !reflect.DeepEqual(got, want) {
		t.Errorf("Pending seqs with 3 events allowed = %v, want %v", got, want)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Reopened with a lower cap, the oldest events over it are dropped.
	cfg.MaxOutboxEvents = 1
	s = openT(t, dir, cfg)
	if got, want := seqsOf(), []uint64{1, 7}; !reflect.DeepEqual(got, want) {
		t.Errorf("Pending seqs after reopening with 1 event allowed = %v, want %v", got, want)
	}
	if n, err := s.OutboxLen(); err != nil || n != 2 {
		t.Errorf("OutboxLen() = %d, %v, want 2", n, err)
	}
}

func TestAck(t *testing.T) {
	s := memT(t)
	a, b := podKey("ns", "a"), podKey("ns", "b")
	mustEnqueue := func(kind wire.StatusKind, k wire.Key, obj string) uint64 {
		t.Helper()
		seq, err := s.Enqueue(kind, k, []byte(obj))
		if err != nil {
			t.Fatalf("Enqueue(%v) = %v", k, err)
		}
		return seq
	}
	a1 := mustEnqueue(wire.KindPodStatus, a, "a1")
	b1 := mustEnqueue(wire.KindPodStatus, b, "b1")
	e1 := mustEnqueue(wire.KindEvent, a, "e1")
	sent, err := s.Pending(0) // what a push would carry: a1, b1, e1
	if err != nil || len(sent) != 3 {
		t.Fatalf("Pending(0) = %v, %v, want 3 items", sent, err)
	}
	// While the push is in flight, a's status changes again.
	a2 := mustEnqueue(wire.KindPodStatus, a, "a2")
	// The hub answers for what was sent, plus a seq it never had.
	if err := s.Ack(a1, b1, e1, 999); err != nil {
		t.Fatalf("Ack(%d, %d, %d, 999) = %v", a1, b1, e1, err)
	}
	want := []wire.StatusItem{{Seq: a2, Kind: wire.KindPodStatus, Key: a, Object: []byte("a2")}}
	if got, err := s.Pending(0); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("Pending(0) after Ack = %v, %v, want %v (the replacing entry stays)", got, err, want)
	}
	// Acking again, or nothing, is a no-op.
	if err := s.Ack(a1, b1); err != nil {
		t.Errorf("Ack(again) = %v", err)
	}
	if err := s.Ack(); err != nil {
		t.Errorf("Ack() = %v", err)
	}
	// A status enqueued after its entry was acked is a new entry.
	b2 := mustEnqueue(wire.KindPodStatus, b, "b2")
	if err := s.Ack(a2); err != nil {
		t.Fatal(err)
	}
	want = []wire.StatusItem{{Seq: b2, Kind: wire.KindPodStatus, Key: b, Object: []byte("b2")}}
	if got, err := s.Pending(0); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("Pending(0) = %v, %v, want %v", got, err, want)
	}
	if n, err := s.OutboxLen(); err != nil || n != 1 {
		t.Errorf("OutboxLen() = %d, %v, want 1", n, err)
	}
}

func TestEnqueueInvalid(t *testing.T) {
	s := memT(t)
	for name, e := range map[string]enqueue{
		"kind 0":    {0, podKey("ns", "a"), ""},
		"no name":   {wire.KindPodStatus, podKey("ns", ""), ""},
		"slash":     {wire.KindPodStatus, podKey("a/b", "c"), ""},
		"too large": {wire.KindEvent, podKey("ns", "a"), string(make([]byte, MaxValueSize+1))},
	} {
		if seq, err := s.Enqueue(e.kind, e.key, []byte(e.obj)); err == nil {
			t.Errorf("Enqueue(%s) = %d, nil, want an error", name, seq)
		}
	}
	if n, err := s.OutboxLen(); err != nil || n != 0 {
		t.Errorf("OutboxLen() = %d, %v, want 0", n, err)
	}
	// Refused calls take no seq.
	if seq, err := s.Enqueue(wire.KindEvent, podKey("ns", "a"), nil); err != nil || seq != 1 {
		t.Errorf("Enqueue() = %d, %v, want 1", seq, err)
	}
}

// TestSeqSurvivesReopen: seqs keep increasing across restarts even when the
// outbox was emptied, so an ack from before a restart never removes an entry
// made after it.
func TestSeqSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir, DefaultConfig())
	var last uint64
	for range 3 {
		seq, err := s.Enqueue(wire.KindPodStatus, podKey("ns", "a"), []byte("s"))
		if err != nil {
			t.Fatal(err)
		}
		last = seq
	}
	if err := s.Ack(last); err != nil {
		t.Fatal(err)
	}
	if n, _ := s.OutboxLen(); n != 0 {
		t.Fatalf("OutboxLen() = %d, want 0", n)
	}
	s.Close()
	s = openT(t, dir, DefaultConfig())
	if seq, err := s.Enqueue(wire.KindPodStatus, podKey("ns", "a"), []byte("s")); err != nil || seq != last+1 {
		t.Errorf("Enqueue() after reopen = %d, %v, want %d", seq, err, last+1)
	}
}
