package overlay

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestHardwareAddr(t *testing.T) {
	for _, tc := range []struct {
		cidr, want string
	}{
		{"10.42.1.0/24", "0a:58:0a:2a:01:00"},
		{"10.42.2.0/24", "0a:58:0a:2a:02:00"},
		{"192.168.4.64/26", "0a:58:c0:a8:04:40"},
		{"10.42.1.7/24", "0a:58:0a:2a:01:00"}, // host bits do not count
	} {
		got := HardwareAddr(netip.MustParsePrefix(tc.cidr))
		if got.String() != tc.want {
			t.Errorf("HardwareAddr(%s) = %s, want %s", tc.cidr, got, tc.want)
		}
		if got[0]&0x01 != 0 || got[0]&0x02 == 0 {
			t.Errorf("HardwareAddr(%s) = %s: not a locally administered unicast address", tc.cidr, got)
		}
	}
}

func testSelf() Config {
	cfg := DefaultConfig()
	cfg.Underlay = netip.MustParseAddr("192.168.77.1")
	cfg.PodCIDR = netip.MustParsePrefix("10.42.1.0/24")
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	return cfg
}

func peer(node, underlay, cidr string) Peer {
	p := Peer{Node: node}
	if underlay != "" {
		p.Underlay = netip.MustParseAddr(underlay)
	}
	if cidr != "" {
		p.PodCIDR = netip.MustParsePrefix(cidr)
	}
	return p
}

// describe renders a state as sorted lines.
func describe(s state) string {
	var lines []string
	for m, dst := range s.fdb {
		lines = append(lines, fmt.Sprintf("fdb %s %s", m, dst))
	}
	for ip, m := range s.neigh {
		lines = append(lines, fmt.Sprintf("neigh %s %s", ip, m))
	}
	for dst, gw := range s.routes {
		lines = append(lines, fmt.Sprintf("route %s %s", dst, gw))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

func TestDesired(t *testing.T) {
	b := peer("b", "192.168.77.2", "10.42.2.0/24")
	c := peer("c", "192.168.77.3", "10.42.3.0/24")
	bc := describe(state{
		fdb: map[mac]netip.Addr{
			{0x0a, 0x58, 10, 42, 2, 0}: netip.MustParseAddr("192.168.77.2"),
			{0x0a, 0x58, 10, 42, 3, 0}: netip.MustParseAddr("192.168.77.3"),
		},
		neigh: map[netip.Addr]mac{
			netip.MustParseAddr("10.42.2.0"): {0x0a, 0x58, 10, 42, 2, 0},
			netip.MustParseAddr("10.42.3.0"): {0x0a, 0x58, 10, 42, 3, 0},
		},
		routes: map[netip.Prefix]netip.Addr{
			netip.MustParsePrefix("10.42.2.0/24"): netip.MustParseAddr("10.42.2.0"),
			netip.MustParsePrefix("10.42.3.0/24"): netip.MustParseAddr("10.42.3.0"),
		},
	})
	for _, tc := range []struct {
		name  string
		peers []Peer
		bad   []string // the nodes of the peers left out
	}{
		{"good", []Peer{b, c}, nil},
		{"same twice", []Peer{c, b, c}, nil},
		{"no name", []Peer{b, c, peer("", "192.168.77.4", "10.42.4.0/24")}, []string{""}},
		{"no pod CIDR", []Peer{b, c, peer("x", "192.168.77.4", "")}, []string{"x"}},
		{"host bits", []Peer{b, c, peer("x", "192.168.77.4", "10.42.4.1/24")}, []string{"x"}},
		{"narrow", []Peer{b, c, peer("x", "192.168.77.4", "10.42.4.0/31")}, []string{"x"}},
		{"IPv6 pod CIDR", []Peer{b, c, peer("x", "192.168.77.4", "fd42::/64")}, []string{"x"}},
		{"no underlay", []Peer{b, c, peer("x", "", "10.42.4.0/24")}, []string{"x"}},
		{"IPv6 underlay", []Peer{b, c, peer("x", "fd00::4", "10.42.4.0/24")}, []string{"x"}},
		{"mapped underlay", []Peer{b, c, peer("x", "::ffff:192.168.77.4", "10.42.4.0/24")}, []string{"x"}},
		{"multicast underlay", []Peer{b, c, peer("x", "239.1.1.1", "10.42.4.0/24")}, []string{"x"}},
		{"our underlay", []Peer{b, c, peer("x", "192.168.77.1", "10.42.4.0/24")}, []string{"x"}},
		{"our pod CIDR", []Peer{b, c, peer("x", "192.168.77.4", "10.42.1.0/24")}, []string{"x"}},
		{"inside our pod CIDR", []Peer{b, c, peer("x", "192.168.77.4", "10.42.1.128/25")}, []string{"x"}},
		{"around our pod CIDR", []Peer{b, c, peer("x", "192.168.77.4", "10.42.0.0/16")}, []string{"x"}},
		{"node twice", []Peer{b, c, peer("x", "192.168.77.4", "10.42.4.0/24"), peer("x", "192.168.77.5", "10.42.4.0/24")}, []string{"x", "x"}},
		{"same pod CIDR", []Peer{b, c, peer("x", "192.168.77.4", "10.42.4.0/24"), peer("y", "192.168.77.5", "10.42.4.0/24")}, []string{"x", "y"}},
		{"nested pod CIDRs", []Peer{peer("x", "192.168.77.4", "10.42.4.0/22"), b, peer("y", "192.168.77.5", "10.42.5.0/24"), c, peer("z", "192.168.77.6", "10.42.6.0/24")}, []string{"x", "y", "z"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, peers := range [][]Peer{tc.peers, reversed(tc.peers)} {
				want, errs := desired(testSelf(), peers)
				if got := describe(want); got != bc {
					t.Errorf("desired(%v) =\n%s\nwant\n%s", peers, got, bc)
				}
				var bad []string
				for _, err := range errs {
					var pe *PeerError
					if !errors.As(err, &pe) {
						t.Fatalf("desired(%v): error %v is no *PeerError", peers, err)
					}
					bad = append(bad, pe.Peer.Node)
				}
				slices.Sort(bad)
				if !slices.Equal(bad, tc.bad) {
					t.Errorf("desired(%v) left out %q (%v), want %q", peers, bad, errs, tc.bad)
				}
			}
		})
	}
}

func reversed(ps []Peer) []Peer {
	out := slices.Clone(ps)
	slices.Reverse(out)
	return out
}

func TestDesiredIPv6Underlay(t *testing.T) {
	self := testSelf()
	self.Underlay = netip.MustParseAddr("fd77::1")
	want, errs := desired(self, []Peer{peer("b", "fd77::2", "10.42.2.0/24"), peer("c", "192.168.77.3", "10.42.3.0/24")})
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), `"c"`) {
		t.Errorf("desired over IPv6 left out %v, want c", errs)
	}
	if got := describe(want); !strings.Contains(got, "fdb 0a:58:0a:2a:02:00 fd77::2") || strings.Contains(got, "10.42.3.0") {
		t.Errorf("desired over IPv6 =\n%s", got)
	}
}

func TestDiff(t *testing.T) {
	mb, mc, md := mac{0x0a, 0x58, 10, 42, 2, 0}, mac{0x0a, 0x58, 10, 42, 3, 0}, mac{0x0a, 0x58, 10, 42, 4, 0}
	ip := netip.MustParseAddr
	pfx := netip.MustParsePrefix
	want := state{
		fdb:    map[mac]netip.Addr{mb: ip("192.168.77.2"), mc: ip("192.168.77.3")},
		neigh:  map[netip.Addr]mac{ip("10.42.2.0"): mb, ip("10.42.3.0"): mc},
		routes: map[netip.Prefix]netip.Addr{pfx("10.42.2.0/24"): ip("10.42.2.0"), pfx("10.42.3.0/24"): ip("10.42.3.0")},
	}
	if c := diff(want, want); !c.empty() {
		t.Errorf("diff(want, want) = %+v, want none", c)
	}
	if c := diff(newState(), want); len(c.setFDB) != 2 || len(c.setNeigh) != 2 || len(c.setRoutes) != 2 || len(c.delFDB)+len(c.delNeigh)+len(c.delRoutes) != 0 {
		t.Errorf("diff(empty, want) = %+v, want everything set", c)
	}
	if c := diff(want, newState()); len(c.delFDB) != 2 || len(c.delNeigh) != 2 || len(c.delRoutes) != 2 || len(c.setFDB)+len(c.setNeigh)+len(c.setRoutes) != 0 {
		t.Errorf("diff(want, empty) = %+v, want everything deleted", c)
	}
	// C moved, D is gone, B's route is wrong and its neighbour entry
	// points elsewhere.
	have := state{
		fdb:    map[mac]netip.Addr{mb: ip("192.168.77.2"), mc: ip("192.168.77.13"), md: ip("192.168.77.4")},
		neigh:  map[netip.Addr]mac{ip("10.42.2.0"): md, ip("10.42.3.0"): mc, ip("10.42.4.0"): md},
		routes: map[netip.Prefix]netip.Addr{pfx("10.42.2.0/24"): {}, pfx("10.42.3.0/24"): ip("10.42.3.0"), pfx("10.42.4.0/24"): ip("10.42.4.0")},
	}
	got := fmt.Sprintf("%v", diff(have, want))
	wantC := fmt.Sprintf("%v", changes{
		setFDB:    []fdbEntry{{mc, ip("192.168.77.3")}},
		setNeigh:  []neighEntry{{ip("10.42.2.0"), mb}},
		setRoutes: []routeEntry{{pfx("10.42.2.0/24"), ip("10.42.2.0")}},
		delRoutes: []routeEntry{{pfx("10.42.4.0/24"), ip("10.42.4.0")}},
		delNeigh:  []neighEntry{{ip("10.42.4.0"), md}},
		delFDB:    []fdbEntry{{md, ip("192.168.77.4")}},
	})
	if got != wantC {
		t.Errorf("diff(have, want) = %s, want %s", got, wantC)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := testSelf().Validate(); err != nil {
		t.Fatalf("Validate() = %v, want nil", err)
	}
	for _, tc := range []struct {
		name string
		edit func(*Config)
	}{
		{"no device", func(c *Config) { c.Device = "" }},
		{"long device", func(c *Config) { c.Device = "a-very-long-device" }},
		{"VNI 0", func(c *Config) { c.VNI = 0 }},
		{"VNI too big", func(c *Config) { c.VNI = 1 << 24 }},
		{"port 0", func(c *Config) { c.Port = 0 }},
		{"no underlay", func(c *Config) { c.Underlay = netip.Addr{} }},
		{"loopback underlay", func(c *Config) { c.Underlay = netip.MustParseAddr("127.0.0.1") }},
		{"mapped underlay", func(c *Config) { c.Underlay = netip.MustParseAddr("::ffff:192.168.77.1") }},
		{"bad underlay link", func(c *Config) { c.UnderlayLink = "a/b" }},
		{"no pod CIDR", func(c *Config) { c.PodCIDR = netip.Prefix{} }},
		{"IPv6 pod CIDR", func(c *Config) { c.PodCIDR = netip.MustParsePrefix("fd42::/64") }},
		{"small MTU", func(c *Config) { c.MTU = 100 }},
		{"relative netns", func(c *Config) { c.HostNetNS = "netns" }},
		{"no logger", func(c *Config) { c.Logger = nil }},
	} {
		c := testSelf()
		tc.edit(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: Validate() = nil, want an error", tc.name)
		}
		if _, err := New(c); err == nil {
			t.Errorf("%s: New() = nil error, want one", tc.name)
		}
	}
}

func TestLinkAddError(t *testing.T) {
	if err := linkAddError("vx", unix.EOPNOTSUPP); !errors.Is(err, ErrNotSupported) {
		t.Errorf("linkAddError(EOPNOTSUPP) = %v, want ErrNotSupported", err)
	}
	for _, e := range []error{unix.EEXIST, unix.EPERM, unix.EINVAL} {
		if err := linkAddError("vx", e); errors.Is(err, ErrNotSupported) || !errors.Is(err, e) {
			t.Errorf("linkAddError(%v) = %v, want it wrapped, not ErrNotSupported", e, err)
		}
	}
}

// FuzzDesired: whatever the peers, desired does not panic, programs only
// peers that are valid and apart from each other and from this node, and
// accounts for every peer either way.
func FuzzDesired(f *testing.F) {
	f.Add([]byte{0, 2, 10, 42, 2, 0, 24, 192, 168, 77, 2, 1, 3, 10, 42, 3, 0, 24, 192, 168, 77, 3})
	f.Add([]byte{0, 2, 10, 42, 0, 0, 16, 192, 168, 77, 2, 0, 2, 10, 42, 2, 0, 24, 192, 168, 77, 3})
	f.Fuzz(func(t *testing.T, data []byte) {
		const size = 11 // node, a node byte, 4 address bytes, bits, 4 underlay bytes
		if len(data) > 64*size {
			return
		}
		self := testSelf()
		var peers []Peer
		for ; len(data) >= size; data = data[size:] {
			a := [4]byte(data[2:6])
			pfx := netip.PrefixFrom(netip.AddrFrom4(a), int(data[6]%40))
			var under netip.Addr
			if data[0]&1 == 0 {
				under = netip.AddrFrom4([4]byte(data[7:11]))
			} else {
				var b [16]byte
				binary.BigEndian.PutUint32(b[12:], binary.BigEndian.Uint32(data[7:11]))
				under = netip.AddrFrom16(b)
			}
			peers = append(peers, Peer{Node: fmt.Sprintf("n%d", data[1]%8), Underlay: under, PodCIDR: pfx})
		}
		want, errs := desired(self, peers)
		var programmed []netip.Prefix
		for p := range want.routes {
			if err := checkPeer(self, Peer{Node: "x", Underlay: want.fdb[mustMAC(t, p)], PodCIDR: p}); err != nil {
				t.Fatalf("desired(%v) programs %s: %v", peers, p, err)
			}
			for _, q := range programmed {
				if p.Overlaps(q) {
					t.Fatalf("desired(%v) programs %s and %s", peers, p, q)
				}
			}
			programmed = append(programmed, p)
		}
		if len(want.fdb) != len(want.routes) || len(want.neigh) != len(want.routes) {
			t.Fatalf("desired(%v) = %d fdb, %d neigh, %d routes", peers, len(want.fdb), len(want.neigh), len(want.routes))
		}
		distinct := map[Peer]bool{}
		for _, p := range peers {
			distinct[p] = true
		}
		if len(want.routes)+len(errs) != len(distinct) {
			t.Fatalf("desired(%v): %d programmed and %d left out of %d", peers, len(want.routes), len(errs), len(distinct))
		}
	})
}

func mustMAC(t *testing.T, p netip.Prefix) mac {
	m, ok := macOf(HardwareAddr(p))
	if !ok {
		t.Fatalf("HardwareAddr(%s) is not 6 bytes", p)
	}
	return m
}
