// Package ipam decides which IPv4 address each pod of a node gets from the
// node's pod CIDR. It is pure: the caller loads leases from disk, hands them
// to New, and persists what Allocate and Release change.
package ipam

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// ErrExhausted is returned by Allocate when every host address of the pod
// CIDR is leased.
var ErrExhausted = errors.New("pod CIDR exhausted")

// Lease binds a pod, by UID, to an address of the pod CIDR.
type Lease struct {
	UID string
	IP  netip.Addr
}

// Pool holds the leases of one pod CIDR. The network address, the gateway
// (the first host address, held by the node's bridge) and the broadcast
// address are never leased. A Pool is not safe for concurrent use.
type Pool struct {
	prefix netip.Prefix
	byUID  map[string]netip.Addr
	byIP   map[netip.Addr]string
	// last is the address most recently handed out; the search for a free
	// one starts after it, so a released address is reused as late as
	// possible and a stale connection to it is unlikely to reach a new pod.
	last netip.Addr
}

// CheckPrefix returns an error unless p can serve as a pod CIDR: IPv4, in
// canonical form (no host bits), and wide enough for a gateway and one pod
// (/30 or wider).
func CheckPrefix(p netip.Prefix) error {
	switch {
	case !p.IsValid():
		return errors.New("pod CIDR is not set")
	case !p.Addr().Is4():
		return fmt.Errorf("pod CIDR %s is not IPv4", p)
	case p.Masked() != p:
		return fmt.Errorf("pod CIDR %s has host bits set, want %s", p, p.Masked())
	case p.Bits() > 30:
		return fmt.Errorf("pod CIDR %s is narrower than /30", p)
	}
	return nil
}

// Gateway returns the first host address of the pod CIDR p, which the
// node's bridge holds and pods route through.
func Gateway(p netip.Prefix) netip.Addr { return p.Masked().Addr().Next() }

// Broadcast returns the last address of the pod CIDR p.
func Broadcast(p netip.Prefix) netip.Addr {
	a := p.Masked().Addr().As4()
	host := uint32(1)<<(32-p.Bits()) - 1
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	v |= host
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// New returns a Pool over prefix holding the given leases, and the leases it
// dropped: those with no UID, outside prefix, on a reserved address, or a
// second lease for a UID or an address already held. When two UIDs claim
// one address, the smaller UID keeps it, so the outcome does not depend on
// the order of leases. The caller owns both slices.
func New(prefix netip.Prefix, leases []Lease) (*Pool, []Lease, error) {
	if err := CheckPrefix(prefix); err != nil {
		return nil, nil, err
	}
	p := &Pool{
		prefix: prefix,
		byUID:  make(map[string]netip.Addr, len(leases)),
		byIP:   make(map[netip.Addr]string, len(leases)),
		last:   Gateway(prefix),
	}
	sorted := slices.Clone(leases)
	slices.SortStableFunc(sorted, func(a, b Lease) int { return strings.Compare(a.UID, b.UID) })
	var dropped []Lease
	for _, l := range sorted {
		_, uidHeld := p.byUID[l.UID]
		_, ipHeld := p.byIP[l.IP]
		if l.UID == "" || uidHeld || ipHeld || !p.leasable(l.IP) {
			dropped = append(dropped, l)
			continue
		}
		p.byUID[l.UID] = l.IP
		p.byIP[l.IP] = l.UID
		if p.last.Less(l.IP) {
			p.last = l.IP
		}
	}
	return p, dropped, nil
}

// leasable reports whether a is a host address of the pod CIDR other than
// the gateway.
func (p *Pool) leasable(a netip.Addr) bool {
	return a.Is4() && p.prefix.Contains(a) && a != p.prefix.Addr() && a != Gateway(p.prefix) && a != Broadcast(p.prefix)
}

// Prefix returns the pod CIDR of the pool.
func (p *Pool) Prefix() netip.Prefix { return p.prefix }

// Get returns uid's lease, if it has one.
func (p *Pool) Get(uid string) (Lease, bool) {
	ip, ok := p.byUID[uid]
	return Lease{UID: uid, IP: ip}, ok
}

// Allocate returns uid's lease, making one on the next free address when it
// has none; created reports whether the lease is new, which the caller must
// then persist. It returns ErrExhausted when no address is free.
func (p *Pool) Allocate(uid string) (l Lease, created bool, err error) {
	if uid == "" {
		return Lease{}, false, errors.New("allocate: empty pod UID")
	}
	if ip, ok := p.byUID[uid]; ok {
		return Lease{UID: uid, IP: ip}, false, nil
	}
	first := Gateway(p.prefix).Next()
	end := Broadcast(p.prefix)
	a := p.last.Next()
	for range p.size() {
		if a == end || !p.prefix.Contains(a) {
			a = first
		}
		if _, taken := p.byIP[a]; !taken {
			p.byUID[uid] = a
			p.byIP[a] = uid
			p.last = a
			return Lease{UID: uid, IP: a}, true, nil
		}
		a = a.Next()
	}
	return Lease{}, false, fmt.Errorf("allocate for pod %s: %w (%s, %d leases)", uid, ErrExhausted, p.prefix, len(p.byUID))
}

// size returns how many addresses Allocate may hand out.
func (p *Pool) size() int { return 1<<(32-p.prefix.Bits()) - 3 }

// Release drops uid's lease and returns it, reporting whether there was one.
func (p *Pool) Release(uid string) (Lease, bool) {
	ip, ok := p.byUID[uid]
	if !ok {
		return Lease{}, false
	}
	delete(p.byUID, uid)
	delete(p.byIP, ip)
	return Lease{UID: uid, IP: ip}, true
}

// Leases returns every lease, ordered by address. The caller owns the slice.
func (p *Pool) Leases() []Lease {
	out := make([]Lease, 0, len(p.byUID))
	for uid, ip := range p.byUID {
		out = append(out, Lease{UID: uid, IP: ip})
	}
	slices.SortFunc(out, func(a, b Lease) int { return a.IP.Compare(b.IP) })
	return out
}
