package view

import (
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
