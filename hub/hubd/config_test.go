package hubd

import (
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"testing"
)

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*Config)
		ok     bool
	}{
		{"default", func(*Config) {}, true},
		{"etcd", func(c *Config) { c.Store = StoreEtcd; c.EtcdEndpoints = []string{"http://127.0.0.1:2379"} }, true},
		{"sans", func(c *Config) { c.TLSSANs = []string{"hub.example.com", "10.0.0.1"} }, true},
		{"no data dir", func(c *Config) { c.DataDir = "" }, false},
		{"no port", func(c *Config) { c.APIAddr = "127.0.0.1" }, false},
		{"unknown store", func(c *Config) { c.Store = "sqlite" }, false},
		{"etcd without endpoints", func(c *Config) { c.Store = StoreEtcd }, false},
		{"endpoints without etcd", func(c *Config) { c.EtcdEndpoints = []string{"http://127.0.0.1:2379"} }, false},
		{"bad san", func(c *Config) { c.TLSSANs = []string{"not a name"} }, false},
		{"no logger", func(c *Config) { c.Logger = nil }, false},
		{"no event TTL", func(c *Config) { c.EventTTL = 0 }, false},
		{"node mask /30", func(c *Config) { c.NodeCIDRMaskSize = 30 }, true},
		{"node mask /31", func(c *Config) { c.NodeCIDRMaskSize = 31 }, false},
		{"node mask as the cluster's", func(c *Config) { c.NodeCIDRMaskSize = 16 }, false},
		{"node mask shorter", func(c *Config) { c.NodeCIDRMaskSize = 8 }, false},
		{"too many blocks", func(c *Config) { c.ClusterCIDR = netip.MustParsePrefix("10.0.0.0/8"); c.NodeCIDRMaskSize = 25 }, false},
		{"no cluster CIDR", func(c *Config) { c.ClusterCIDR = netip.Prefix{} }, false},
		{"cluster CIDR host bits", func(c *Config) { c.ClusterCIDR = netip.MustParsePrefix("10.42.0.1/16") }, false},
		{"cluster CIDR over the services'", func(c *Config) { c.ClusterCIDR = netip.MustParsePrefix("10.0.0.0/8") }, false},
		{"cluster CIDR inside the services'", func(c *Config) { c.ClusterCIDR = netip.MustParsePrefix("10.43.128.0/20") }, false},
		{"cluster CIDR beside the services'", func(c *Config) { c.ClusterCIDR = netip.MustParsePrefix("10.44.0.0/14") }, true},
		{"IPv6 cluster CIDR", func(c *Config) { c.ClusterCIDR = netip.MustParsePrefix("fd00:42::/56"); c.NodeCIDRMaskSize = 64 }, true},
		{"not allocating: unchecked", func(c *Config) { c.AllocateNodeCIDRs = false; c.ClusterCIDR = netip.Prefix{} }, true},
	} {
		c := DefaultConfig("/var/lib/outpost")
		tc.mutate(&c)
		if err := c.Validate(); (err == nil) != tc.ok {
			t.Errorf("%s: Validate() = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

func TestClientAddr(t *testing.T) {
	for _, tc := range []struct {
		apiAddr, bound, want string
	}{
		{"127.0.0.1:6443", "127.0.0.1:6443", "127.0.0.1:6443"},
		{"127.0.0.1:0", "127.0.0.1:41234", "127.0.0.1:41234"},
		{":6443", "[::]:6443", "127.0.0.1:6443"},
		{"0.0.0.0:6443", "0.0.0.0:6443", "127.0.0.1:6443"},
		{"[::]:6443", "[::]:6443", "[::1]:6443"},
		{"hub.example.com:6443", "10.0.0.1:6443", "hub.example.com:6443"},
		{"[fd00::1]:0", "[fd00::1]:5000", "[fd00::1]:5000"},
	} {
		bound, err := net.ResolveTCPAddr("tcp", tc.bound)
		if err != nil {
			t.Fatal(err)
		}
		if got := clientAddr(tc.apiAddr, bound); got != tc.want {
			t.Errorf("clientAddr(%q, %v) = %q, want %q", tc.apiAddr, tc.bound, got, tc.want)
		}
	}
}

func TestServingNames(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	got := servingNames("10.1.2.3:6443", []string{"hub.example.com"}, log)
	for _, want := range []string{"localhost", "127.0.0.1", "::1", "10.1.2.3", "hub.example.com"} {
		if !slices.Contains(got, want) {
			t.Errorf("servingNames = %v, want %q among them", got, want)
		}
	}
	for _, wildcard := range []string{"0.0.0.0:6443", ":6443", "[::]:6443"} {
		for _, n := range servingNames(wildcard, nil, log) {
			if n == "" || n == "0.0.0.0" || n == "::" {
				t.Errorf("servingNames(%q) includes the wildcard %q", wildcard, n)
			}
		}
	}
}
