package view

import (
	"bytes"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/outpost-mesh/outpost/sync/wire"
)

// testDerive derives a key that names its site and epoch.
func testDerive(site string, epoch int64) []byte {
	k := make([]byte, wire.MeshKeySize)
	copy(k, fmt.Sprintf("%s/%d", site, epoch))
	return k
}

func TestMeshKeyPolicy(t *testing.T) {
	p := DefaultMeshKeyPolicy()
	day := int64(86400)
	for _, tc := range []struct {
		now  time.Time
		want int64
	}{
		{time.Unix(0, 0), 0},
		{time.Unix(day-1, 0), 0},
		{time.Unix(day, 0), 1},
		{time.Unix(20790*day+3600, 0), 20790},
		{time.Unix(-1, 0), -1},
	} {
		if got := p.Epoch(tc.now); got != tc.want {
			t.Errorf("Epoch(%v) = %d, want %d", tc.now.UTC(), got, tc.want)
		}
	}
	if got := p.From(20790); got.Unix() != 20790*day {
		t.Errorf("From(20790) = %v, want Unix %d", got, 20790*day)
	}
	if got, want := p.Revision(20790), (20790+7)*day; got != want {
		t.Errorf("Revision(20790) = %d, want %d: the last key's start", got, want)
	}

	k := p.Keys("east", 20790, testDerive)
	if err := k.Validate(); err != nil {
		t.Fatalf("Keys(east, 20790) = %v", err)
	}
	if len(k.Keys) != 9 || k.Site != "east" {
		t.Fatalf("Keys(east, 20790) = %d keys of %q, want 9 of east: the epoch before, this one and 7 ahead", len(k.Keys), k.Site)
	}
	for i, mk := range k.Keys {
		e := int64(20789 + i)
		if !mk.From.Equal(p.From(e)) || !bytes.Equal(mk.Key, testDerive("east", e)) {
			t.Errorf("key %d = %v %q, want epoch %d's", i, mk.From, mk.Key, e)
		}
	}
	if got := k.Keys[len(k.Keys)-1].From.Unix(); got != p.Revision(20790) {
		t.Errorf("last key from %d, revision %d: want the same", got, p.Revision(20790))
	}
	// A node that holds them rotates on its own: a day later its primary
	// is the next epoch's key, which the hub would send as primary too.
	next := p.Keys("east", 20791, testDerive)
	at := p.From(20791).Add(time.Hour)
	if got, want := k.Ring(at)[0], next.Ring(at)[0]; !bytes.Equal(got, want) {
		t.Errorf("a day on, the primary of the old keys is %q, of the new %q", got, want)
	}
}

// TestMeshKeysPlan: a node is sent its site's keys when it lacks them or
// the epoch moved, nothing when it holds them, and the keys of another
// site are deleted.
func TestMeshKeysPlan(t *testing.T) {
	p := DefaultMeshKeyPolicy()
	now := p.From(20790).Add(5 * time.Hour)
	east, west := wire.MeshKeysKey("east"), wire.MeshKeysKey("west")
	current := p.Revision(20790)
	for _, tc := range []struct {
		name   string
		held   []wire.InventoryEntry
		site   string
		put    bool
		delete []wire.Key
	}{
		{"nothing held", nil, "east", true, nil},
		{"held at the current revision", []wire.InventoryEntry{{Key: east, Revision: current}}, "east", false, nil},
		{"held from the day before", []wire.InventoryEntry{{Key: east, Revision: p.Revision(20789)}}, "east", true, nil},
		{"held from a hub whose clock was ahead", []wire.InventoryEntry{{Key: east, Revision: p.Revision(20791)}}, "east", true, nil},
		{"another site's", []wire.InventoryEntry{{Key: west, Revision: current}, {Key: east, Revision: current}}, "east", false, []wire.Key{west}},
		{"in no site", []wire.InventoryEntry{{Key: west, Revision: current}, {Key: east, Revision: current}}, "", false, []wire.Key{east, west}},
		{"no site, nothing held", nil, "", false, nil},
		{"other resources ignored", []wire.InventoryEntry{{Key: wire.PodTokensKey("default", "uid"), Revision: 9}, {Key: wire.Key{Resource: wire.ResourceMeshKeys}}}, "east", true, nil},
	} {
		m := NewMeshKeys(p, tc.held)
		plan := m.Plan(tc.site, now)
		if plan.Put != tc.put || !slices.Equal(plan.Delete, tc.delete) {
			t.Errorf("%s: Plan(%q) puts %v, deletes %v; want %v, %v", tc.name, tc.site, plan.Put, plan.Delete, tc.put, tc.delete)
		}
		if tc.site == "" {
			if !plan.Next.IsZero() {
				t.Errorf("%s: Plan(no site).Next = %v, want none", tc.name, plan.Next)
			}
			continue
		}
		if plan.Key != wire.MeshKeysKey(tc.site) || plan.Epoch != 20790 || plan.Revision != current || !plan.Next.Equal(p.From(20791)) {
			t.Errorf("%s: Plan = %+v, want %v in epoch 20790 at %d, next at %v", tc.name, plan, wire.MeshKeysKey(tc.site), current, p.From(20791))
		}
	}

	// A session's life: sent, then nothing until the epoch moves; the
	// site changes and the old keys go.
	m := NewMeshKeys(p, nil)
	plan := m.Plan("east", now)
	m.Sent(plan.Key, plan.Revision)
	if again := m.Plan("east", now.Add(time.Hour)); again.Put || len(again.Delete) > 0 {
		t.Errorf("after Sent, Plan = %+v, want nothing", again)
	}
	later := m.Plan("east", plan.Next)
	if !later.Put || later.Epoch != 20791 || later.Revision <= plan.Revision {
		t.Errorf("at the next epoch, Plan = %+v, want the keys of epoch 20791 at a later revision", later)
	}
	m.Sent(later.Key, later.Revision)
	moved := m.Plan("west", plan.Next)
	if !moved.Put || moved.Key != west || !slices.Equal(moved.Delete, []wire.Key{east}) {
		t.Errorf("moved to west, Plan = %+v, want west's keys put and east's deleted", moved)
	}
	m.Deleted(east)
	m.Sent(west, moved.Revision)
	if again := m.Plan("west", plan.Next); again.Put || len(again.Delete) > 0 {
		t.Errorf("after the move, Plan = %+v, want nothing", again)
	}
}

// TestSessionSite: a session's site follows its node's Node label.
func TestSessionSite(t *testing.T) {
	x := NewIndex(DefaultConfig())
	rev := int64(0)
	node := func(site string) {
		t.Helper()
		rev++
		if err := x.Apply([]Event{{Revision: rev, Key: nodeKey("n1"), Raw: storedNode(t, "n1", &nodeSpec{site: site}, int(rev))}}); err != nil {
			t.Fatal(err)
		}
	}
	node("east")
	s, _, _, err := x.Resume("n1", 0)
	if err != nil {
		s, _, _ = x.ResumeFromInventory("n1", nil)
	}
	defer s.Close()
	if got := s.Site(); got != "east" {
		t.Fatalf("Site() = %q, want east", got)
	}
	for _, site := range []string{"west", "", "east"} {
		node(site)
		select {
		case <-s.Changed():
		default:
			t.Fatalf("relabelled to %q: the session was not woken", site)
		}
		if _, _, err := s.Next(); err != nil {
			t.Fatal(err)
		}
		if got := s.Site(); got != site {
			t.Errorf("relabelled to %q: Site() = %q", site, got)
		}
	}
}
