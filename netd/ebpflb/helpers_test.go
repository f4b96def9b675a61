package ebpflb

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/outpost-mesh/outpost/internal/netnstest"
	"github.com/outpost-mesh/outpost/netd/internal/bpftest"
	"github.com/outpost-mesh/outpost/netd/services"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// needKernel skips t unless the kernel runs the dataplane and a cgroup2
// hierarchy holds the test process, and returns that cgroup's directory.
func needKernel(t testing.TB) string {
	t.Helper()
	bpftest.NeedKernel(t, Supported)
	cg, err := ownCgroup()
	if err != nil {
		t.Skipf("no cgroup2 hierarchy holding the test: %v", err)
	}
	return cg
}

// ownCgroup returns the cgroup2 directory of the calling process, on the
// cgroup2 mount at /sys/fs/cgroup/unified (this machine's) or
// /sys/fs/cgroup (a unified-only machine's).
func ownCgroup() (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	var rel string
	for _, line := range strings.Split(string(b), "\n") {
		if r, ok := strings.CutPrefix(line, "0::"); ok {
			rel = r
		}
	}
	if rel == "" {
		return "", errors.New("no cgroup2 line in /proc/self/cgroup")
	}
	for _, root := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
		var st unix.Statfs_t
		if unix.Statfs(root, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
			return filepath.Join(root, rel), nil
		}
	}
	return "", errors.New("no cgroup2 mount")
}

// bpffs mounts a bpffs of t's own and returns a pin dir on it; the mount
// goes when t ends, and with it whatever t left pinned.
func bpffs(t testing.TB) string {
	t.Helper()
	return filepath.Join(bpftest.Mount(t), "node")
}

// setup runs in t's network namespace of its own: it returns a Config
// for a dataplane attached to the test's cgroup and scoped to the
// namespace, pinned on a bpffs of t's own.
func setup(t *testing.T) Config {
	t.Helper()
	cg := needKernel(t)
	cfg := DefaultConfig()
	cfg.Cgroup = cg
	cfg.PinDir = bpffs(t)
	c, err := NetnsCookie()
	if err != nil {
		t.Fatal(err)
	}
	cfg.NetnsCookie = c
	return cfg
}

// open returns a new dataplane for cfg, removed when t ends.
func open(t *testing.T, cfg Config) *Dataplane {
	t.Helper()
	d, err := New(cfg)
	return bpftest.Opened(t, d, err, ErrClosed)
}

// addAddrs adds IPv6 addresses to the namespace's loopback (IPv4
// backends use 127.0.0.0/8, local already).
func addAddrs(t *testing.T, addrs ...string) {
	t.Helper()
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		p := netip.MustParsePrefix(a)
		ipn := &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
		if err := netlink.AddrAdd(lo, &netlink.Addr{IPNet: ipn, Flags: unix.IFA_F_NODAD}); err != nil {
			t.Fatalf("add %s: %v", a, err)
		}
	}
}

// tcpServer answers each connection with its name and a newline, then
// echoes what it reads, until t ends.
func tcpServer(t *testing.T, addr string) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	bpftest.ServeTCP(t, ln, func(net.Conn) string { return addr + "\n" })
}

// udpServer answers each datagram with its name.
func udpServer(t *testing.T, addr string) {
	t.Helper()
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	bpftest.ServeUDP(t, pc, func(net.Addr) string { return addr })
}

// query sends a datagram from pc to addr and returns the answer (a
// udpServer's name) and the address it came from.
func query(pc *net.UDPConn, addr netip.AddrPort) (string, netip.AddrPort, error) {
	if _, err := pc.WriteToUDPAddrPort([]byte("q"), addr); err != nil {
		return "", netip.AddrPort{}, fmt.Errorf("sendto %s: %w", addr, err)
	}
	pc.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 100)
	n, from, err := pc.ReadFromUDPAddrPort(buf)
	if err != nil {
		return "", from, fmt.Errorf("reply from %s: %w", addr, err)
	}
	return string(buf[:n]), from, nil
}

// dial connects to addr over TCP and returns the server's name and the
// connection.
func dial(addr string) (string, net.Conn, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return "", nil, err
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	name, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		c.Close()
		return "", nil, err
	}
	c.SetDeadline(time.Time{})
	return strings.TrimSuffix(name, "\n"), c, nil
}

// dialName connects to addr over TCP and returns the server's name.
func dialName(addr string) (string, error) {
	name, c, err := dial(addr)
	if err != nil {
		return "", err
	}
	c.Close()
	return name, nil
}

// peerName returns getpeername(2) of c's socket.
func peerName(t *testing.T, c syscallConn) netip.AddrPort {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var sa unix.Sockaddr
	var serr error
	if err := rc.Control(func(fd uintptr) { sa, serr = unix.Getpeername(int(fd)) }); err != nil {
		t.Fatal(err)
	}
	if serr != nil {
		t.Fatalf("getpeername: %v", serr)
	}
	switch sa := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(sa.Port))
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr), uint16(sa.Port))
	}
	t.Fatalf("getpeername: %T", sa)
	return netip.AddrPort{}
}

type syscallConn interface {
	SyscallConn() (syscall.RawConn, error)
}

// frontend returns a TCP (or proto) frontend at addr with backends.
func frontend(addr string, proto services.Proto, backends ...string) *services.Frontend {
	ap := netip.MustParseAddrPort(addr)
	f := &services.Frontend{
		Key:     services.Key{Addr: ap.Addr(), Port: ap.Port(), Proto: proto},
		Kind:    services.ClusterIP,
		Service: "default/test",
	}
	for _, b := range backends {
		f.Backends = append(f.Backends, services.Backend{Addr: netip.MustParseAddrPort(b), Local: true})
	}
	return f
}

// inNetns reports whether t runs in its network namespace of its own,
// having made it if not; the caller returns at once on false.
func inNetns(t *testing.T) bool {
	t.Helper()
	return netnstest.Enter(t)
}
