package dns

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/outpost-mesh/outpost/netd/podfiles"
)

func TestParseResolvConf(t *testing.T) {
	self := netip.MustParseAddr("10.42.0.1")
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"nameserver 192.0.2.1\nnameserver 2001:db8::53\n", []string{"192.0.2.1:53", "[2001:db8::53]:53"}},
		{"# comment\nsearch example.com\nnameserver 192.0.2.1\noptions ndots:2\n", []string{"192.0.2.1:53"}},
		{"nameserver\nnameserver dns.example.com\nnameserver 10.42.0.1\nnameserver 192.0.2.2\n", []string{"192.0.2.2:53"}},
		{"nameserver 192.0.2.1\nnameserver 192.0.2.2\nnameserver 192.0.2.3\nnameserver 192.0.2.4\n", []string{"192.0.2.1:53", "192.0.2.2:53", "192.0.2.3:53"}},
		{"nameserver ::ffff:192.0.2.9\n", []string{"192.0.2.9:53"}},
		{"nameserver fe80::1%eth0\n", []string{"[fe80::1%eth0]:53"}},
		{"", nil},
	} {
		got, err := ParseResolvConf(strings.NewReader(tc.in), self)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("ParseResolvConf(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	big := strings.Repeat("# filler\n", podfiles.MaxFileSize/8)
	if _, err := ParseResolvConf(strings.NewReader(big), self); !errors.Is(err, podfiles.ErrTooLarge) {
		t.Errorf("ParseResolvConf(%d bytes) = %v, want ErrTooLarge", len(big), err)
	}
}

func TestReadResolvConf(t *testing.T) {
	p := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(p, []byte("nameserver 192.0.2.1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := ReadResolvConf(p, netip.Addr{})
	if err != nil || !slices.Equal(got, []string{"192.0.2.1:53"}) {
		t.Errorf("ReadResolvConf = %q, %v", got, err)
	}
	if _, err := ReadResolvConf(filepath.Join(t.TempDir(), "none"), netip.Addr{}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ReadResolvConf(missing) = %v, want ErrNotExist", err)
	}
}

func FuzzParseResolvConf(f *testing.F) {
	f.Add("nameserver 192.0.2.1\nsearch a b\noptions ndots:5\n")
	f.Add("nameserver\nnameserver ::1\n")
	f.Fuzz(func(t *testing.T, s string) {
		ups, err := ParseResolvConf(strings.NewReader(s), netip.Addr{})
		if err != nil {
			return
		}
		if len(ups) > MaxUpstreams {
			t.Fatalf("%d upstreams, want at most %d", len(ups), MaxUpstreams)
		}
		for _, u := range ups {
			if _, err := netip.ParseAddrPort(u); err != nil {
				t.Fatalf("upstream %q: %v", u, err)
			}
		}
	})
}
