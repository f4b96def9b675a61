package hubd

import (
	"net"
	"testing"
)

func TestAdvertiseAddr(t *testing.T) {
	ifaces := func(addrs ...string) func() ([]net.Addr, error) {
		return func() ([]net.Addr, error) {
			var out []net.Addr
			for _, a := range addrs {
				ip, n, err := net.ParseCIDR(a)
				if err != nil {
					t.Fatal(err)
				}
				n.IP = ip
				out = append(out, n)
			}
			return out, nil
		}
	}
	for _, tc := range []struct {
		apiAddr string
		ifaces  []string
		want    string
		ok      bool
	}{
		{"192.168.1.5:6443", nil, "192.168.1.5", true},
		{"127.0.0.1:6443", []string{"10.1.2.3/24"}, "127.0.0.1", false}, // a loopback API is not for pods
		{"0.0.0.0:6443", []string{"127.0.0.1/8", "fe80::1/64", "2001:db8::5/64", "10.1.2.3/24"}, "10.1.2.3", true},
		{":6443", []string{"127.0.0.1/8", "2001:db8::5/64"}, "2001:db8::5", true},
		{"[::]:6443", []string{"127.0.0.1/8"}, "invalid IP", false},
	} {
		got, ok := advertiseAddr(tc.apiAddr, ifaces(tc.ifaces...))
		if got.String() != tc.want || ok != tc.ok {
			t.Errorf("advertiseAddr(%q, %v) = %v, %v; want %s, %v", tc.apiAddr, tc.ifaces, got, ok, tc.want, tc.ok)
		}
	}
}
