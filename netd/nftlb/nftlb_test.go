package nftlb

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"

	"github.com/outpost-mesh/outpost/netd/services"
)

const clusterIP = "10.43.0.10"

// serveAll runs a TCP and a UDP server on port 8080 of every pod, named
// pod0, pod1, ...
func (n *testNet) serveAll(t *testing.T) {
	for i, p := range n.pods {
		serve(t, p, "tcp", ":8080", fmt.Sprintf("pod%d", i))
		serve(t, p, "udp", ":8053", fmt.Sprintf("pod%d", i))
	}
}

func clusterIPFrontend(addr string, proto services.Proto, port uint16, bs []services.Backend) *services.Frontend {
	return &services.Frontend{Key: key(addr, proto), Kind: services.ClusterIP, Service: "default/web", Backends: bs}
}

// TestClusterIP: TCP to a cluster IP from a host process and from a pod
// reaches a backend pod; all backends are picked over many connections;
// UDP works through it; a frontend with no backend refuses at once.
func TestClusterIP(t *testing.T) {
	n := newTestNet(t, 3)
	n.serveAll(t)
	d := n.newDataplane(t, All)
	mustSync(t, d, table(
		clusterIPFrontend(clusterIP+":80", services.TCP, 80, backends(8080, true, n.podIP...)),
		clusterIPFrontend(clusterIP+":53", services.UDP, 53, backends(8053, true, n.podIP...)),
		clusterIPFrontend("10.43.0.11:80", services.TCP, 80, nil),
		clusterIPFrontend("10.43.0.11:53", services.UDP, 53, nil),
	))

	for _, from := range []struct{ name, ns string }{{"host", n.node}, {"pod", n.pods[0]}} {
		t.Run(from.name, func(t *testing.T) {
			seen := map[string]int{}
			for range 60 {
				name, _ := mustDial(t, from.ns, "tcp", clusterIP+":80")
				seen[name]++
			}
			if len(seen) != 3 {
				t.Errorf("60 connections reached %v, want all of pod0, pod1, pod2", seen)
			}
			name, _ := mustDial(t, from.ns, "udp", clusterIP+":53")
			if name == "" {
				t.Errorf("UDP reply from no one")
			}
			start := time.Now()
			_, _, err := dial(t, from.ns, "tcp", "10.43.0.11:80")
			if !isRefused(err) {
				t.Errorf("dial a frontend with no backends: %v, want connection refused", err)
			}
			if d := time.Since(start); d > time.Second {
				t.Errorf("refused after %v", d)
			}
			// A datagram rejected in the output hook fails its send
			// with EPERM; from a pod, the ICMP error refuses it.
			start = time.Now()
			if _, _, err := dial(t, from.ns, "udp", "10.43.0.11:53"); !isRefused(err) && !errors.Is(err, unix.EPERM) {
				t.Errorf("UDP to a frontend with no backends: %v, want refused", err)
			}
			if d := time.Since(start); d > time.Second {
				t.Errorf("UDP refused after %v", d)
			}
		})
	}
}

const (
	nodePort   = "192.168.50.1:30080"
	externalIP = "203.0.113.10:80"
)

func nodePortFrontend(addr string, kind services.Kind, bs, ext []services.Backend, local bool) *services.Frontend {
	return &services.Frontend{Key: key(addr, services.TCP), Kind: kind, Service: "default/web", PortName: "http",
		Backends: bs, ExternalBackends: ext, ExternalLocal: local}
}

// TestNodePortFromLAN: a NodePort and an external IP reached from a LAN
// client, in both modes. With the Cluster policy the client is
// masqueraded to the node; with Local it is seen as itself.
func TestNodePortFromLAN(t *testing.T) {
	for _, mode := range []Mode{All, External} {
		t.Run(mode.String(), func(t *testing.T) {
			n := newTestNet(t, 2)
			n.serveAll(t)
			d := n.newDataplane(t, mode)
			all := backends(8080, true, n.podIP...)
			mustSync(t, d, table(
				nodePortFrontend(nodePort, services.NodePort, all, all, false),
				nodePortFrontend(externalIP, services.ExternalIP, all, all, false),
				nodePortFrontend("192.168.50.1:30081", services.NodePort, all, all[1:], true),
				nodePortFrontend("192.168.50.1:30082", services.NodePort, nil, nil, false),
			))
			for _, addr := range []string{nodePort, externalIP} {
				seen := map[string]bool{}
				for range 30 {
					name, peer := mustDial(t, n.lan, "tcp", addr)
					seen[name] = true
					if peer.Addr() != bridgeIP.Addr() {
						t.Fatalf("%s: backend saw the client at %v, want it masqueraded to %v", addr, peer, bridgeIP.Addr())
					}
				}
				if len(seen) != 2 {
					t.Errorf("%s: 30 connections reached %v, want both pods", addr, seen)
				}
			}
			for range 10 {
				name, peer := mustDial(t, n.lan, "tcp", "192.168.50.1:30081")
				if name != "pod1" || peer.Addr() != clientLAN.Addr() {
					t.Fatalf("Local policy: reached %s, seen from %v; want pod1 seeing the client %v", name, peer, clientLAN.Addr())
				}
			}
			if _, _, err := dial(t, n.lan, "tcp", "192.168.50.1:30082"); !isRefused(err) {
				t.Errorf("NodePort with no backends: %v, want connection refused", err)
			}
			// From the node itself and from a pod: routed in mode All
			// (to Backends, so both pods), left alone in External (the
			// socket hooks' job), where nothing listens on the port.
			for _, from := range []string{n.node, n.pods[0]} {
				seen := map[string]bool{}
				for range 30 {
					name, _, err := dial(t, from, "tcp", "192.168.50.1:30081")
					if mode == External {
						if !isRefused(err) {
							t.Fatalf("External mode, NodePort from inside the node: %v, want refused by the node", err)
						}
						continue
					}
					if err != nil {
						t.Fatal(err)
					}
					seen[name] = true
				}
				if mode == All && len(seen) != 2 {
					t.Errorf("Local policy from inside: reached %v, want both pods (Backends)", seen)
				}
				if mode == All {
					mustDial(t, from, "tcp", externalIP)
				}
			}
		})
	}
}

// TestAffinity: with ClientIP affinity, a client keeps its backend.
func TestAffinity(t *testing.T) {
	n := newTestNet(t, 3)
	n.serveAll(t)
	d := n.newDataplane(t, All)
	f := clusterIPFrontend(clusterIP+":80", services.TCP, 80, backends(8080, true, n.podIP...))
	f.Affinity = time.Hour
	mustSync(t, d, table(f))
	for _, from := range []string{n.node, n.pods[0], n.pods[2]} {
		first, _ := mustDial(t, from, "tcp", clusterIP+":80")
		for range 20 {
			if name, _ := mustDial(t, from, "tcp", clusterIP+":80"); name != first {
				t.Fatalf("affinity: reached %s after %s", name, first)
			}
		}
	}
}

// TestBackendRemoved: once a backend is removed, new connections avoid
// it, and one already open to it keeps working.
func TestBackendRemoved(t *testing.T) {
	n := newTestNet(t, 3)
	n.serveAll(t)
	d := n.newDataplane(t, All)
	mustSync(t, d, table(clusterIPFrontend(clusterIP+":80", services.TCP, 80, backends(8080, true, n.podIP...))))
	c, err := connect(t, n.pods[0], clusterIP+":80")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var rest []netip.Addr
	for i, ip := range n.podIP {
		if fmt.Sprintf("pod%d", i) != c.name {
			rest = append(rest, ip)
		}
	}
	mustSync(t, d, table(clusterIPFrontend(clusterIP+":80", services.TCP, 80, backends(8080, true, rest...))))
	for range 30 {
		if name, _ := mustDial(t, n.pods[0], "tcp", clusterIP+":80"); name == c.name {
			t.Fatalf("a new connection reached the removed backend %s", name)
		}
	}
	if err := c.echo(); err != nil {
		t.Fatalf("connection to the removed backend: %v", err)
	}
}

// TestIPv6 routes an IPv6 cluster IP from the host and a pod.
func TestIPv6(t *testing.T) {
	n := newTestNet(t, 2)
	n.serveAll(t)
	d := n.newDataplane(t, All)
	all := backends(8080, true, n.podIP6...)
	mustSync(t, d, table(
		clusterIPFrontend("[fd43::10]:80", services.TCP, 80, all),
		clusterIPFrontend("[fd43::11]:80", services.TCP, 80, nil),
		clusterIPFrontend(clusterIP+":80", services.TCP, 80, backends(8080, true, n.podIP...)),
		nodePortFrontend("[fd50::1]:30080", services.NodePort, all, all, false),
		nodePortFrontend("[fd50::1]:30081", services.NodePort, all, all[:1], true),
	))
	if _, peer := mustDial(t, n.lan, "tcp", "[fd50::1]:30080"); peer.Addr() != bridgeIP6.Addr() {
		t.Errorf("IPv6 NodePort, Cluster policy: backend saw %v, want the node's %v", peer, bridgeIP6.Addr())
	}
	if name, peer := mustDial(t, n.lan, "tcp", "[fd50::1]:30081"); name != "pod0" || peer.Addr() != clientLAN6.Addr() {
		t.Errorf("IPv6 NodePort, Local policy: %s saw %v, want pod0 seeing %v", name, peer, clientLAN6.Addr())
	}

	for _, from := range []string{n.node, n.pods[0]} {
		seen := map[string]bool{}
		for range 30 {
			name, _ := mustDial(t, from, "tcp", "[fd43::10]:80")
			seen[name] = true
		}
		if len(seen) != 2 {
			t.Errorf("reached %v, want both pods", seen)
		}
		if _, _, err := dial(t, from, "tcp", "[fd43::11]:80"); !isRefused(err) {
			t.Errorf("no backends: %v, want refused", err)
		}
		mustDial(t, from, "tcp", clusterIP+":80")
	}
}

// snapshot describes the dataplane's tables in the node namespace: every
// chain with its rules' handles, every set, and the service-ips
// elements. Two equal snapshots mean nothing was rewritten in between.
func snapshot(t *testing.T, n *testNet) string {
	t.Helper()
	ns, err := os.Open(n.node)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	c, err := nftables.New(nftables.WithNetNSFd(int(ns.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, tf := range []nftables.TableFamily{nftables.TableFamilyIPv4, nftables.TableFamilyIPv6} {
		tbl := &nftables.Table{Name: DefaultConfig().Table, Family: tf}
		tables, err := c.ListTablesOfFamily(tf)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(tables, func(x *nftables.Table) bool { return x.Name == tbl.Name }) {
			continue
		}
		chains, err := c.ListChainsOfTableFamily(tf)
		if err != nil {
			t.Fatal(err)
		}
		for _, ch := range chains {
			if ch.Table.Name != tbl.Name {
				continue
			}
			rules, err := c.GetRules(tbl, ch)
			if err != nil {
				t.Fatal(err)
			}
			var hs []string
			for _, r := range rules {
				hs = append(hs, fmt.Sprint(r.Handle))
			}
			lines = append(lines, fmt.Sprintf("%d chain %s rules %s", tf, ch.Name, strings.Join(hs, ",")))
		}
		sets, err := c.GetSets(tbl)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range sets {
			if s.Anonymous {
				continue
			}
			lines = append(lines, fmt.Sprintf("%d set %s", tf, s.Name))
		}
		els, err := c.GetSetElements(&nftables.Set{Table: tbl, Name: mapServices})
		if err == nil {
			for _, e := range els {
				lines = append(lines, fmt.Sprintf("%d element %x %s", tf, e.Key, e.Comment))
			}
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

func adoptionTable(n *testNet, drop int) services.Table {
	var bs []services.Backend
	for i, b := range backends(8080, true, n.podIP...) {
		if i != drop {
			bs = append(bs, b)
		}
	}
	aff := clusterIPFrontend("10.43.0.12:80", services.TCP, 80, backends(8080, true, n.podIP...))
	aff.Affinity = time.Minute
	return table(
		clusterIPFrontend(clusterIP+":80", services.TCP, 80, bs),
		clusterIPFrontend("[fd43::10]:80", services.TCP, 80, backends(8080, true, n.podIP6...)),
		aff,
		nodePortFrontend(nodePort, services.NodePort, bs, bs[:1], true),
		nodePortFrontend("192.168.50.1:30082", services.NodePort, nil, nil, false),
	)
}

// TestAdoption: an agent restart (Close, New, Sync of the same table)
// rewrites nothing and keeps connections; the next change rewrites only
// the frontends that changed; Remove leaves nothing.
func TestAdoption(t *testing.T) {
	n := newTestNet(t, 3)
	n.serveAll(t)
	d := n.newDataplane(t, All)
	mustSync(t, d, adoptionTable(n, -1))
	c, err := connect(t, n.pods[0], clusterIP+":80")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	before := snapshot(t, n)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := d.Sync(t.Context(), adoptionTable(n, -1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Sync after Close: %v, want ErrClosed", err)
	}
	if err := c.echo(); err != nil {
		t.Fatalf("connection after Close: %v", err)
	}

	d = n.newDataplane(t, All)
	mustSync(t, d, adoptionTable(n, -1))
	if after := snapshot(t, n); after != before {
		t.Fatalf("Sync after a restart changed the tables:\n%s\nwant\n%s", after, before)
	}
	if err := c.echo(); err != nil {
		t.Fatalf("connection after the restart: %v", err)
	}

	// Drop the backend of the open connection: only the frontends that
	// use it change.
	var drop int
	fmt.Sscanf(c.name, "pod%d", &drop)
	mustSync(t, d, adoptionTable(n, drop))
	after := snapshot(t, n)
	for _, l := range strings.Split(before, "\n") {
		if strings.Contains(l, frontendID(key("[fd43::10]:80", services.TCP))) || strings.Contains(l, frontendID(key("10.43.0.12:80", services.TCP))) {
			if !strings.Contains(after, l) {
				t.Errorf("an unchanged frontend's %q was rewritten", l)
			}
		}
	}
	if after == before {
		t.Fatal("a change rewrote nothing")
	}
	for range 20 {
		if name, _ := mustDial(t, n.pods[1], "tcp", clusterIP+":80"); name == c.name {
			t.Fatalf("new connection reached the removed %s", name)
		}
	}
	if err := c.echo(); err != nil {
		t.Fatalf("connection to the removed backend: %v", err)
	}

	// A restart under another mode rebuilds the tables.
	d.Close()
	d = n.newDataplane(t, External)
	mustSync(t, d, adoptionTable(n, drop))
	if s := snapshot(t, n); strings.Contains(s, "chain "+chainOutput) || strings.Contains(s, "10.43.0.10") {
		t.Errorf("External mode kept the output chain or a cluster IP:\n%s", s)
	}

	if err := d.Remove(t.Context()); err != nil {
		t.Fatal(err)
	}
	if s := snapshot(t, n); s != "" {
		t.Fatalf("after Remove:\n%s", s)
	}
	if err := d.Remove(t.Context()); err != nil {
		t.Fatalf("second Remove: %v", err)
	}
	if _, _, err := dial(t, n.node, "tcp", clusterIP+":80"); err == nil {
		t.Fatal("the cluster IP answers after Remove")
	}
}

// TestSyncCanceled: a Sync whose context is done changes nothing.
func TestSyncCanceled(t *testing.T) {
	n := newTestNet(t, 1)
	d := n.newDataplane(t, All)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := d.Sync(ctx, table(clusterIPFrontend(clusterIP+":80", services.TCP, 80, nil))); err == nil {
		t.Fatal("Sync with a canceled context: no error")
	}
	if s := snapshot(t, n); s != "" {
		t.Fatalf("a canceled Sync made:\n%s", s)
	}
}

// TestLimits: a table beyond the limits is refused and changes nothing.
func TestLimits(t *testing.T) {
	n := newTestNet(t, 1)
	d := n.newDataplane(t, All)
	ok := table(clusterIPFrontend(clusterIP+":80", services.TCP, 80, backends(8080, true, n.podIP...)))
	mustSync(t, d, ok)
	before := snapshot(t, n)

	many := make([]netip.Addr, services.MaxBackends+1)
	for i := range many {
		many[i] = netip.AddrFrom4([4]byte{10, 42, byte(i >> 8), byte(i)})
	}
	big := maps.Clone(ok)
	big[key("10.43.0.20:80", services.TCP)] = clusterIPFrontend("10.43.0.20:80", services.TCP, 80, backends(80, false, many...))
	if err := d.Sync(t.Context(), big); err == nil {
		t.Error("Sync of a frontend with too many backends: no error")
	}
	wide := maps.Clone(ok)
	for i := range services.MaxFrontends {
		k := services.Key{Addr: netip.AddrFrom4([4]byte{10, 44, byte(i >> 8), byte(i)}), Port: 80, Proto: services.TCP}
		wide[k] = &services.Frontend{Key: k, Kind: services.ClusterIP}
	}
	if err := d.Sync(t.Context(), wide); err == nil {
		t.Error("Sync of too many frontends: no error")
	}
	if after := snapshot(t, n); after != before {
		t.Errorf("a refused Sync changed the tables:\n%s\nwant\n%s", after, before)
	}
}

// TestUDPBackendRemoved: a UDP client that keeps its socket moves off a
// removed backend at once: its conntrack entry is cleared.
func TestUDPBackendRemoved(t *testing.T) {
	n := newTestNet(t, 3)
	n.serveAll(t)
	d := n.newDataplane(t, All)
	f := clusterIPFrontend(clusterIP+":53", services.UDP, 53, backends(8053, true, n.podIP...))
	mustSync(t, d, table(f))
	var c net.Conn
	if err := in(t, n.pods[0], func() (err error) {
		c, err = net.Dial("udp", clusterIP+":53")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ask := func() string {
		t.Helper()
		c.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 128)
		n, err := c.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		name, _, _ := strings.Cut(string(buf[:n]), " ")
		return name
	}
	first := ask()
	if again := ask(); again != first {
		t.Fatalf("one UDP flow reached %s, then %s", first, again)
	}
	var rest []netip.Addr
	for i, ip := range n.podIP {
		if fmt.Sprintf("pod%d", i) != first {
			rest = append(rest, ip)
		}
	}
	mustSync(t, d, table(clusterIPFrontend(clusterIP+":53", services.UDP, 53, backends(8053, true, rest...))))
	if got := ask(); got == first {
		t.Fatalf("the UDP flow still reaches the removed backend %s", got)
	}
}
