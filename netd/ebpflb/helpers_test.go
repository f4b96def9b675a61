package ebpflb

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/outpost-mesh/outpost/internal/netnstest"
	"github.com/outpost-mesh/outpost/netd/services"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// needKernel skips t unless the kernel runs the dataplane and a cgroup2
// hierarchy holds the test process, and returns that cgroup's directory.
func needKernel(t testing.TB) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: loads eBPF programs and mounts bpffs")
	}
	if err := Supported(); err != nil {
		if errors.Is(err, ebpf.ErrNotSupported) {
			t.Skipf("kernel lacks what the dataplane needs: %v", err)
		}
		t.Fatal(err)
	}
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
	dir := filepath.Join(t.TempDir(), "bpf")
	if err := MountBPFFS(dir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount bpffs: %v", err)
		}
	})
	return filepath.Join(dir, "node")
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
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := d.Remove(context.Background()); err != nil && !errors.Is(err, ErrClosed) {
			t.Errorf("Remove: %v", err)
		}
	})
	return d
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
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				if _, err := io.WriteString(c, addr+"\n"); err != nil {
					return
				}
				io.Copy(c, c)
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
}

// udpServer answers each datagram with its name.
func udpServer(t *testing.T, addr string) {
	t.Helper()
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		buf := make([]byte, 1500)
		for {
			_, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo([]byte(addr), from)
		}
	})
	t.Cleanup(func() {
		pc.Close()
		wg.Wait()
	})
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

// echo checks that c still carries data both ways.
func echo(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		t.Fatalf("write on the established connection: %v", err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || line != "ping\n" {
		t.Fatalf("echo on the established connection = %q, %v", line, err)
	}
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

func table(fs ...*services.Frontend) services.Table {
	t := services.Table{}
	for _, f := range fs {
		t[f.Key] = f
	}
	return t
}

func sync_(t *testing.T, d *Dataplane, tab services.Table) {
	t.Helper()
	if err := d.Sync(context.Background(), tab); err != nil {
		t.Fatalf("Sync: %v", err)
	}
}

// inNetns reports whether t runs in its network namespace of its own,
// having made it if not; the caller returns at once on false.
func inNetns(t *testing.T) bool {
	t.Helper()
	return netnstest.Enter(t)
}
