package nodeipam

import (
	"errors"
	"net/netip"
	"reflect"
	"slices"
	"testing"
)

func newAllocator(t *testing.T, cluster string, mask int) *Allocator {
	t.Helper()
	a, err := NewAllocator(netip.MustParsePrefix(cluster), mask)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func reserve(t *testing.T, a *Allocator, name, uid, want string) {
	t.Helper()
	p, err := a.Reserve(name, uid)
	if err != nil || p.String() != want {
		t.Fatalf("Reserve(%s, %s) = %v, %v; want %s", name, uid, p, err, want)
	}
}

func hold(t *testing.T, a *Allocator, name, uid string, cidrs []string, want Held) {
	t.Helper()
	if got := a.Hold(name, uid, cidrs); !reflect.DeepEqual(got, want) {
		t.Fatalf("Hold(%s, %s, %v) = %+v, want %+v", name, uid, cidrs, got, want)
	}
}

// TestAllocatorRestart: the blocks of the nodes held before any is given
// are never given again, and new nodes get the others in order.
func TestAllocatorRestart(t *testing.T) {
	a := newAllocator(t, "10.42.0.0/16", 24)
	hold(t, a, "a", "ua", []string{"10.42.0.0/24"}, Held{Changed: true})
	hold(t, a, "b", "ub", []string{"10.42.2.0/24"}, Held{Changed: true})
	hold(t, a, "c", "uc", []string{"10.1.0.0/24", "fd00::/64"}, Held{Changed: true, Outside: []string{"10.1.0.0/24", "fd00::/64"}})
	// 10.42.2.0/23: b's block and the next.
	hold(t, a, "d", "ud", []string{"10.42.3.0/23"}, Held{Changed: true, Shared: []Conflict{{CIDR: "10.42.3.0/23", Others: []string{"b"}}}})
	if a.Used() != 3 {
		t.Fatalf("Used() = %d, want 3", a.Used())
	}
	reserve(t, a, "e", "ue", "10.42.1.0/24")
	reserve(t, a, "f", "uf", "10.42.4.0/24")
	// A repeat of what is recorded is nothing new.
	hold(t, a, "a", "ua", []string{"10.42.0.0/24"}, Held{})
	hold(t, a, "c", "uc", []string{"10.1.0.0/24", "fd00::/64"}, Held{})
}

// TestAllocatorReserve: a reservation is the node's until its spec holds
// it; it is given again only for the same node, and freed when the write
// fails or the spec holds another.
func TestAllocatorReserve(t *testing.T) {
	a := newAllocator(t, "10.42.0.0/16", 24)
	reserve(t, a, "a", "u1", "10.42.0.0/24")
	reserve(t, a, "a", "u1", "10.42.0.0/24") // the write is tried again
	reserve(t, a, "b", "ub", "10.42.1.0/24")

	// Another node of the same name: a's block goes back, and the new
	// one gets the next.
	reserve(t, a, "a", "u2", "10.42.2.0/24")
	if a.Used() != 2 {
		t.Fatalf("Used() = %d after a node of a reserved name came back, want 2", a.Used())
	}
	// Seen on the node: confirmed, and no longer Unreserve's to free.
	hold(t, a, "a", "u2", []string{"10.42.2.0/24"}, Held{})
	a.Unreserve("a", "u2")
	if a.Used() != 2 {
		t.Fatalf("Used() = %d after Unreserve of a block seen on its node, want 2", a.Used())
	}
	// A failed write frees the block.
	a.Unreserve("b", "other")
	if a.Used() != 2 {
		t.Fatalf("Used() = %d after Unreserve of another uid, want 2", a.Used())
	}
	a.Unreserve("b", "ub")
	if a.Used() != 1 {
		t.Fatalf("Used() = %d after Unreserve, want 1", a.Used())
	}
	// A node whose spec turns out to hold another CIDR frees the one
	// reserved for it.
	reserve(t, a, "c", "uc", "10.42.3.0/24")
	hold(t, a, "c", "uc", []string{"10.42.9.0/24"}, Held{Changed: true})
	if a.Used() != 2 {
		t.Fatalf("Used() = %d, want 2 (a's and c's own)", a.Used())
	}
	a.Forget("a")
	a.Forget("c")
	a.Forget("nobody")
	if a.Used() != 0 {
		t.Fatalf("Used() = %d after every node was forgotten, want 0", a.Used())
	}
}

// TestAllocatorConflict: a block two nodes hold is reported, stays in use
// until both are gone, and is never given meanwhile.
func TestAllocatorConflict(t *testing.T) {
	a := newAllocator(t, "10.42.0.0/22", 24)
	hold(t, a, "a", "ua", []string{"10.42.0.0/24"}, Held{Changed: true})
	hold(t, a, "b", "ub", []string{"10.42.0.0/24"}, Held{Changed: true, Shared: []Conflict{{CIDR: "10.42.0.0/24", Others: []string{"a"}}}})
	hold(t, a, "c", "uc", []string{"10.42.0.128/25"}, Held{Changed: true, Shared: []Conflict{{CIDR: "10.42.0.128/25", Others: []string{"a", "b"}}}})
	hold(t, a, "b", "ub", []string{"10.42.0.0/24"}, Held{})
	a.Forget("a")
	a.Forget("b")
	reserve(t, a, "d", "ud", "10.42.1.0/24")
	reserve(t, a, "e", "ue", "10.42.2.0/24")
	reserve(t, a, "f", "uf", "10.42.3.0/24")
	if _, err := a.Reserve("g", "ug"); !errors.Is(err, ErrExhausted) {
		t.Fatalf("Reserve(g) with 10.42.0.0/24 still held by c = %v, want ErrExhausted", err)
	}
	a.Forget("c")
	reserve(t, a, "g", "ug", "10.42.0.0/24")

	// Invalid CIDRs are kept by their node and take nothing.
	hold(t, a, "h", "uh", []string{"not a CIDR"}, Held{Changed: true, Invalid: []string{"not a CIDR"}})
}

// TestAllocatorExhausted: a node refused for want of a block is named by
// Retry once one is freed, and then gets it.
func TestAllocatorExhausted(t *testing.T) {
	a := newAllocator(t, "10.42.0.0/29", 30)
	reserve(t, a, "a", "ua", "10.42.0.0/30")
	reserve(t, a, "b", "ub", "10.42.0.4/30")
	for _, n := range []string{"c", "d"} {
		if _, err := a.Reserve(n, "u"+n); !errors.Is(err, ErrExhausted) {
			t.Fatalf("Reserve(%s) of a full range = %v, want ErrExhausted", n, err)
		}
	}
	if got := a.Retry(); got != nil {
		t.Fatalf("Retry() with no block freed = %v, want nil", got)
	}
	a.Forget("d") // gone while it waited
	a.Unreserve("a", "ua")
	if got := a.Retry(); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("Retry() once a block was freed = %v, want [c]", got)
	}
	if got := a.Retry(); got != nil {
		t.Fatalf("Retry() again = %v, want nil", got)
	}
	reserve(t, a, "c", "uc", "10.42.0.0/30")
	// A node that got a CIDR otherwise is no longer waiting.
	if _, err := a.Reserve("e", "ue"); !errors.Is(err, ErrExhausted) {
		t.Fatalf("Reserve(e) = %v, want ErrExhausted", err)
	}
	hold(t, a, "e", "ue", []string{"10.99.0.0/24"}, Held{Changed: true, Outside: []string{"10.99.0.0/24"}})
	a.Forget("b")
	if got := a.Retry(); got != nil {
		t.Fatalf("Retry() with no node waiting = %v, want nil", got)
	}
}
