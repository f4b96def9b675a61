package overlay

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"

	"github.com/outpost-mesh/outpost/netd/ipam"
)

// Peer is another node of the site, whose pods this node reaches over the
// overlay.
type Peer struct {
	// Node names the peer, for errors and logs; unique among the peers.
	Node string
	// Underlay is the peer's address on the site's LAN.
	Underlay netip.Addr
	// PodCIDR is the peer's pod CIDR.
	PodCIDR netip.Prefix
}

// PeerError is a peer that Sync left out, and why. Sync returns them
// joined, after programming every other peer.
type PeerError struct {
	Peer Peer
	Err  error
}

func (e *PeerError) Error() string {
	return fmt.Sprintf("peer %q (pod CIDR %s, underlay %s): %v", e.Peer.Node, e.Peer.PodCIDR, e.Peer.Underlay, e.Err)
}

func (e *PeerError) Unwrap() error { return e.Err }

// HardwareAddr returns the MAC address of the VXLAN device of the node
// whose pod CIDR is podCIDR: 0a:58 followed by the four bytes of the pod
// CIDR's network address, so 10.42.1.0/24 gives 0a:58:0a:2a:01:00. The
// first byte makes it locally administered and unicast; pod CIDRs of one
// site do not overlap, so neither do their nodes' MACs; and every node
// computes every other's from the pod CIDR alone, with no handshake.
// podCIDR is an IPv4 prefix.
func HardwareAddr(podCIDR netip.Prefix) net.HardwareAddr {
	a := podCIDR.Masked().Addr().As4()
	return net.HardwareAddr{0x0a, 0x58, a[0], a[1], a[2], a[3]}
}

// vtepAddr returns the address of the VXLAN device of the node whose pod
// CIDR is podCIDR: its network address, held as a /32 as flannel does. The
// node's pod IPs and its bridge's gateway address stay free, routes to
// the node's pods through the device need no address of a subnet of
// their own, and the node's own packets to other nodes' pods leave from
// an address inside its pod CIDR, which the other end routes back
// through the overlay.
func vtepAddr(podCIDR netip.Prefix) netip.Addr { return podCIDR.Masked().Addr() }

// mac is a MAC address usable as a map key.
type mac [6]byte

func macOf(hw net.HardwareAddr) (mac, bool) {
	var m mac
	if len(hw) != len(m) {
		return m, false
	}
	copy(m[:], hw)
	return m, true
}

func (m mac) String() string { return net.HardwareAddr(m[:]).String() }

// state is what the overlay programs on its device: forwarding entries
// (a peer's MAC to its underlay address), permanent neighbour entries (a
// peer's device address to its MAC) and routes (a peer's pod CIDR via
// its device address).
type state struct {
	fdb    map[mac]netip.Addr
	neigh  map[netip.Addr]mac
	routes map[netip.Prefix]netip.Addr
}

func newState() state {
	return state{fdb: map[mac]netip.Addr{}, neigh: map[netip.Addr]mac{}, routes: map[netip.Prefix]netip.Addr{}}
}

// desired returns the state that makes the node reach exactly the good
// peers, and a *PeerError for each peer left out: one with an invalid
// field, of the other underlay family than self's, with self's underlay,
// or with a pod CIDR that overlaps self's; every entry of a node given
// twice differently; and every peer whose pod CIDR overlaps another
// peer's, since which of them is right cannot be told. Peers given twice
// alike count once. The outcome does not depend on the order of peers.
// No I/O.
func desired(self Config, peers []Peer) (state, []error) {
	var errs []error
	bad := func(p Peer, err error) { errs = append(errs, &PeerError{Peer: p, Err: err}) }

	byNode := map[string][]Peer{}
	for _, p := range peers {
		if !slices.Contains(byNode[p.Node], p) {
			byNode[p.Node] = append(byNode[p.Node], p)
		}
	}
	var good []Peer
	for _, node := range slices.Sorted(maps.Keys(byNode)) {
		ps := byNode[node]
		if len(ps) > 1 {
			for _, p := range ps {
				bad(p, fmt.Errorf("node given %d times with different addresses", len(ps)))
			}
			continue
		}
		p := ps[0]
		if err := checkPeer(self, p); err != nil {
			bad(p, err)
			continue
		}
		good = append(good, p)
	}

	// Canonical prefixes overlap when one holds the other: sorted by
	// address, then widest first, a prefix overlaps the ones after it
	// that it contains.
	slices.SortFunc(good, func(a, b Peer) int {
		if c := a.PodCIDR.Addr().Compare(b.PodCIDR.Addr()); c != 0 {
			return c
		}
		return cmp.Compare(a.PodCIDR.Bits(), b.PodCIDR.Bits())
	})
	overlaps := make([]bool, len(good))
	for i := range good {
		for j := i + 1; j < len(good) && good[i].PodCIDR.Contains(good[j].PodCIDR.Addr()); j++ {
			overlaps[i], overlaps[j] = true, true
		}
	}
	want := newState()
	for i, p := range good {
		if overlaps[i] {
			bad(p, errors.New("pod CIDR overlaps another peer's"))
			continue
		}
		m, _ := macOf(HardwareAddr(p.PodCIDR))
		want.fdb[m] = p.Underlay
		want.neigh[vtepAddr(p.PodCIDR)] = m
		want.routes[p.PodCIDR] = vtepAddr(p.PodCIDR)
	}
	return want, errs
}

// checkPeer reports what makes p unusable on its own.
func checkPeer(self Config, p Peer) error {
	switch {
	case p.Node == "":
		return errors.New("no node name")
	}
	if err := ipam.CheckPrefix(p.PodCIDR); err != nil {
		return err
	}
	if err := checkUnderlay(p.Underlay); err != nil {
		return err
	}
	switch {
	case p.Underlay.Is4() != self.Underlay.Is4():
		return fmt.Errorf("underlay %s is not of the family of this node's, %s: a site's underlay is all IPv4 or all IPv6", p.Underlay, self.Underlay)
	case p.Underlay == self.Underlay:
		return errors.New("underlay is this node's")
	case p.PodCIDR.Overlaps(self.PodCIDR):
		return fmt.Errorf("pod CIDR overlaps this node's, %s", self.PodCIDR)
	}
	return nil
}

// changes are what moves the device from one state to another: entries
// to set (add or replace) and entries to delete.
type changes struct {
	setFDB    []fdbEntry
	setNeigh  []neighEntry
	setRoutes []routeEntry
	delRoutes []routeEntry
	delNeigh  []neighEntry
	delFDB    []fdbEntry
}

type fdbEntry struct {
	mac mac
	dst netip.Addr
}

type neighEntry struct {
	ip  netip.Addr
	mac mac
}

type routeEntry struct {
	dst netip.Prefix
	gw  netip.Addr
}

func (c changes) empty() bool {
	return len(c.setFDB)+len(c.setNeigh)+len(c.setRoutes)+len(c.delRoutes)+len(c.delNeigh)+len(c.delFDB) == 0
}

// diff returns the changes from have to want, each list sorted. Applied in
// the order of the fields of changes, a peer's forwarding and neighbour
// entries exist before its route, and its route is gone before them, so
// no packet is routed to the device without a way on. No I/O.
func diff(have, want state) changes {
	var c changes
	for m, dst := range want.fdb {
		if d, ok := have.fdb[m]; !ok || d != dst {
			c.setFDB = append(c.setFDB, fdbEntry{m, dst})
		}
	}
	for m, dst := range have.fdb {
		if _, ok := want.fdb[m]; !ok {
			c.delFDB = append(c.delFDB, fdbEntry{m, dst})
		}
	}
	for ip, m := range want.neigh {
		if hm, ok := have.neigh[ip]; !ok || hm != m {
			c.setNeigh = append(c.setNeigh, neighEntry{ip, m})
		}
	}
	for ip, m := range have.neigh {
		if _, ok := want.neigh[ip]; !ok {
			c.delNeigh = append(c.delNeigh, neighEntry{ip, m})
		}
	}
	for dst, gw := range want.routes {
		if g, ok := have.routes[dst]; !ok || g != gw {
			c.setRoutes = append(c.setRoutes, routeEntry{dst, gw})
		}
	}
	for dst, gw := range have.routes {
		if _, ok := want.routes[dst]; !ok {
			c.delRoutes = append(c.delRoutes, routeEntry{dst, gw})
		}
	}
	byMAC := func(a, b fdbEntry) int { return slices.Compare(a.mac[:], b.mac[:]) }
	byIP := func(a, b neighEntry) int { return a.ip.Compare(b.ip) }
	byDst := func(a, b routeEntry) int {
		return cmp.Or(a.dst.Addr().Compare(b.dst.Addr()), cmp.Compare(a.dst.Bits(), b.dst.Bits()))
	}
	slices.SortFunc(c.setFDB, byMAC)
	slices.SortFunc(c.delFDB, byMAC)
	slices.SortFunc(c.setNeigh, byIP)
	slices.SortFunc(c.delNeigh, byIP)
	slices.SortFunc(c.setRoutes, byDst)
	slices.SortFunc(c.delRoutes, byDst)
	return c
}
