package server_test

import (
	"bytes"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/outpost-mesh/outpost/internal/wait"
	"github.com/outpost-mesh/outpost/sync/view"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// testMeshKey derives a key that names its site and epoch.
func testMeshKey(site string, epoch int64) []byte {
	k := make([]byte, wire.MeshKeySize)
	copy(k, fmt.Sprintf("%s/%d", site, epoch))
	return k
}

func meshHub(t *testing.T, policy view.MeshKeyPolicy) *hub {
	t.Helper()
	h := startHub(t, defaultHubOptions())
	h.stop()
	h.cfg.MeshKeys, h.cfg.MeshKeyPolicy = testMeshKey, policy
	h.start(h.addr)
	return h
}

// siteNode returns Node name in site ("" for none).
func siteNode(name, site string) *corev1.Node {
	n := testNode(name)
	if site != "" {
		n.Labels = map[string]string{wire.SiteLabel: site}
	}
	return n
}

// meshKeysOf returns the meshkeys objects st holds, by site, with their
// revisions.
func meshKeysOf(t *testing.T, st *memStore) (map[string]*wire.MeshKeys, map[string]int64) {
	t.Helper()
	st.mu.Lock()
	defer st.mu.Unlock()
	keys, revs := map[string]*wire.MeshKeys{}, map[string]int64{}
	for k, c := range st.objs {
		if k.Resource != wire.ResourceMeshKeys {
			continue
		}
		mk, err := wire.UnmarshalMeshKeys(c.Object)
		if err != nil {
			t.Fatalf("%v: %v", k, err)
		}
		keys[k.Name], revs[k.Name] = mk, c.Revision
	}
	return keys, revs
}

// TestMeshKeys: a node in a site holds its site's keys, of the epoch
// before through Ahead after, at the revision of the last one's start;
// moved to another site it holds that site's instead, and in no site
// none. Returning with its keys, it keeps them.
func TestMeshKeys(t *testing.T) {
	p := view.DefaultMeshKeyPolicy()
	h := meshHub(t, p)
	h.feed.put(nodeKey("edge-1"), siteNode("edge-1", "east"))
	st := newMemStore()
	cfg := h.clientConfig("edge-1", h.ca.nodeCert(t, "edge-1", time.Hour), st)
	cfg.HeldTokens = heldTokens(st)
	_, stop := runClient(t, cfg)

	holds := func(sites ...string) func() (bool, string) {
		return func() (bool, string) {
			keys, _ := meshKeysOf(t, st)
			var got []string
			for s := range keys {
				got = append(got, s)
			}
			slices.Sort(got)
			return slices.Equal(got, sites), fmt.Sprint(got)
		}
	}
	wait.For(t, waitLong, "east's keys", holds("east"))
	keys, revs := meshKeysOf(t, st)
	e := p.Epoch(time.Now())
	if want := p.Keys("east", e, testMeshKey); !equalMeshKeys(keys["east"], want) || revs["east"] != p.Revision(e) {
		if p.Epoch(time.Now()) == e { // not a day's turn during the test
			t.Errorf("east's keys = %+v at %d, want %+v at %d", keys["east"], revs["east"], want, p.Revision(e))
		}
	}
	if ring := keys["east"].Ring(time.Now()); !bytes.Equal(ring[0], testMeshKey("east", e)) {
		t.Errorf("east's primary key = %q, want epoch %d's", ring[0], e)
	}

	h.feed.put(nodeKey("edge-1"), siteNode("edge-1", "west"))
	wait.For(t, waitLong, "west's keys instead of east's", holds("west"))
	h.feed.put(nodeKey("edge-1"), siteNode("edge-1", ""))
	wait.For(t, waitLong, "no keys in no site", holds())

	// Back in east while the node is away: it returns to east's keys.
	stop()
	h.waitGone(t, "edge-1")
	h.feed.put(nodeKey("edge-1"), siteNode("edge-1", "east"))
	_, stop = runClient(t, cfg)
	wait.For(t, waitLong, "east's keys on return", holds("east"))
	// Moved to west while away: east's go, west's come.
	stop()
	h.waitGone(t, "edge-1")
	h.feed.put(nodeKey("edge-1"), siteNode("edge-1", "west"))
	runClient(t, cfg)
	wait.For(t, waitLong, "west's keys on return", holds("west"))
}

// equalMeshKeys reports whether a and b hold the same keys.
func equalMeshKeys(a, b *wire.MeshKeys) bool {
	return a != nil && b != nil && bytes.Equal(wire.MarshalMeshKeys(a), wire.MarshalMeshKeys(b))
}

// viewKeys reads the Batches of the resume step from s, answering an
// inventory request with inv, and returns the keys they carry.
func viewKeys(t *testing.T, s *rawStream, inv []wire.InventoryEntry) []wire.Key {
	t.Helper()
	w, ok := s.recv(t).(*wire.Welcome)
	if !ok {
		t.Fatalf("want a Welcome")
	}
	if w.SendInventory {
		s.send(t, &wire.Inventory{Entries: inv})
	}
	var keys []wire.Key
	for {
		b, ok := s.recv(t).(*wire.Batch)
		if !ok {
			t.Fatal("want a Batch")
		}
		for _, c := range b.Changes {
			keys = append(keys, c.Key)
		}
		if b.Revision != 0 {
			return keys
		}
	}
}

// TestMeshKeysHeld: a node that says it holds its site's current keys is
// sent none; one that speaks capability version 4 is sent none either;
// one that says it holds too many is refused.
func TestMeshKeysHeld(t *testing.T) {
	p := view.DefaultMeshKeyPolicy()
	h := meshHub(t, p)
	h.feed.put(nodeKey("edge-1"), siteNode("edge-1", "east"))
	east := wire.MeshKeysKey("east")
	for _, tc := range []struct {
		name    string
		version uint32
		held    bool
	}{
		{"holding the current keys", wire.CapabilityVersion, true},
		{"of version 4", 4, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := p.Epoch(time.Now())
			hello := &wire.Hello{CapabilityVersion: tc.version, NodeName: "edge-1"}
			var inv []wire.InventoryEntry
			if tc.held {
				hello.Tokens = []wire.InventoryEntry{{Key: east, Revision: p.Revision(before)}}
				inv = hello.Tokens
			}
			s := openStream(t, h.rawConn(t, h.ca.nodeCert(t, "edge-1", time.Hour)))
			s.send(t, hello)
			if keys := viewKeys(t, s, inv); !slices.Contains(keys, nodeKey("edge-1")) || slices.Contains(keys, east) {
				t.Fatalf("view = %v, want the Node and no keys", keys)
			}
			// Give the session the moment it would take to send them.
			s.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
			if m, err := s.f.Read(); err == nil && p.Epoch(time.Now()) == before {
				t.Errorf("after its view, the node was sent %#v", m)
			}
		})
	}

	// Without them, the same node is sent them, after its view.
	s := openStream(t, h.rawConn(t, h.ca.nodeCert(t, "edge-1", time.Hour)))
	s.send(t, &wire.Hello{CapabilityVersion: wire.CapabilityVersion, NodeName: "edge-1"})
	viewKeys(t, s, nil)
	b, ok := s.recv(t).(*wire.Batch)
	if !ok || len(b.Changes) != 1 || b.Changes[0].Key != east || b.Changes[0].Op != wire.OpPut {
		t.Fatalf("after the view, got %#v, want a Batch putting %v", b, east)
	}

	var many []wire.InventoryEntry
	for i := range 17 {
		many = append(many, wire.InventoryEntry{Key: wire.MeshKeysKey(fmt.Sprint("site-", i)), Revision: 1})
	}
	s = openStream(t, h.rawConn(t, h.ca.nodeCert(t, "edge-1", time.Hour)))
	s.send(t, &wire.Hello{CapabilityVersion: wire.CapabilityVersion, NodeName: "edge-1", Tokens: many})
	s.recvError(t, wire.CodeTooLarge)
}

// TestMeshKeysRotate: as the epoch moves, the node is sent the keys of
// the new one, at a later revision, once an epoch.
func TestMeshKeysRotate(t *testing.T) {
	p := view.MeshKeyPolicy{Period: time.Second, Ahead: 2}
	h := meshHub(t, p)
	h.feed.put(nodeKey("edge-1"), siteNode("edge-1", "east"))
	st := newMemStore()
	cfg := h.clientConfig("edge-1", h.ca.nodeCert(t, "edge-1", time.Hour), st)
	cfg.HeldTokens = heldTokens(st)
	runClient(t, cfg)

	rev := func() int64 {
		_, revs := meshKeysOf(t, st)
		return revs["east"]
	}
	wait.For(t, waitLong, "east's keys", func() (bool, string) { return rev() > 0, "" })
	start, first := time.Now(), rev()
	wait.For(t, waitLong, "two rotations", func() (bool, string) { return rev() >= first+2, fmt.Sprint(rev()) })
	elapsed := time.Since(start)
	keys, revs := meshKeysOf(t, st)
	k := keys["east"]
	if len(k.Keys) != 4 || k.Keys[3].From.Unix() != revs["east"] {
		t.Fatalf("east's keys = %+v at %d, want 4 keys, the last from the revision", k, revs["east"])
	}
	e := p.Epoch(k.Keys[3].From) - int64(p.Ahead) // the epoch they were sent in
	for i, mk := range k.Keys {
		if want := testMeshKey("east", e-1+int64(i)); !bytes.Equal(mk.Key, want) {
			t.Errorf("key %d = %q, want %q", i, mk.Key, want)
		}
	}
	puts := 0
	for _, b := range st.batchesSince(0) {
		for _, c := range b {
			if c.Key.Resource == wire.ResourceMeshKeys {
				puts++
			}
		}
	}
	if limit := int(elapsed/time.Second) + 3; puts > limit {
		t.Errorf("%d mesh key puts in %v with a 1s period: the session spins", puts, elapsed)
	}
}
