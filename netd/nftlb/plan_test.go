package nftlb

import (
	"fmt"
	"math"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"

	"github.com/outpost-mesh/outpost/netd/services"
)

func TestCheckTable(t *testing.T) {
	good := func() *services.Frontend {
		return &services.Frontend{Key: key("10.43.0.1:80", services.TCP), Kind: services.ClusterIP,
			Backends: backends(8080, true, netip.MustParseAddr("10.42.3.5"))}
	}
	for _, tc := range []struct {
		name string
		edit func(f *services.Frontend)
		ok   bool
	}{
		{"good", func(*services.Frontend) {}, true},
		{"no backends", func(f *services.Frontend) { f.Backends = nil }, true},
		{"bad kind", func(f *services.Frontend) { f.Kind = 9 }, false},
		{"bad proto", func(f *services.Frontend) { f.Key.Proto = 1 }, false},
		{"mixed families", func(f *services.Frontend) { f.Backends = backends(80, false, netip.MustParseAddr("fd42::5")) }, false},
		{"port 0 backend", func(f *services.Frontend) { f.Backends = backends(0, false, netip.MustParseAddr("10.42.3.5")) }, false},
		{"mapped address", func(f *services.Frontend) { f.Key.Addr = netip.MustParseAddr("::ffff:10.43.0.1") }, false},
		{"long affinity", func(f *services.Frontend) { f.Affinity = 48 * time.Hour }, false},
	} {
		f := good()
		tc.edit(f)
		err := checkTable(services.Table{f.Key: f})
		if (err == nil) != tc.ok {
			t.Errorf("%s: checkTable = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
	f := good()
	if err := checkTable(services.Table{key("10.43.0.2:80", services.TCP): f}); err == nil {
		t.Error("checkTable of a frontend under another key: no error")
	}
}

func TestNoepFor(t *testing.T) {
	for _, tc := range []struct {
		in, ext int
		want    [2]noep
	}{
		{0, 0, [2]noep{noepReject, noepReject}},
		{2, 2, [2]noep{noepNone, noepNone}},
		{2, 0, [2]noep{noepNone, noepDrop}},
		{0, 1, [2]noep{noepReject, noepNone}},
	} {
		in, ext := noepFor(tc.in, tc.ext)
		if [2]noep{in, ext} != tc.want {
			t.Errorf("noepFor(%d, %d) = %v, %v, want %v", tc.in, tc.ext, in, ext, tc.want)
		}
	}
}

// TestNames: every name a plan makes fits in 31 bytes, is owned by its
// frontend, and differs between frontends.
func TestNames(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ClusterCIDRs = []netip.Prefix{clusterCIDR, cluster6}
	cfg.PodCIDRs = []netip.Prefix{podCIDR, podCIDR6}
	seen := map[string]string{}
	for _, v4 := range []bool{true, false} {
		fam := newFamily(cfg, v4)
		p := planner{cfg: cfg, fam: fam, base: baseHash(cfg, fam)}
		addr, b := "10.43.0.1", netip.MustParseAddr("10.42.3.5")
		if !v4 {
			addr, b = "[fd43:ffff:ffff:ffff:ffff:ffff:ffff:ffff]", netip.MustParseAddr("fd42:ffff:ffff:ffff:ffff:ffff:ffff:ffff")
		}
		for _, port := range []string{"80", "443"} {
			f := &services.Frontend{Key: key(addr+":"+port, services.TCP), Kind: services.NodePort, ExternalLocal: true, Affinity: time.Hour,
				Backends: backends(65535, true, b), ExternalBackends: backends(65535, true, b)}
			s := p.plan(f)
			var names []string
			for _, c := range s.chains {
				names = append(names, c.name)
			}
			for _, st := range s.sets {
				names = append(names, st.name)
			}
			// Entry, internal pick, endpoint, affinity set; the
			// external pick is inline in the entry chain.
			if len(names) != 4 {
				t.Errorf("%v: names %v, want 4", f.Key, names)
			}
			for _, n := range names {
				if len(n) > 31 {
					t.Errorf("name %q: longer than 31 bytes", n)
				}
				if id, ok := ownerID(n); !ok || id != s.id {
					t.Errorf("ownerID(%q) = %q, %v, want %q", n, id, ok, s.id)
				}
				if other, ok := seen[n]; ok && other != f.Key.String() {
					t.Errorf("name %q of both %v and %v", n, f.Key, other)
				}
				seen[n] = f.Key.String()
			}
			if got := commentHash(s.comment); got != s.hash {
				t.Errorf("commentHash(%q) = %q, want %q", s.comment, got, s.hash)
			}
		}
	}
	for _, n := range []string{chainPrerouting, chainFInput, chainFForward, chainServices, mapServices, mapNoepExt, "Fxyz"} {
		if _, ok := ownerID(n); ok {
			t.Errorf("ownerID(%q): a frontend's", n)
		}
	}
}

// TestFrontendHash: the hash changes with every field that shapes the
// rules, and with the Config.
func TestFrontendHash(t *testing.T) {
	cfg := DefaultConfig()
	fam := newFamily(cfg, true)
	p := planner{cfg: cfg, fam: fam, base: baseHash(cfg, fam)}
	base := func() *services.Frontend {
		return &services.Frontend{Key: key("192.168.50.1:30080", services.TCP), Kind: services.NodePort, Service: "a/b",
			Backends: backends(80, true, netip.MustParseAddr("10.42.3.5")), ExternalBackends: backends(80, true, netip.MustParseAddr("10.42.3.5"))}
	}
	h0 := p.frontendHash(base())
	for name, edit := range map[string]func(f *services.Frontend){
		"backend port": func(f *services.Frontend) { f.Backends[0].Addr = netip.MustParseAddrPort("10.42.3.5:81") },
		"local":        func(f *services.Frontend) { f.Backends[0].Local = false },
		"external":     func(f *services.Frontend) { f.ExternalBackends = nil },
		"policy":       func(f *services.Frontend) { f.ExternalLocal = true },
		"affinity":     func(f *services.Frontend) { f.Affinity = time.Second },
		"kind":         func(f *services.Frontend) { f.Kind = services.ExternalIP },
		"service":      func(f *services.Frontend) { f.Service = "a/c" },
		"backend moving": func(f *services.Frontend) {
			f.ExternalBackends, f.Backends = nil, append(f.Backends, f.ExternalBackends...)
		},
	} {
		f := base()
		edit(f)
		if p.frontendHash(f) == h0 {
			t.Errorf("%s: hash unchanged", name)
		}
	}
	cfg.Mode = External
	p2 := planner{cfg: cfg, fam: fam, base: baseHash(cfg, fam)}
	if p2.frontendHash(base()) == h0 {
		t.Error("mode: hash unchanged")
	}
	if !strings.HasPrefix(p.plan(base()).comment, h0+" NodePort a/b") {
		t.Errorf("comment %q", p.plan(base()).comment)
	}
}

func TestDecodeKey(t *testing.T) {
	for _, s := range []string{"10.43.0.1:80", "[fd43::1]:65535", "0.0.0.0:1"} {
		for _, proto := range []services.Proto{services.TCP, services.UDP, services.SCTP} {
			k := key(s, proto)
			got, err := decodeKey(keyBytes(k), k.Addr.Is4())
			if err != nil || got != k {
				t.Errorf("decodeKey(keyBytes(%v)) = %v, %v", k, got, err)
			}
		}
	}
	for _, b := range [][]byte{nil, make([]byte, 11), append(make([]byte, 12), 1), {10, 0, 0, 1, 6, 1, 0, 0, 0, 80, 0, 0}} {
		if k, err := decodeKey(b, true); err == nil {
			t.Errorf("decodeKey(%x) = %v, want an error", b, k)
		}
	}
}

// FuzzDecodeKey: a map key from the kernel decodes to a key that encodes
// back to the same bytes, or to an error; never a panic.
func FuzzDecodeKey(f *testing.F) {
	f.Add(keyBytes(key("10.43.0.1:80", services.TCP)), true)
	f.Add(keyBytes(key("[fd43::1]:53", services.UDP)), false)
	f.Add([]byte{}, false)
	f.Fuzz(func(t *testing.T, b []byte, v4 bool) {
		k, err := decodeKey(b, v4)
		if err != nil {
			return
		}
		if got := keyBytes(k); string(got) != string(b) {
			t.Fatalf("keyBytes(decodeKey(%x)) = %x", b, got)
		}
	})
}

// FuzzCommentHash: an element comment yields a well-formed hash or none.
func FuzzCommentHash(f *testing.F) {
	f.Add("0123456789abcdefghijklmn NodePort a/b:http")
	f.Add("")
	f.Add("zzzzzzzzzzzzzzzzzzzzzzzz x")
	f.Fuzz(func(t *testing.T, s string) {
		h := commentHash(s)
		if h == "" {
			return
		}
		if len(h) != 24 || !strings.HasPrefix(s, h) {
			t.Fatalf("commentHash(%q) = %q", s, h)
		}
		if _, ok := ownerID("F" + h[:idLen]); !ok {
			t.Fatalf("hash %q has characters outside the ids' alphabet", h)
		}
	})
}

// TestPickRules: rule i of n takes what the rules before it left with
// probability 1/(n-i), so that each target gets 1/n; the last takes all
// that is left.
func TestPickRules(t *testing.T) {
	for n := 1; n <= 5; n++ {
		targets := make([]string, n)
		for i := range targets {
			targets[i] = fmt.Sprintf("E%d", i)
		}
		rules := pickRules(targets)
		if len(rules) != n {
			t.Fatalf("pickRules(%d targets): %d rules", n, len(rules))
		}
		left := 1.0
		for i, r := range rules {
			p := 1.0
			if i < n-1 {
				ng, ok := r.exprs[0].(*expr.Numgen)
				if !ok || ng.Modulus != uint32(n-i) {
					t.Fatalf("rule %d of %d: %#v, want numgen mod %d", i, n, r.exprs[0], n-i)
				}
				p = 1 / float64(ng.Modulus)
			} else if len(r.exprs) != 1 {
				t.Fatalf("last rule of %d: %d expressions, want a goto alone", n, len(r.exprs))
			}
			if v, ok := r.exprs[len(r.exprs)-1].(*expr.Verdict); !ok || v.Chain != targets[i] {
				t.Fatalf("rule %d of %d does not go to %s", i, n, targets[i])
			}
			if got := left * p; math.Abs(got-1/float64(n)) > 1e-9 {
				t.Errorf("target %d of %d: probability %v, want %v", i, n, got, 1/float64(n))
			}
			left -= left * p
		}
	}
}

func TestStaleFlows(t *testing.T) {
	fe := netip.MustParseAddrPort("10.43.0.10:53")
	keep := netip.MustParseAddrPort("10.42.3.11:8053")
	gone := netip.MustParseAddrPort("10.42.3.12:8053")
	s := staleFlows{fe: {keep: true}, netip.MustParseAddrPort("10.43.0.11:53"): nil}
	flow := func(proto uint8, dst, backend netip.AddrPort) *netlink.ConntrackFlow {
		f := &netlink.ConntrackFlow{}
		f.Forward.Protocol, f.Forward.DstIP, f.Forward.DstPort = proto, dst.Addr().AsSlice(), dst.Port()
		f.Reverse.SrcIP, f.Reverse.SrcPort = backend.Addr().AsSlice(), backend.Port()
		return f
	}
	for _, tc := range []struct {
		f    *netlink.ConntrackFlow
		want bool
	}{
		{flow(17, fe, keep), false},
		{flow(17, fe, gone), true},
		{flow(6, fe, gone), false}, // TCP is left to finish
		{flow(17, netip.MustParseAddrPort("10.43.0.11:53"), keep), true},
		{flow(17, netip.MustParseAddrPort("10.43.0.12:53"), gone), false},
	} {
		if got := s.MatchConntrackFlow(tc.f); got != tc.want {
			t.Errorf("MatchConntrackFlow(%v) = %v, want %v", tc.f, got, tc.want)
		}
	}
}
