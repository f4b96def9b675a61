package ebpflb

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/outpost-mesh/outpost/netd/internal/bpftest"
	"github.com/outpost-mesh/outpost/netd/services"
)

const (
	tcp = services.TCP
	udp = services.UDP
)

var backends4 = []string{"127.0.0.2:8080", "127.0.0.3:8080", "127.0.0.4:8080"}

// TestTCP: connects to a ClusterIP reach every backend, the peer name is
// the ClusterIP, and a Service with no backends refuses.
func TestTCP(t *testing.T) {
	if !inNetns(t) {
		return
	}
	cfg := setup(t)
	for _, b := range backends4 {
		tcpServer(t, b)
	}
	d := open(t, cfg)
	if _, err := dialName("10.96.0.10:80"); err == nil {
		t.Fatal("the ClusterIP answers before Sync")
	}
	bpftest.Sync(t, d, bpftest.Table(
		frontend("10.96.0.10:80", tcp, backends4...),
		frontend("10.96.0.11:80", tcp),
		frontend("10.96.0.12:80", udp, backends4...),
	))
	seen := map[string]int{}
	for range 100 {
		name, c, err := dial("10.96.0.10:80")
		if err != nil {
			t.Fatalf("connect to the ClusterIP: %v", err)
		}
		if got := peerName(t, c.(*net.TCPConn)); got.String() != "10.96.0.10:80" {
			t.Errorf("getpeername = %s, want the ClusterIP 10.96.0.10:80", got)
		}
		if got := c.RemoteAddr().String(); got != "10.96.0.10:80" {
			t.Errorf("RemoteAddr = %s, want the ClusterIP", got)
		}
		c.Close()
		seen[name]++
	}
	if len(seen) != len(backends4) {
		t.Errorf("backends picked %v, want all of %v", seen, backends4)
	}
	if _, err := dialName("10.96.0.11:80"); !errors.Is(err, syscall.EPERM) {
		t.Errorf("connect to a Service with no backends: %v, want EPERM", err)
	}
	// A UDP frontend on the address does not catch TCP.
	if _, err := dialName("10.96.0.12:80"); !errors.Is(err, syscall.ENETUNREACH) {
		t.Errorf("TCP connect to a UDP-only frontend: %v, want ENETUNREACH (left alone)", err)
	}
}

// TestUDP: datagrams to a ClusterIP reach the backends and their replies
// come from the ClusterIP, on unconnected and connected sockets.
func TestUDP(t *testing.T) {
	if !inNetns(t) {
		return
	}
	cfg := setup(t)
	ubs := []string{"127.0.0.2:5353", "127.0.0.3:5353"}
	for _, b := range ubs {
		udpServer(t, b)
	}
	d := open(t, cfg)
	bpftest.Sync(t, d, bpftest.Table(frontend("10.96.0.10:53", udp, ubs...), frontend("10.96.0.11:53", udp)))

	pc, err := net.ListenUDP("udp4", &net.UDPAddr{})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	seen := map[string]bool{}
	for range 40 {
		name, from, err := query(pc, netip.MustParseAddrPort("10.96.0.10:53"))
		if err != nil {
			t.Fatal(err)
		}
		if from.String() != "10.96.0.10:53" {
			t.Errorf("reply from %s, want the ClusterIP 10.96.0.10:53", from)
		}
		seen[name] = true
	}
	if len(seen) != len(ubs) {
		t.Errorf("backends answering %v, want all of %v", seen, ubs)
	}
	if _, err := pc.WriteToUDP([]byte("q"), &net.UDPAddr{IP: net.IPv4(10, 96, 0, 11), Port: 53}); !errors.Is(err, syscall.EPERM) {
		t.Errorf("sendto a Service with no backends: %v, want EPERM", err)
	}

	c, err := net.Dial("udp", "10.96.0.10:53")
	if err != nil {
		t.Fatalf("connected UDP socket: %v", err)
	}
	defer c.Close()
	if got := peerName(t, c.(*net.UDPConn)); got.String() != "10.96.0.10:53" {
		t.Errorf("getpeername = %s, want the ClusterIP", got)
	}
	if _, err := c.Write([]byte("q")); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 100)
	n, err := c.Read(buf)
	if err != nil || !slices.Contains(ubs, string(buf[:n])) {
		t.Errorf("reply on the connected socket = %q, %v", buf[:n], err)
	}
}

// TestIPv6: the IPv6 hooks, and an IPv4 Service reached through a
// v4-mapped address on an IPv6 socket.
func TestIPv6(t *testing.T) {
	if !inNetns(t) {
		return
	}
	cfg := setup(t)
	addAddrs(t, "fd00::2/128", "fd00::3/128")
	b6 := []string{"[fd00::2]:8080", "[fd00::3]:8080"}
	for _, b := range b6 {
		tcpServer(t, b)
		udpServer(t, b)
	}
	tcpServer(t, backends4[0])
	d := open(t, cfg)
	bpftest.Sync(t, d, bpftest.Table(
		frontend("[fd96::10]:80", tcp, b6...),
		frontend("[fd96::10]:53", udp, b6...),
		frontend("[fd96::11]:80", tcp),
		frontend("10.96.0.10:80", tcp, backends4[0]),
		frontend("10.96.0.10:53", udp, "127.0.0.2:5353"),
	))
	udpServer(t, "127.0.0.2:5353")
	seen := map[string]bool{}
	for range 40 {
		name, c, err := dial("[fd96::10]:80")
		if err != nil {
			t.Fatalf("connect to the IPv6 ClusterIP: %v", err)
		}
		if got := peerName(t, c.(*net.TCPConn)); got.String() != "[fd96::10]:80" {
			t.Errorf("getpeername = %s, want [fd96::10]:80", got)
		}
		c.Close()
		seen[name] = true
	}
	if len(seen) != len(b6) {
		t.Errorf("backends picked %v, want all of %v", seen, b6)
	}
	if _, err := dialName("[fd96::11]:80"); !errors.Is(err, syscall.EPERM) {
		t.Errorf("connect to a Service with no backends: %v, want EPERM", err)
	}

	pc, err := net.ListenUDP("udp6", &net.UDPAddr{})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	name, from, err := query(pc, netip.MustParseAddrPort("[fd96::10]:53"))
	if err != nil || from.String() != "[fd96::10]:53" || !slices.Contains(b6, name) {
		t.Errorf("reply %q from %s, %v; want a backend's from [fd96::10]:53", name, from, err)
	}

	// ::ffff:10.96.0.10 on an IPv6 socket, UDP then TCP.
	dual, err := net.ListenUDP("udp", nil) // AF_INET6, v4 as v4-mapped
	if err != nil {
		t.Fatal(err)
	}
	defer dual.Close()
	name, from, err = query(dual, netip.MustParseAddrPort("[::ffff:10.96.0.10]:53"))
	if err != nil || from.Addr().Unmap().String() != "10.96.0.10" || from.Port() != 53 || name != "127.0.0.2:5353" {
		t.Errorf("v4-mapped UDP reply %q from %s, %v; want 127.0.0.2:5353's from 10.96.0.10:53", name, from, err)
	}

	fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 5})
	mapped := netip.MustParseAddr("::ffff:10.96.0.10").As16()
	if err := unix.Connect(fd, &unix.SockaddrInet6{Port: 80, Addr: mapped}); err != nil {
		t.Fatalf("connect to ::ffff:10.96.0.10: %v", err)
	}
	buf := make([]byte, 100)
	n, err := unix.Read(fd, buf)
	if err != nil || string(buf[:n]) != backends4[0]+"\n" {
		t.Errorf("v4-mapped connect answered %q, %v; want %s", buf[:n], err, backends4[0])
	}
	sa, err := unix.Getpeername(fd)
	if sa6, ok := sa.(*unix.SockaddrInet6); err != nil || !ok || sa6.Addr != mapped || sa6.Port != 80 {
		t.Errorf("getpeername = %+v, %v; want [::ffff:10.96.0.10]:80", sa, err)
	}
}

// TestAffinity: with ClientIP affinity a client keeps its backend, also
// across a change of the other backends, until the affinity ages out or
// its backend goes.
func TestAffinity(t *testing.T) {
	if !inNetns(t) {
		return
	}
	cfg := setup(t)
	all := append(slices.Clone(backends4), "127.0.0.5:8080")
	for _, b := range all {
		tcpServer(t, b)
	}
	d := open(t, cfg)
	f := frontend("10.96.0.10:80", tcp, backends4...)
	f.Affinity = 10 * time.Second
	bpftest.Sync(t, d, bpftest.Table(f))
	stuck := func() string {
		t.Helper()
		first := ""
		for range 30 {
			name, err := dialName("10.96.0.10:80")
			if err != nil {
				t.Fatal(err)
			}
			if first == "" {
				first = name
			} else if name != first {
				t.Fatalf("with affinity went to %s after %s", name, first)
			}
		}
		return first
	}
	b := stuck()

	// Swap another backend for a new one: the client stays.
	f2 := frontend("10.96.0.10:80", tcp, b, all[3])
	f2.Affinity = f.Affinity
	for _, a := range backends4 {
		if a != b {
			f2.Backends = append(f2.Backends, services.Backend{Addr: netip.MustParseAddrPort(a)})
			break
		}
	}
	bpftest.Sync(t, d, bpftest.Table(f2))
	if got := stuck(); got != b {
		t.Errorf("after another backend changed, went to %s, want still %s", got, b)
	}

	// Age the affinity out: each connect then picks afresh.
	aff := d.maps[mapAffinity]
	seen := map[string]bool{}
	for range 30 {
		var k affKey
		var v affVal
		for it := aff.Iterate(); it.Next(&k, &v); {
			v.Last = 0 // as old as the machine's uptime, more than 10s
			if err := aff.Put(k, v); err != nil {
				t.Fatal(err)
			}
		}
		name, err := dialName("10.96.0.10:80")
		if err != nil {
			t.Fatal(err)
		}
		seen[name] = true
	}
	if len(seen) < 2 {
		t.Errorf("expired affinity still picks only %v", seen)
	}

	// Its backend gone, the client moves.
	b = stuck()
	f3 := frontend("10.96.0.10:80", tcp)
	f3.Affinity = f.Affinity
	for _, a := range all {
		if a != b {
			f3.Backends = append(f3.Backends, services.Backend{Addr: netip.MustParseAddrPort(a)})
		}
	}
	bpftest.Sync(t, d, bpftest.Table(f3))
	if got := stuck(); got == b {
		t.Errorf("went to removed backend %s", b)
	}
}

// TestScope: a second network namespace with the same ClusterIP, whose
// sockets the same cgroup programs see, is left alone until it is
// included (as a pod's namespace would be), and again once excluded.
func TestScope(t *testing.T) {
	if !inNetns(t) {
		return
	}
	cfg := setup(t)
	tcpServer(t, backends4[0])
	d := open(t, cfg)
	// 127.0.0.9 answers only in the other namespace.
	bpftest.Sync(t, d, bpftest.Table(frontend("10.96.0.10:80", tcp, backends4[0]), frontend("10.96.0.20:80", tcp, "127.0.0.9:8080")))

	inOtherNetns(t, func() {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			t.Fatal(err)
		}
		if err := netlink.LinkSetUp(lo); err != nil {
			t.Fatal(err)
		}
		addAddrs(t, "10.96.0.10/32")
		// Servers of its own, made on this thread, so in this
		// namespace: one on the ClusterIP itself.
		tcpServer(t, "10.96.0.10:80")
		tcpServer(t, "127.0.0.9:8080")
		if name, err := dialName("10.96.0.10:80"); err != nil || name != "10.96.0.10:80" {
			t.Errorf("in another namespace, 10.96.0.10:80 reached %q, %v; want its own server", name, err)
		}
		if _, err := dialName("10.96.0.20:80"); !errors.Is(err, syscall.ENETUNREACH) {
			t.Errorf("in another namespace, 10.96.0.20:80: %v, want ENETUNREACH", err)
		}
		cookie, err := NetnsCookie()
		if err != nil {
			t.Fatal(err)
		}
		if cookie == cfg.NetnsCookie {
			t.Fatal("two namespaces with one cookie")
		}
		if err := d.Include(cookie); err != nil {
			t.Fatal(err)
		}
		if name, err := dialName("10.96.0.20:80"); err != nil || name != "127.0.0.9:8080" {
			t.Errorf("included, 10.96.0.20:80 reached %q, %v; want the backend", name, err)
		}
		if err := d.Exclude(cookie); err != nil {
			t.Fatal(err)
		}
		if _, err := dialName("10.96.0.20:80"); !errors.Is(err, syscall.ENETUNREACH) {
			t.Errorf("excluded again, 10.96.0.20:80: %v, want ENETUNREACH", err)
		}
	})
	if name, err := dialName("10.96.0.10:80"); err != nil || name != backends4[0] {
		t.Errorf("in the node's namespace, reached %q, %v; want %s", name, err, backends4[0])
	}
}

// inOtherNetns runs fn on a thread in a new network namespace, gone when
// fn returns and its sockets are closed.
func inOtherNetns(t *testing.T, fn func()) {
	t.Helper()
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	defer orig.Close()
	other, err := netns.New()
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	defer other.Close()
	defer func() {
		// Back in the test's namespace, or the thread must die with
		// its goroutine.
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		}
	}()
	fn()
}

// TestUpdateNoGap: connects made while the backends change all succeed.
func TestUpdateNoGap(t *testing.T) {
	if !inNetns(t) {
		return
	}
	cfg := setup(t)
	var all []string
	for i := 2; i < 10; i++ {
		a := netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, byte(i)}), 8080).String()
		all = append(all, a)
		tcpServer(t, a)
	}
	d := open(t, cfg)
	sets := [][]string{all[:1], all[:3], all[2:8], all[5:6], all, all[3:5], all[7:]}
	tab := func(i int) services.Table {
		tb := bpftest.Table(frontend("10.96.0.10:80", tcp, sets[i%len(sets)]...))
		// Other frontends come and go meanwhile, their ids reused.
		for j := range i % 5 {
			f := frontend(netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 96, 1, byte(j)}), 80).String(), tcp, all[j:j+2]...)
			tb[f.Key] = f
		}
		return tb
	}
	bpftest.Sync(t, d, tab(0))

	var stop atomic.Bool
	var ok, failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for !stop.Load() {
				if _, err := dialName("10.96.0.10:80"); err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
				} else {
					ok.Add(1)
				}
			}
		})
	}
	deadline := time.Now().Add(30 * time.Second)
	for i := 1; i < 300 || ok.Load() < 500; i++ {
		if time.Now().After(deadline) {
			break
		}
		if err := d.Sync(context.Background(), tab(i)); err != nil {
			stop.Store(true)
			wg.Wait()
			t.Fatal(err)
		}
	}
	stop.Store(true)
	wg.Wait()
	if failed.Load() != 0 {
		t.Errorf("%d of %d connects failed while backends changed; first: %v", failed.Load(), failed.Load()+ok.Load(), firstErr.Load())
	}
	if ok.Load() < 100 {
		t.Errorf("only %d connects made", ok.Load())
	}
}

// linkIDs returns the ids of d's links and of their programs.
func linkIDs(t *testing.T, d *Dataplane) (links map[string]link.ID, progs map[string]ebpf.ProgramID) {
	t.Helper()
	links, progs = map[string]link.ID{}, map[string]ebpf.ProgramID{}
	for name, l := range d.objs.Links {
		info, err := l.Info()
		if err != nil {
			t.Fatal(err)
		}
		links[name], progs[name] = info.ID, info.Program
	}
	return links, progs
}

// TestAdoptUpgradeRemove: Close then New adopts the pinned maps and links
// without reloading, keeps an established connection and new connects
// working, and its first Sync writes nothing that is already there; a
// new program version replaces the old in the same links; Remove leaves
// no pin and no link.
func TestAdoptUpgradeRemove(t *testing.T) {
	if !inNetns(t) {
		return
	}
	cfg := setup(t)
	for _, b := range backends4 {
		tcpServer(t, b)
	}
	tab := bpftest.Table(frontend("10.96.0.10:80", tcp, backends4...), frontend("10.96.0.11:80", tcp, backends4[1:]...))
	d1 := open(t, cfg)
	bpftest.Sync(t, d1, tab)
	if d1.lastOps == 0 {
		t.Fatal("first Sync wrote nothing")
	}
	links1, progs1 := linkIDs(t, d1)
	_, conn, err := dial("10.96.0.10:80")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := d1.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d1.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	// The agent is away: routing stays.
	bpftest.Echo(t, conn)
	if _, err := dialName("10.96.0.11:80"); err != nil {
		t.Fatalf("connect with no agent: %v", err)
	}

	d2 := open(t, cfg)
	links2, progs2 := linkIDs(t, d2)
	if !maps_equal(links1, links2) || !maps_equal(progs1, progs2) {
		t.Errorf("adopting changed links %v -> %v, programs %v -> %v", links1, links2, progs1, progs2)
	}
	bpftest.Sync(t, d2, tab)
	if d2.lastOps != 0 {
		t.Errorf("first Sync after adoption made %d map changes, want none", d2.lastOps)
	}
	tab2 := bpftest.Table(frontend("10.96.0.10:80", tcp, backends4[:2]...), frontend("10.96.0.11:80", tcp, backends4[1:]...))
	bpftest.Sync(t, d2, tab2)
	if d2.lastOps != 1 { // count lowered with the inline slots, in one entry
		t.Errorf("dropping one backend made %d map changes, want 1", d2.lastOps)
	}
	bpftest.Echo(t, conn)
	for range 10 {
		if name, err := dialName("10.96.0.10:80"); err != nil || name == backends4[2] {
			t.Fatalf("after adoption reached %q, %v", name, err)
		}
	}
	d2.Close()

	// A new program version: same links, new programs.
	defer func(v int32) { progVersion = v }(progVersion)
	progVersion++
	d3 := open(t, cfg)
	links3, progs3 := linkIDs(t, d3)
	if !maps_equal(links1, links3) {
		t.Errorf("upgrade changed links %v -> %v", links1, links3)
	}
	for name, id := range progs3 {
		if id == progs1[name] {
			t.Errorf("upgrade kept program %d of hook %s", id, name)
		}
	}
	bpftest.Echo(t, conn)
	if _, err := dialName("10.96.0.10:80"); err != nil {
		t.Fatalf("after upgrade: %v", err)
	}

	// Adopting pins attached elsewhere is refused, and changes nothing.
	child := filepath.Join(cfg.Cgroup, fmt.Sprintf("outpost-ebpflb-test-%d", os.Getpid()))
	if err := os.Mkdir(child, 0o755); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(child)
	moved := cfg
	moved.Cgroup = child
	if d, err := New(moved); err == nil {
		d.Close()
		t.Error("New adopted links pinned on another cgroup")
	}
	if _, err := dialName("10.96.0.10:80"); err != nil {
		t.Fatalf("after a refused adoption: %v", err)
	}

	mapIDs := map[string]ebpf.MapID{}
	for name, m := range d3.maps {
		info, err := m.Info()
		if err != nil {
			t.Fatal(err)
		}
		id, _ := info.ID()
		mapIDs[name] = id
	}
	if err := d3.Remove(context.Background()); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if err := d3.Sync(context.Background(), tab); !errors.Is(err, ErrClosed) {
		t.Errorf("Sync after Remove = %v, want ErrClosed", err)
	}
	if _, err := os.Stat(cfg.PinDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pin dir after Remove: %v", err)
	}
	if _, err := dialName("10.96.0.10:80"); !errors.Is(err, syscall.ENETUNREACH) {
		t.Errorf("connect after Remove: %v, want ENETUNREACH", err)
	}
	// The kernel frees links and maps shortly after their last
	// reference goes.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var left []string
		it := new(link.Iterator)
		for it.Next() {
			info, err := it.Take().Info()
			if err == nil && slices.Contains(mapValues(links1), info.ID) {
				left = append(left, "link")
			}
		}
		it.Close()
		if err := it.Err(); err != nil {
			t.Fatal(err)
		}
		for name, id := range mapIDs {
			if m, err := ebpf.NewMapFromID(id); err == nil {
				m.Close()
				left = append(left, "map "+name)
			}
		}
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after Remove, still in the kernel: %v", left)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func maps_equal[K, V comparable](a, b map[K]V) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func mapValues[K comparable, V any](m map[K]V) []V {
	var out []V
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// TestLimits: a table beyond the limits or with a frontend that cannot be
// routed is refused and changes nothing.
func TestLimits(t *testing.T) {
	if !inNetns(t) {
		return
	}
	cfg := setup(t)
	tcpServer(t, backends4[0])
	d := open(t, cfg)
	tab := bpftest.Table(frontend("10.96.0.10:80", tcp, backends4[0]))
	bpftest.Sync(t, d, tab)
	big := services.Table{}
	for i := range services.MaxFrontends + 1 {
		f := frontend(netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 100, byte(i >> 8), byte(i)}), uint16(80+i>>16)).String(), tcp, backends4[0])
		big[f.Key] = f
	}
	wide := frontend("10.96.0.20:80", tcp)
	for i := range services.MaxBackends + 1 {
		wide.Backends = append(wide.Backends, services.Backend{Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 42, byte(i >> 8), byte(i)}), 80)})
	}
	for _, tc := range []struct {
		name string
		t    services.Table
		want error
	}{
		{"frontends", big, ErrTooLarge},
		{"backends", bpftest.Table(wide), ErrTooLarge},
		{"family", bpftest.Table(frontend("10.96.0.10:80", tcp, "[fd00::2]:80")), ErrInvalid},
	} {
		if err := d.Sync(context.Background(), tc.t); !errors.Is(err, tc.want) {
			t.Errorf("Sync(%s) = %v, want %v", tc.name, err, tc.want)
		}
		n := 0
		var k svcKey
		var v svcVal
		for it := d.maps[mapServices].Iterate(); it.Next(&k, &v); {
			n++
		}
		if n != 1 {
			t.Errorf("after Sync(%s): %d frontends in the map, want the 1 before", tc.name, n)
		}
		if name, err := dialName("10.96.0.10:80"); err != nil || name != backends4[0] {
			t.Errorf("after Sync(%s): %q, %v", tc.name, name, err)
		}
	}
}

// TestRepair: maps left inconsistent (by a Sync cut short, or an older
// agent) are brought to exactly the table by the next dataplane's first
// Sync: a frontend counting more slots than it has, slots of no
// frontend, two frontends sharing an id.
func TestRepair(t *testing.T) {
	if !inNetns(t) {
		return
	}
	cfg := setup(t)
	for _, b := range backends4 {
		tcpServer(t, b)
	}
	d1 := open(t, cfg)
	be := func(s string) beVal { return beOf(services.Backend{Addr: netip.MustParseAddrPort(s)}) }
	k1 := keyOf(frontend("10.96.0.10:80", tcp).Key)
	k2 := keyOf(frontend("10.96.0.11:80", tcp).Key)
	k3 := keyOf(frontend("10.96.0.12:80", tcp).Key)
	svcs, slots := d1.maps[mapServices], d1.maps[mapBackends]
	inline := func(id, count uint32, bs ...string) svcVal {
		var slots []beVal
		for _, b := range bs {
			slots = append(slots, be(b))
		}
		v := svcValOf(id, 0, slots)
		v.Count = count
		return v
	}
	for _, e := range []struct {
		k svcKey
		v svcVal
	}{
		{k1, inline(7, inlineSlots+2, backends4[0], backends4[1], backends4[0], backends4[1])}, // slot inlineSlots+1 missing
		{k2, inline(7, 1, backends4[2])}, // 7 again
		{k3, inline(9, 1, backends4[2])}, // not in the table
	} {
		if err := svcs.Put(e.k, e.v); err != nil {
			t.Fatal(err)
		}
	}
	for _, e := range []struct {
		k slotKey
		v beVal
	}{
		{slotKey{7, 1}, be(backends4[1])}, // inline: left by an older agent
		{slotKey{7, inlineSlots}, be(backends4[1])},
		{slotKey{7, inlineSlots + 5}, be(backends4[1])}, // beyond Count
		{slotKey{9, inlineSlots}, be(backends4[2])},     // beyond Count
		{slotKey{40, 0}, be(backends4[2])},              // no frontend's
	} {
		if err := slots.Put(e.k, e.v); err != nil {
			t.Fatal(err)
		}
	}
	d1.Close()

	d2 := open(t, cfg)
	tab := bpftest.Table(frontend("10.96.0.10:80", tcp, backends4...), frontend("10.96.0.11:80", tcp, backends4[2]))
	bpftest.Sync(t, d2, tab)
	m := newModel()
	var sk svcKey
	var sv svcVal
	for it := d2.maps[mapServices].Iterate(); it.Next(&sk, &sv); {
		m.svcs[sk] = sv
	}
	var bk slotKey
	var bv beVal
	for it := d2.maps[mapBackends].Iterate(); it.Next(&bk, &bv); {
		m.slots[bk] = bv
	}
	if err := m.equal(tab); err != nil {
		t.Fatalf("after the first Sync: %v", err)
	}
	seen := map[string]bool{}
	for range 60 {
		name, err := dialName("10.96.0.10:80")
		if err != nil {
			t.Fatal(err)
		}
		seen[name] = true
	}
	if len(seen) != 3 {
		t.Errorf("reached %v, want all three", seen)
	}
	if name, err := dialName("10.96.0.11:80"); err != nil || name != backends4[2] {
		t.Errorf("10.96.0.11:80 reached %q, %v", name, err)
	}
}

// TestNewFailsClean: a New that fails leaves nothing pinned or made, and
// a pin dir off bpffs is refused before anything is made.
func TestNewFailsClean(t *testing.T) {
	if !inNetns(t) {
		return
	}
	cfg := setup(t)
	bad := cfg
	bad.Cgroup = filepath.Join(cfg.Cgroup, "outpost-ebpflb-no-such-cgroup")
	if d, err := New(bad); err == nil {
		d.Close()
		t.Fatal("New attached to a missing cgroup")
	}
	if _, err := os.Stat(cfg.PinDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pin dir after a failed New: %v", err)
	}
	off := cfg
	off.PinDir = filepath.Join(t.TempDir(), "a", "b")
	if d, err := New(off); err == nil {
		d.Close()
		t.Fatal("New pinned off bpffs")
	}
	if _, err := os.Stat(filepath.Dir(off.PinDir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("New made directories off bpffs: %v", err)
	}
}

// TestRemovePins: the routing of a dataplane not open is taken away by
// its pin dir alone.
func TestRemovePins(t *testing.T) {
	if !inNetns(t) {
		return
	}
	cfg := setup(t)
	tcpServer(t, backends4[0])
	d := open(t, cfg)
	bpftest.Sync(t, d, bpftest.Table(frontend("10.96.0.10:80", tcp, backends4[0])))
	d.Close()
	if _, err := dialName("10.96.0.10:80"); err != nil {
		t.Fatalf("with the dataplane closed: %v", err)
	}
	if err := RemovePins(context.Background(), cfg.PinDir); err != nil {
		t.Fatalf("RemovePins: %v", err)
	}
	if _, err := os.Stat(cfg.PinDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pin dir after RemovePins: %v", err)
	}
	// Detaching follows the last reference, soon after.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := dialName("10.96.0.10:80")
		if errors.Is(err, syscall.ENETUNREACH) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("connect after RemovePins: %v, want ENETUNREACH", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := RemovePins(context.Background(), cfg.PinDir); err != nil {
		t.Errorf("RemovePins again: %v", err)
	}
}
