package view

import (
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/outpost-mesh/outpost/sync/wire"
)

// Sites. A node's view holds the Nodes of its site: every other Node
// whose label wire.SiteLabel has the same non-empty value as the node's
// own Node's. The edge builds its site's overlay (VXLAN, the memberlist
// mesh) from them. A node whose Node does not exist, has no label, or
// does not decode is in no site and sees no other Node. Sites are small
// (a few dozen nodes at most) while a fleet has thousands: the index keeps
// each site's Nodes, so that a Node's change costs the nodes of its sites
// (before and after) only.

// decodeNode returns the site of a Node stored as raw (Kubernetes
// protobuf), "" for none, and false with "" if raw is not a Node.
func decodeNode(raw []byte) (string, bool) {
	obj, _, err := codec.Decode(raw, nil, &corev1.Node{})
	if err != nil {
		return "", false
	}
	node, ok := obj.(*corev1.Node)
	if !ok {
		return "", false
	}
	return node.Labels[wire.SiteLabel], true
}

// siteChange is what one change of a Node did to sites: its site before
// and after ("" for none, or no Node). When they differ, left and joined
// are the other Nodes of each, sorted: the node's view loses the ones and
// gains the others. It is immutable once built, shared by the history and
// its sessions.
type siteChange struct {
	prev, next   string
	left, joined []string
}

// nodeKey returns the key of the Node of node.
func nodeKey(node string) wire.Key {
	return wire.Key{Resource: wire.ResourceNodes, Name: node}
}

// placeNode makes site ("" for none) the site of node's Node, and returns
// what that changed: nil if the Node was and is in no site. x.mu is held.
func (x *Index) placeNode(node, site string) *siteChange {
	prev := x.siteOf[node]
	if prev == "" && site == "" {
		return nil
	}
	c := &siteChange{prev: prev, next: site}
	if prev == site {
		return c
	}
	if prev != "" {
		ns := x.sites[prev]
		delete(ns, node)
		if len(ns) == 0 {
			delete(x.sites, prev)
		}
		delete(x.siteOf, node)
		c.left = x.members(prev, node)
	}
	if site != "" {
		c.joined = x.members(site, node)
		ns := x.sites[site]
		if ns == nil {
			ns = make(map[string]struct{})
			x.sites[site] = ns
		}
		ns[node] = struct{}{}
		x.siteOf[node] = site
	}
	return c
}

// members returns the Nodes of site other than but, sorted. x.mu is
// held.
func (x *Index) members(site, but string) []string {
	ns := x.sites[site]
	out := make([]string, 0, len(ns))
	for n := range ns {
		if n != but {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// eachPeer calls f with the Nodes of the sites of c (before and after),
// each once, but node, whose change c is; x.sites is as after c. x.mu is
// held.
func (x *Index) eachPeer(c *siteChange, node string, f func(string)) {
	if c == nil {
		return
	}
	sites := []string{c.prev, c.next}
	if c.prev == c.next {
		sites = sites[:1]
	}
	for _, site := range sites {
		for n := range x.sites[site] { // none for ""
			if n != node {
				f(n)
			}
		}
	}
}

// peers returns the number of Nodes eachPeer calls f with, or more.
func (x *Index) peers(c *siteChange) int {
	if c == nil {
		return 0
	}
	n := len(x.sites[c.prev])
	if c.next != c.prev {
		n += len(x.sites[c.next])
	}
	return n
}
