package netd

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/outpost-mesh/outpost/netd/ipam"
)

// nodeState describes what Setup owns in the node namespace, for
// comparing two runs.
func nodeState(t *testing.T, tn *testNet) string {
	t.Helper()
	var b strings.Builder
	withNL(t, tn.nodeNS, func(h *netlink.Handle) {
		br, err := h.LinkByName(tn.cfg.Bridge)
		if err != nil {
			t.Fatal(err)
		}
		a := br.Attrs()
		fmt.Fprintf(&b, "bridge %s mtu=%d mac=%s up=%v\n", br.Type(), a.MTU, a.HardwareAddr, a.Flags&net.FlagUp != 0)
		addrs, err := h.AddrList(br, netlink.FAMILY_V4)
		if err != nil {
			t.Fatal(err)
		}
		for _, ad := range addrs {
			fmt.Fprintf(&b, "addr %s\n", ad.IPNet)
		}
		routes, err := h.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
		if err != nil {
			t.Fatal(err)
		}
		var lines []string
		for _, r := range routes {
			lines = append(lines, fmt.Sprintf("route %v type=%d dev=%d", r.Dst, r.Type, r.LinkIndex))
		}
		slices.Sort(lines)
		b.WriteString(strings.Join(lines, "\n") + "\n")
	})
	for _, sysctl := range []string{"net/ipv4/ip_forward", "net/ipv4/conf/" + tn.cfg.Bridge + "/route_localnet"} {
		var v []byte
		if err := in(t, tn.nodeNS, func() (err error) { v, err = os.ReadFile("/proc/sys/" + sysctl); return err }); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s=%s", sysctl, v)
	}
	for _, c := range []string{chainPrerouting, chainOutput, chainPostrouting, chainInput, chainHostPorts} {
		for _, r := range rules(t, tn, c) {
			fmt.Fprintf(&b, "%s:", c)
			for _, e := range r.Exprs {
				fmt.Fprintf(&b, " %T%+v", e, e)
			}
			fmt.Fprintf(&b, " %q\n", r.UserData)
		}
	}
	return b.String()
}

func rules(t *testing.T, tn *testNet, chain string) []*nftables.Rule {
	t.Helper()
	ns, err := netns.GetFromPath(tn.nodeNS)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	c, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := c.GetRules(tn.table(), &nftables.Chain{Name: chain, Table: tn.table()})
	if err != nil {
		t.Fatalf("list rules of %s: %v", chain, err)
	}
	return rs
}

func TestSetupIdempotentAndRepairs(t *testing.T) {
	tn := newTestNet(t)
	want := nodeState(t, tn)
	for _, line := range []string{
		"bridge bridge mtu=1500", "up=true", "addr 10.42.3.1/24",
		"route 10.42.0.0/16 type=7", "route 10.43.0.0/16 type=7", "route 10.42.3.0/24 type=1",
		"ip_forward=1", "route_localnet=1", "*expr.Masq",
	} {
		if !strings.Contains(want, line) {
			t.Errorf("after Setup, the node lacks %q:\n%s", line, want)
		}
	}
	if err := tn.Setup(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := nodeState(t, tn); got != want {
		t.Errorf("a second Setup changed the node:\n%s\nwant\n%s", got, want)
	}

	// Break what Setup made, as an operator or a crash might.
	withNL(t, tn.nodeNS, func(h *netlink.Handle) {
		br, _ := h.LinkByName(tn.cfg.Bridge)
		h.LinkSetDown(br)
		h.LinkSetMTU(br, 1400)
		for _, a := range must(h.AddrList(br, netlink.FAMILY_V4)) {
			h.AddrDel(br, &a)
		}
		h.AddrAdd(br, &netlink.Addr{IPNet: ipNet(netip.MustParseAddr("10.42.7.1"), 24)})
		if err := h.RouteDel(unreachableRoute(tn.cfg.ClusterCIDR)); err != nil {
			t.Fatal(err)
		}
	})
	ns, _ := netns.GetFromPath(tn.nodeNS)
	c, _ := nftables.New(nftables.WithNetNSFd(int(ns)))
	c.FlushChain(&nftables.Chain{Name: chainPostrouting, Table: tn.table()})
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	ns.Close()
	if got := nodeState(t, tn); got == want {
		t.Fatal("breaking the node changed nothing the test sees")
	}
	if err := tn.Setup(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := nodeState(t, tn); got != want {
		t.Errorf("Setup did not repair the node:\n%s\nwant\n%s", got, want)
	}

	if err := tn.Teardown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if linkExists(t, tn.nodeNS, tn.cfg.Bridge) {
		t.Error("bridge left after Teardown")
	}
	if n := unreachableRoutes(t, tn.nodeNS); n != 0 {
		t.Errorf("%d unreachable routes left after Teardown", n)
	}
	if tableExists(t, tn) {
		t.Error("nftables table left after Teardown")
	}
	if err := tn.Teardown(t.Context()); err != nil {
		t.Errorf("second Teardown: %v", err)
	}
}

// TestRouteServicesToBridge: the service CIDR goes into the bridge once
// asked, a later Setup keeps it so, and Teardown leaves no route.
func TestRouteServicesToBridge(t *testing.T) {
	tn := newTestNet(t)
	if err := tn.RouteServicesToBridge(); err != nil {
		t.Fatal(err)
	}
	want := nodeState(t, tn)
	if !strings.Contains(want, "route 10.43.0.0/16 type=1") || strings.Contains(want, "route 10.43.0.0/16 type=7") {
		t.Fatalf("the service CIDR is not routed into the bridge:\n%s", want)
	}
	if err := tn.Setup(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := nodeState(t, tn); got != want {
		t.Errorf("Setup changed the service CIDR's route back:\n%s\nwant\n%s", got, want)
	}
	if err := tn.Teardown(t.Context()); err != nil {
		t.Fatal(err)
	}
	withNL(t, tn.nodeNS, func(h *netlink.Handle) {
		routes, err := h.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Dst: ipNet(tn.cfg.ServiceCIDR.Addr(), tn.cfg.ServiceCIDR.Bits())}, netlink.RT_FILTER_DST)
		if err != nil || len(routes) != 0 {
			t.Errorf("service CIDR routes after Teardown: %v, %v", routes, err)
		}
	})
}

func unreachableRoutes(t *testing.T, nodeNS string) int {
	t.Helper()
	var n int
	withNL(t, nodeNS, func(h *netlink.Handle) {
		routes, err := h.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: unix.RT_TABLE_MAIN, Type: unix.RTN_UNREACHABLE}, netlink.RT_FILTER_TABLE|netlink.RT_FILTER_TYPE)
		if err != nil {
			t.Fatal(err)
		}
		n = len(routes)
	})
	return n
}

func tableExists(t *testing.T, tn *testNet) bool {
	t.Helper()
	ns, err := netns.GetFromPath(tn.nodeNS)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	c, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		t.Fatal(err)
	}
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyIPv4)
	if err != nil {
		t.Fatal(err)
	}
	return slices.ContainsFunc(tables, func(x *nftables.Table) bool { return x.Name == tn.table().Name })
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestSetupRefusesForeignLink(t *testing.T) {
	needRoot(t)
	nodeNS := newTestNS(t)
	withNL(t, nodeNS, func(h *netlink.Handle) {
		attrs := netlink.NewLinkAttrs()
		attrs.Name = "outpost0"
		if err := h.LinkAdd(&netlink.Veth{LinkAttrs: attrs, PeerName: "peer0"}); err != nil {
			t.Fatal(err)
		}
	})
	n, err := New(testConfig(t, nodeNS, newMemLeases()))
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Setup(t.Context()); err == nil || !strings.Contains(err.Error(), "not a bridge") {
		t.Errorf("Setup over a dummy link named like the bridge = %v, want a not-a-bridge error", err)
	}
}

func TestPodsReachEachOther(t *testing.T) {
	tn := newTestNet(t)
	a := tn.addPod(t, "pod-a")
	b := tn.addPod(t, "pod-b")
	if a.IP == b.IP {
		t.Fatalf("pods share the IP %v", a.IP)
	}
	for _, att := range []Attachment{a, b} {
		if !tn.cfg.PodCIDR.Contains(att.IP) || att.Gateway != netip.MustParseAddr("10.42.3.1") || att.PrefixLen != 24 {
			t.Errorf("attachment %+v: want an IP in %s, gateway 10.42.3.1, /24", att, tn.cfg.PodCIDR)
		}
	}
	if a.NetNSPath != filepath.Join(tn.cfg.NetNSDir, "pod-a") {
		t.Errorf("pod-a netns at %s", a.NetNSPath)
	}
	serve(t, a.NetNSPath, "tcp", ":8080", "a")
	target := netip.AddrPortFrom(a.IP, 8080).String()
	mustReach(t, tn.nodeNS, "tcp", target, "a")
	if peer := mustReach(t, b.NetNSPath, "tcp", target, "a"); peer.Addr() != b.IP {
		t.Errorf("pod-a saw pod-b at %v, want %v: pod-to-pod traffic must not be masqueraded", peer, b.IP)
	}

	// AddPod again, as after an agent restart: same namespace and address,
	// and the pod keeps working.
	again := tn.addPod(t, "pod-a")
	if again != a {
		t.Errorf("AddPod again = %+v, want %+v", again, a)
	}
	mustReach(t, b.NetNSPath, "tcp", target, "a")
}

func TestRestartKeepsLeaseAndRepairs(t *testing.T) {
	tn := newTestNet(t)
	tn.addPod(t, "pod-x")
	first := tn.addPod(t, "pod-a")
	if ip, ok := tn.leases.get("pod-a"); !ok || ip != first.IP {
		t.Fatalf("stored lease of pod-a = %v, %v, want %v", ip, ok, first.IP)
	}

	// A new Network on the same store, as after an agent restart, with the
	// pod's veth gone and its namespace file left unmounted, as after a
	// reboot.
	tn.Network = tn.restart(t)
	withNL(t, tn.nodeNS, func(h *netlink.Handle) {
		if err := h.LinkDel(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: tn.vethName("pod-a")}}); err != nil {
			t.Fatal(err)
		}
	})
	if err := unix.Unmount(first.NetNSPath, unix.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
	if err := tn.Setup(t.Context()); err != nil {
		t.Fatal(err)
	}
	got := tn.addPod(t, "pod-a")
	if got != first {
		t.Fatalf("AddPod after restart = %+v, want %+v", got, first)
	}
	if ok, err := isNetNS(got.NetNSPath); !ok || err != nil {
		t.Fatalf("pod netns not mounted again: %v, %v", ok, err)
	}
	serve(t, got.NetNSPath, "tcp", ":80", "a")
	mustReach(t, tn.nodeNS, "tcp", netip.AddrPortFrom(got.IP, 80).String(), "a")
	if b := tn.addPod(t, "pod-b"); b.IP == first.IP {
		t.Errorf("a new pod got pod-a's kept address %v", b.IP)
	}
}

func TestLeasesOutsideNewCIDRDropped(t *testing.T) {
	tn := newTestNet(t)
	tn.addPod(t, "pod-a")
	if err := tn.RemovePod(t.Context(), "pod-a"); err != nil {
		t.Fatal(err)
	}
	tn.leases.SaveLease(t.Context(), ipam.Lease{UID: "old", IP: netip.MustParseAddr("10.42.9.9")})
	n := tn.restart(t)
	if _, err := n.Leases(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, ok := tn.leases.get("old"); ok {
		t.Error("a lease outside the pod CIDR stayed in the store")
	}
}

func TestRemovePod(t *testing.T) {
	tn := newTestNet(t)
	a := tn.addPod(t, "pod-a", HostPort{HostPort: 8080, ContainerPort: 80})
	veth := tn.vethName("pod-a")
	if !linkExists(t, tn.nodeNS, veth) || !fileExists(t, a.NetNSPath) || len(rules(t, tn, chainHostPorts)) != 1 {
		t.Fatal("AddPod made no veth, netns file or hostPort rule")
	}
	for range 2 {
		if err := tn.RemovePod(t.Context(), "pod-a"); err != nil {
			t.Fatal(err)
		}
		if linkExists(t, tn.nodeNS, veth) {
			t.Error("veth left after RemovePod")
		}
		if fileExists(t, a.NetNSPath) {
			t.Error("netns file left after RemovePod")
		}
		if _, ok := tn.leases.get("pod-a"); ok {
			t.Error("lease left after RemovePod")
		}
		if r := rules(t, tn, chainHostPorts); len(r) != 0 {
			t.Errorf("%d hostPort rules left after RemovePod", len(r))
		}
	}
	if err := tn.RemovePod(t.Context(), "../etc"); err == nil {
		t.Error("RemovePod accepted a UID that is a path")
	}
}

func TestSweep(t *testing.T) {
	tn := newTestNet(t)
	keep := tn.addPod(t, "keep", HostPort{HostPort: 8080, ContainerPort: 80})
	tn.addPod(t, "gone-1", HostPort{Protocol: UDP, HostPort: 5353, ContainerPort: 53})
	tn.addPod(t, "gone-2")
	tn.leases.SaveLease(t.Context(), ipam.Lease{UID: "lease-only", IP: netip.MustParseAddr("10.42.3.200")})
	if err := os.WriteFile(filepath.Join(tn.cfg.NetNSDir, "empty-file"), nil, 0o444); err != nil {
		t.Fatal(err)
	}
	// As after a crash: a new Network knows only what is on the node.
	tn.Network = tn.restart(t)
	var asked []string
	if err := tn.Sweep(t.Context(), func(uid string) bool { asked = append(asked, uid); return uid == "keep" }); err != nil {
		t.Fatal(err)
	}
	if want := []string{"empty-file", "gone-1", "gone-2", "keep", "lease-only"}; !slices.Equal(asked, want) {
		t.Errorf("Sweep asked about %v, want %v", asked, want)
	}
	entries, _ := os.ReadDir(tn.cfg.NetNSDir)
	if len(entries) != 1 || entries[0].Name() != "keep" {
		t.Errorf("netns directory after Sweep: %v, want only keep", entries)
	}
	for _, uid := range []string{"gone-1", "gone-2"} {
		if linkExists(t, tn.nodeNS, tn.vethName(uid)) {
			t.Errorf("veth of %s left after Sweep", uid)
		}
	}
	leases, _ := tn.leases.LoadLeases(t.Context())
	if len(leases) != 1 || leases[0] != (ipam.Lease{UID: "keep", IP: keep.IP}) {
		t.Errorf("leases after Sweep: %v, want only keep's", leases)
	}
	if r := rules(t, tn, chainHostPorts); len(r) != 1 || !strings.HasPrefix(string(r[0].UserData[2:]), "keep ") {
		t.Errorf("hostPort rules after Sweep: %d, want keep's one", len(r))
	}
	serve(t, keep.NetNSPath, "tcp", ":80", "keep")
	mustReach(t, tn.nodeNS, "tcp", "10.42.3.1:8080", "keep")
}

func TestUnreachableFailsFast(t *testing.T) {
	tn := newTestNet(t)
	pod := tn.addPod(t, "pod-a")
	for _, from := range []string{tn.nodeNS, pod.NetNSPath} {
		for _, addr := range []string{"10.42.9.9:80", "10.43.0.10:53"} {
			start := time.Now()
			_, _, err := dial(t, from, "tcp", addr)
			elapsed := time.Since(start)
			t.Logf("dial %s from %s: %v in %v", addr, filepath.Base(from), err, elapsed)
			if !errors.Is(err, syscall.EHOSTUNREACH) && !errors.Is(err, syscall.ENETUNREACH) {
				t.Errorf("dial %s from %s = %v, want no route to host", addr, filepath.Base(from), err)
			}
			if elapsed > time.Second {
				t.Errorf("dial %s from %s took %v, want a fast failure", addr, filepath.Base(from), elapsed)
			}
		}
	}
}

// addUplink gives the node an uplink to a client namespace: the node at
// 198.51.100.1/24, the client at 198.51.100.2/24, with no route beyond.
func addUplink(t *testing.T, tn *testNet) (client string) {
	t.Helper()
	client = newTestNS(t)
	cns, err := netns.GetFromPath(client)
	if err != nil {
		t.Fatal(err)
	}
	defer cns.Close()
	withNL(t, tn.nodeNS, func(h *netlink.Handle) {
		attrs := netlink.NewLinkAttrs()
		attrs.Name = "uplink0"
		if err := h.LinkAdd(&netlink.Veth{LinkAttrs: attrs, PeerName: "eth0", PeerNamespace: netlink.NsFd(cns)}); err != nil {
			t.Fatal(err)
		}
		up, _ := h.LinkByName("uplink0")
		h.AddrAdd(up, &netlink.Addr{IPNet: ipNet(netip.MustParseAddr("198.51.100.1"), 24)})
		if err := h.LinkSetUp(up); err != nil {
			t.Fatal(err)
		}
	})
	withNL(t, client, func(h *netlink.Handle) {
		eth, _ := h.LinkByName("eth0")
		h.AddrAdd(eth, &netlink.Addr{IPNet: ipNet(netip.MustParseAddr("198.51.100.2"), 24)})
		if err := h.LinkSetUp(eth); err != nil {
			t.Fatal(err)
		}
	})
	return client
}

func TestHostPorts(t *testing.T) {
	tn := newTestNet(t)
	client := addUplink(t, tn)
	a := tn.addPod(t, "pod-a",
		HostPort{Protocol: TCP, HostPort: 8080, ContainerPort: 80},
		HostPort{Protocol: UDP, HostPort: 5353, ContainerPort: 53},
		HostPort{Protocol: TCP, HostIP: netip.MustParseAddr("198.51.100.1"), HostPort: 9090, ContainerPort: 90},
	)
	b := tn.addPod(t, "pod-b")
	serve(t, a.NetNSPath, "tcp", ":80", "a")
	serve(t, a.NetNSPath, "udp", ":53", "a-udp")
	serve(t, a.NetNSPath, "tcp", ":90", "a-90")

	for _, tc := range []struct {
		from, network, addr, want string
		wantPeer                  netip.Addr // the client address the pod sees, if it matters
	}{
		{from: client, network: "tcp", addr: "198.51.100.1:8080", want: "a", wantPeer: netip.MustParseAddr("198.51.100.2")},
		{from: client, network: "udp", addr: "198.51.100.1:5353", want: "a-udp"},
		{from: client, network: "tcp", addr: "198.51.100.1:9090", want: "a-90"},
		{from: tn.nodeNS, network: "tcp", addr: "198.51.100.1:8080", want: "a"},
		{from: tn.nodeNS, network: "tcp", addr: "10.42.3.1:8080", want: "a"},
		{from: tn.nodeNS, network: "tcp", addr: "127.0.0.1:8080", want: "a"},
		{from: tn.nodeNS, network: "udp", addr: "127.0.0.1:5353", want: "a-udp"},
		{from: b.NetNSPath, network: "tcp", addr: "10.42.3.1:8080", want: "a"},
		{from: b.NetNSPath, network: "tcp", addr: "198.51.100.1:8080", want: "a"},
		{from: a.NetNSPath, network: "tcp", addr: "10.42.3.1:8080", want: "a"}, // hairpin
	} {
		peer := mustReach(t, tc.from, tc.network, tc.addr, tc.want)
		if tc.wantPeer.IsValid() && peer.Addr() != tc.wantPeer {
			t.Errorf("%s %s from %s: the pod saw the client at %v, want %v", tc.network, tc.addr, tc.from, peer, tc.wantPeer)
		}
	}
	// The port bound to one address is not on the others.
	if _, _, err := dial(t, tn.nodeNS, "tcp", "10.42.3.1:9090"); err == nil {
		t.Error("hostPort 9090 on 198.51.100.1 answered on 10.42.3.1")
	}

	// Another pod cannot take a held port; the failed call leaves nothing.
	_, err := tn.AddPod(t.Context(), PodSpec{UID: "pod-c", HostPorts: []HostPort{{HostIP: netip.MustParseAddr("10.42.3.1"), HostPort: 8080, ContainerPort: 8080}}})
	if !errors.Is(err, ErrHostPortConflict) {
		t.Fatalf("AddPod with a held hostPort = %v, want ErrHostPortConflict", err)
	}
	if fileExists(t, filepath.Join(tn.cfg.NetNSDir, "pod-c")) || linkExists(t, tn.nodeNS, tn.vethName("pod-c")) {
		t.Error("the refused pod left a netns or a veth")
	}
	if _, ok := tn.leases.get("pod-c"); ok {
		t.Error("the refused pod left a lease")
	}
	// The same UDP port number is free for TCP; AddPod again replaces a
	// pod's ports.
	tn.addPod(t, "pod-b", HostPort{Protocol: TCP, HostPort: 5353, ContainerPort: 80})
	serve(t, b.NetNSPath, "tcp", ":80", "b")
	mustReach(t, client, "tcp", "198.51.100.1:5353", "b")
	tn.addPod(t, "pod-b")
	if _, _, err := dial(t, client, "tcp", "198.51.100.1:5353"); err == nil {
		t.Error("pod-b's hostPort still answers after AddPod without it")
	}
}

func TestMasquerade(t *testing.T) {
	tn := newTestNet(t)
	client := addUplink(t, tn)
	pod := tn.addPod(t, "pod-a")
	other := tn.addPod(t, "pod-b")
	var masq bool
	for _, r := range rules(t, tn, chainPostrouting) {
		masq = masq || slices.ContainsFunc(r.Exprs, func(e expr.Any) bool { _, ok := e.(*expr.Masq); return ok })
	}
	if !masq {
		t.Fatal("no masquerade rule in postrouting")
	}
	// The client has no route to the pod CIDR: only a masqueraded
	// connection gets an answer back.
	serve(t, client, "tcp", "198.51.100.2:9000", "client")
	if peer := mustReach(t, pod.NetNSPath, "tcp", "198.51.100.2:9000", "client"); peer.Addr() != netip.MustParseAddr("198.51.100.1") {
		t.Errorf("the client saw the pod at %v, want the node's 198.51.100.1", peer)
	}
	// Inside the cluster CIDR nothing is masqueraded.
	serve(t, other.NetNSPath, "tcp", ":7000", "b")
	if peer := mustReach(t, pod.NetNSPath, "tcp", netip.AddrPortFrom(other.IP, 7000).String(), "b"); peer.Addr() != pod.IP {
		t.Errorf("pod-b saw pod-a at %v, want %v", peer, pod.IP)
	}
}

func TestAddPodFailureUndoes(t *testing.T) {
	tn := newTestNet(t)
	tn.failBeforeHostPorts = errors.New("injected")
	_, err := tn.AddPod(t.Context(), PodSpec{UID: "pod-a", HostPorts: []HostPort{{HostPort: 8080, ContainerPort: 80}}})
	if err == nil || !strings.Contains(err.Error(), "injected") {
		t.Fatalf("AddPod = %v, want the injected error", err)
	}
	if fileExists(t, filepath.Join(tn.cfg.NetNSDir, "pod-a")) || linkExists(t, tn.nodeNS, tn.vethName("pod-a")) {
		t.Error("failed AddPod left a netns or a veth")
	}
	if _, ok := tn.leases.get("pod-a"); ok {
		t.Error("failed AddPod left a lease")
	}
	if l, _ := tn.Leases(t.Context()); len(l) != 0 {
		t.Errorf("failed AddPod left a lease in the pool: %v", l)
	}

	// A failure on a pod that already had its network keeps what was
	// there before the call.
	tn.failBeforeHostPorts = nil
	a := tn.addPod(t, "pod-a")
	tn.failBeforeHostPorts = errors.New("injected")
	if _, err := tn.AddPod(t.Context(), PodSpec{UID: "pod-a"}); err == nil {
		t.Fatal("AddPod with an injected failure succeeded")
	}
	if !fileExists(t, a.NetNSPath) || !linkExists(t, tn.nodeNS, tn.vethName("pod-a")) {
		t.Error("a failed repair removed the pod's existing network")
	}
	if ip, ok := tn.leases.get("pod-a"); !ok || ip != a.IP {
		t.Error("a failed repair dropped the pod's lease")
	}

	tn.failBeforeHostPorts = nil
	tn.leases.saveErr = errors.New("disk full")
	if _, err := tn.AddPod(t.Context(), PodSpec{UID: "pod-b"}); err == nil {
		t.Fatal("AddPod with a failing lease store succeeded")
	}
	if fileExists(t, filepath.Join(tn.cfg.NetNSDir, "pod-b")) {
		t.Error("AddPod whose lease failed made a netns")
	}
}

func TestExhaustion(t *testing.T) {
	needRoot(t)
	nodeNS := newTestNS(t)
	leases := newMemLeases()
	cfg := testConfig(t, nodeNS, leases)
	cfg.PodCIDR = netip.MustParsePrefix("10.42.3.0/30")
	tn := &testNet{cfg: cfg, nodeNS: nodeNS, leases: leases}
	tn.Network = tn.restart(t)
	if err := tn.Setup(t.Context()); err != nil {
		t.Fatal(err)
	}
	tn.addPod(t, "pod-a")
	if _, err := tn.AddPod(t.Context(), PodSpec{UID: "pod-b"}); !errors.Is(err, ipam.ErrExhausted) {
		t.Errorf("AddPod on a full /30 = %v, want ErrExhausted", err)
	}
}

func TestTwoNetworksOnOneNode(t *testing.T) {
	tn := newTestNet(t)
	cfg := tn.cfg
	cfg.Bridge = "outpost1"
	cfg.PodCIDR = netip.MustParsePrefix("10.42.4.0/24")
	cfg.NetNSDir = filepath.Join(t.TempDir(), "netns")
	cfg.Leases = newMemLeases()
	second := &testNet{cfg: cfg, nodeNS: tn.nodeNS, leases: cfg.Leases.(*memLeases)}
	second.Network = second.restart(t)
	if err := second.Setup(t.Context()); err != nil {
		t.Fatal(err)
	}
	a := tn.addPod(t, "pod-a", HostPort{HostPort: 8080, ContainerPort: 80})
	b := second.addPod(t, "pod-b")
	serve(t, a.NetNSPath, "tcp", ":80", "a")
	mustReach(t, b.NetNSPath, "tcp", netip.AddrPortFrom(a.IP, 80).String(), "a")
	// Each sweeps only its own pods.
	if err := second.Sweep(t.Context(), func(string) bool { return false }); err != nil {
		t.Fatal(err)
	}
	mustReach(t, tn.nodeNS, "tcp", "10.42.3.1:8080", "a")
	if linkExists(t, tn.nodeNS, second.vethName("pod-b")) {
		t.Error("the second network's sweep left its own pod")
	}
	if err := second.Teardown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := unreachableRoutes(t, tn.nodeNS); n != 2 {
		t.Errorf("after one of two networks' Teardown, %d unreachable routes, want the 2 the other needs", n)
	}
	if !tableExists(t, tn) || tableExists(t, second) {
		t.Error("Teardown of one network touched the other's table, or left its own")
	}
	mustReach(t, tn.nodeNS, "tcp", "10.42.3.1:8080", "a")
}

func TestUDPHostPortFollowsNewPod(t *testing.T) {
	tn := newTestNet(t)
	client := addUplink(t, tn)
	hp := HostPort{Protocol: UDP, HostPort: 5353, ContainerPort: 53}
	// ask sends from one client port each time, so that the node's
	// conntrack sees one flow.
	ask := func() (string, error) {
		var reply string
		err := in(t, client, func() error {
			c, err := net.DialUDP("udp4", &net.UDPAddr{Port: 40000}, net.UDPAddrFromAddrPort(netip.MustParseAddrPort("198.51.100.1:5353")))
			if err != nil {
				return err
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(time.Second))
			if _, err := c.Write([]byte("ping")); err != nil {
				return err
			}
			buf := make([]byte, 64)
			n, err := c.Read(buf)
			reply, _, _ = strings.Cut(string(buf[:n]), " ")
			return err
		})
		return reply, err
	}
	a := tn.addPod(t, "pod-a", hp)
	serve(t, a.NetNSPath, "udp", ":53", "a")
	if got, err := ask(); err != nil || got != "a" {
		t.Fatalf("ask = %q, %v, want a", got, err)
	}
	if err := tn.RemovePod(t.Context(), "pod-a"); err != nil {
		t.Fatal(err)
	}
	c := tn.addPod(t, "pod-c", hp)
	if c.IP == a.IP {
		t.Fatalf("pod-c got pod-a's address %v; the test needs another", c.IP)
	}
	serve(t, c.NetNSPath, "udp", ":53", "c")
	if got, err := ask(); err != nil || got != "c" {
		t.Fatalf("ask after the port moved = %q, %v, want c: a stale conntrack entry still leads to the old pod", got, err)
	}
}
