package mesh

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outpost-mesh/outpost/internal/testlog"
	"github.com/outpost-mesh/outpost/internal/wait"
)

const (
	uidA = "0b6e2a4c-1f3d-4c5e-9a7b-8c9d0e1f2a3b"
	uidB = "7f000001-aaaa-4bbb-8ccc-123456789abc"
)

func TestPodWireRoundTrip(t *testing.T) {
	d := nodePods{node: "gw-1", seq: 1 << 60, pods: []podEntry{
		{uid: uidA, ready: true}, {uid: uidB, gone: true}, {uid: "not-a-uuid", ready: false},
	}}
	slices.SortFunc(d.pods, func(a, b podEntry) int { return strings.Compare(a.uid, b.uid) })
	b := encodeDelta(d)
	got, err := decodeDelta(b)
	if err != nil || !reflect.DeepEqual(got, d) {
		t.Fatalf("decodeDelta = %+v, %v; want %+v", got, err, d)
	}
	// A UUID takes 16 bytes, not 36.
	if n := len(encodeDelta(nodePods{node: "n", pods: []podEntry{{uid: uidA}}})); n > 24 {
		t.Errorf("a delta of one UUID pod is %d bytes", n)
	}
	// An uppercase UUID is kept as it is.
	up := nodePods{node: "n", seq: 1, pods: []podEntry{{uid: strings.ToUpper(uidA), ready: true}}}
	if got, err := decodeDelta(encodeDelta(up)); err != nil || got.pods[0].uid != up.pods[0].uid {
		t.Errorf("uppercase UID came back as %+v, %v", got, err)
	}

	s := []nodePods{{node: "a", seq: 3, pods: []podEntry{{uid: uidA, ready: true}}}, {node: "b", seq: 9, pods: []podEntry{}}}
	gs, err := decodeState(encodeState(s))
	if err != nil || !reflect.DeepEqual(gs, s) {
		t.Fatalf("decodeState = %+v, %v; want %+v", gs, err, s)
	}
}

func TestPodWireRefuses(t *testing.T) {
	valid := encodeDelta(nodePods{node: "n", seq: 1, pods: []podEntry{{uid: "a"}, {uid: "b"}}})
	for name, b := range map[string][]byte{
		"empty":          nil,
		"state as delta": encodeState(nil),
		"version":        {typeDelta, 9, 1, 'n', 1, 0},
		"truncated":      valid[:len(valid)-1],
		"trailing":       append(slices.Clone(valid), 0),
		"empty node":     {typeDelta, podWireVersion, 0, 1, 0},
		"empty uid":      {typeDelta, podWireVersion, 1, 'n', 1, 1, 0, 0},
		"unknown flags":  {typeDelta, podWireVersion, 1, 'n', 1, 1, 0x80, 1, 'a'},
		"unsorted":       encodeDelta(nodePods{node: "n", seq: 1, pods: []podEntry{{uid: "b"}, {uid: "a"}}}),
		"repeated":       encodeDelta(nodePods{node: "n", seq: 1, pods: []podEntry{{uid: "a"}, {uid: "a", ready: true}}}),
		"count past end": {typeDelta, podWireVersion, 1, 'n', 1, 0xff, 0x1f},
		"too many pods":  append([]byte{typeDelta, podWireVersion, 1, 'n', 1}, 0x81, 0x40), // 8193
		"long uid":       encodeDelta(nodePods{node: "n", seq: 1, pods: []podEntry{{uid: strings.Repeat("u", maxUID+1)}}}),
		"long node":      encodeDelta(nodePods{node: strings.Repeat("n", maxNodeName+1), seq: 1}),
		"bad seq":        {typeDelta, podWireVersion, 1, 'n', 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0},
		"oversized":      make([]byte, MaxStateSize+1),
	} {
		if _, err := decodeDelta(b); !errors.Is(err, errPodWire) {
			t.Errorf("%s: decodeDelta = %v, want errPodWire", name, err)
		}
	}
	for name, b := range map[string][]byte{
		"delta as state": valid,
		"gone in state":  encodeState([]nodePods{{node: "n", seq: 1, pods: []podEntry{{uid: "a", gone: true}}}}),
		"node twice":     encodeState([]nodePods{{node: "n", seq: 1}, {node: "n", seq: 2}}),
		"count past end": {typeState, podWireVersion, 0x80, 0x08},
		"too many nodes": {typeState, podWireVersion, 0x81, 0x08}, // 1025
	} {
		if _, err := decodeState(b); !errors.Is(err, errPodWire) {
			t.Errorf("%s: decodeState = %v, want errPodWire", name, err)
		}
	}
}

// FuzzDecodeDelta: any bytes decode or are refused, and what decodes
// encodes to what decodes the same.
func FuzzDecodeDelta(f *testing.F) {
	f.Add(encodeDelta(nodePods{node: "gw-1", seq: 7, pods: []podEntry{{uid: uidA, ready: true}, {uid: "x", gone: true}}}))
	f.Add([]byte{typeDelta, podWireVersion, 1, 'n', 1, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := decodeDelta(b)
		if err != nil {
			if !errors.Is(err, errPodWire) {
				t.Fatalf("error %v does not match errPodWire", err)
			}
			return
		}
		again, err := decodeDelta(encodeDelta(n))
		if err != nil || !reflect.DeepEqual(again, n) {
			t.Fatalf("%+v re-encoded decodes as %+v, %v", n, again, err)
		}
	})
}

// FuzzDecodeState is FuzzDecodeDelta for states.
func FuzzDecodeState(f *testing.F) {
	f.Add(encodeState([]nodePods{{node: "a", seq: 1, pods: []podEntry{{uid: uidB}}}, {node: "b", seq: 2, pods: []podEntry{}}}))
	f.Add([]byte{typeState, podWireVersion, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		nodes, err := decodeState(b)
		if err != nil {
			if !errors.Is(err, errPodWire) {
				t.Fatalf("error %v does not match errPodWire", err)
			}
			return
		}
		again, err := decodeState(encodeState(nodes))
		if err != nil || !reflect.DeepEqual(again, nodes) {
			t.Fatalf("%+v re-encoded decodes as %+v, %v", nodes, again, err)
		}
	})
}

func everyone(string) bool { return true }

func TestPodTable(t *testing.T) {
	tb := newPodTable("me")
	clock := time.Unix(0, 1000)
	tb.now = func() time.Time { return clock }

	// Own pods: a delta of the change, none when nothing changed.
	ds := tb.setOwn([]PodReady{{UID: uidA, Ready: true}, {UID: "p2"}})
	if len(ds) != 1 {
		t.Fatalf("setOwn: %d deltas, want 1", len(ds))
	}
	d, err := decodeDelta(ds[0])
	if err != nil || d.node != "me" || d.seq != 1000 || len(d.pods) != 2 {
		t.Fatalf("the delta is %+v, %v", d, err)
	}
	if ds := tb.setOwn([]PodReady{{UID: "p2"}, {UID: uidA, Ready: true}}); ds != nil {
		t.Errorf("setOwn of the same pods: %d deltas", len(ds))
	}
	ds = tb.setOwn([]PodReady{{UID: uidA, Ready: false}})
	d, _ = decodeDelta(ds[0])
	if want := []podEntry{{uid: uidA}, {uid: "p2", gone: true}}; d.seq != 1001 || !slices.EqualFunc(d.pods, want, func(a, b podEntry) bool { return a == b }) {
		t.Errorf("the second delta is %+v, want seq 1001 and %+v", d, want)
	}

	// Many pods: deltas that each fit a packet, of consecutive seqs.
	var many []PodReady
	for i := range 300 {
		many = append(many, PodReady{UID: fmt.Sprintf("%08x-0000-4000-8000-000000000000", i), Ready: i%2 == 0})
	}
	ds = tb.setOwn(many)
	if len(ds) < 2 {
		t.Fatalf("300 pods went in %d deltas", len(ds))
	}
	var seqs []uint64
	total := 0
	for _, b := range ds {
		if len(b) > maxDeltaSize {
			t.Errorf("a delta of %d bytes, over %d", len(b), maxDeltaSize)
		}
		d, err := decodeDelta(b)
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, d.seq)
		total += len(d.pods)
	}
	if total != 301 { // 300 set, and uidA gone
		t.Errorf("the deltas hold %d pods, want 301", total)
	}
	for i := 1; i < len(seqs); i++ {
		if seqs[i] != seqs[i-1]+1 {
			t.Errorf("seqs %v are not consecutive", seqs)
		}
	}

	// A peer's deltas: applied in order, older ones and ones about me
	// ignored, and only from members.
	peer := newPodTable("peer")
	peer.now = func() time.Time { return clock }
	pd := peer.setOwn([]PodReady{{UID: "q1", Ready: true}})
	pd2 := peer.setOwn([]PodReady{{UID: "q1", Ready: false}})
	n1, _ := decodeDelta(pd[0])
	n2, _ := decodeDelta(pd2[0])
	if tb.applyDelta(n1, func(string) bool { return false }) {
		t.Error("a delta of a node not in the site applied")
	}
	if !tb.applyDelta(n2, everyone) || tb.applyDelta(n1, everyone) {
		t.Error("the newer delta did not apply, or the older one did after it")
	}
	if tb.applyDelta(nodePods{node: "me", seq: 1 << 62, pods: []podEntry{{uid: "evil"}}}, everyone) {
		t.Error("a delta about the node itself applied")
	}
	// A state: replaces unless older; not about me; not of non-members.
	if !tb.applyState([]nodePods{{node: "peer", seq: n2.seq, pods: []podEntry{{uid: "q1", ready: true}, {uid: "q2"}}}}, everyone) {
		t.Error("a state of the same seq did not replace")
	}
	if tb.applyState([]nodePods{{node: "peer", seq: n1.seq, pods: nil}, {node: "me", seq: 1 << 62}, {node: "stranger", seq: 1}}, func(n string) bool { return n != "stranger" }) {
		t.Error("an older state, one about me, or one of a stranger applied")
	}
	snap := tb.snapshot()
	if len(snap) != 2 || snap[1].Node != "peer" || !reflect.DeepEqual(snap[1].Pods, []PodReady{{UID: "q1", Ready: true}, {UID: "q2"}}) {
		t.Errorf("snapshot %+v", snap)
	}
	// What the node sends in a push-pull decodes to what it holds.
	st, err := decodeState(tb.state())
	if err != nil || len(st) != 2 || st[1].node != "peer" || len(st[0].pods) != 300 {
		t.Errorf("state() decodes to %d nodes, %v", len(st), err)
	}
	if !tb.forget("peer") || tb.forget("peer") || tb.forget("me") {
		t.Error("forget: the peer not forgotten once, or the node itself forgotten")
	}
}

func podsOfNode(m *Mesh, node string) []PodReady {
	for _, n := range m.PodStates() {
		if n.Node == node {
			return n.Pods
		}
	}
	return nil
}

func hasPods(m *Mesh, node string, want ...PodReady) func() (bool, string) {
	return func() (bool, string) {
		got := podsOfNode(m, node)
		return slices.Equal(got, want), fmt.Sprintf("%s holds %v of %s, want %v", m.name, got, node, want)
	}
}

func TestPodGossip(t *testing.T) {
	ms := site(t, 3, key1)
	for _, m := range ms {
		wait.For(t, 10*time.Second, m.name+" sees the site", func() (bool, string) {
			return len(m.Alive()) == 2, fmt.Sprint(m.Alive())
		})
	}
	ms[1].SetPods([]PodReady{{UID: uidA, Ready: true}, {UID: uidB, Ready: true}})
	wait.For(t, 5*time.Second, "n0 learns n1's pods", hasPods(ms[0], "n1", PodReady{uidA, true}, PodReady{uidB, true}))
	wait.For(t, 5*time.Second, "n2 learns n1's pods", hasPods(ms[2], "n1", PodReady{uidA, true}, PodReady{uidB, true}))

	// A pod turns unready, another goes.
	ms[1].SetPods([]PodReady{{UID: uidA, Ready: false}})
	wait.For(t, 5*time.Second, "n0 learns the change", hasPods(ms[0], "n1", PodReady{uidA, false}))

	// A newcomer learns them in the push-pull of its join.
	late := start(t, testConfig("n3", "s1", key1))
	if _, err := late.Join([]netip.AddrPort{ms[0].Addr()}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "the newcomer learns n1's pods", hasPods(late, "n1", PodReady{uidA, false}))

	// A node that dies is forgotten with its pods.
	ms[1].Close()
	wait.For(t, 15*time.Second, "n0 forgets n1's pods", hasPods(ms[0], "n1"))
}

func TestPeerGarbageIgnored(t *testing.T) {
	rec := testlog.NewRecorder(t, slog.LevelInfo)
	cfg := testConfig("n0", "s1", key1)
	cfg.Logger = slog.New(rec)
	m := start(t, cfg)
	d := &delegate{m: m}
	for range 3 {
		d.NotifyMsg([]byte{typeDelta, podWireVersion, 0xff})
		d.MergeRemoteState([]byte("garbage"), false)
	}
	if got := m.PodStates(); len(got) != 0 {
		t.Errorf("garbage made pods: %+v", got)
	}
	for _, msg := range []string{
		"mesh: refused a peer's pod readiness: mesh: malformed pod readiness message: bad node name length",
		"mesh: refused a peer's pod readiness: mesh: malformed pod readiness message: message type 103, want 2",
	} {
		if n := rec.Count(msg); n != 1 {
			t.Errorf("%q logged %d times, want once", msg, n)
		}
	}
}
