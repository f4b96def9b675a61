package ipam

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"testing"
)

var (
	pfx = netip.MustParsePrefix
	ip  = netip.MustParseAddr
)

func TestCheckPrefix(t *testing.T) {
	for _, tc := range []struct {
		p  netip.Prefix
		ok bool
	}{
		{pfx("10.42.3.0/24"), true},
		{pfx("10.42.0.0/16"), true},
		{pfx("10.42.3.0/30"), true},
		{pfx("10.42.3.0/31"), false},
		{pfx("10.42.3.0/32"), false},
		{pfx("10.42.3.5/24"), false},
		{pfx("fd00::/64"), false},
		{netip.Prefix{}, false},
	} {
		if err := CheckPrefix(tc.p); (err == nil) != tc.ok {
			t.Errorf("CheckPrefix(%v) = %v, want ok=%v", tc.p, err, tc.ok)
		}
	}
}

func TestGatewayBroadcast(t *testing.T) {
	for _, tc := range []struct {
		p         netip.Prefix
		gw, bcast netip.Addr
	}{
		{pfx("10.42.3.0/24"), ip("10.42.3.1"), ip("10.42.3.255")},
		{pfx("10.42.0.0/16"), ip("10.42.0.1"), ip("10.42.255.255")},
		{pfx("192.168.7.8/29"), ip("192.168.7.9"), ip("192.168.7.15")},
	} {
		if got := Gateway(tc.p); got != tc.gw {
			t.Errorf("Gateway(%v) = %v, want %v", tc.p, got, tc.gw)
		}
		if got := Broadcast(tc.p); got != tc.bcast {
			t.Errorf("Broadcast(%v) = %v, want %v", tc.p, got, tc.bcast)
		}
	}
}

func TestNewDrops(t *testing.T) {
	for _, tc := range []struct {
		name        string
		prefix      netip.Prefix
		in          []Lease
		kept, drops []Lease
	}{
		{
			name:   "all fit",
			prefix: pfx("10.42.3.0/24"),
			in:     []Lease{{"b", ip("10.42.3.9")}, {"a", ip("10.42.3.2")}},
			kept:   []Lease{{"a", ip("10.42.3.2")}, {"b", ip("10.42.3.9")}},
		},
		{
			name:   "outside a new CIDR",
			prefix: pfx("10.42.4.0/24"),
			in:     []Lease{{"a", ip("10.42.3.2")}, {"b", ip("10.42.4.7")}},
			kept:   []Lease{{"b", ip("10.42.4.7")}},
			drops:  []Lease{{"a", ip("10.42.3.2")}},
		},
		{
			name:   "reserved addresses",
			prefix: pfx("10.42.3.0/24"),
			in:     []Lease{{"n", ip("10.42.3.0")}, {"g", ip("10.42.3.1")}, {"x", ip("10.42.3.255")}, {"v6", ip("fd00::2")}},
			drops:  []Lease{{"g", ip("10.42.3.1")}, {"n", ip("10.42.3.0")}, {"v6", ip("fd00::2")}, {"x", ip("10.42.3.255")}},
		},
		{
			name:   "two UIDs on one address: the smaller keeps it",
			prefix: pfx("10.42.3.0/24"),
			in:     []Lease{{"z", ip("10.42.3.5")}, {"m", ip("10.42.3.5")}},
			kept:   []Lease{{"m", ip("10.42.3.5")}},
			drops:  []Lease{{"z", ip("10.42.3.5")}},
		},
		{
			name:   "one UID twice, empty UID",
			prefix: pfx("10.42.3.0/24"),
			in:     []Lease{{"a", ip("10.42.3.5")}, {"a", ip("10.42.3.6")}, {"", ip("10.42.3.7")}},
			kept:   []Lease{{"a", ip("10.42.3.5")}},
			drops:  []Lease{{"", ip("10.42.3.7")}, {"a", ip("10.42.3.6")}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, dropped, err := New(tc.prefix, tc.in)
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			if got := p.Leases(); !slices.Equal(got, tc.kept) && !(len(got) == 0 && len(tc.kept) == 0) {
				t.Errorf("New(%v, %v).Leases() = %v, want %v", tc.prefix, tc.in, got, tc.kept)
			}
			if !slices.Equal(dropped, tc.drops) {
				t.Errorf("New(%v, %v) dropped %v, want %v", tc.prefix, tc.in, dropped, tc.drops)
			}
		})
	}
}

func TestAllocate(t *testing.T) {
	type step struct {
		op      string // "alloc" or "release"
		uid     string
		want    string // address, "" for none
		created bool
		err     error
	}
	for _, tc := range []struct {
		name   string
		prefix netip.Prefix
		leases []Lease
		steps  []step
	}{
		{
			name:   "sequential from after the gateway",
			prefix: pfx("10.42.3.0/24"),
			steps: []step{
				{op: "alloc", uid: "a", want: "10.42.3.2", created: true},
				{op: "alloc", uid: "b", want: "10.42.3.3", created: true},
				{op: "alloc", uid: "a", want: "10.42.3.2"},
			},
		},
		{
			name:   "a released address is reused last",
			prefix: pfx("10.42.3.0/29"), // .2 to .6 leasable
			steps: []step{
				{op: "alloc", uid: "a", want: "10.42.3.2", created: true},
				{op: "alloc", uid: "b", want: "10.42.3.3", created: true},
				{op: "release", uid: "a", want: "10.42.3.2"},
				{op: "alloc", uid: "c", want: "10.42.3.4", created: true},
				{op: "alloc", uid: "d", want: "10.42.3.5", created: true},
				{op: "alloc", uid: "e", want: "10.42.3.6", created: true},
				{op: "alloc", uid: "f", want: "10.42.3.2", created: true}, // wrapped, skipping network and gateway
				{op: "alloc", uid: "g", err: ErrExhausted},
				{op: "release", uid: "c", want: "10.42.3.4"},
				{op: "alloc", uid: "g", want: "10.42.3.4", created: true},
				{op: "release", uid: "nobody"},
			},
		},
		{
			name:   "continues after the highest loaded lease",
			prefix: pfx("10.42.3.0/24"),
			leases: []Lease{{"a", ip("10.42.3.2")}, {"b", ip("10.42.3.40")}},
			steps: []step{
				{op: "alloc", uid: "b", want: "10.42.3.40"},
				{op: "alloc", uid: "c", want: "10.42.3.41", created: true},
			},
		},
		{
			name:   "smallest CIDR holds one pod",
			prefix: pfx("10.42.3.4/30"),
			steps: []step{
				{op: "alloc", uid: "a", want: "10.42.3.6", created: true},
				{op: "alloc", uid: "b", err: ErrExhausted},
			},
		},
		{
			name:   "the last host address is leased, the broadcast is not",
			prefix: pfx("10.42.3.0/24"),
			leases: []Lease{{"a", ip("10.42.3.253")}},
			steps: []step{
				{op: "alloc", uid: "b", want: "10.42.3.254", created: true},
				{op: "alloc", uid: "c", want: "10.42.3.2", created: true},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, _, err := New(tc.prefix, tc.leases)
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range tc.steps {
				switch s.op {
				case "alloc":
					l, created, err := p.Allocate(s.uid)
					if !errors.Is(err, s.err) {
						t.Fatalf("step %d: Allocate(%q) error = %v, want %v", i, s.uid, err, s.err)
					}
					if err != nil {
						continue
					}
					if l.IP.String() != s.want || created != s.created || l.UID != s.uid {
						t.Fatalf("step %d: Allocate(%q) = %v, %v, want %s, %v", i, s.uid, l, created, s.want, s.created)
					}
				case "release":
					l, ok := p.Release(s.uid)
					if ok != (s.want != "") || (ok && l.IP.String() != s.want) {
						t.Fatalf("step %d: Release(%q) = %v, %v, want %q", i, s.uid, l, ok, s.want)
					}
				}
			}
		})
	}
}

func TestAllocateFillsWideCIDR(t *testing.T) {
	p, _, err := New(pfx("10.42.0.0/22"), nil)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[netip.Addr]bool{}
	for i := range 1021 {
		l, _, err := p.Allocate(fmt.Sprint("pod-", i))
		if err != nil {
			t.Fatalf("Allocate #%d: %v", i, err)
		}
		if seen[l.IP] || !p.leasable(l.IP) {
			t.Fatalf("Allocate #%d = %v: duplicate or reserved", i, l.IP)
		}
		seen[l.IP] = true
	}
	if _, _, err := p.Allocate("one-more"); !errors.Is(err, ErrExhausted) {
		t.Fatalf("Allocate on a full /22 = %v, want ErrExhausted", err)
	}
	if l, ok := p.Get("pod-7"); !ok || !seen[l.IP] {
		t.Errorf("Get(pod-7) = %v, %v", l, ok)
	}
}
