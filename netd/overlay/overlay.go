// Package overlay owns the site overlay: the VXLAN device through which
// the nodes of one site reach each other's pods, as flannel's vxlan
// backend does, with a forwarding entry, a neighbour entry and a route
// per peer, programmed from the peers the caller gives. It imports
// nothing from hub or edge; the edge agent drives it through Overlay.
package overlay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// RouteProtocol marks the routes the overlay makes (the rtm_protocol of
// `ip route ... proto 111`), so Sync finds its own among the routes
// through the device and leaves the others alone. Unassigned in
// iproute2's rt_protos.
const RouteProtocol netlink.RouteProtocol = 111

// overhead is what VXLAN adds to a packet: outer Ethernet, IP, UDP and
// VXLAN headers.
func overhead(underlay netip.Addr) int {
	if underlay.Is4() {
		return 14 + 20 + 8 + 8
	}
	return 14 + 40 + 8 + 8
}

// Overlay is the node's side of the site overlay. Its methods may be
// called concurrently; they run one at a time. It holds no goroutines and
// no open handles between calls.
type Overlay struct {
	cfg Config
	log *slog.Logger

	mu sync.Mutex
}

// New returns an Overlay for cfg. It starts nothing and touches nothing.
func New(cfg Config) (*Overlay, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("overlay config: %w", err)
	}
	return &Overlay{cfg: cfg, log: cfg.Logger.With("device", cfg.Device)}, nil
}

// openNode returns a netlink handle in the node's namespace; the caller
// closes it.
func (o *Overlay) openNode() (*netlink.Handle, error) {
	path := o.cfg.HostNetNS
	if path == "" {
		// This thread's: every thread not locked into another namespace
		// for a moment is in the agent's.
		path = "/proc/thread-self/ns/net"
	}
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return nil, fmt.Errorf("open node netns %s: %w", path, err)
	}
	defer ns.Close() // the handle's sockets keep the namespace
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return nil, fmt.Errorf("netlink in node netns: %w", err)
	}
	return h, nil
}

// Setup makes the VXLAN device, or adopts the one a previous run made:
// learning off, its MAC address HardwareAddr(PodCIDR), its address the
// pod CIDR's network address /32, up. A device of the name that differs
// in what peers rely on (VNI, port, underlay, MAC) is made again, which
// drops its entries until the next Sync; one that differs only in MTU or
// address is repaired in place, and its entries kept, so a new Overlay
// after an agent restart takes over with no gap. A link of the name that
// is no VXLAN device is an error. On a kernel without VXLAN it returns an
// error wrapping ErrNotSupported.
func (o *Overlay) Setup(ctx context.Context) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	h, err := o.openNode()
	if err != nil {
		return fmt.Errorf("overlay setup: %w", err)
	}
	defer h.Close()
	if err := o.ensureDevice(h); err != nil {
		return fmt.Errorf("overlay setup: %w", err)
	}
	return nil
}

func (o *Overlay) ensureDevice(h *netlink.Handle) error {
	under, err := o.underlayLink(h)
	if err != nil {
		return err
	}
	mtu := o.cfg.MTU
	if mtu == 0 {
		mtu = under.Attrs().MTU - overhead(o.cfg.Underlay)
	}
	want := &netlink.Vxlan{
		LinkAttrs:    netlink.LinkAttrs{Name: o.cfg.Device, MTU: mtu, HardwareAddr: HardwareAddr(o.cfg.PodCIDR)},
		VxlanId:      int(o.cfg.VNI),
		VtepDevIndex: under.Attrs().Index,
		SrcAddr:      o.cfg.Underlay.AsSlice(),
		Port:         int(o.cfg.Port),
		Learning:     false,
	}

	link, err := h.LinkByName(o.cfg.Device)
	switch {
	case isLinkNotFound(err):
		link = nil
	case err != nil:
		return fmt.Errorf("find device %s: %w", o.cfg.Device, err)
	case link.Type() != "vxlan":
		return fmt.Errorf("link %s is a %s, not a VXLAN device: pick another device name or remove it", o.cfg.Device, link.Type())
	default:
		if why := incompatible(want, link.(*netlink.Vxlan)); why != "" {
			o.log.Warn("remaking the VXLAN device", "reason", why)
			if err := h.LinkDel(link); err != nil {
				return fmt.Errorf("delete device %s: %w", o.cfg.Device, err)
			}
			link = nil
		}
	}
	if link == nil {
		if err := h.LinkAdd(want); err != nil {
			return linkAddError(o.cfg.Device, err)
		}
		if link, err = h.LinkByName(o.cfg.Device); err != nil {
			return fmt.Errorf("find device %s: %w", o.cfg.Device, err)
		}
		// No IPv6 link-local address: the device carries the pods' IPv4
		// only, and would otherwise send router solicitations and MLD
		// reports into it. A kernel without IPv6 has none to stop.
		if err := h.LinkSetIP6AddrGenMode(link, 1 /* IN6_ADDR_GEN_MODE_NONE */); err != nil {
			o.log.Debug("cannot turn off IPv6 addresses on the device", "err", err)
		}
		o.log.Info("made the VXLAN device", "vni", o.cfg.VNI, "port", o.cfg.Port, "underlay", o.cfg.Underlay, "underlay_link", under.Attrs().Name, "mtu", mtu)
	}
	if link.Attrs().MTU != mtu {
		if err := h.LinkSetMTU(link, mtu); err != nil {
			return fmt.Errorf("set device MTU %d: %w", mtu, err)
		}
	}
	addr := &netlink.Addr{IPNet: ipNet(netip.PrefixFrom(vtepAddr(o.cfg.PodCIDR), 32))}
	addrs, err := h.AddrList(link, netlink.FAMILY_V4)
	if err != nil {
		return fmt.Errorf("list device addresses: %w", err)
	}
	for _, a := range addrs {
		if a.IPNet.String() != addr.IPNet.String() {
			if err := h.AddrDel(link, &a); err != nil {
				return fmt.Errorf("delete stale device address %s: %w", a.IPNet, err)
			}
		}
	}
	if err := h.AddrReplace(link, addr); err != nil {
		return fmt.Errorf("set device address %s: %w", addr.IPNet, err)
	}
	if err := h.LinkSetUp(link); err != nil {
		return fmt.Errorf("set device up: %w", err)
	}
	return nil
}

// underlayLink returns the link named UnderlayLink, or the one holding
// Underlay; either must hold Underlay.
func (o *Overlay) underlayLink(h *netlink.Handle) (netlink.Link, error) {
	family := netlink.FAMILY_V4
	if o.cfg.Underlay.Is6() {
		family = netlink.FAMILY_V6
	}
	var on netlink.Link
	if o.cfg.UnderlayLink != "" {
		l, err := h.LinkByName(o.cfg.UnderlayLink)
		if err != nil {
			return nil, fmt.Errorf("find underlay link %s: %w", o.cfg.UnderlayLink, err)
		}
		on = l
	}
	addrs, err := h.AddrList(on, family)
	if err != nil {
		return nil, fmt.Errorf("list addresses: %w", err)
	}
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP); ok && ip.Unmap() == o.cfg.Underlay {
			if on != nil {
				return on, nil
			}
			l, err := h.LinkByIndex(a.LinkIndex)
			if err != nil {
				return nil, fmt.Errorf("find underlay link %d: %w", a.LinkIndex, err)
			}
			return l, nil
		}
	}
	if on != nil {
		return nil, fmt.Errorf("underlay link %s does not hold the underlay address %s", o.cfg.UnderlayLink, o.cfg.Underlay)
	}
	return nil, fmt.Errorf("no link of the node holds the underlay address %s", o.cfg.Underlay)
}

// incompatible says what of have differs from want in a way that only
// making the device again mends, or "".
func incompatible(want, have *netlink.Vxlan) string {
	src, _ := netip.AddrFromSlice(have.SrcAddr)
	wantSrc, _ := netip.AddrFromSlice(want.SrcAddr)
	switch {
	case have.VxlanId != want.VxlanId:
		return fmt.Sprintf("VNI %d, want %d", have.VxlanId, want.VxlanId)
	case have.Port != want.Port:
		return fmt.Sprintf("port %d, want %d", have.Port, want.Port)
	case src.Unmap() != wantSrc.Unmap():
		return fmt.Sprintf("underlay %s, want %s", src, wantSrc)
	case have.VtepDevIndex != want.VtepDevIndex:
		return fmt.Sprintf("underlay link %d, want %d", have.VtepDevIndex, want.VtepDevIndex)
	case have.Learning:
		return "learning on"
	case have.Group != nil && !have.Group.IsUnspecified():
		return fmt.Sprintf("group %s", have.Group)
	case have.FlowBased:
		return "external (flow-based)"
	case !bytes.Equal(have.HardwareAddr, want.HardwareAddr):
		return fmt.Sprintf("MAC %s, want %s", have.HardwareAddr, want.HardwareAddr)
	}
	return ""
}

// linkAddError wraps the error of making the device, as ErrNotSupported
// when the kernel knows no VXLAN.
func linkAddError(name string, err error) error {
	switch {
	case errors.Is(err, unix.EOPNOTSUPP):
		return fmt.Errorf("create device %s: %w (%v)", name, ErrNotSupported, err)
	case errors.Is(err, unix.EEXIST):
		return fmt.Errorf("create device %s: %w: another VXLAN device of the node has the same VNI, port and underlay address", name, err)
	}
	return fmt.Errorf("create device %s: %w", name, err)
}

// Sync makes the node route exactly to the given peers' pod CIDRs through
// the device, which Setup must have made: it adds the forwarding entry,
// neighbour entry and route of each new peer, repoints the forwarding
// entry of a peer whose underlay changed, and removes those of peers no
// longer given. Entries already right are not touched, so running it
// again changes nothing. It leaves alone the routes through the device
// that it did not make (their protocol is not RouteProtocol) and the
// entries that are not permanent; every permanent neighbour and
// forwarding entry on the device is its own.
//
// A bad peer (see desired) is left out and reported as a *PeerError in
// the returned error, joined with any other; the others are programmed.
func (o *Overlay) Sync(ctx context.Context, peers []Peer) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	want, errs := desired(o.cfg, peers)
	for _, err := range errs {
		o.log.Warn("leaving out a bad peer", "err", err)
	}
	h, err := o.openNode()
	if err != nil {
		return fmt.Errorf("overlay sync: %w", err)
	}
	defer h.Close()
	link, err := h.LinkByName(o.cfg.Device)
	if err != nil {
		return fmt.Errorf("overlay sync: find device %s (Setup makes it): %w", o.cfg.Device, err)
	}
	if link.Type() != "vxlan" {
		return fmt.Errorf("overlay sync: link %s is a %s, not the overlay's VXLAN device", o.cfg.Device, link.Type())
	}
	idx := link.Attrs().Index
	have, err := readState(h, idx)
	if err != nil {
		return fmt.Errorf("overlay sync: %w", err)
	}
	c := diff(have, want)
	nodes := map[netip.Prefix]string{} // for the logs
	for _, p := range peers {
		nodes[p.PodCIDR] = p.Node
	}
	if err := o.apply(h, idx, c, nodes); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("overlay sync: %w", err)
	}
	return nil
}

// readState reads what the overlay made on the device with index idx.
func readState(h *netlink.Handle, idx int) (state, error) {
	s := newState()
	fdb, err := h.NeighList(idx, unix.AF_BRIDGE)
	if err != nil {
		return s, fmt.Errorf("list forwarding entries: %w", err)
	}
	for _, n := range fdb {
		m, ok := macOf(n.HardwareAddr)
		ip, ok2 := netip.AddrFromSlice(n.IP)
		if n.LinkIndex != idx || n.State&netlink.NUD_PERMANENT == 0 || !ok || !ok2 {
			continue
		}
		s.fdb[m] = ip.Unmap()
	}
	neigh, err := h.NeighList(idx, netlink.FAMILY_V4)
	if err != nil {
		return s, fmt.Errorf("list neighbour entries: %w", err)
	}
	for _, n := range neigh {
		m, ok := macOf(n.HardwareAddr)
		ip, ok2 := netip.AddrFromSlice(n.IP)
		if n.LinkIndex != idx || n.State&netlink.NUD_PERMANENT == 0 || !ok || !ok2 {
			continue
		}
		s.neigh[ip.Unmap()] = m
	}
	routes, err := h.RouteListFiltered(netlink.FAMILY_V4,
		&netlink.Route{LinkIndex: idx, Table: unix.RT_TABLE_MAIN, Protocol: RouteProtocol},
		netlink.RT_FILTER_OIF|netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		return s, fmt.Errorf("list routes: %w", err)
	}
	for _, r := range routes {
		if r.Dst == nil {
			continue
		}
		dst, ok := netip.AddrFromSlice(r.Dst.IP)
		ones, _ := r.Dst.Mask.Size()
		gw, ok2 := netip.AddrFromSlice(r.Gw)
		if !ok {
			continue
		}
		if !ok2 || r.Flags&unix.RTNH_F_ONLINK == 0 || r.Scope != netlink.SCOPE_UNIVERSE {
			gw = netip.Addr{} // not as the overlay makes it: replaced
		}
		s.routes[netip.PrefixFrom(dst.Unmap(), ones)] = gw.Unmap()
	}
	return s, nil
}

// apply carries out c on the device with index idx, in the order of the
// fields of changes. It goes on past a failed change, so that one bad
// entry does not hold back the others, and returns every error.
func (o *Overlay) apply(h *netlink.Handle, idx int, c changes, nodes map[netip.Prefix]string) error {
	var errs []error
	for _, e := range c.setFDB {
		if err := h.NeighSet(fdbNeigh(idx, e)); err != nil {
			errs = append(errs, fmt.Errorf("set forwarding entry %s to %s: %w", e.mac, e.dst, err))
			continue
		}
		o.log.Info("overlay peer VTEP set", "mac", e.mac, "underlay", e.dst)
	}
	for _, e := range c.setNeigh {
		if err := h.NeighSet(neighNeigh(idx, e)); err != nil {
			errs = append(errs, fmt.Errorf("set neighbour entry %s at %s: %w", e.ip, e.mac, err))
		}
	}
	for _, e := range c.setRoutes {
		if err := h.RouteReplace(route(idx, e)); err != nil {
			errs = append(errs, fmt.Errorf("set route to %s via %s: %w", e.dst, e.gw, err))
			continue
		}
		o.log.Info("overlay peer routed", "node", nodes[e.dst], "pod_cidr", e.dst, "via", e.gw)
	}
	for _, e := range c.delRoutes {
		if err := h.RouteDel(route(idx, e)); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("delete route to %s: %w", e.dst, err))
			continue
		}
		o.log.Info("overlay peer unrouted", "pod_cidr", e.dst)
	}
	for _, e := range c.delNeigh {
		if err := h.NeighDel(neighNeigh(idx, e)); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("delete neighbour entry %s: %w", e.ip, err))
		}
	}
	for _, e := range c.delFDB {
		if err := h.NeighDel(fdbNeigh(idx, e)); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("delete forwarding entry %s: %w", e.mac, err))
		}
	}
	return errors.Join(errs...)
}

func fdbNeigh(idx int, e fdbEntry) *netlink.Neigh {
	return &netlink.Neigh{
		LinkIndex:    idx,
		Family:       unix.AF_BRIDGE,
		Flags:        netlink.NTF_SELF,
		State:        netlink.NUD_PERMANENT,
		IP:           e.dst.AsSlice(),
		HardwareAddr: net.HardwareAddr(e.mac[:]),
	}
}

func neighNeigh(idx int, e neighEntry) *netlink.Neigh {
	return &netlink.Neigh{
		LinkIndex:    idx,
		Family:       netlink.FAMILY_V4,
		State:        netlink.NUD_PERMANENT,
		Type:         unix.RTN_UNICAST,
		IP:           e.ip.AsSlice(),
		HardwareAddr: net.HardwareAddr(e.mac[:]),
	}
}

// route is the route to a peer's pod CIDR: via its device address, which
// is on no subnet of the node's, so onlink.
func route(idx int, e routeEntry) *netlink.Route {
	return &netlink.Route{
		LinkIndex: idx,
		Dst:       ipNet(e.dst),
		Gw:        e.gw.AsSlice(),
		Flags:     int(netlink.FLAG_ONLINK),
		Scope:     netlink.SCOPE_UNIVERSE,
		Table:     unix.RT_TABLE_MAIN,
		Protocol:  RouteProtocol,
	}
}

// Teardown removes the device, and with it every route and entry through
// it. A missing device is not an error.
func (o *Overlay) Teardown(ctx context.Context) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	h, err := o.openNode()
	if err != nil {
		return fmt.Errorf("overlay teardown: %w", err)
	}
	defer h.Close()
	link, err := h.LinkByName(o.cfg.Device)
	if isLinkNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("overlay teardown: find device %s: %w", o.cfg.Device, err)
	}
	if link.Type() != "vxlan" {
		return fmt.Errorf("overlay teardown: link %s is a %s, not the overlay's VXLAN device: left alone", o.cfg.Device, link.Type())
	}
	if err := h.LinkDel(link); err != nil {
		return fmt.Errorf("overlay teardown: delete device %s: %w", o.cfg.Device, err)
	}
	o.log.Info("removed the VXLAN device")
	return nil
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

func isLinkNotFound(err error) bool {
	var nf netlink.LinkNotFoundError
	return errors.As(err, &nf)
}
