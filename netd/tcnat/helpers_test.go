package tcnat

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/outpost-mesh/outpost/internal/netnstest"
	"github.com/outpost-mesh/outpost/netd/internal/bpftest"
	"github.com/outpost-mesh/outpost/netd/services"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// needKernel skips t unless the kernel runs the dataplane.
func needKernel(t testing.TB) {
	t.Helper()
	bpftest.NeedKernel(t, Supported)
}

// nodeSysctls make a namespace a router that masquerades nothing by
// itself and does no DAD (addresses are usable at once).
var nodeSysctls = []string{
	"ipv4/ip_forward", "1",
	"ipv6/conf/all/forwarding", "1",
	"ipv4/conf/all/rp_filter", "0",
	"ipv4/conf/default/rp_filter", "0",
	"ipv6/conf/default/accept_dad", "0",
}

var hostSysctls = []string{"ipv6/conf/default/accept_dad", "0"}

// veth links namespace a (interface an, addresses aa) with b (bn, ba),
// both up.
func veth(t testing.TB, a, an string, aa []string, b, bn string, ba []string) {
	t.Helper()
	bns, err := netns.GetFromPath(b)
	if err != nil {
		t.Fatal(err)
	}
	defer bns.Close()
	netnstest.WithNL(t, a, func(h *netlink.Handle) {
		v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: an}, PeerName: bn, PeerNamespace: netlink.NsFd(int(bns))}
		if err := h.LinkAdd(v); err != nil {
			t.Fatalf("veth %s-%s: %v", an, bn, err)
		}
	})
	setup := func(ns, name string, addrs []string) {
		netnstest.WithNL(t, ns, func(h *netlink.Handle) {
			l, err := h.LinkByName(name)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range addrs {
				p := netip.MustParsePrefix(s)
				ipn := &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
				if err := h.AddrAdd(l, &netlink.Addr{IPNet: ipn, Flags: unix.IFA_F_NODAD}); err != nil {
					t.Fatalf("add %s to %s: %v", s, name, err)
				}
			}
			if err := h.LinkSetUp(l); err != nil {
				t.Fatal(err)
			}
		})
	}
	setup(a, an, aa)
	setup(b, bn, ba)
}

// defaultVia routes everything of gw's family in ns via gw.
func defaultVia(t testing.TB, ns string, gws ...string) {
	t.Helper()
	netnstest.WithNL(t, ns, func(h *netlink.Handle) {
		for _, gw := range gws {
			g := netip.MustParseAddr(gw)
			if err := h.RouteAdd(&netlink.Route{Gw: g.AsSlice()}); err != nil {
				t.Fatalf("default via %s: %v", gw, err)
			}
		}
	})
}

// lab is a node with a LAN interface lan0 (10.0.0.1, fd00::1) to a
// client (10.0.0.2, fd00::2) and a pod interface pod0 (10.1.0.1, fd01::1)
// to a pod (10.1.0.2 and 10.1.0.3, fd01::2), whose default route is the
// node.
type lab struct {
	node, client, pod string
	pins              string
}

// enterLab runs t in a network namespace of its own on a kernel that has
// tc programs, and returns a lab whose pins are under a bpffs of the
// test's; nil in the process that made the namespace, which must return
// at once.
func enterLab(t *testing.T) *lab {
	t.Helper()
	if !netnstest.Enter(t) {
		return nil
	}
	needKernel(t)
	return newLab(t, filepath.Join(bpftest.Mount(t), "node"))
}

func newLab(t *testing.T, pins string) *lab {
	t.Helper()
	l := &lab{
		node:   netnstest.NewNS(t, "node", nodeSysctls...),
		client: netnstest.NewNS(t, "client", hostSysctls...),
		pod:    netnstest.NewNS(t, "pod", hostSysctls...),
		pins:   pins,
	}
	veth(t, l.node, "lan0", []string{"10.0.0.1/24", "fd00::1/64"}, l.client, "eth0", []string{"10.0.0.2/24", "fd00::2/64"})
	veth(t, l.node, "pod0", []string{"10.1.0.1/24", "fd01::1/64"}, l.pod, "eth0", []string{"10.1.0.2/24", "10.1.0.3/24", "fd01::2/64"})
	defaultVia(t, l.pod, "10.1.0.1", "fd01::1")
	return l
}

func (l *lab) config() Config {
	cfg := DefaultConfig()
	cfg.PinDir = l.pins
	cfg.HostNetNS = l.node
	cfg.Interfaces = []string{"lan0"}
	return cfg
}

// open returns a new dataplane for cfg, removed when t ends.
func open(t *testing.T, cfg Config) *Dataplane {
	t.Helper()
	d, err := New(cfg)
	return bpftest.Opened(t, d, err, ErrClosed)
}

// tcpServer listens at addr in ns and answers each connection with
// "<its address> <the client's address as it saw it>\n", then echoes
// what it reads, until t ends.
func tcpServer(t *testing.T, ns, addr string) {
	t.Helper()
	var ln net.Listener
	if err := netnstest.In(t, ns, func() (err error) {
		ln, err = net.Listen("tcp", addr)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	bpftest.ServeTCP(t, ln, func(c net.Conn) string { return fmt.Sprintf("%s %s\n", addr, c.RemoteAddr()) })
}

// udpServer answers each datagram with "<its address> <the client's>".
func udpServer(t *testing.T, ns, addr string) {
	t.Helper()
	var pc net.PacketConn
	if err := netnstest.In(t, ns, func() (err error) {
		pc, err = net.ListenPacket("udp", addr)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	bpftest.ServeUDP(t, pc, func(from net.Addr) string { return addr + " " + from.String() })
}

// answer is what a server said: which backend, and whom it saw.
type answer struct {
	backend, peer string
}

func parseAnswer(s string) (answer, error) {
	b, p, ok := strings.Cut(strings.TrimSpace(s), " ")
	if !ok {
		return answer{}, fmt.Errorf("answer %q", s)
	}
	return answer{b, p}, nil
}

// dial connects from ns to addr over TCP and returns the server's
// answer and the connection.
func dial(t *testing.T, ns, addr string) (answer, net.Conn, error) {
	var c net.Conn
	if err := netnstest.In(t, ns, func() (err error) {
		c, err = net.DialTimeout("tcp", addr, 2*time.Second)
		return err
	}); err != nil {
		return answer{}, nil, err
	}
	c.SetDeadline(time.Now().Add(2 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		c.Close()
		return answer{}, nil, err
	}
	c.SetDeadline(time.Time{})
	a, err := parseAnswer(line)
	if err != nil {
		c.Close()
		return answer{}, nil, err
	}
	return a, c, nil
}

// ask connects from ns to addr, reads the answer and closes, retrying
// until a deadline: the first packets may wait for neighbour discovery.
func ask(t *testing.T, ns, addr string) answer {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		a, c, err := dial(t, ns, addr)
		if err == nil {
			c.Close()
			return a
		}
		if time.Now().After(deadline) {
			t.Fatalf("connect to %s: %v", addr, err)
		}
	}
}

// askUDP sends a datagram from ns to addr and returns the answer and the
// address it came from, retrying until a deadline.
func askUDP(t *testing.T, ns, addr string) (answer, netip.AddrPort) {
	t.Helper()
	var pc net.PacketConn
	if err := netnstest.In(t, ns, func() (err error) {
		pc, err = net.ListenPacket("udp", ":0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	to, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	buf := make([]byte, 1500)
	for {
		if _, err := pc.WriteTo([]byte("hi"), to); err != nil {
			t.Fatal(err)
		}
		pc.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		n, from, err := pc.ReadFrom(buf)
		if err == nil {
			a, err := parseAnswer(string(buf[:n]))
			if err != nil {
				t.Fatal(err)
			}
			ap := from.(*net.UDPAddr).AddrPort()
			return a, netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
		}
		if time.Now().After(deadline) {
			t.Fatalf("UDP to %s: %v", addr, err)
		}
	}
}

// nodePort returns a NodePort frontend at addr with external backends.
func nodePort(addr string, proto services.Proto, backends ...string) *services.Frontend {
	ap := netip.MustParseAddrPort(addr)
	f := &services.Frontend{
		Key:     services.Key{Addr: ap.Addr(), Port: ap.Port(), Proto: proto},
		Kind:    services.NodePort,
		Service: "default/test",
	}
	for _, b := range backends {
		f.ExternalBackends = append(f.ExternalBackends, services.Backend{Addr: netip.MustParseAddrPort(b)})
	}
	f.Backends = f.ExternalBackends
	return f
}

// attached returns the ids of the programs attached to the interface
// name of ns, by direction.
func attached(t *testing.T, ns, name string) map[string][]ebpf.ProgramID {
	t.Helper()
	out := map[string][]ebpf.ProgramID{}
	if err := netnstest.In(t, ns, func() error {
		ifi, err := net.InterfaceByName(name)
		if err != nil {
			return err
		}
		for _, dir := range directions {
			r, err := queryTCX(ifi.Index, dir.attach)
			if err != nil {
				return err
			}
			out[dir.name] = r
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// bulk sends n bytes through the echo server on c and checks they come
// back.
func bulk(t *testing.T, c net.Conn, n int) {
	t.Helper()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	defer c.SetDeadline(time.Time{})
	data := make([]byte, n)
	for i := range data {
		data[i] = byte(i * 7)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := c.Write(data)
		errc <- err
	}()
	got := make([]byte, n)
	_, rerr := io.ReadFull(c, got)
	if err := <-errc; err != nil {
		t.Fatalf("bulk write: %v", err)
	}
	if rerr != nil {
		t.Fatalf("bulk read: %v", rerr)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("bulk data came back changed")
	}
}
