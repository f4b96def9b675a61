package nftlb

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/outpost-mesh/outpost/internal/netnstest"
	"github.com/outpost-mesh/outpost/netd/services"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func needRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces, links and nftables tables")
	}
}

// newNS creates a network namespace with lo up, bind-mounted under the
// test's temporary directory and removed when the test ends. It does no
// duplicate address detection: the links' IPv6 link-local addresses are
// usable at once, rather than after a second or two in which the node's
// first forwarded replies are lost.
func newNS(t testing.TB, name string) string {
	t.Helper()
	return netnstest.NewNS(t, name, "ipv6/conf/all/accept_dad", "0", "ipv6/conf/default/accept_dad", "0")
}

// withNL runs fn with a netlink handle in the namespace at path.
func withNL(t testing.TB, path string, fn func(h *netlink.Handle)) { netnstest.WithNL(t, path, fn) }

// in runs fn on a thread in the namespace at path.
func in(t testing.TB, path string, fn func() error) error { return netnstest.In(t, path, fn) }

// The test network: a node namespace with a bridge holding the pod CIDR's
// gateway, pods behind veths on it, and a LAN client joined to the node
// by a veth, which is also the node's default route.
var (
	podCIDR     = netip.MustParsePrefix("10.42.3.0/24")
	clusterCIDR = netip.MustParsePrefix("10.42.0.0/16")
	podCIDR6    = netip.MustParsePrefix("fd42:3::/64")
	cluster6    = netip.MustParsePrefix("fd42::/48")
	bridgeIP    = netip.MustParsePrefix("10.42.3.1/24")
	bridgeIP6   = netip.MustParsePrefix("fd42:3::1/64")
	nodeLAN     = netip.MustParsePrefix("192.168.50.1/24")
	clientLAN   = netip.MustParsePrefix("192.168.50.2/24")
	nodeLAN6    = netip.MustParsePrefix("fd50::1/64")
	clientLAN6  = netip.MustParsePrefix("fd50::2/64")
)

type testNet struct {
	node, lan string
	pods      []string
	podIP     []netip.Addr
	podIP6    []netip.Addr
}

func addAddr(t testing.TB, h *netlink.Handle, l netlink.Link, p netip.Prefix) {
	t.Helper()
	a := &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}}
	if p.Addr().Is6() {
		a.Flags = unix.IFA_F_NODAD
	}
	if err := h.AddrAdd(l, a); err != nil {
		t.Fatalf("add %v: %v", p, err)
	}
}

func addDefault(t testing.TB, h *netlink.Handle, gw netip.Addr) {
	t.Helper()
	if err := h.RouteAdd(&netlink.Route{Gw: gw.AsSlice()}); err != nil {
		t.Fatalf("default route via %v: %v", gw, err)
	}
}

// veth makes a veth pair with a in namespace aNS and b moved to bNS, both
// up, and returns their links.
func veth(t testing.TB, aNS, a, bNS, b string) {
	t.Helper()
	withNL(t, aNS, func(h *netlink.Handle) {
		bns, err := netns.GetFromPath(bNS)
		if err != nil {
			t.Fatal(err)
		}
		defer bns.Close()
		v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: a}, PeerName: b, PeerNamespace: netlink.NsFd(bns)}
		if err := h.LinkAdd(v); err != nil {
			t.Fatalf("add veth %s: %v", a, err)
		}
		l, err := h.LinkByName(a)
		if err == nil {
			err = h.LinkSetUp(l)
		}
		if err != nil {
			t.Fatal(err)
		}
	})
	withNL(t, bNS, func(h *netlink.Handle) {
		l, err := h.LinkByName(b)
		if err == nil {
			err = h.LinkSetUp(l)
		}
		if err != nil {
			t.Fatal(err)
		}
	})
}

func newTestNet(t testing.TB, pods int) *testNet {
	t.Helper()
	needRoot(t)
	n := &testNet{node: newNS(t, "node"), lan: newNS(t, "lan")}
	if err := in(t, n.node, func() error {
		for _, f := range []string{"/proc/sys/net/ipv4/ip_forward", "/proc/sys/net/ipv6/conf/all/forwarding"} {
			if err := os.WriteFile(f, []byte("1"), 0o644); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	withNL(t, n.node, func(h *netlink.Handle) {
		br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br0"}}
		if err := h.LinkAdd(br); err != nil {
			t.Fatal(err)
		}
		addAddr(t, h, br, bridgeIP)
		addAddr(t, h, br, bridgeIP6)
		if err := h.LinkSetUp(br); err != nil {
			t.Fatal(err)
		}
	})
	veth(t, n.node, "lan0", n.lan, "eth0")
	withNL(t, n.node, func(h *netlink.Handle) {
		l, _ := h.LinkByName("lan0")
		addAddr(t, h, l, nodeLAN)
		addAddr(t, h, l, nodeLAN6)
		addDefault(t, h, clientLAN.Addr())
		addDefault(t, h, clientLAN6.Addr())
	})
	withNL(t, n.lan, func(h *netlink.Handle) {
		l, _ := h.LinkByName("eth0")
		addAddr(t, h, l, clientLAN)
		addAddr(t, h, l, clientLAN6)
		// External IPs are routed to the node.
		if err := h.RouteAdd(&netlink.Route{Dst: &net.IPNet{IP: net.ParseIP("203.0.113.0"), Mask: net.CIDRMask(24, 32)}, Gw: nodeLAN.Addr().AsSlice()}); err != nil {
			t.Fatal(err)
		}
	})
	for i := range pods {
		p := newNS(t, fmt.Sprintf("pod%d", i))
		ip := netip.AddrFrom4([4]byte{10, 42, 3, byte(11 + i)})
		ip6 := netip.MustParseAddr(fmt.Sprintf("fd42:3::%x", 0x11+i))
		veth(t, n.node, fmt.Sprintf("vpod%d", i), p, "eth0")
		withNL(t, n.node, func(h *netlink.Handle) {
			l, _ := h.LinkByName(fmt.Sprintf("vpod%d", i))
			br, _ := h.LinkByName("br0")
			if err := h.LinkSetMaster(l, br); err != nil {
				t.Fatal(err)
			}
			// As netd sets it: a pod reaches itself through a frontend.
			if err := h.LinkSetHairpin(l, true); err != nil {
				t.Fatal(err)
			}
		})
		withNL(t, p, func(h *netlink.Handle) {
			l, _ := h.LinkByName("eth0")
			addAddr(t, h, l, netip.PrefixFrom(ip, podCIDR.Bits()))
			addAddr(t, h, l, netip.PrefixFrom(ip6, podCIDR6.Bits()))
			addDefault(t, h, bridgeIP.Addr())
			addDefault(t, h, bridgeIP6.Addr())
		})
		n.pods = append(n.pods, p)
		n.podIP = append(n.podIP, ip)
		n.podIP6 = append(n.podIP6, ip6)
	}
	return n
}

func (n *testNet) config(mode Mode) Config {
	cfg := DefaultConfig()
	cfg.HostNetNS = n.node
	cfg.Mode = mode
	cfg.PodCIDRs = []netip.Prefix{podCIDR, podCIDR6}
	cfg.ClusterCIDRs = []netip.Prefix{clusterCIDR, cluster6}
	return cfg
}

func (n *testNet) newDataplane(t testing.TB, mode Mode) *Dataplane {
	t.Helper()
	d, err := New(n.config(mode))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func mustSync(t testing.TB, d *Dataplane, tbl services.Table) {
	t.Helper()
	if err := d.Sync(t.Context(), tbl); err != nil {
		t.Fatalf("Sync: %v", err)
	}
}

// serve runs a server in the namespace at path, on addr. A TCP server
// writes "<name> <peer>\n" to each connection, then echoes each line it
// reads; a UDP server answers each datagram with "<name> <peer>".
func serve(t testing.TB, path, network, addr, name string) {
	t.Helper()
	var (
		l  net.Listener
		pc net.PacketConn
	)
	if err := in(t, path, func() (err error) {
		if network == "udp" {
			pc, err = net.ListenPacket("udp", addr)
		} else {
			l, err = net.Listen("tcp", addr)
		}
		return err
	}); err != nil {
		t.Fatalf("listen %s %s: %v", network, addr, err)
	}
	var wg sync.WaitGroup
	if pc != nil {
		wg.Go(func() {
			buf := make([]byte, 64)
			for {
				_, from, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				pc.WriteTo([]byte(name+" "+from.String()), from)
			}
		})
		t.Cleanup(func() { pc.Close(); wg.Wait() })
		return
	}
	var (
		mu    sync.Mutex
		conns = map[net.Conn]bool{}
	)
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[c] = true
			mu.Unlock()
			wg.Go(func() {
				defer c.Close()
				if _, err := fmt.Fprintf(c, "%s %s\n", name, c.RemoteAddr()); err != nil {
					return
				}
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			})
		}
	})
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
}

// conn is a TCP connection opened in a namespace, with what the server
// said first.
type conn struct {
	net.Conn
	r    *bufio.Reader
	name string
	peer netip.AddrPort
}

// connect opens a TCP connection from the namespace at path and reads
// the server's greeting.
func connect(t testing.TB, path, addr string) (*conn, error) {
	t.Helper()
	var c net.Conn
	err := in(t, path, func() (err error) {
		c, err = net.DialTimeout("tcp", addr, 2*time.Second)
		return err
	})
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		c.Close()
		return nil, err
	}
	name, p, _ := strings.Cut(strings.TrimSpace(line), " ")
	peer, err := netip.ParseAddrPort(p)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("greeting %q: %w", line, err)
	}
	return &conn{Conn: c, r: r, name: name, peer: netip.AddrPortFrom(peer.Addr().Unmap(), peer.Port())}, nil
}

// echo checks that the connection still carries data both ways.
func (c *conn) echo() error {
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return err
	}
	line, err := c.r.ReadString('\n')
	if err != nil {
		return err
	}
	if line != "ping\n" {
		return fmt.Errorf("echo %q", line)
	}
	return nil
}

// dial connects once and returns the server's name and the client
// address it saw.
func dial(t testing.TB, path, network, addr string) (string, netip.AddrPort, error) {
	t.Helper()
	if network == "tcp" {
		c, err := connect(t, path, addr)
		if err != nil {
			return "", netip.AddrPort{}, err
		}
		c.Close()
		return c.name, c.peer, nil
	}
	var reply string
	err := in(t, path, func() error {
		c, err := net.DialTimeout("udp", addr, 2*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Write([]byte("ping")); err != nil {
			return err
		}
		buf := make([]byte, 128)
		n, err := c.Read(buf)
		reply = string(buf[:n])
		return err
	})
	if err != nil {
		return "", netip.AddrPort{}, err
	}
	name, p, _ := strings.Cut(reply, " ")
	peer, err := netip.ParseAddrPort(p)
	return name, netip.AddrPortFrom(peer.Addr().Unmap(), peer.Port()), err
}

func mustDial(t testing.TB, path, network, addr string) (string, netip.AddrPort) {
	t.Helper()
	name, peer, err := dial(t, path, network, addr)
	if err != nil {
		t.Fatalf("dial %s %s from %s: %v", network, addr, filepath.Base(path), err)
	}
	return name, peer
}

// isRefused reports whether err is a refused connection.
func isRefused(err error) bool { return errors.Is(err, unix.ECONNREFUSED) }

func key(s string, proto services.Proto) services.Key {
	ap := netip.MustParseAddrPort(s)
	return services.Key{Addr: ap.Addr(), Port: ap.Port(), Proto: proto}
}

func backends(port uint16, local bool, addrs ...netip.Addr) []services.Backend {
	var out []services.Backend
	for _, a := range addrs {
		out = append(out, services.Backend{Addr: netip.AddrPortFrom(a, port), Local: local})
	}
	return out
}

func table(fs ...*services.Frontend) services.Table {
	t := services.Table{}
	for _, f := range fs {
		t[f.Key] = f
	}
	return t
}
