package objects

import (
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestPodCIDR(t *testing.T) {
	for _, c := range []struct {
		single string
		dual   []string
		want   string // "" for none
	}{
		{"10.42.1.0/24", []string{"10.42.1.0/24"}, "10.42.1.0/24"},
		{"fd00:42::/64", []string{"fd00:42::/64", "10.42.2.0/24"}, "10.42.2.0/24"},
		{"10.42.3.0/24", nil, "10.42.3.0/24"},
		{"", nil, ""},
		{"fd00:42::/64", []string{"fd00:42::/64"}, ""},
		{"garbage", []string{"also garbage"}, ""},
	} {
		n := &corev1.Node{Spec: corev1.NodeSpec{PodCIDR: c.single, PodCIDRs: c.dual}}
		got, ok := PodCIDR(n)
		if want := c.want; ok != (want != "") || ok && got != netip.MustParsePrefix(want) {
			t.Errorf("PodCIDR(%q, %q) = %v, %v; want %q", c.single, c.dual, got, ok, want)
		}
	}
}
