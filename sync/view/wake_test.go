package view

import (
	"strings"
	"testing"

	"github.com/outpost-mesh/outpost/sync/wire"
)

// TestSessionWakeups: a session wakes for changes of its node's view (its
// pods, what they reference, services) and not for other nodes' changes.
func TestSessionWakeups(t *testing.T) {
	x := NewIndex(DefaultConfig())
	rev := int64(0)
	put := func(k wire.Key, spec *podSpec) {
		rev++
		if err := x.Apply([]Event{{Revision: rev, Key: k, Raw: storedObject(t, k, spec, int(rev))}}); err != nil {
			t.Fatal(err)
		}
	}
	podA, podB := key("pods/ns/a"), key("pods/ns/b")
	secretA, secretB := key("secrets/ns/sa"), key("secrets/ns/sb")
	put(podA, &podSpec{node: "edge-a", secrets: []string{"sa"}})
	put(podB, &podSpec{node: "edge-b", secrets: []string{"sb"}})

	s, _, _, err := x.Resume("edge-a", rev)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	drain := func() bool {
		select {
		case <-s.Changed():
			return true
		default:
			return false
		}
	}
	drain()
	for _, tc := range []struct {
		what string
		key  wire.Key
		spec *podSpec
		wake bool
	}{
		{"another node's pod", podB, &podSpec{node: "edge-b", secrets: []string{"sb"}}, false},
		{"a secret only another node uses", secretB, nil, false},
		{"its own pod", podA, &podSpec{node: "edge-a", secrets: []string{"sa"}}, true},
		{"a secret its pod uses", secretA, nil, true},
		{"a service", key("services/ns/web"), nil, true},
		{"its Node", key("nodes//edge-a"), nil, true},
		{"another Node", key("nodes//edge-b"), nil, false},
		{"a pod moving to it", podB, &podSpec{node: "edge-a"}, true},
	} {
		put(tc.key, tc.spec)
		if got := drain(); got != tc.wake {
			t.Errorf("after %s: woken = %v, want %v", tc.what, got, tc.wake)
		}
		if _, _, err := s.Next(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSessionWakeupsBySite: a change of a Node wakes the sessions of the
// nodes of its site, before and after, and no other.
func TestSessionWakeupsBySite(t *testing.T) {
	x := NewIndex(DefaultConfig())
	rev := int64(0)
	put := func(node, site string) {
		rev++
		k := nodeKey(node)
		if err := x.Apply([]Event{{Revision: rev, Key: k, Raw: storedNode(t, node, &nodeSpec{site: site}, int(rev))}}); err != nil {
			t.Fatal(err)
		}
	}
	put("a", "east")
	put("b", "east")
	put("c", "west")
	put("d", "")
	sessions := map[string]*Session{}
	for _, n := range []string{"a", "b", "c", "d", "e"} {
		s, _, _, err := x.Resume(n, rev)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		sessions[n] = s
	}
	woken := func() string {
		var out []string
		for _, n := range []string{"a", "b", "c", "d", "e"} {
			select {
			case <-sessions[n].Changed():
				out = append(out, n)
			default:
			}
			if _, _, err := sessions[n].Next(); err != nil {
				t.Fatal(err)
			}
		}
		return strings.Join(out, " ")
	}
	woken()
	for _, tc := range []struct {
		what       string
		node, site string
		want       string
	}{
		{"a status change in east", "b", "east", "a b"},
		{"a status change in west", "c", "west", "c"},
		{"a status change of a Node in no site", "d", "", "d"},
		{"a Node joining east", "d", "east", "a b d"},
		{"a Node moving from west to east", "c", "east", "a b c d"},
		{"a Node leaving east", "b", "", "a b c d"},
		{"a Node moving from east to west", "a", "west", "a c d"},
		{"a status change in west", "a", "west", "a"},
		{"a Node created in west", "e", "west", "a e"},
	} {
		put(tc.node, tc.site)
		if got := woken(); got != tc.want {
			t.Errorf("after %s (%s): woken %q, want %q", tc.what, tc.node, got, tc.want)
		}
	}
	rev++
	if err := x.Apply([]Event{{Revision: rev, Key: nodeKey("e"), Deleted: true}}); err != nil {
		t.Fatal(err)
	}
	if got, want := woken(), "a e"; got != want {
		t.Errorf("after a Node's deletion in west: woken %q, want %q", got, want)
	}
}
