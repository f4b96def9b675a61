package netsvc

import (
	"net/netip"
	"sort"

	corev1 "k8s.io/api/core/v1"

	"github.com/outpost-mesh/outpost/edge/objects"
	"github.com/outpost-mesh/outpost/netd/overlay"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// sitePeers returns the overlay peers of node self among nodes: the other
// nodes of site with an InternalIP and an IPv4 pod CIDR, sorted by name.
// The hub sends a node only its own site's Nodes; those of another site,
// which it would not send, are left out all the same. No I/O.
func sitePeers(self, site string, nodes []*corev1.Node) []overlay.Peer {
	if site == "" {
		return nil
	}
	var out []overlay.Peer
	for _, n := range nodes {
		if n == nil || n.Name == self || n.Labels[wire.SiteLabel] != site {
			continue
		}
		under, ok := internalIP(n)
		if !ok {
			continue
		}
		cidr, ok := objects.PodCIDR(n)
		if !ok {
			continue
		}
		out = append(out, overlay.Peer{Node: n.Name, Underlay: under, PodCIDR: cidr})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}

// internalIP returns the node's first InternalIP address.
func internalIP(n *corev1.Node) (netip.Addr, bool) {
	for _, a := range n.Status.Addresses {
		if a.Type != corev1.NodeInternalIP {
			continue
		}
		if ip, err := netip.ParseAddr(a.Address); err == nil {
			return ip.Unmap(), true
		}
	}
	return netip.Addr{}, false
}
