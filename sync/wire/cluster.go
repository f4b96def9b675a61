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

// NodeAnnotations are the annotations a node sets on its Node through its
// status reports: the hub applies these from a report, and no other.
var NodeAnnotations = []string{AnnotationServiceRouting}
