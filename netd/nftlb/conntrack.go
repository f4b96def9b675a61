package nftlb

import (
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// staleFlows selects the UDP conntrack entries of frontends whose
// backends changed: those that go to a backend the frontend no longer
// has. UDP has no connection to end, so without this a client that keeps
// its socket would keep sending to a removed backend (as kube-proxy, nftlb
// clears them; TCP connections are left to finish). It maps a frontend to
// the backends it keeps, none for a removed frontend.
type staleFlows map[netip.AddrPort]map[netip.AddrPort]bool

var _ netlink.CustomConntrackFilter = staleFlows(nil)

// MatchConntrackFlow reports whether f is stale.
func (s staleFlows) MatchConntrackFlow(f *netlink.ConntrackFlow) bool {
	if f.Forward.Protocol != unix.IPPROTO_UDP {
		return false
	}
	dst, ok := netip.AddrFromSlice(f.Forward.DstIP)
	if !ok {
		return false
	}
	keep, ok := s[netip.AddrPortFrom(dst.Unmap(), f.Forward.DstPort)]
	if !ok {
		return false
	}
	src, ok := netip.AddrFromSlice(f.Reverse.SrcIP)
	return !ok || !keep[netip.AddrPortFrom(src.Unmap(), f.Reverse.SrcPort)]
}

// clearFlows deletes the stale UDP conntrack entries of the family.
func (d *Dataplane) clearFlows(v4 bool, s staleFlows) error {
	if len(s) == 0 {
		return nil
	}
	h, err := netlink.NewHandleAt(netns.NsHandle(d.nsfd()), unix.NETLINK_NETFILTER)
	if err != nil {
		return fmt.Errorf("conntrack: %w", err)
	}
	defer h.Close()
	fam := netlink.InetFamily(unix.AF_INET6)
	if v4 {
		fam = unix.AF_INET
	}
	if _, err := h.ConntrackDeleteFilters(netlink.ConntrackTable, fam, s); err != nil {
		return fmt.Errorf("clear stale UDP conntrack entries: %w", err)
	}
	return nil
}
