package nodeipam

import (
	"errors"
	"fmt"
	"net/netip"
)

// MaxBlockBits bounds how much longer a node's mask may be than the
// cluster's: a range splits into at most 1<<16 blocks, upstream's bound
// for IPv6, so that a Set stays small.
const MaxBlockBits = 16

var (
	// ErrExhausted is returned by Set.AllocateNext and Allocator.Reserve
	// when every block of the range is in use.
	ErrExhausted = errors.New("no pod CIDR left in the cluster range")
	// ErrOutOfRange is returned by Set.Occupy and Set.Release for a
	// prefix that shares no address with the cluster range.
	ErrOutOfRange = errors.New("outside the cluster range")
)

// Set is the cluster range cut into blocks of one mask size, with how
// many holders each block has: a block is free when it has none. It is
// upstream's cidrset, counting holders where upstream keeps one bit, so
// that a block two nodes claim stays in use until both are gone. No I/O;
// a Set is not safe for concurrent use.
type Set struct {
	cluster netip.Prefix // masked
	mask    int          // the blocks' prefix length
	holders []uint32     // by block index
	used    int          // blocks with a holder
	next    int          // the block AllocateNext looks at first
}

// NewSet returns the empty set of the blocks of cluster with prefix
// length mask. The mask must be longer than cluster's, by at most
// MaxBlockBits, and no longer than an address.
func NewSet(cluster netip.Prefix, mask int) (*Set, error) {
	if !cluster.IsValid() {
		return nil, errors.New("nodeipam: cluster CIDR is not a valid prefix")
	}
	cluster = cluster.Masked()
	switch {
	case mask <= cluster.Bits() || mask > cluster.Addr().BitLen():
		return nil, fmt.Errorf("nodeipam: node mask /%d must be longer than the cluster CIDR's /%d, and at most /%d", mask, cluster.Bits(), cluster.Addr().BitLen())
	case mask-cluster.Bits() > MaxBlockBits:
		return nil, fmt.Errorf("nodeipam: node mask /%d cuts %v into more than %d blocks", mask, cluster, 1<<MaxBlockBits)
	}
	return &Set{cluster: cluster, mask: mask, holders: make([]uint32, 1<<(mask-cluster.Bits()))}, nil
}

// Cluster returns the range, masked.
func (s *Set) Cluster() netip.Prefix { return s.cluster }

// Mask returns the blocks' prefix length.
func (s *Set) Mask() int { return s.mask }

// Size returns how many blocks the range has.
func (s *Set) Size() int { return len(s.holders) }

// Used returns how many blocks have a holder.
func (s *Set) Used() int { return s.used }

// AllocateNext gives the first free block at or after the one after the
// last it gave (wrapping around), as upstream does, so that a block just
// released is the last to be given again; it then has one holder. It
// returns ErrExhausted when no block is free.
func (s *Set) AllocateNext() (netip.Prefix, error) {
	if s.used == len(s.holders) {
		return netip.Prefix{}, ErrExhausted
	}
	i := s.next
	for s.holders[i] != 0 {
		i = (i + 1) % len(s.holders)
	}
	s.holders[i] = 1
	s.used++
	s.next = (i + 1) % len(s.holders)
	return s.block(i), nil
}

// Occupy adds a holder to every block p shares an address with: the
// block holding p when p is no larger than a block, every block of p when
// it is larger, all of them when p holds the whole range. shared reports
// whether any of those blocks already had a holder. It returns an error
// wrapping ErrOutOfRange, changing nothing, when p shares no address with
// the range.
func (s *Set) Occupy(p netip.Prefix) (shared bool, err error) {
	first, n, err := s.span(p)
	if err != nil {
		return false, err
	}
	for i := first; i < first+n; i++ {
		if s.holders[i] == 0 {
			s.used++
		} else {
			shared = true
		}
		s.holders[i]++
	}
	return shared, nil
}

// Release takes a holder from every block Occupy(p) adds one to; a block
// with none is left free. It returns an error wrapping ErrOutOfRange,
// changing nothing, when p shares no address with the range.
func (s *Set) Release(p netip.Prefix) error {
	first, n, err := s.span(p)
	if err != nil {
		return err
	}
	for i := first; i < first+n; i++ {
		switch s.holders[i] {
		case 0:
		case 1:
			s.holders[i] = 0
			s.used--
		default:
			s.holders[i]--
		}
	}
	return nil
}

// span returns the index of the first block p shares an address with,
// and how many blocks from there it does.
func (s *Set) span(p netip.Prefix) (first, n int, err error) {
	if !p.IsValid() {
		return 0, 0, fmt.Errorf("invalid prefix: %w", ErrOutOfRange)
	}
	p = p.Masked()
	switch {
	case p.Bits() <= s.cluster.Bits() && p.Contains(s.cluster.Addr()):
		return 0, len(s.holders), nil
	case p.Bits() > s.cluster.Bits() && s.cluster.Contains(p.Addr()):
		first = s.index(p.Addr())
		if p.Bits() >= s.mask {
			return first, 1, nil
		}
		return first, 1 << (s.mask - p.Bits()), nil
	}
	return 0, 0, fmt.Errorf("%v is %w %v", p, ErrOutOfRange, s.cluster)
}

// index returns the block of a, an address of the range: the bits of a
// between the cluster's mask and the blocks'.
func (s *Set) index(a netip.Addr) int {
	b := a.AsSlice()
	i := 0
	for k := s.cluster.Bits(); k < s.mask; k++ {
		i = i<<1 | int(b[k/8]>>(7-k%8)&1)
	}
	return i
}

// block returns the prefix of block i.
func (s *Set) block(i int) netip.Prefix {
	b := s.cluster.Addr().AsSlice()
	for k := s.mask - 1; k >= s.cluster.Bits(); k-- {
		if i&1 == 1 {
			b[k/8] |= 1 << (7 - k%8)
		}
		i >>= 1
	}
	a, _ := netip.AddrFromSlice(b)
	return netip.PrefixFrom(a, s.mask)
}
