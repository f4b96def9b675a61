package netd

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func TestConflicts(t *testing.T) {
	ip := netip.MustParseAddr
	for _, tc := range []struct {
		a, b HostPort
		want bool
	}{
		{HostPort{HostPort: 80}, HostPort{Protocol: TCP, HostPort: 80}, true},
		{HostPort{HostPort: 80}, HostPort{Protocol: UDP, HostPort: 80}, false},
		{HostPort{HostPort: 80}, HostPort{HostPort: 81}, false},
		{HostPort{HostPort: 80}, HostPort{HostIP: ip("192.0.2.1"), HostPort: 80}, true},
		{HostPort{HostIP: ip("0.0.0.0"), HostPort: 80}, HostPort{HostIP: ip("192.0.2.1"), HostPort: 80}, true},
		{HostPort{HostIP: ip("192.0.2.2"), HostPort: 80}, HostPort{HostIP: ip("192.0.2.1"), HostPort: 80}, false},
		{HostPort{HostIP: ip("192.0.2.1"), HostPort: 80, ContainerPort: 1}, HostPort{HostIP: ip("192.0.2.1"), HostPort: 80, ContainerPort: 2}, true},
	} {
		if got := conflicts(tc.a, tc.b); got != tc.want {
			t.Errorf("conflicts(%v, %v) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
		if got := conflicts(tc.b, tc.a); got != tc.want {
			t.Errorf("conflicts(%v, %v) = %v, want %v", tc.b, tc.a, got, tc.want)
		}
	}
}

func TestCheckSpec(t *testing.T) {
	ok := HostPort{HostPort: 8080, ContainerPort: 80}
	for _, tc := range []struct {
		spec    PodSpec
		wantErr string
	}{
		{PodSpec{UID: "0b7c6a47-8c1f-4d2e-9a0b-1c2d3e4f5a6b", HostPorts: []HostPort{ok}}, ""},
		{PodSpec{UID: "d41d8cd98f00b204e9800998ecf8427e"}, ""},
		{PodSpec{UID: ""}, "want 1 to 128 bytes"},
		{PodSpec{UID: ".."}, "want 1 to 128 bytes"},
		{PodSpec{UID: strings.Repeat("a", 129)}, "want 1 to 128 bytes"},
		{PodSpec{UID: "a/b"}, "holds '/'"},
		{PodSpec{UID: "a b"}, "holds ' '"},
		{PodSpec{UID: "u", HostPorts: []HostPort{{Protocol: "ICMP", HostPort: 1, ContainerPort: 1}}}, "protocol"},
		{PodSpec{UID: "u", HostPorts: []HostPort{{HostPort: 0, ContainerPort: 1}}}, "ports must be"},
		{PodSpec{UID: "u", HostPorts: []HostPort{{HostPort: 1, ContainerPort: 0}}}, "ports must be"},
		{PodSpec{UID: "u", HostPorts: []HostPort{{HostIP: netip.MustParseAddr("fd00::1"), HostPort: 1, ContainerPort: 1}}}, "not IPv4"},
		{PodSpec{UID: "u", HostPorts: []HostPort{ok, {HostPort: 8080, ContainerPort: 81}}}, ErrHostPortConflict.Error()},
	} {
		err := checkSpec(tc.spec)
		if tc.wantErr == "" {
			if err != nil {
				t.Errorf("checkSpec(%+v) = %v, want nil", tc.spec, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("checkSpec(%+v) = %v, want an error with %q", tc.spec, err, tc.wantErr)
		}
	}
	if err := checkSpec(PodSpec{UID: "u", HostPorts: []HostPort{ok, ok}}); !errors.Is(err, ErrHostPortConflict) {
		t.Errorf("checkSpec with a port twice = %v, want ErrHostPortConflict", err)
	}
}

func TestRuleComment(t *testing.T) {
	for _, hp := range []HostPort{
		{HostPort: 8080, ContainerPort: 80},
		{Protocol: UDP, HostIP: netip.MustParseAddr("192.0.2.1"), HostPort: 53, ContainerPort: 5353},
		{Protocol: SCTP, HostPort: 65535, ContainerPort: 1},
	} {
		c := ruleComment("0b7c6a47-8c1f", hp)
		uid, got, ok := parseRuleComment(c)
		if !ok || uid != "0b7c6a47-8c1f" || got != hp.key() {
			t.Errorf("parseRuleComment(%q) = %q, %+v, %v, want %+v", c, uid, got, ok, hp.key())
		}
		back, ok := ruleUserComment(userComment(c))
		if !ok || back != c {
			t.Errorf("ruleUserComment(userComment(%q)) = %q, %v", c, back, ok)
		}
	}
	for _, bad := range []string{"", "u tcp 0.0.0.0:80", "u icmp 0.0.0.0:80 80", "u tcp [::1]:80 80", "u tcp 0.0.0.0:0 80", "u tcp 0.0.0.0:80 0", "a/b tcp 0.0.0.0:80 80", "u tcp 0.0.0.0:80 70000"} {
		if _, _, ok := parseRuleComment(bad); ok {
			t.Errorf("parseRuleComment(%q) accepted it", bad)
		}
	}
	for _, udata := range [][]byte{nil, {0}, {0, 5, 'a'}, {1, 1, 'x'}} {
		if s, ok := ruleUserComment(udata); ok {
			t.Errorf("ruleUserComment(%q) = %q, want none", udata, s)
		}
	}
	// Another record first, as a comment need not be the first.
	if s, ok := ruleUserComment(append([]byte{1, 1, 'x'}, userComment("hi")...)); !ok || s != "hi" {
		t.Errorf("ruleUserComment after another record = %q, %v", s, ok)
	}
}

// FuzzRuleUserData feeds arbitrary rule user data, which any program may
// have put on a rule in netd's chain, to the decoders Sweep and AddPod use.
func FuzzRuleUserData(f *testing.F) {
	f.Add(userComment(ruleComment("uid-1", HostPort{HostPort: 80, ContainerPort: 8080})))
	f.Add([]byte{0, 200, 'x'})
	f.Add([]byte{1, 0, 0, 3, 'a', ' ', 'b'})
	f.Fuzz(func(t *testing.T, udata []byte) {
		c, ok := ruleUserComment(udata)
		if !ok {
			return
		}
		uid, hp, ok := parseRuleComment(c)
		if !ok {
			return
		}
		if checkUID(uid) != nil || hp.HostPort == 0 || hp.ContainerPort == 0 || !hp.HostIP.Is4() {
			t.Fatalf("parseRuleComment(%q) = %q, %+v: accepted what AddPod would refuse", c, uid, hp)
		}
		if u2, h2, ok := parseRuleComment(ruleComment(uid, hp)); !ok || u2 != uid || h2 != hp {
			t.Fatalf("parseRuleComment(ruleComment(%q, %+v)) = %q, %+v, %v", uid, hp, u2, h2, ok)
		}
	})
}

func TestConfigValidate(t *testing.T) {
	base := DefaultConfig()
	base.PodCIDR = netip.MustParsePrefix("10.42.3.0/24")
	base.NetNSDir = "/var/lib/outpost/netns"
	base.Leases = newMemLeases()
	base.Logger = nil
	for _, tc := range []struct {
		name    string
		mod     func(c *Config)
		wantErr string
	}{
		{"valid", func(c *Config) {}, ""},
		{"no bridge", func(c *Config) { c.Bridge = "" }, "bridge"},
		{"long bridge", func(c *Config) { c.Bridge = "outpost-bridge-0x" }, "longer than 15"},
		{"bridge with colon", func(c *Config) { c.Bridge = "a:b" }, "':'"},
		{"no pod CIDR", func(c *Config) { c.PodCIDR = netip.Prefix{} }, "pod CIDR is not set"},
		{"pod CIDR outside cluster", func(c *Config) { c.PodCIDR = netip.MustParsePrefix("10.50.0.0/24") }, "not inside"},
		{"pod CIDR wider than cluster", func(c *Config) { c.PodCIDR = netip.MustParsePrefix("10.0.0.0/8") }, "not inside"},
		{"services overlap pods", func(c *Config) { c.ServiceCIDR = netip.MustParsePrefix("10.42.128.0/17") }, "overlaps"},
		{"cluster not canonical", func(c *Config) { c.ClusterCIDR = netip.MustParsePrefix("10.42.0.1/16") }, "canonical"},
		{"MTU", func(c *Config) { c.MTU = 100 }, "MTU"},
		{"relative netns dir", func(c *Config) { c.NetNSDir = "netns" }, "absolute"},
		{"relative host netns", func(c *Config) { c.HostNetNS = "ns" }, "absolute"},
		{"no leases", func(c *Config) { c.Leases = nil }, "lease store"},
		{"no logger", func(c *Config) { c.Logger = nil }, "logger"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base
			c.Logger = testLogger(t)
			tc.mod(&c)
			err := c.Validate()
			if tc.wantErr == "" {
				if err != nil {
					t.Errorf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Validate() = %v, want an error with %q", err, tc.wantErr)
			}
		})
	}
}
