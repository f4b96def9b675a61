package netd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"go.uber.org/goleak"

	"github.com/outpost-mesh/outpost/internal/netnstest"
	"github.com/outpost-mesh/outpost/internal/testlog"
	"github.com/outpost-mesh/outpost/netd/ipam"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// memLeases is an in-memory LeaseStore for tests. saveErr, when set, fails
// SaveLease.
type memLeases struct {
	mu      sync.Mutex
	m       map[string]netip.Addr
	saveErr error
}

var _ LeaseStore = (*memLeases)(nil)

func newMemLeases() *memLeases { return &memLeases{m: map[string]netip.Addr{}} }

func (s *memLeases) LoadLeases(context.Context) ([]ipam.Lease, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []ipam.Lease
	for uid, ip := range s.m {
		out = append(out, ipam.Lease{UID: uid, IP: ip})
	}
	return out, nil
}

func (s *memLeases) SaveLease(_ context.Context, l ipam.Lease) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.saveErr != nil {
		return s.saveErr
	}
	s.m[l.UID] = l.IP
	return nil
}

func (s *memLeases) DeleteLease(_ context.Context, uid string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, uid)
	return nil
}

func (s *memLeases) get(uid string) (netip.Addr, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ip, ok := s.m[uid]
	return ip, ok
}

func testLogger(t *testing.T) *slog.Logger { return testlog.New(t, slog.LevelDebug) }

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces, links and nftables rules")
	}
}

// newTestNS creates a network namespace with only lo, up, removed when the
// test ends.
func newTestNS(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "netns")
	if err := newNetNS(path); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := removeNetNS(path); err != nil {
			t.Error(err)
		}
	})
	withNL(t, path, func(h *netlink.Handle) {
		lo, err := h.LinkByName("lo")
		if err == nil {
			err = h.LinkSetUp(lo)
		}
		if err != nil {
			t.Fatal(err)
		}
	})
	return path
}

// withNL runs fn with a netlink handle in the namespace at path.
func withNL(t *testing.T, path string, fn func(h *netlink.Handle)) { netnstest.WithNL(t, path, fn) }

// in runs fn on a thread in the namespace at path.
func in(t *testing.T, path string, fn func() error) error { return netnstest.In(t, path, fn) }

// testNet is a Network on its own node namespace.
type testNet struct {
	*Network
	cfg    Config
	nodeNS string
	leases *memLeases
}

func testConfig(t *testing.T, nodeNS string, leases *memLeases) Config {
	cfg := DefaultConfig()
	cfg.PodCIDR = netip.MustParsePrefix("10.42.3.0/24")
	cfg.HostNetNS = nodeNS
	cfg.NetNSDir = filepath.Join(t.TempDir(), "netns")
	cfg.Leases = leases
	cfg.Logger = testLogger(t)
	return cfg
}

// newTestNet returns a set-up Network on a new node namespace. Pod
// namespaces it leaves behind are removed when the test ends.
func newTestNet(t *testing.T) *testNet {
	t.Helper()
	needRoot(t)
	nodeNS := newTestNS(t)
	leases := newMemLeases()
	cfg := testConfig(t, nodeNS, leases)
	tn := &testNet{cfg: cfg, nodeNS: nodeNS, leases: leases}
	tn.Network = tn.restart(t)
	if err := tn.Setup(t.Context()); err != nil {
		t.Fatal(err)
	}
	return tn
}

// restart returns a new Network on tn's configuration and lease store, as
// the agent makes after a restart.
func (tn *testNet) restart(t *testing.T) *Network {
	t.Helper()
	n, err := New(tn.cfg)
	if err != nil {
		t.Fatal(err)
	}
	dir := tn.cfg.NetNSDir
	t.Cleanup(func() {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			removeNetNS(filepath.Join(dir, e.Name()))
		}
	})
	return n
}

func (tn *testNet) addPod(t *testing.T, uid string, hps ...HostPort) Attachment {
	t.Helper()
	a, err := tn.AddPod(t.Context(), PodSpec{UID: uid, Namespace: "default", Name: "pod-" + uid, HostPorts: hps})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// serve runs a TCP or UDP server in the namespace at path, on addr, that
// answers every connection or datagram with "<name> <peer address>".
func serve(t *testing.T, path, network, addr, name string) {
	t.Helper()
	var (
		l  net.Listener
		pc net.PacketConn
	)
	if err := in(t, path, func() (err error) {
		if network == "udp" {
			pc, err = net.ListenPacket("udp4", addr)
		} else {
			l, err = net.Listen("tcp4", addr)
		}
		return err
	}); err != nil {
		t.Fatalf("listen %s %s in %s: %v", network, addr, path, err)
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
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Write([]byte(name + " " + c.RemoteAddr().String()))
			c.Close()
		}
	})
	t.Cleanup(func() { l.Close(); wg.Wait() })
}

// dial connects from the namespace at path to addr and returns what the
// server said: its name and the address it saw the client at.
func dial(t *testing.T, path, network, addr string) (name string, peer netip.AddrPort, err error) {
	t.Helper()
	var reply []byte
	err = in(t, path, func() error {
		c, err := net.DialTimeout(network+"4", addr, 2*time.Second)
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
	if err != nil {
		return "", netip.AddrPort{}, err
	}
	name, p, ok := strings.Cut(string(reply), " ")
	if !ok {
		return "", netip.AddrPort{}, fmt.Errorf("reply %q", reply)
	}
	peer, err = netip.ParseAddrPort(p)
	return name, peer, err
}

// mustReach dials addr from path and fails unless the server named want
// answers.
func mustReach(t *testing.T, path, network, addr, want string) netip.AddrPort {
	t.Helper()
	name, peer, err := dial(t, path, network, addr)
	if err != nil {
		t.Fatalf("dial %s %s from %s: %v", network, addr, filepath.Base(filepath.Dir(path))+"/"+filepath.Base(path), err)
	}
	if name != want {
		t.Fatalf("dial %s %s reached %q, want %q", network, addr, name, want)
	}
	return peer
}

func linkExists(t *testing.T, nsPath, name string) bool {
	t.Helper()
	var ok bool
	withNL(t, nsPath, func(h *netlink.Handle) {
		_, err := h.LinkByName(name)
		if err != nil && !isLinkNotFound(err) {
			t.Fatal(err)
		}
		ok = err == nil
	})
	return ok
}

func fileExists(t *testing.T, path string) bool {
	t.Helper()
	_, err := os.Stat(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return err == nil
}
