package netsvc

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/sync/wire"
)

func TestSitePeers(t *testing.T) {
	node := func(name, site, ip, cidr string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
		if site != "" {
			n.Labels[wire.SiteLabel] = site
		}
		if ip != "" {
			n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: name}, {Type: corev1.NodeInternalIP, Address: ip}}
		}
		if cidr != "" {
			n.Spec.PodCIDR, n.Spec.PodCIDRs = cidr, []string{cidr}
		}
		return n
	}
	nodes := []*corev1.Node{
		node("c", "shop", "192.168.1.3", "10.42.3.0/24"),
		node("self", "shop", "192.168.1.1", "10.42.1.0/24"),
		node("b", "shop", "192.168.1.2", "10.42.2.0/24"),
		node("other-site", "depot", "192.168.9.1", "10.42.9.0/24"),
		node("no-site", "", "192.168.1.4", "10.42.4.0/24"),
		node("no-ip", "shop", "", "10.42.5.0/24"),
		node("no-cidr", "shop", "192.168.1.6", ""),
		node("v6-cidr", "shop", "192.168.1.7", "fd00:42::/64"),
		nil,
	}
	got := sitePeers("self", "shop", nodes)
	if len(got) != 2 || got[0].Node != "b" || got[1].Node != "c" ||
		got[0].Underlay.String() != "192.168.1.2" || got[0].PodCIDR.String() != "10.42.2.0/24" {
		t.Errorf("sitePeers = %+v, want b and c with their addresses and pod CIDRs", got)
	}
	if got := sitePeers("self", "", nodes); got != nil {
		t.Errorf("a node of no site has peers %+v", got)
	}
}
