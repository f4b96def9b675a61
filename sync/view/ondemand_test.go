package view

import (
	"bytes"
	"slices"
	"testing"

	"github.com/outpost-mesh/outpost/sync/wire"
)

// held returns the bytes the index holds and the objects it holds without
// theirs.
func held(x *Index) (int64, int) {
	s := x.Stats()
	return s.ObjectBytes, s.Unheld
}

// worldBytes returns the length of the objects of w that are not of
// OnDemand resources, and of those of keys.
func worldBytes(w *world, keys ...wire.Key) int64 {
	var n int64
	for k, o := range w.objs {
		if kindOf(k) != kindNone && (!OnDemand(k.Resource) || Shared(k) || slices.Contains(keys, k)) {
			n += int64(len(o.raw))
		}
	}
	return n
}

// TestOnDemandBytes: the index holds the bytes of configmaps, secrets and
// service accounts only while a node's pod references them, whether they
// come by Apply or Reset, with their bytes or without.
func TestOnDemandBytes(t *testing.T) {
	cm, sec, sa := key("configmaps/default/c1"), key("secrets/default/s1"), key("serviceaccounts/default/default")
	w := newWorld(t, DefaultConfig())
	w.commit(change{key: key("nodes//n1")})
	w.commit(change{key: key("services/default/api")})
	w.commit(change{key: cm})
	w.commit(change{key: sec})
	w.commit(change{key: sa})
	check := func(what string, wantBytes int64, wantUnheld int) {
		t.Helper()
		if b, u := held(w.x); b != wantBytes || u != wantUnheld {
			t.Errorf("%s: index holds %d bytes, %d objects without theirs; want %d, %d", what, b, u, wantBytes, wantUnheld)
		}
	}
	check("nothing referenced", worldBytes(w), 3)

	// A pod that references the configmap: its bytes are read from the
	// store once, for the first node that needs them, and kept.
	w.commit(change{key: key("pods/default/web"), spec: &podSpec{node: "n1", configMaps: []string{"c1"}}})
	check("referenced, not read yet", worldBytes(w), 3)
	e := w.newEdge("n1")
	s, changes, rev, err := w.x.Resume("n1", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	e.s = s
	e.apply(changes, rev)
	if want := []string{"configmaps/default/c1@3", "serviceaccounts/default/default@5"}; !slices.Equal(e.loaded, want) {
		t.Errorf("objects read from the store = %v, want %v", e.loaded, want)
	}
	check("referenced and read", worldBytes(w, cm, sa), 1)

	// A change of a referenced object is kept as it comes; one of an
	// object no pod references is not.
	w.commit(change{key: cm})
	w.commit(change{key: sec})
	check("changed", worldBytes(w, cm, sa), 1)
	if err := drain(t, w, e); err != nil {
		t.Fatal(err)
	}
	if len(e.loaded) != 2 {
		t.Errorf("objects read from the store = %v, want no more", e.loaded)
	}

	// The pod goes: so do the bytes of what it referenced.
	w.commit(change{key: key("pods/default/web"), deleted: true})
	check("pod deleted", worldBytes(w), 3)

	// A pod and the secret it references written in one revision: the
	// secret's bytes are kept.
	w.commit(change{key: sec}, change{key: key("pods/default/db"), spec: &podSpec{node: "n1", secrets: []string{"s1"}}})
	check("pod and secret in one revision", worldBytes(w, sec), 2)
	if err := drain(t, w, e); err != nil {
		t.Fatal(err)
	}
	// The service account it references too: n1 holds it already.
	check("pod and secret in one revision, then sent", worldBytes(w, sec), 2)

	// Reset with every object's bytes keeps those referenced; the hub's,
	// with none of the configmaps', secrets' and service accounts', keeps
	// none, and a node that holds them all reads none.
	w.reset()
	check("Reset with bytes", worldBytes(w, sec, sa), 1)
	w.resetRaw = false
	w.reset()
	check("Reset without bytes", worldBytes(w), 3)
	if err := drain(t, w, e); err != nil {
		t.Fatal(err)
	}
	check("Reset without bytes, then a session", worldBytes(w), 3)
	if d := diffViews(e.holds, w.viewAt(w.rev, "n1")); d != "" {
		t.Errorf("node n1 differs from its view:%s", d)
	}
	if len(e.loaded) != 2 {
		t.Errorf("objects read from the store = %v, want no more", e.loaded)
	}
}

// TestReferencedObjectSent: a pod's configmap created long before it, never
// held by the index, reaches the pod's node as it is stored, whether the
// node is connected, resumes by revision or from its inventory; nodes
// after the first find it in the index.
func TestReferencedObjectSent(t *testing.T) {
	cm := key("configmaps/default/big")
	w := newWorld(t, DefaultConfig())
	w.commit(change{key: cm})
	w.resetRaw = false
	w.reset()
	if b, u := held(w.x); b != 0 || u != 1 {
		t.Fatalf("after Reset: %d bytes held, %d objects without; want none held", b, u)
	}
	live := w.newEdge("n1")
	s, changes, rev, err := w.x.Resume("n1", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	live.s = s
	live.apply(changes, rev)

	w.commit(change{key: key("pods/default/a"), spec: &podSpec{node: "n1", configMaps: []string{"big"}}})
	w.commit(change{key: key("pods/default/b"), spec: &podSpec{node: "n2", configMaps: []string{"big"}}})
	w.commit(change{key: key("pods/default/c"), spec: &podSpec{node: "n3", configMaps: []string{"big"}}})
	changes, rev, err = s.Next()
	if err != nil {
		t.Fatal(err)
	}
	var put *Change
	for i, c := range changes {
		if c.Key == cm {
			put = &changes[i]
		}
	}
	want := w.objs[cm].raw
	if put == nil || put.Object != nil || put.Size != len(want) || put.Revision != 1 {
		t.Fatalf("Next() = %s, want a put of %s@1 without its object, of size %d", formatChanges(changes), cm, len(want))
	}
	live.apply(changes, rev) // reads it from the store and hands it to the index
	if raw, ok := w.x.Raw(cm, 1); !ok || !bytes.Equal(raw, want) {
		t.Fatalf("Raw(%s, 1) = %d bytes, %v; want the %d stored", cm, len(raw), ok, len(want))
	}

	byRev := w.newEdge("n2")
	s2, changes, rev, err := w.x.Resume("n2", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	byRev.apply(changes, rev)
	byInv := w.newEdge("n3")
	s3, changes, rev := w.x.ResumeFromInventory("n3", nil)
	defer s3.Close()
	byInv.apply(changes, rev)
	for _, e := range []*edge{live, byRev, byInv} {
		if d := diffViews(e.holds, w.viewAt(w.rev, e.node)); d != "" {
			t.Errorf("node %s differs from its view:%s", e.node, d)
		}
	}
	if len(live.loaded) != 1 || len(byRev.loaded)+len(byInv.loaded) != 0 {
		t.Errorf("read from the store: by n1 %v, n2 %v, n3 %v; want by n1 only", live.loaded, byRev.loaded, byInv.loaded)
	}
}

// TestObjectGoneBeforeLoad: a put that came without its object, whose
// version the store no longer has when the shell reads it (the object
// changed or went, and the old version was compacted away), is dropped,
// and the next result brings the newer change.
func TestObjectGoneBeforeLoad(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change change
		want   string
	}{
		{"updated", change{key: key("secrets/default/s1")}, "put secrets/default/s1@4"},
		{"deleted", change{key: key("secrets/default/s1"), deleted: true}, "del secrets/default/s1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, DefaultConfig())
			w.commit(change{key: key("secrets/default/s1")})
			w.commit(change{key: key("serviceaccounts/default/default")})
			e := w.newEdge("n1")
			s, changes, rev, err := w.x.Resume("n1", 2)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			e.s = s
			e.apply(changes, rev)
			w.commit(change{key: key("pods/default/web"), spec: &podSpec{node: "n1", secrets: []string{"s1"}}})
			changes, rev, err = s.Next()
			if err != nil {
				t.Fatal(err)
			}
			// Between Next and the read, the secret changes.
			w.commit(tc.change)
			e.apply(changes, rev)
			if !slices.Contains(e.dropped, "secrets/default/s1@1") {
				t.Fatalf("dropped %v, want secrets/default/s1@1", e.dropped)
			}
			if _, ok := e.holds[key("secrets/default/s1")]; ok {
				t.Fatalf("node holds the secret at %d, want it dropped", e.holds[key("secrets/default/s1")])
			}
			changes, rev, err = s.Next()
			if err != nil {
				t.Fatal(err)
			}
			if got := changeSet(changes); !slices.Contains(got, tc.want) {
				t.Errorf("Next() = %v, want %s", got, tc.want)
			}
			e.apply(changes, rev)
			if d := diffViews(e.holds, w.viewAt(w.rev, "n1")); d != "" {
				t.Errorf("node n1 differs from its view:%s", d)
			}
			// A node that resumes from the revision of the dropped
			// change gets the newer one too.
			other := w.newEdge("n1")
			s2, changes, rev, err := w.x.Resume("n1", 3)
			if err != nil {
				t.Fatal(err)
			}
			defer s2.Close()
			other.holds = map[wire.Key]int64{key("pods/default/web"): 3, key("serviceaccounts/default/default"): 2} // without the secret
			other.apply(changes, rev)
			if d := diffViews(other.holds, w.viewAt(w.rev, "n1")); d != "" {
				t.Errorf("node n1 resumed from 3 differs from its view:%s", d)
			}
		})
	}
}

// TestFill: the index keeps what Fill hands it only for an object of an
// OnDemand resource still at that revision, referenced, of the size
// indexed, and whose bytes it does not hold.
func TestFill(t *testing.T) {
	w := newWorld(t, DefaultConfig())
	w.commit(change{key: key("configmaps/default/used")})   // 1
	w.commit(change{key: key("configmaps/default/unused")}) // 2
	w.commit(change{key: key("pods/default/web"), spec: &podSpec{node: "n1", configMaps: []string{"used"}}})
	w.commit(change{key: key("services/default/api")}) // 4
	raw := func(k string) []byte { return bytes.Clone(w.objs[key(k)].raw) }
	for _, tc := range []struct {
		name string
		key  string
		rev  int64
		raw  []byte
		want bool
	}{
		{"stale revision", "configmaps/default/used", 2, raw("configmaps/default/used"), false},
		{"not referenced", "configmaps/default/unused", 2, raw("configmaps/default/unused"), false},
		{"another size", "configmaps/default/used", 1, raw("configmaps/default/used")[1:], false},
		{"no bytes", "configmaps/default/used", 1, nil, false},
		{"not of an OnDemand resource", "services/default/api", 4, raw("services/default/api"), false},
		{"not indexed", "configmaps/default/none", 1, raw("configmaps/default/used"), false},
		{"referenced and current", "configmaps/default/used", 1, raw("configmaps/default/used"), true},
		{"already held", "configmaps/default/used", 1, raw("configmaps/default/used"), false},
	} {
		before, _ := held(w.x)
		got := w.x.Fill(key(tc.key), tc.rev, tc.raw)
		after, _ := held(w.x)
		if got != tc.want || (after-before != 0) != tc.want {
			t.Errorf("Fill(%s: %s@%d) = %v, bytes held %d -> %d; want %v", tc.name, tc.key, tc.rev, got, before, after, tc.want)
		}
	}
	if raw, ok := w.x.Raw(key("configmaps/default/used"), 1); !ok || !bytes.Equal(raw, w.objs[key("configmaps/default/used")].raw) {
		t.Errorf("Raw(used, 1) = %d bytes, %v; want what Fill kept", len(raw), ok)
	}
	if _, ok := w.x.Raw(key("configmaps/default/unused"), 2); ok {
		t.Errorf("Raw(unused, 2) found bytes; want none held")
	}
	// Once the pod stops referencing it, the bytes go.
	w.commit(change{key: key("pods/default/web"), spec: &podSpec{node: "n1"}})
	if _, ok := w.x.Raw(key("configmaps/default/used"), 1); ok {
		t.Errorf("Raw(used, 1) after the pod dropped it found bytes; want none held")
	}
}

// TestFirmwareTrustShared: the firmware trust set is a configmap that no
// pod references, yet it is in every node's view, live and on resume, by
// Apply and by Reset, and the index holds its bytes.
func TestFirmwareTrustShared(t *testing.T) {
	for _, viaReset := range []bool{false, true} {
		w := newWorld(t, DefaultConfig())
		w.commit(change{key: key("nodes//n1")})
		w.commit(change{key: key("nodes//n2")})
		w.commit(change{key: key("configmaps/kube-system/other")})
		w.commit(change{key: wire.FirmwareTrustKey})
		if viaReset {
			w.reset()
		}
		if b, u := held(w.x); b != worldBytes(w) || u != 1 {
			t.Errorf("reset %v: index holds %d bytes, %d objects without theirs; want %d, 1", viaReset, b, u, worldBytes(w))
		}
		if viaReset {
			for _, n := range []string{"n1", "n2"} {
				if !slices.ContainsFunc(w.x.View(n), func(e wire.InventoryEntry) bool { return e.Key == wire.FirmwareTrustKey }) {
					t.Errorf("after Reset, %s's view lacks the trust set", n)
				}
			}
			continue
		}
		for _, n := range []string{"n1", "n2"} {
			e := w.newEdge(n)
			s, changes, rev, err := w.x.Resume(n, 0)
			if err != nil {
				t.Fatal(err)
			}
			e.s = s
			e.apply(changes, rev)
			if _, ok := e.holds[wire.FirmwareTrustKey]; !ok {
				t.Errorf("reset %v: %s's view lacks the trust set: %v", viaReset, n, e.holds)
			}
			if d := diffViews(e.holds, w.viewAt(w.rev, n)); d != "" {
				t.Errorf("reset %v: %s: %s", viaReset, n, d)
			}
			// A change of the trust set reaches the node live.
			w.commit(change{key: wire.FirmwareTrustKey})
			if err := drain(t, w, e); err != nil {
				t.Fatal(err)
			}
			if e.holds[wire.FirmwareTrustKey] != w.rev {
				t.Errorf("reset %v: %s holds the trust set at %d, want %d", viaReset, n, e.holds[wire.FirmwareTrustKey], w.rev)
			}
			s.Close()
		}
	}
}
