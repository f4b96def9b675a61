package tcnat

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/google/nftables"
	"github.com/vishvananda/netlink"

	"github.com/outpost-mesh/outpost/internal/netnstest"
	"github.com/outpost-mesh/outpost/netd/internal/bpftest"
	"github.com/outpost-mesh/outpost/netd/services"
)

// TestNodePort: a client on the LAN reaches a pod through the node's
// NodePorts, over TCP and UDP, IPv4 and IPv6; the replies come from the
// address and port it connected to, and the pod sees the node (the flow
// is masqueraded).
func TestNodePort(t *testing.T) {
	l := enterLab(t)
	if l == nil {
		return
	}
	tcpServer(t, l.pod, "10.1.0.2:8080")
	tcpServer(t, l.pod, "[fd01::2]:8080")
	udpServer(t, l.pod, "10.1.0.2:5353")
	udpServer(t, l.pod, "[fd01::2]:5353")
	d := open(t, l.config())
	bpftest.Sync(t, d, bpftest.Table(
		nodePort("10.0.0.1:30080", services.TCP, "10.1.0.2:8080"),
		nodePort("[fd00::1]:30080", services.TCP, "[fd01::2]:8080"),
		nodePort("10.0.0.1:30053", services.UDP, "10.1.0.2:5353"),
		nodePort("[fd00::1]:30053", services.UDP, "[fd01::2]:5353"),
	))

	if a := ask(t, l.client, "10.0.0.1:30080"); a.backend != "10.1.0.2:8080" || netip.MustParseAddrPort(a.peer).Addr() != netip.MustParseAddr("10.1.0.1") {
		t.Errorf("TCP to 10.0.0.1:30080: answer %+v, want from 10.1.0.2:8080 seeing 10.1.0.1", a)
	}
	if a := ask(t, l.client, "[fd00::1]:30080"); a.backend != "[fd01::2]:8080" || netip.MustParseAddrPort(a.peer).Addr() != netip.MustParseAddr("fd01::1") {
		t.Errorf("TCP to [fd00::1]:30080: answer %+v, want from [fd01::2]:8080 seeing fd01::1", a)
	}
	// A megabyte each way: segmentation offload (GSO/GRO) packets, with
	// partial checksums, cross the programs.
	for _, fe := range []string{"10.0.0.1:30080", "[fd00::1]:30080"} {
		_, c, err := dial(t, l.client, fe)
		if err != nil {
			t.Fatal(err)
		}
		bulk(t, c, 1<<20)
		c.Close()
	}
	for _, fe := range []string{"10.0.0.1:30053", "[fd00::1]:30053"} {
		a, from := askUDP(t, l.client, fe)
		if from != netip.MustParseAddrPort(fe) {
			t.Errorf("UDP to %s: reply from %s", fe, from)
		}
		if p := netip.MustParseAddrPort(a.peer).Addr(); p.Is4() && p != netip.MustParseAddr("10.1.0.1") || p.Is6() && p != netip.MustParseAddr("fd01::1") {
			t.Errorf("UDP to %s: backend saw %s, want the node", fe, a.peer)
		}
	}
}

// TestExternalLocal: with externalTrafficPolicy Local the pod sees the
// client's own address, and the reply, routed by the pod straight to
// the client through the node, still comes from the NodePort.
func TestExternalLocal(t *testing.T) {
	l := enterLab(t)
	if l == nil {
		return
	}
	tcpServer(t, l.pod, "10.1.0.2:8080")
	udpServer(t, l.pod, "10.1.0.2:5353")
	d := open(t, l.config())
	tcp := nodePort("10.0.0.1:30080", services.TCP, "10.1.0.2:8080")
	udp := nodePort("10.0.0.1:30053", services.UDP, "10.1.0.2:5353")
	tcp.ExternalLocal, udp.ExternalLocal = true, true
	bpftest.Sync(t, d, bpftest.Table(tcp, udp))
	if a := ask(t, l.client, "10.0.0.1:30080"); netip.MustParseAddrPort(a.peer).Addr() != netip.MustParseAddr("10.0.0.2") {
		t.Errorf("TCP: backend saw %s, want the client 10.0.0.2", a.peer)
	}
	a, from := askUDP(t, l.client, "10.0.0.1:30053")
	if netip.MustParseAddrPort(a.peer).Addr() != netip.MustParseAddr("10.0.0.2") || from != netip.MustParseAddrPort("10.0.0.1:30053") {
		t.Errorf("UDP: backend saw %s, reply from %s; want the client, and from the NodePort", a.peer, from)
	}
}

// TestOtherNode: a backend on a second node, reached over a link between
// the nodes that is not one of the LAN interfaces, and with no route to
// the client: masquerading makes its replies come back through node A,
// and it sees node A's address.
func TestOtherNode(t *testing.T) {
	l := enterLab(t)
	if l == nil {
		return
	}
	nodeB := netnstest.NewNS(t, "nodeB", nodeSysctls...)
	veth(t, l.node, "nodeb", []string{"10.2.0.1/24"}, nodeB, "nodea", []string{"10.2.0.2/24"})
	tcpServer(t, nodeB, "10.2.0.2:8080")
	udpServer(t, nodeB, "10.2.0.2:5353")
	d := open(t, l.config())
	bpftest.Sync(t, d, bpftest.Table(
		nodePort("10.0.0.1:30080", services.TCP, "10.2.0.2:8080"),
		nodePort("10.0.0.1:30053", services.UDP, "10.2.0.2:5353"),
	))
	a := ask(t, l.client, "10.0.0.1:30080")
	if peer := netip.MustParseAddrPort(a.peer); a.backend != "10.2.0.2:8080" || peer.Addr() != netip.MustParseAddr("10.2.0.1") || peer.Port() < 32768 || peer.Port() > 60999 {
		t.Errorf("TCP: answer %+v, want from 10.2.0.2:8080 seeing node A's 10.2.0.1 at a port in 32768-60999", a)
	}
	a, from := askUDP(t, l.client, "10.0.0.1:30053")
	if peer := netip.MustParseAddrPort(a.peer); peer.Addr() != netip.MustParseAddr("10.2.0.1") || peer.Port() < 32768 || from != netip.MustParseAddrPort("10.0.0.1:30053") {
		t.Errorf("UDP: backend saw %s, reply from %s; want node A, and from the NodePort", a.peer, from)
	}
}

// TestBackendRemoved: once Sync takes a backend away, new connections
// avoid it, and one established to it keeps working.
func TestBackendRemoved(t *testing.T) {
	l := enterLab(t)
	if l == nil {
		return
	}
	tcpServer(t, l.pod, "10.1.0.2:8080")
	tcpServer(t, l.pod, "10.1.0.3:8080")
	d := open(t, l.config())
	bpftest.Sync(t, d, bpftest.Table(nodePort("10.0.0.1:30080", services.TCP, "10.1.0.2:8080", "10.1.0.3:8080")))
	ask(t, l.client, "10.0.0.1:30080") // neighbours resolved
	a, c, err := dial(t, l.client, "10.0.0.1:30080")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	kept := "10.1.0.2:8080"
	if a.backend == kept {
		kept = "10.1.0.3:8080"
	}
	bpftest.Sync(t, d, bpftest.Table(nodePort("10.0.0.1:30080", services.TCP, kept)))
	for range 20 {
		if got := ask(t, l.client, "10.0.0.1:30080"); got.backend != kept {
			t.Fatalf("a new connection went to %s, removed", got.backend)
		}
	}
	bpftest.Echo(t, c)

	// No backends at all: new connections are dropped, the
	// established one still works.
	bpftest.Sync(t, d, bpftest.Table(nodePort("10.0.0.1:30080", services.TCP)))
	if _, c2, err := dial(t, l.client, "10.0.0.1:30080"); err == nil {
		c2.Close()
		t.Error("connected to a NodePort without backends")
	}
	bpftest.Echo(t, c)
}

// TestAdoptUpgradeRemove: a new Dataplane over the pins of one that was
// closed adopts its links and maps (an established connection goes on,
// one program per direction stays attached); one with a new program
// version swaps the programs in place; Remove leaves no program, pin or
// nftables table behind.
func TestAdoptUpgradeRemove(t *testing.T) {
	l := enterLab(t)
	if l == nil {
		return
	}
	tcpServer(t, l.pod, "10.1.0.2:8080")
	cfg := l.config()
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	bpftest.Sync(t, d, bpftest.Table(nodePort("10.0.0.1:30080", services.TCP, "10.1.0.2:8080")))
	ask(t, l.client, "10.0.0.1:30080")
	_, c, err := dial(t, l.client, "10.0.0.1:30080")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	before := attached(t, l.node, "lan0")
	if len(before["ingress"]) != 1 || len(before["egress"]) != 1 {
		t.Fatalf("attached %v, want one program per direction", before)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := d.Sync(context.Background(), nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Sync after Close = %v, want ErrClosed", err)
	}
	bpftest.Echo(t, c) // the routing outlives the dataplane

	d2, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := attached(t, l.node, "lan0"); !equalIDs(got, before) {
		t.Errorf("after adoption attached %v, want %v as before", got, before)
	}
	if len(d2.state) != 1 {
		t.Errorf("adopted state has %d frontends, want 1", len(d2.state))
	}
	bpftest.Sync(t, d2, bpftest.Table(nodePort("10.0.0.1:30080", services.TCP, "10.1.0.2:8080")))
	if d2.lastOps != 0 {
		t.Errorf("Sync of the same table after adoption made %d changes, want 0", d2.lastOps)
	}
	bpftest.Echo(t, c)
	d2.Close()

	progVersion++
	defer func() { progVersion-- }()
	d3 := open(t, cfg)
	after := attached(t, l.node, "lan0")
	if len(after["ingress"]) != 1 || len(after["egress"]) != 1 || equalIDs(after, before) {
		t.Errorf("after upgrade attached %v, want one new program per direction (was %v)", after, before)
	}
	bpftest.Echo(t, c)
	if a := ask(t, l.client, "10.0.0.1:30080"); a.backend != "10.1.0.2:8080" {
		t.Errorf("after upgrade: answer %+v", a)
	}

	if err := d3.Remove(context.Background()); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if got := attached(t, l.node, "lan0"); len(got["ingress"])+len(got["egress"]) != 0 {
		t.Errorf("after Remove attached %v, want none", got)
	}
	if _, err := os.Stat(cfg.PinDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pin dir after Remove: %v", err)
	}
	if tabs := nftTables(t, l.node); len(tabs) != 0 {
		t.Errorf("nftables tables after Remove: %v", tabs)
	}
}

func equalIDs[K comparable, V comparable](a, b map[K][]V) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

// nftTables lists the nftables tables of ns.
func nftTables(t *testing.T, ns string) []string {
	t.Helper()
	f, err := os.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c, err := nftables.New(nftables.WithNetNSFd(int(f.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	tabs, err := c.ListTables()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, tab := range tabs {
		out = append(out, tab.Name)
	}
	return out
}

// TestTwoNodes: two nodes on one machine, with the same addresses and
// table name, each with a dataplane of its own on one bpffs: each
// client reaches its own node's pod.
func TestTwoNodes(t *testing.T) {
	if !netnstest.Enter(t) {
		return
	}
	needKernel(t)
	fs := bpftest.Mount(t)
	var labs []*lab
	for i, port := range []string{"8080", "8081"} {
		l := newLab(t, filepath.Join(fs, "node"+port))
		tcpServer(t, l.pod, "10.1.0.2:"+port)
		udpServer(t, l.pod, "10.1.0.2:"+port)
		d := open(t, l.config())
		bpftest.Sync(t, d, bpftest.Table(
			nodePort("10.0.0.1:30080", services.TCP, "10.1.0.2:"+port),
			nodePort("10.0.0.1:30080", services.UDP, "10.1.0.2:"+port),
		))
		labs = append(labs, l)
		_ = i
	}
	for _, round := range []int{1, 2} {
		for i, port := range []string{"8080", "8081"} {
			if a := ask(t, labs[i].client, "10.0.0.1:30080"); a.backend != "10.1.0.2:"+port {
				t.Errorf("round %d: node %d's client reached %s, want its own pod's 10.1.0.2:%s", round, i, a.backend, port)
			}
			if a, _ := askUDP(t, labs[i].client, "10.0.0.1:30080"); a.backend != "10.1.0.2:"+port {
				t.Errorf("round %d: node %d's client reached %s over UDP", round, i, a.backend)
			}
		}
	}
}

// TestSameLAN: the client, node A and node B on one LAN (a bridge); the
// backend is on node B, reached out of the very interface the client's
// packets came in on. Masquerading makes B answer A, whose conntrack
// sends the reply back out of the LAN interface, translated.
func TestSameLAN(t *testing.T) {
	if !netnstest.Enter(t) {
		return
	}
	needKernel(t)
	lan := netnstest.NewNS(t, "lan")
	nodeA := netnstest.NewNS(t, "nodeA", nodeSysctls...)
	nodeB := netnstest.NewNS(t, "nodeB", nodeSysctls...)
	client := netnstest.NewNS(t, "client", hostSysctls...)
	netnstest.WithNL(t, lan, func(h *netlink.Handle) {
		if err := h.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br0"}}); err != nil {
			t.Skipf("no bridge: %v", err)
		}
	})
	for i, host := range []struct{ ns, name, addr string }{
		{client, "eth0", "10.0.0.2/24"}, {nodeA, "lan0", "10.0.0.1/24"}, {nodeB, "lan0", "10.0.0.3/24"},
	} {
		port := fmt.Sprintf("port%d", i)
		veth(t, host.ns, host.name, []string{host.addr}, lan, port, nil)
		netnstest.WithNL(t, lan, func(h *netlink.Handle) {
			br, err := h.LinkByName("br0")
			if err == nil {
				var p netlink.Link
				if p, err = h.LinkByName(port); err == nil {
					err = h.LinkSetMaster(p, br)
				}
				if err == nil {
					err = h.LinkSetUp(br)
				}
			}
			if err != nil {
				t.Fatal(err)
			}
		})
	}
	tcpServer(t, nodeB, "10.0.0.3:8080")
	udpServer(t, nodeB, "10.0.0.3:5353")
	cfg := DefaultConfig()
	cfg.PinDir = filepath.Join(bpftest.Mount(t), "nodeA")
	cfg.HostNetNS, cfg.Interfaces = nodeA, []string{"lan0"}
	d := open(t, cfg)
	bpftest.Sync(t, d, bpftest.Table(
		nodePort("10.0.0.1:30080", services.TCP, "10.0.0.3:8080"),
		nodePort("10.0.0.1:30053", services.UDP, "10.0.0.3:5353"),
	))
	for range 5 {
		if a := ask(t, client, "10.0.0.1:30080"); a.backend != "10.0.0.3:8080" || netip.MustParseAddrPort(a.peer).Addr() != netip.MustParseAddr("10.0.0.1") {
			t.Fatalf("TCP: answer %+v, want from 10.0.0.3:8080 seeing node A", a)
		}
	}
	a, from := askUDP(t, client, "10.0.0.1:30053")
	if netip.MustParseAddrPort(a.peer).Addr() != netip.MustParseAddr("10.0.0.1") || from != netip.MustParseAddrPort("10.0.0.1:30053") {
		t.Errorf("UDP: backend saw %s, reply from %s; want node A, and from the NodePort", a.peer, from)
	}
}

// TestInterfaces: a New whose Interfaces changed detaches from the
// interfaces left out and attaches to new ones; an interface made anew
// (its programs died with the old one) gets them again. Uninstall
// takes away what a closed dataplane left.
func TestInterfaces(t *testing.T) {
	if !netnstest.Enter(t) {
		return
	}
	needKernel(t)
	node := netnstest.NewNS(t, "node")
	mkVeth := func(name string) {
		netnstest.WithNL(t, node, func(h *netlink.Handle) {
			if err := h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: name + "p"}); err != nil {
				t.Fatal(err)
			}
		})
	}
	mkVeth("lan0")
	mkVeth("lan1")
	cfg := DefaultConfig()
	cfg.PinDir = filepath.Join(bpftest.Mount(t), "node")
	cfg.HostNetNS = node
	count := func(name string) int {
		n := 0
		for _, ids := range attached(t, node, name) {
			n += len(ids)
		}
		return n
	}
	reopen := func(ifs ...string) {
		t.Helper()
		cfg.Interfaces = ifs
		d, err := New(cfg)
		if err != nil {
			t.Fatalf("New(%v): %v", ifs, err)
		}
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
	}
	reopen("lan0", "lan1")
	if a, b := count("lan0"), count("lan1"); a != 2 || b != 2 {
		t.Fatalf("programs on lan0 and lan1: %d and %d, want 2 each", a, b)
	}
	reopen("lan0")
	if a, b := count("lan0"), count("lan1"); a != 2 || b != 0 {
		t.Fatalf("after dropping lan1, programs on lan0 and lan1: %d and %d, want 2 and 0", a, b)
	}
	netnstest.WithNL(t, node, func(h *netlink.Handle) {
		l, err := h.LinkByName("lan0")
		if err == nil {
			err = h.LinkDel(l)
		}
		if err != nil {
			t.Fatal(err)
		}
	})
	mkVeth("lan0")
	if n := count("lan0"); n != 0 {
		t.Fatalf("a new lan0 has %d programs", n)
	}
	reopen("lan0")
	if n := count("lan0"); n != 2 {
		t.Fatalf("after New, the new lan0 has %d programs, want 2", n)
	}
	// A missing interface, or one without Ethernet headers, fails New,
	// and leaves what was there.
	netnstest.WithNL(t, node, func(h *netlink.Handle) {
		if err := h.LinkAdd(&netlink.Tuntap{LinkAttrs: netlink.LinkAttrs{Name: "tun0"}, Mode: netlink.TUNTAP_MODE_TUN, Flags: netlink.TUNTAP_DEFAULTS | netlink.TUNTAP_NO_PI}); err != nil {
			t.Fatal(err)
		}
	})
	for _, bad := range []string{"nosuch", "tun0"} {
		cfg.Interfaces = []string{"lan0", bad}
		if _, err := New(cfg); err == nil {
			t.Fatalf("New with interface %s succeeded", bad)
		}
	}
	cfg.Interfaces = []string{"lan0"}
	if n := count("lan0"); n != 2 {
		t.Fatalf("after a failed New, lan0 has %d programs, want 2", n)
	}
	// An older agent's frontends map, as a New killed part way
	// through an upgrade leaves it, goes too.
	old, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: 20, ValueSize: 16, MaxEntries: 1})
	if err != nil {
		t.Fatal(err)
	}
	err = old.Pin(filepath.Join(cfg.PinDir, locklessFrontends))
	old.Close()
	if err != nil {
		t.Fatal(err)
	}

	if err := Uninstall(context.Background(), cfg); err != nil {
		t.Fatalf("Uninstall: %v", err)
	}
	if n := count("lan0"); n != 0 {
		t.Errorf("after Uninstall, lan0 has %d programs", n)
	}
	if _, err := os.Stat(cfg.PinDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pin dir after Uninstall: %v", err)
	}
	if tabs := nftTables(t, node); len(tabs) != 0 {
		t.Errorf("nftables tables after Uninstall: %v", tabs)
	}
	if err := Uninstall(context.Background(), cfg); err != nil {
		t.Errorf("second Uninstall: %v", err)
	}
}

// TestTooLarge: a table beyond the limits changes nothing.
func TestTooLarge(t *testing.T) {
	l := enterLab(t)
	if l == nil {
		return
	}
	tcpServer(t, l.pod, "10.1.0.2:8080")
	d := open(t, l.config())
	small := bpftest.Table(nodePort("10.0.0.1:30080", services.TCP, "10.1.0.2:8080"))
	bpftest.Sync(t, d, small)
	big := bpftest.BigTable(services.MaxFrontends+1, services.NodePort)
	if err := d.Sync(context.Background(), big); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Sync of %d frontends = %v, want ErrTooLarge", len(big), err)
	}
	if err := d.readState(); err != nil {
		t.Fatal(err)
	}
	if len(d.state) != 1 {
		t.Errorf("after the refused Sync the maps hold %d frontends, want 1", len(d.state))
	}
	if a := ask(t, l.client, "10.0.0.1:30080"); a.backend != "10.1.0.2:8080" {
		t.Errorf("after the refused Sync: answer %+v", a)
	}
}

// TestNewMapsReplacePrograms: a node whose maps are gone from the pins
// (a New that failed part way, say) gets its maps anew, and programs that
// read them: the pinned links' programs, which read the old maps, are
// replaced though their tags are this version's.
func TestNewMapsReplacePrograms(t *testing.T) {
	l := enterLab(t)
	if l == nil {
		return
	}
	tcpServer(t, l.pod, "10.1.0.2:8080")
	cfg := l.config()
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	bpftest.Sync(t, d, bpftest.Table(nodePort("10.0.0.1:30080", services.TCP, "10.1.0.2:8080")))
	before := attached(t, l.node, "lan0")
	for name, m := range d.maps {
		if err := m.Unpin(); err != nil {
			t.Fatalf("unpin %s: %v", name, err)
		}
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	d2, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d2.Remove(context.Background()); err != nil {
			t.Errorf("remove: %v", err)
		}
	})
	after := attached(t, l.node, "lan0")
	if len(after["ingress"]) != 1 || len(after["egress"]) != 1 || equalIDs(after, before) {
		t.Errorf("attached %v after the maps were made anew, want one new program per direction (before %v)", after, before)
	}
	bpftest.Sync(t, d2, bpftest.Table(nodePort("10.0.0.1:30080", services.TCP, "10.1.0.2:8080")))
	ask(t, l.client, "10.0.0.1:30080")
}
