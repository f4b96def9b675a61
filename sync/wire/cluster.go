package wire

import "net/netip"

// ClusterDNSAddr is the cluster DNS address of a service CIDR, which hub
// and nodes agree on without asking each other: the hub gives it to
// kube-system's kube-dns Service, pods' resolv.conf names it and every
// node answers it with its own DNS server. It is the tenth address after
// the network address, as K3s's 10.43.0.10; not valid when the range is
// too small to hold it.
func ClusterDNSAddr(serviceCIDR netip.Prefix) netip.Addr {
	if !serviceCIDR.IsValid() {
		return netip.Addr{}
	}
	p := serviceCIDR.Masked()
	a := p.Addr()
	for range 10 {
		a = a.Next()
	}
	if !p.Contains(a) || (a.Is4() && !p.Contains(a.Next())) {
		return netip.Addr{} // outside, or the IPv4 broadcast address
	}
	return a
}

// AnnotationServiceRouting is set by a node on its Node to how it routes
// Services: "ebpf", or "nftables" where its kernel lacks cgroup BPF.
const AnnotationServiceRouting = "outpost.dev/service-routing"

// The site mesh's annotations, which a node sets on its own Node through
// its status reports while it runs the mesh of its site (the nodes whose
// SiteLabel has the same value), and removes when it does not:
//
//   - AnnotationMeshAddr is the address and port the node's mesh listens
//     on, as "192.168.1.10:7946" or "[fd00::1]:7946": its site peers join
//     it there, also after a reboot while the hub is away (the site's
//     Nodes are in each node's view, and so in its checkpoint).
//   - AnnotationMeshAlive lists the site peers the node holds alive now
//     (suspects included, as SWIM does), sorted and separated by commas,
//     the node itself left out; "" when it holds none alive. The hub
//     reads it, from nodes whose session is up, to tell a node whose
//     uplink is down from a node that is dead (the SiteReachable
//     condition).
const (
	AnnotationMeshAddr  = "outpost.dev/mesh-addr"
	AnnotationMeshAlive = "outpost.dev/mesh-alive"
)

// AnnotationFirmware is set by a node on its Node to its over-the-air
// update state, as firmware/apis/v1's NodeFirmware (JSON); the value of
// that package's AnnotationState.
const AnnotationFirmware = "firmware.outpost.dev/state"

// NodeAnnotations are the annotations a node sets on its Node through its
// status reports: the hub applies these from a report, and no other.
var NodeAnnotations = []string{AnnotationServiceRouting, AnnotationMeshAddr, AnnotationMeshAlive, AnnotationFirmware}
