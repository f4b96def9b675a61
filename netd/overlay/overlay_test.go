package overlay

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

const port = 8080

var (
	lanA = netip.MustParseAddr("192.168.77.1")
	lanB = netip.MustParseAddr("192.168.77.2")
)

// testSite is two nodes joined by a veth pair as the site's LAN,
// 192.168.77.0/24, each with a pod that serves on port; the Overlays are
// set up, with no peers yet. IPv6 is off, so the LAN's counters count
// only what the test sends.
type testSite struct {
	a, b *testNode
	// before holds each node's routes, links and neighbours before its
	// Overlay was made.
	before map[*testNode]string
}

func newTestSite(t *testing.T) *testSite {
	t.Helper()
	needRoot(t)
	s := &testSite{
		a:      newTestNode(t, "node-a", netip.MustParsePrefix("10.42.1.0/24"), true),
		b:      newTestNode(t, "node-b", netip.MustParsePrefix("10.42.2.0/24"), true),
		before: map[*testNode]string{},
	}
	vethPair(t, s.a.ns, "lan0", netip.PrefixFrom(lanA, 24), s.b.ns, "lan0", netip.PrefixFrom(lanB, 24))
	s.a.serve(t, port)
	s.b.serve(t, port)
	s.before[s.a], s.before[s.b] = nodeSnapshot(t, s.a.ns), nodeSnapshot(t, s.b.ns)
	s.a.start(t, lanA)
	s.b.start(t, lanB)
	return s
}

// join syncs each node with the other as its one peer.
func (s *testSite) join(t *testing.T) {
	t.Helper()
	must(t, s.a.Sync(t.Context(), []Peer{s.b.peer(lanB)}))
	must(t, s.b.Sync(t.Context(), []Peer{s.a.peer(lanA)}))
}

// nodeSnapshot describes the links, main-table routes and neighbour
// entries of the namespace at path, for comparing.
func nodeSnapshot(t *testing.T, path string) string {
	t.Helper()
	var lines []string
	withNL(t, path, func(h *netlink.Handle) {
		links, err := h.LinkList()
		must(t, err)
		for _, l := range links {
			lines = append(lines, fmt.Sprintf("link %s %s", l.Attrs().Name, l.Type()))
		}
		routes, err := h.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
		must(t, err)
		for _, r := range routes {
			lines = append(lines, fmt.Sprintf("route %v via %v dev %d type %d proto %d", r.Dst, r.Gw, r.LinkIndex, r.Type, r.Protocol))
		}
		for _, family := range []int{netlink.FAMILY_V4, unix.AF_BRIDGE} {
			neighs, err := h.NeighList(0, family)
			must(t, err)
			for _, n := range neighs {
				if n.State&netlink.NUD_PERMANENT != 0 {
					lines = append(lines, fmt.Sprintf("neigh %d %v %v dev %d", family, n.IP, n.HardwareAddr, n.LinkIndex))
				}
			}
		}
	})
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// TestSitePods: once both nodes have the other as a peer, each pod
// reaches the other by pod IP over TCP and UDP, in VXLAN packets that
// cross the LAN; with the peer gone, the other node's pods are
// unreachable at once and nothing leaves for the LAN; Teardown leaves the
// nodes as they were.
func TestSitePods(t *testing.T) {
	s := newTestSite(t)
	a, b := s.a, s.b

	mustNotReach(t, a, b, port)

	s.join(t)
	lanTx, vxTx := txPackets(t, a.ns, "lan0"), txPackets(t, a.ns, a.cfg.Device)
	mustReach(t, a, b, port)
	mustReach(t, b, a, port)
	lanSent, vxSent := txPackets(t, a.ns, "lan0")-lanTx, txPackets(t, a.ns, a.cfg.Device)-vxTx
	// TCP and UDP, each way: at least a SYN, an ACK and a datagram from A.
	if vxSent < 3 || lanSent < vxSent {
		t.Errorf("node A sent %d packets into the VXLAN device and %d onto the LAN, want at least 3, and each on the LAN", vxSent, lanSent)
	}
	// What crossed the LAN reached node B as UDP datagrams (B itself
	// runs no UDP socket but the VXLAN device's) and came out of its
	// VXLAN device.
	udpIn, vxRx := udpInDatagrams(t, b.ns), rxPackets(t, b.ns, b.cfg.Device)
	mustReach(t, a, b, port)
	if got, gotRx := udpInDatagrams(t, b.ns)-udpIn, rxPackets(t, b.ns, b.cfg.Device)-vxRx; got < 3 || gotRx < 3 {
		t.Errorf("node B received %d UDP datagrams and %d packets from its VXLAN device, want at least 3 of each", got, gotRx)
	}

	// The node itself reaches the other node's pod, from its device's
	// address, which the other node routes back through the overlay.
	for _, network := range []string{"tcp", "udp"} {
		got, err := dial(t, a.ns, network, netip.AddrPortFrom(b.podIP, port))
		if want := "node-b 10.42.1.0:"; err != nil || !strings.HasPrefix(got, want) {
			t.Errorf("%s from node A to pod of B: %q, %v, want %q...", network, got, err, want)
		}
	}

	want := strings.Join([]string{
		"device IDX 0a:58:0a:2a:01:00",
		"fdb 0a:58:0a:2a:02:00 192.168.77.2",
		"neigh 10.42.2.0 0a:58:0a:2a:02:00",
		"route 10.42.2.0/24 10.42.2.0",
	}, "\n")
	if got := devIndexRE(overlayState(t, a)); got != want {
		t.Errorf("node A's overlay:\n%s\nwant:\n%s", got, want)
	}
	withNL(t, a.ns, func(h *netlink.Handle) {
		l, err := h.LinkByName(a.cfg.Device)
		must(t, err)
		vx := l.(*netlink.Vxlan)
		if vx.MTU != 1450 || vx.Learning || vx.VxlanId != 1 || vx.Port != 8472 || !vx.SrcAddr.Equal(lanA.AsSlice()) {
			t.Errorf("device: mtu %d learning %v vni %d port %d local %s, want 1450 false 1 8472 %s", vx.MTU, vx.Learning, vx.VxlanId, vx.Port, vx.SrcAddr, lanA)
		}
		addrs, err := h.AddrList(l, netlink.FAMILY_ALL)
		must(t, err)
		if len(addrs) != 1 || addrs[0].IPNet.String() != "10.42.1.0/32" {
			t.Errorf("device addresses %v, want 10.42.1.0/32 alone", addrs)
		}
	})

	// Again: nothing changes.
	before := overlayState(t, a)
	must(t, a.Sync(t.Context(), []Peer{b.peer(lanB)}))
	if after := overlayState(t, a); after != before {
		t.Errorf("second Sync changed node A's overlay:\n%s\nwas:\n%s", after, before)
	}

	// B is gone from A's peers: A's pod fails at once to reach B's,
	// through netd's unreachable route, and nothing leaves for the LAN.
	must(t, a.Sync(t.Context(), nil))
	lanTx = txPackets(t, a.ns, "lan0")
	mustNotReach(t, a, b, port)
	if got := txPackets(t, a.ns, "lan0"); got != lanTx {
		t.Errorf("node A sent %d packets onto the LAN with no peer", got-lanTx)
	}
	if got, want := devIndexRE(overlayState(t, a)), "device IDX 0a:58:0a:2a:01:00"; got != want {
		t.Errorf("node A's overlay with no peer:\n%s\nwant:\n%s", got, want)
	}

	for _, n := range []*testNode{a, b} {
		must(t, n.Teardown(t.Context()))
		must(t, n.Teardown(t.Context())) // nothing left to remove
		if got := nodeSnapshot(t, n.ns); got != s.before[n] {
			t.Errorf("%s after Teardown:\n%s\nbefore Setup:\n%s", n.name, got, s.before[n])
		}
	}
}

// devIndexRE replaces the device's index in an overlayState.
func devIndexRE(s string) string {
	first, rest, _ := strings.Cut(s, "\n")
	f := strings.Fields(first)
	if len(f) == 3 && f[0] == "device" {
		f[1] = "IDX"
		first = strings.Join(f, " ")
	}
	if rest == "" {
		return first
	}
	return first + "\n" + rest
}

// TestSiteUnderlayChange: a peer that moves to another LAN address is
// followed: A's forwarding entry for B points at B's new address, and the
// pods reach each other with B's old address gone.
func TestSiteUnderlayChange(t *testing.T) {
	s := newTestSite(t)
	a, b := s.a, s.b
	s.join(t)
	mustReach(t, a, b, port)

	newB := netip.MustParseAddr("192.168.77.12")
	// Without it, deleting B's first address would delete the second too.
	writeSysctl(t, b.ns, "net/ipv4/conf/lan0/promote_secondaries", "1")
	withNL(t, b.ns, func(h *netlink.Handle) {
		l, err := h.LinkByName("lan0")
		must(t, err)
		must(t, h.AddrAdd(l, &netlink.Addr{IPNet: ipNet(netip.PrefixFrom(newB, 24)), Flags: unix.IFA_F_NODAD}))
	})
	b.cfg.Underlay = newB
	b.Overlay = b.restart(t)
	must(t, b.Setup(t.Context()))
	must(t, b.Sync(t.Context(), []Peer{a.peer(lanA)}))
	withNL(t, b.ns, func(h *netlink.Handle) {
		l, err := h.LinkByName("lan0")
		must(t, err)
		must(t, h.AddrDel(l, &netlink.Addr{IPNet: ipNet(netip.PrefixFrom(lanB, 24))}))
	})

	must(t, a.Sync(t.Context(), []Peer{b.peer(newB)}))
	if got := overlayState(t, a); !strings.Contains(got, "fdb 0a:58:0a:2a:02:00 192.168.77.12\n") {
		t.Errorf("node A's overlay after B moved:\n%s", got)
	}
	mustReach(t, a, b, port)
	mustReach(t, b, a, port)
}

// events records the netlink route, neighbour and link messages of a
// namespace until stop.
type events struct {
	wait func() []string // stops the recording and returns it
}

func watch(t *testing.T, path string) *events {
	t.Helper()
	ns, err := netns.GetFromPath(path)
	must(t, err)
	defer ns.Close()
	done := make(chan struct{})
	routes := make(chan netlink.RouteUpdate)
	neighs := make(chan netlink.NeighUpdate)
	links := make(chan netlink.LinkUpdate)
	must(t, netlink.RouteSubscribeAt(ns, routes, done))
	must(t, netlink.NeighSubscribeAt(ns, neighs, done))
	must(t, netlink.LinkSubscribeAt(ns, links, done))
	out := make(chan []string)
	go func() {
		var got []string
		for routes != nil || neighs != nil || links != nil {
			select {
			case u, ok := <-routes:
				if !ok {
					routes = nil
					continue
				}
				got = append(got, fmt.Sprintf("route msg %d %v dev %d", u.Type, u.Dst, u.LinkIndex))
			case u, ok := <-neighs:
				if !ok {
					neighs = nil
					continue
				}
				got = append(got, fmt.Sprintf("neigh msg %d %v %v dev %d state %#x", u.Type, u.IP, u.HardwareAddr, u.LinkIndex, u.State))
			case u, ok := <-links:
				if !ok {
					links = nil
					continue
				}
				got = append(got, fmt.Sprintf("link msg %d %s", u.Header.Type, u.Attrs().Name))
			}
		}
		out <- got
	}()
	var stopped bool
	e := &events{}
	e.wait = func() []string {
		if !stopped {
			stopped = true
			close(done)
		}
		return <-out
	}
	t.Cleanup(func() {
		if !stopped {
			e.wait()
		}
	})
	return e
}

// TestSiteRestart: a new Overlay after an agent restart adopts the device
// and its entries: Setup and Sync change nothing (no netlink message
// about the device, its routes or its entries), and a TCP connection
// between the pods, open across the restart, carries on.
func TestSiteRestart(t *testing.T) {
	s := newTestSite(t)
	a, b := s.a, s.b
	s.join(t)

	// An echo server in B's pod, and a connection to it from A's.
	var l net.Listener
	must(t, in(t, b.pod, func() (err error) {
		l, err = net.Listen("tcp4", netip.AddrPortFrom(b.podIP, 9000).String())
		return err
	}))
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	t.Cleanup(func() { l.Close() })
	var c net.Conn
	must(t, in(t, a.pod, func() (err error) {
		c, err = net.DialTimeout("tcp4", netip.AddrPortFrom(b.podIP, 9000).String(), 2*time.Second)
		return err
	}))
	defer c.Close()
	sc, ok := <-accepted
	if !ok {
		t.Fatal("accept failed")
	}
	defer sc.Close()
	ping := func(from, to net.Conn, msg string) {
		t.Helper()
		from.SetDeadline(time.Now().Add(2 * time.Second))
		to.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := from.Write([]byte(msg)); err != nil {
			t.Fatalf("write %q: %v", msg, err)
		}
		buf := make([]byte, len(msg))
		if _, err := io.ReadFull(to, buf); err != nil || string(buf) != msg {
			t.Fatalf("read %q, %v, want %q", buf, err, msg)
		}
	}
	ping(c, sc, "before")
	ping(sc, c, "before, back")

	stateA, stateB := overlayState(t, a), overlayState(t, b)
	evA, evB := watch(t, a.ns), watch(t, b.ns)
	for _, n := range []*testNode{a, b} {
		n.Overlay = n.restart(t)
		must(t, n.Setup(t.Context()))
	}
	must(t, a.Sync(t.Context(), []Peer{b.peer(lanB)}))
	must(t, b.Sync(t.Context(), []Peer{a.peer(lanA)}))
	for _, x := range []struct {
		n      *testNode
		ev     *events
		before string
	}{{a, evA, stateA}, {b, evB, stateB}} {
		if got := overlayState(t, x.n); got != x.before {
			t.Errorf("%s's overlay after the restart:\n%s\nbefore:\n%s", x.n.name, got, x.before)
		}
		idx := deviceIndex(t, x.n)
		for _, e := range x.ev.wait() {
			if strings.Contains(e, x.n.cfg.Device) || strings.HasSuffix(e, fmt.Sprintf(" dev %d", idx)) || strings.Contains(e, fmt.Sprintf(" dev %d state", idx)) {
				t.Errorf("%s: the restart changed the overlay: %s", x.n.name, e)
			}
		}
	}
	ping(c, sc, "after")
	ping(sc, c, "after, back")
}

func deviceIndex(t *testing.T, n *testNode) int {
	t.Helper()
	var idx int
	withNL(t, n.ns, func(h *netlink.Handle) {
		l, err := h.LinkByName(n.cfg.Device)
		must(t, err)
		idx = l.Attrs().Index
	})
	return idx
}

// TestSiteBadPeers: bad peers are left out with an error naming each,
// and the good one is programmed.
func TestSiteBadPeers(t *testing.T) {
	s := newTestSite(t)
	a, b := s.a, s.b
	must(t, b.Sync(t.Context(), []Peer{a.peer(lanA)}))
	peers := []Peer{
		{Node: "own-cidr", Underlay: netip.MustParseAddr("192.168.77.5"), PodCIDR: a.podCIDR},
		{Node: "v6", Underlay: netip.MustParseAddr("fd00::5"), PodCIDR: netip.MustParsePrefix("10.42.5.0/24")},
		{Node: "no-cidr", Underlay: netip.MustParseAddr("192.168.77.6")},
		{Node: "twice", Underlay: netip.MustParseAddr("192.168.77.7"), PodCIDR: netip.MustParsePrefix("10.42.7.0/24")},
		{Node: "twice", Underlay: netip.MustParseAddr("192.168.77.8"), PodCIDR: netip.MustParsePrefix("10.42.7.0/24")},
		{Node: "wide", Underlay: netip.MustParseAddr("192.168.77.9"), PodCIDR: netip.MustParsePrefix("10.42.8.0/23")},
		{Node: "narrow", Underlay: netip.MustParseAddr("192.168.77.10"), PodCIDR: netip.MustParsePrefix("10.42.9.0/24")},
		b.peer(lanB),
	}
	err := a.Sync(t.Context(), peers)
	var named []string
	for _, e := range unjoin(err) {
		var pe *PeerError
		if !errors.As(e, &pe) {
			t.Errorf("Sync error %v is no *PeerError", e)
			continue
		}
		named = append(named, pe.Peer.Node)
	}
	slices.Sort(named)
	if want := []string{"narrow", "no-cidr", "own-cidr", "twice", "twice", "v6", "wide"}; !slices.Equal(named, want) {
		t.Errorf("Sync left out %v (%v), want %v", named, err, want)
	}
	if !strings.Contains(err.Error(), `"own-cidr"`) {
		t.Errorf("Sync error %q does not name the peer", err)
	}
	mustReach(t, a, b, port)
	mustReach(t, b, a, port)
	want := strings.Join([]string{
		"device IDX 0a:58:0a:2a:01:00",
		"fdb 0a:58:0a:2a:02:00 192.168.77.2",
		"neigh 10.42.2.0 0a:58:0a:2a:02:00",
		"route 10.42.2.0/24 10.42.2.0",
	}, "\n")
	if got := devIndexRE(overlayState(t, a)); got != want {
		t.Errorf("node A's overlay:\n%s\nwant:\n%s", got, want)
	}
}

// unjoin flattens the errors joined in err.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, unjoin(e)...)
		}
		return out
	}
	if w := errors.Unwrap(err); w != nil {
		if _, ok := w.(interface{ Unwrap() []error }); ok {
			return unjoin(w)
		}
	}
	if err == nil {
		return nil
	}
	return []error{err}
}

// TestSiteLeavesOthers: Sync keeps a route through the device that it did
// not make, and netd's unreachable route.
func TestSiteLeavesOthers(t *testing.T) {
	s := newTestSite(t)
	a := s.a
	foreign := &netlink.Route{
		Dst:      ipNet(netip.MustParsePrefix("10.99.0.0/24")),
		Protocol: unix.RTPROT_STATIC,
	}
	withNL(t, a.ns, func(h *netlink.Handle) {
		l, err := h.LinkByName(a.cfg.Device)
		must(t, err)
		foreign.LinkIndex = l.Attrs().Index
		must(t, h.RouteAdd(foreign))
	})
	check := func(withB bool) {
		t.Helper()
		withNL(t, a.ns, func(h *netlink.Handle) {
			routes, err := h.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
			must(t, err)
			var got []string
			for _, r := range routes {
				got = append(got, r.Dst.String())
			}
			for _, want := range []string{"10.99.0.0/24", "10.42.0.0/16"} {
				if !slices.Contains(got, want) {
					t.Errorf("routes %v, want %s kept", got, want)
				}
			}
			if slices.Contains(got, "10.42.2.0/24") != withB {
				t.Errorf("routes %v, want B's pod CIDR there: %v", got, withB)
			}
		})
	}
	s.join(t)
	check(true)
	must(t, a.Sync(t.Context(), nil))
	check(false)
}

// TestSetupRemakes: a device of the name with another VNI is made again;
// a link of the name that is no VXLAN device is refused and left alone.
func TestSetupRemakes(t *testing.T) {
	needRoot(t)
	n := newTestNode(t, "node-a", netip.MustParsePrefix("10.42.1.0/24"), true)
	other := newNS(t, true)
	vethPair(t, n.ns, "lan0", netip.PrefixFrom(lanA, 24), other, "lan0", netip.PrefixFrom(lanB, 24))
	n.start(t, lanA)
	idx := deviceIndex(t, n)

	// Another MTU is set in place.
	n.cfg.MTU = 1400
	n.Overlay = n.restart(t)
	must(t, n.Setup(t.Context()))
	if got, mtu := deviceIndex(t, n), linkMTU(t, n.ns, n.cfg.Device); got != idx || mtu != 1400 {
		t.Errorf("device %d MTU %d, want %d with MTU 1400", got, mtu, idx)
	}

	n.cfg.VNI = 7
	n.Overlay = n.restart(t)
	must(t, n.Setup(t.Context()))
	withNL(t, n.ns, func(h *netlink.Handle) {
		l, err := h.LinkByName(n.cfg.Device)
		must(t, err)
		if l.Attrs().Index == idx || l.(*netlink.Vxlan).VxlanId != 7 {
			t.Errorf("device %d VNI %d, want a new one with VNI 7", l.Attrs().Index, l.(*netlink.Vxlan).VxlanId)
		}
		must(t, h.LinkDel(l))
		attrs := netlink.NewLinkAttrs()
		attrs.Name = n.cfg.Device
		must(t, h.LinkAdd(&netlink.Bridge{LinkAttrs: attrs}))
	})
	if err := n.Setup(t.Context()); err == nil || !strings.Contains(err.Error(), "not a VXLAN device") {
		t.Errorf("Setup over a bridge: %v, want refused", err)
	}
	if err := n.Sync(t.Context(), nil); err == nil || !strings.Contains(err.Error(), "not the overlay's VXLAN device") {
		t.Errorf("Sync on a bridge: %v, want refused", err)
	}
	if err := n.Teardown(t.Context()); err == nil {
		t.Error("Teardown removed a bridge")
	}
	withNL(t, n.ns, func(h *netlink.Handle) {
		l, err := h.LinkByName(n.cfg.Device)
		must(t, err)
		must(t, h.LinkDel(l))
	})
}

// TestSetupNoUnderlay: an underlay address the node does not hold is an
// error, and so is an underlay link that does not hold it.
func TestSetupNoUnderlay(t *testing.T) {
	needRoot(t)
	n := newTestNode(t, "node-a", netip.MustParsePrefix("10.42.1.0/24"), true)
	cfg := DefaultConfig()
	cfg.Underlay, cfg.PodCIDR, cfg.HostNetNS, cfg.Logger = lanA, n.podCIDR, n.ns, testLogger(t)
	o, err := New(cfg)
	must(t, err)
	if err := o.Setup(t.Context()); err == nil || !strings.Contains(err.Error(), "no link of the node holds") {
		t.Errorf("Setup: %v, want no link holding the underlay", err)
	}
	cfg.UnderlayLink = "br0"
	o, err = New(cfg)
	must(t, err)
	if err := o.Setup(t.Context()); err == nil || !strings.Contains(err.Error(), "does not hold") {
		t.Errorf("Setup: %v, want br0 not holding the underlay", err)
	}
	if got := overlayState(t, &testNode{ns: n.ns, cfg: cfg}); got != "no device" {
		t.Errorf("after failed Setups: %s", got)
	}
}

// TestSiteIPv6Underlay: the pods' IPv4 crosses a LAN of IPv6 alone.
func TestSiteIPv6Underlay(t *testing.T) {
	needRoot(t)
	a := newTestNode(t, "node-a", netip.MustParsePrefix("10.42.1.0/24"), false)
	b := newTestNode(t, "node-b", netip.MustParsePrefix("10.42.2.0/24"), false)
	v6A, v6B := netip.MustParseAddr("fd77::1"), netip.MustParseAddr("fd77::2")
	vethPair(t, a.ns, "lan0", netip.PrefixFrom(v6A, 64), b.ns, "lan0", netip.PrefixFrom(v6B, 64))
	a.serve(t, port)
	b.serve(t, port)
	a.start(t, v6A)
	b.start(t, v6B)
	must(t, a.Sync(t.Context(), []Peer{b.peer(v6B)}))
	must(t, b.Sync(t.Context(), []Peer{a.peer(v6A)}))
	mustReach(t, a, b, port)
	mustReach(t, b, a, port)
	if mtu := linkMTU(t, a.ns, a.cfg.Device); mtu != 1430 {
		t.Errorf("device MTU %d over IPv6, want 1430", mtu)
	}
}

func linkMTU(t *testing.T, path, name string) int {
	t.Helper()
	var mtu int
	withNL(t, path, func(h *netlink.Handle) {
		l, err := h.LinkByName(name)
		must(t, err)
		mtu = l.Attrs().MTU
	})
	return mtu
}
