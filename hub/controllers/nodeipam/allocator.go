package nodeipam

import (
	"maps"
	"net/netip"
	"slices"
)

// Allocator keeps, by node name, which blocks of a Set each node holds:
// those its spec's pod CIDRs cover (Hold), or the one reserved for it
// before its spec says so (Reserve). A node is told apart from an earlier
// one of its name by its UID. No I/O; an Allocator is not safe for
// concurrent use.
type Allocator struct {
	set     *Set
	nodes   map[string]*holding
	waiting map[string]bool // nodes Reserve found no block for
	freed   bool            // a block has been freed since Retry last answered
}

// holding is what one node holds.
type holding struct {
	uid      string
	cidrs    []string       // as the node's spec says, or the one reserved
	occupied []netip.Prefix // those the Set counts
	reserved bool           // given by Reserve, not yet seen in the spec
}

// Held is what Hold found of a node's pod CIDRs. The zero Held is a
// repeat of what was recorded already.
type Held struct {
	// Changed reports whether the record of the node changed.
	Changed bool
	// Outside are the CIDRs outside the cluster range: the node keeps
	// them, and they take nothing from the range.
	Outside []string
	// Invalid are those that are not CIDRs.
	Invalid []string
	// Shared are those in the range that other nodes hold too. Their
	// blocks are not given to any node until all holders are gone.
	Shared []Conflict
}

// Conflict is one pod CIDR of a node that shares blocks with those of
// other nodes.
type Conflict struct {
	CIDR   string
	Others []string // sorted
}

// NewAllocator returns the Allocator of the blocks of cluster with
// prefix length mask (see NewSet), all free.
func NewAllocator(cluster netip.Prefix, mask int) (*Allocator, error) {
	set, err := NewSet(cluster, mask)
	if err != nil {
		return nil, err
	}
	return &Allocator{set: set, nodes: map[string]*holding{}, waiting: map[string]bool{}}, nil
}

// Cluster returns the range.
func (a *Allocator) Cluster() netip.Prefix { return a.set.Cluster() }

// Size returns how many blocks the range has.
func (a *Allocator) Size() int { return a.set.Size() }

// Used returns how many blocks are held.
func (a *Allocator) Used() int { return a.set.Used() }

// Hold records that node name, of uid, holds cidrs (its spec.podCIDRs,
// which the caller keeps ownership of), in place of whatever was recorded
// of name: a block reserved for it is thus confirmed when cidrs are that
// block, and freed when they are not.
func (a *Allocator) Hold(name, uid string, cidrs []string) Held {
	delete(a.waiting, name)
	if h := a.nodes[name]; h != nil && h.uid == uid && slices.Equal(h.cidrs, cidrs) {
		h.reserved = false
		return Held{}
	}
	a.release(name)
	h := &holding{uid: uid, cidrs: slices.Clone(cidrs)}
	out := Held{Changed: true}
	for _, c := range cidrs {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			out.Invalid = append(out.Invalid, c)
			continue
		}
		shared, err := a.set.Occupy(p)
		if err != nil {
			out.Outside = append(out.Outside, c)
			continue
		}
		h.occupied = append(h.occupied, p)
		if others := a.overlapping(p); shared && len(others) > 0 {
			out.Shared = append(out.Shared, Conflict{CIDR: c, Others: others})
		}
	}
	a.nodes[name] = h
	return out
}

// Reserve returns the block for node name, of uid, whose spec holds no
// pod CIDR: the one reserved for it already, or else the next free one
// (Set.AllocateNext), which stays reserved for it until Hold records what
// its spec holds, Unreserve or Forget. What was recorded of an earlier
// node of that name is released. It returns ErrExhausted when no block is
// free, and remembers the node as waiting for one (see Retry).
func (a *Allocator) Reserve(name, uid string) (netip.Prefix, error) {
	if h := a.nodes[name]; h != nil {
		if h.uid == uid && h.reserved {
			return h.occupied[0], nil
		}
		a.release(name)
	}
	p, err := a.set.AllocateNext()
	if err != nil {
		a.waiting[name] = true
		return netip.Prefix{}, err
	}
	delete(a.waiting, name)
	a.nodes[name] = &holding{uid: uid, cidrs: []string{p.String()}, occupied: []netip.Prefix{p}, reserved: true}
	return p, nil
}

// Unreserve frees the block reserved for node name, of uid, if its spec
// has not been seen holding it: the write of it failed.
func (a *Allocator) Unreserve(name, uid string) {
	if h := a.nodes[name]; h != nil && h.uid == uid && h.reserved {
		a.release(name)
	}
}

// Forget frees what node name holds: the Node is gone.
func (a *Allocator) Forget(name string) {
	a.release(name)
	delete(a.waiting, name)
}

// Retry returns, sorted, the nodes Reserve found no block for, if a block
// has been freed since they were refused (or since Retry last returned
// them), and forgets them: they are worth another Reserve now. Otherwise
// it returns nil.
func (a *Allocator) Retry() []string {
	if !a.freed || len(a.waiting) == 0 {
		return nil
	}
	names := slices.Sorted(maps.Keys(a.waiting))
	clear(a.waiting)
	a.freed = false
	return names
}

// release drops the record of name and the Set's count of what it held.
func (a *Allocator) release(name string) {
	h := a.nodes[name]
	if h == nil {
		return
	}
	delete(a.nodes, name)
	used := a.set.Used()
	for _, p := range h.occupied {
		_ = a.set.Release(p) // in the range: Occupy took it
	}
	if a.set.Used() < used {
		a.freed = true
	}
}

// overlapping returns, sorted, the nodes recorded as holding a CIDR that
// shares a block with p.
func (a *Allocator) overlapping(p netip.Prefix) []string {
	var names []string
	for name, h := range a.nodes {
		for _, q := range h.occupied {
			if a.sameBlocks(p, q) {
				names = append(names, name)
				break
			}
		}
	}
	slices.Sort(names)
	return names
}

// sameBlocks reports whether p and q, both in the range, share a block.
func (a *Allocator) sameBlocks(p, q netip.Prefix) bool {
	pf, pn, _ := a.set.span(p)
	qf, qn, _ := a.set.span(q)
	return pf < qf+qn && qf < pf+pn
}
