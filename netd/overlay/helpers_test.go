package overlay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/outpost-mesh/outpost/internal/netnstest"
	"github.com/outpost-mesh/outpost/internal/testlog"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func testLogger(t *testing.T) *slog.Logger { return testlog.New(t, slog.LevelDebug) }

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces, links and routes")
	}
}

// newNS creates a network namespace with only lo, up, bind-mounted at a
// file of the test's, and removed when the test ends. With noIPv6 it has
// IPv6 off on every link made in it, so that link counters count only
// what the test sends.
func newNS(t *testing.T, noIPv6 bool) string {
	t.Helper()
	if noIPv6 {
		return netnstest.NewNS(t, "netns", "ipv6/conf/all/disable_ipv6", "1", "ipv6/conf/default/disable_ipv6", "1")
	}
	return netnstest.NewNS(t, "netns")
}

// withNL runs fn with a netlink handle in the namespace at path.
func withNL(t *testing.T, path string, fn func(h *netlink.Handle)) { netnstest.WithNL(t, path, fn) }

// in runs fn on a thread in the namespace at path.
func in(t *testing.T, path string, fn func() error) error { return netnstest.In(t, path, fn) }

func writeSysctl(t *testing.T, path, name, value string) {
	t.Helper()
	if err := in(t, path, func() error {
		return os.WriteFile("/proc/sys/"+name, []byte(value), 0o644)
	}); err != nil {
		t.Fatalf("sysctl %s=%s: %v", name, value, err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// vethPair makes a veth pair: a in the namespace at aNS, b in bNS, each
// with its address (if valid), up.
func vethPair(t *testing.T, aNS, a string, aAddr netip.Prefix, bNS, b string, bAddr netip.Prefix) {
	t.Helper()
	bns, err := netns.GetFromPath(bNS)
	if err != nil {
		t.Fatal(err)
	}
	defer bns.Close()
	withNL(t, aNS, func(h *netlink.Handle) {
		attrs := netlink.NewLinkAttrs()
		attrs.Name = a
		must(t, h.LinkAdd(&netlink.Veth{LinkAttrs: attrs, PeerName: b, PeerNamespace: netlink.NsFd(bns)}))
	})
	for _, side := range []struct {
		ns, name string
		addr     netip.Prefix
	}{{aNS, a, aAddr}, {bNS, b, bAddr}} {
		withNL(t, side.ns, func(h *netlink.Handle) {
			l, err := h.LinkByName(side.name)
			must(t, err)
			if side.addr.IsValid() {
				must(t, h.AddrAdd(l, &netlink.Addr{IPNet: ipNet(side.addr), Flags: unix.IFA_F_NODAD}))
			}
			must(t, h.LinkSetUp(l))
		})
	}
}

// testNode is a node namespace with a pod bridge and one pod behind it,
// as netd makes them, and an Overlay on it.
type testNode struct {
	name    string
	ns      string // the node's namespace
	pod     string // the pod's namespace
	podCIDR netip.Prefix
	podIP   netip.Addr
	cfg     Config
	*Overlay
}

// newTestNode makes a node namespace with ip_forward on, a bridge holding
// podCIDR's first address, netd's unreachable route for 10.42.0.0/16, and
// a pod namespace on the bridge with podCIDR's second address and a
// default route via the bridge. The node's LAN is the caller's to make.
func newTestNode(t *testing.T, name string, podCIDR netip.Prefix, noIPv6 bool) *testNode {
	t.Helper()
	n := &testNode{name: name, ns: newNS(t, noIPv6), pod: newNS(t, noIPv6), podCIDR: podCIDR}
	gw := podCIDR.Addr().Next()
	n.podIP = gw.Next()
	writeSysctl(t, n.ns, "net/ipv4/ip_forward", "1")
	withNL(t, n.ns, func(h *netlink.Handle) {
		attrs := netlink.NewLinkAttrs()
		attrs.Name = "br0"
		must(t, h.LinkAdd(&netlink.Bridge{LinkAttrs: attrs}))
		br, err := h.LinkByName("br0")
		must(t, err)
		must(t, h.AddrAdd(br, &netlink.Addr{IPNet: ipNet(netip.PrefixFrom(gw, podCIDR.Bits()))}))
		must(t, h.LinkSetUp(br))
		must(t, h.RouteAdd(&netlink.Route{
			Dst:      ipNet(netip.MustParsePrefix("10.42.0.0/16")),
			Type:     unix.RTN_UNREACHABLE,
			Protocol: unix.RTPROT_STATIC,
		}))
	})
	vethPair(t, n.ns, "vpod", netip.Prefix{}, n.pod, "eth0", netip.PrefixFrom(n.podIP, podCIDR.Bits()))
	withNL(t, n.ns, func(h *netlink.Handle) {
		v, err := h.LinkByName("vpod")
		must(t, err)
		br, err := h.LinkByName("br0")
		must(t, err)
		must(t, h.LinkSetMaster(v, br))
	})
	withNL(t, n.pod, func(h *netlink.Handle) {
		must(t, h.RouteAdd(&netlink.Route{Gw: gw.AsSlice()}))
	})
	return n
}

// start makes n's Overlay on underlay and sets it up.
func (n *testNode) start(t *testing.T, underlay netip.Addr) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Underlay = underlay
	cfg.PodCIDR = n.podCIDR
	cfg.HostNetNS = n.ns
	cfg.Logger = testLogger(t).With("node", n.name)
	n.cfg = cfg
	n.Overlay = n.restart(t)
	must(t, n.Setup(t.Context()))
	t.Cleanup(func() {
		if err := n.Teardown(context.Background()); err != nil { // t's is done by now
			t.Error(err)
		}
	})
}

// restart returns a new Overlay on n's configuration, as the agent makes
// after a restart.
func (n *testNode) restart(t *testing.T) *Overlay {
	t.Helper()
	o, err := New(n.cfg)
	must(t, err)
	return o
}

// peer returns n as a peer at underlay.
func (n *testNode) peer(underlay netip.Addr) Peer {
	return Peer{Node: n.name, Underlay: underlay, PodCIDR: n.podCIDR}
}

// serve runs a TCP and a UDP server on port in n's pod, that answer every
// connection and datagram with "<node> <peer address>".
func (n *testNode) serve(t *testing.T, port uint16) {
	t.Helper()
	addr := netip.AddrPortFrom(n.podIP, port).String()
	var (
		l   net.Listener
		pc  net.PacketConn
		wg  sync.WaitGroup
		msg = func(a net.Addr) []byte { return []byte(n.name + " " + a.String()) }
	)
	must(t, in(t, n.pod, func() (err error) {
		if l, err = net.Listen("tcp4", addr); err != nil {
			return err
		}
		pc, err = net.ListenPacket("udp4", addr)
		return err
	}))
	wg.Go(func() {
		buf := make([]byte, 64)
		for {
			_, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo(msg(from), from)
		}
	})
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Write(msg(c.RemoteAddr()))
			c.Close()
		}
	})
	t.Cleanup(func() { l.Close(); pc.Close(); wg.Wait() })
}

// dial connects from the namespace at path to addr over network ("tcp"
// or "udp") and returns what the server said.
func dial(t *testing.T, path, network string, addr netip.AddrPort) (string, error) {
	t.Helper()
	var reply []byte
	err := in(t, path, func() error {
		c, err := net.DialTimeout(network+"4", addr.String(), 2*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(2 * time.Second))
		if network == "udp" {
			if _, err := c.Write([]byte("ping")); err != nil {
				return err
			}
			buf := make([]byte, 64)
			n, err := c.Read(buf)
			reply = buf[:n]
			return err
		}
		reply, err = io.ReadAll(c)
		return err
	})
	return string(reply), err
}

// mustReach dials n's pod from the pod of from, over TCP and UDP, and
// fails unless n's server answers, having seen the client at its own pod
// IP: no address translation on the way.
func mustReach(t *testing.T, from, to *testNode, port uint16) {
	t.Helper()
	for _, network := range []string{"tcp", "udp"} {
		got, err := dial(t, from.pod, network, netip.AddrPortFrom(to.podIP, port))
		if err != nil {
			t.Fatalf("%s from pod of %s to pod of %s: %v", network, from.name, to.name, err)
		}
		if want := to.name + " " + from.podIP.String() + ":"; !strings.HasPrefix(got, want) {
			t.Fatalf("%s from pod of %s to pod of %s: reply %q, want %q...", network, from.name, to.name, got, want)
		}
	}
}

// mustNotReach checks that a TCP connection from the pod of from to the
// pod of to fails at once as unreachable.
func mustNotReach(t *testing.T, from, to *testNode, port uint16) {
	t.Helper()
	start := time.Now()
	_, err := dial(t, from.pod, "tcp", netip.AddrPortFrom(to.podIP, port))
	if !errors.Is(err, unix.EHOSTUNREACH) {
		t.Fatalf("tcp from pod of %s to pod of %s: %v, want host unreachable", from.name, to.name, err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("tcp from pod of %s to pod of %s failed after %v, want at once", from.name, to.name, d)
	}
}

// txPackets returns the packets sent by the link name in the namespace at
// path.
func txPackets(t *testing.T, path, name string) uint64 {
	t.Helper()
	var n uint64
	withNL(t, path, func(h *netlink.Handle) {
		l, err := h.LinkByName(name)
		must(t, err)
		n = l.Attrs().Statistics.TxPackets
	})
	return n
}

// rxPackets returns the packets received by the link name in the
// namespace at path.
func rxPackets(t *testing.T, path, name string) uint64 {
	t.Helper()
	var n uint64
	withNL(t, path, func(h *netlink.Handle) {
		l, err := h.LinkByName(name)
		must(t, err)
		n = l.Attrs().Statistics.RxPackets
	})
	return n
}

// udpInDatagrams returns the UDP datagrams the namespace at path has
// received (InDatagrams in its /proc/net/snmp).
func udpInDatagrams(t *testing.T, path string) uint64 {
	t.Helper()
	var b []byte
	must(t, in(t, path, func() (err error) {
		b, err = os.ReadFile("/proc/thread-self/net/snmp")
		return err
	}))
	var names []string
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "Udp:" {
			continue
		}
		if names == nil {
			names = f
			continue
		}
		for i, name := range names {
			if name == "InDatagrams" && i < len(f) {
				var n uint64
				if _, err := fmt.Sscan(f[i], &n); err != nil {
					t.Fatalf("snmp Udp InDatagrams %q: %v", f[i], err)
				}
				return n
			}
		}
	}
	t.Fatalf("no Udp InDatagrams in /proc/net/snmp:\n%s", b)
	return 0
}

// overlayState describes the device and what is on it in n's namespace,
// or "no device".
func overlayState(t *testing.T, n *testNode) string {
	t.Helper()
	var b strings.Builder
	withNL(t, n.ns, func(h *netlink.Handle) {
		l, err := h.LinkByName(n.cfg.Device)
		if _, ok := err.(netlink.LinkNotFoundError); ok {
			b.WriteString("no device")
			return
		}
		must(t, err)
		s, err := readState(h, l.Attrs().Index)
		must(t, err)
		fmt.Fprintf(&b, "device %d %s\n", l.Attrs().Index, l.Attrs().HardwareAddr)
		for m, dst := range s.fdb {
			fmt.Fprintf(&b, "fdb %s %s\n", m, dst)
		}
		for ip, m := range s.neigh {
			fmt.Fprintf(&b, "neigh %s %s\n", ip, m)
		}
		for dst, gw := range s.routes {
			fmt.Fprintf(&b, "route %s %s\n", dst, gw)
		}
	})
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}
