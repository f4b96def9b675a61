package wire

import (
	"fmt"
	"net/netip"
	"strings"
)

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

// AnnotationTimeZone is set by a node on its Node to the IANA name of its
// site's time zone, such as "Europe/Berlin": its --timezone, or the zone
// its machine's clock is set to. Over-the-air rollouts open their
// maintenance windows in it. A node that does not know its zone leaves it
// unset, and is taken to be on UTC. Label values cannot hold the "/" of
// most zone names, hence an annotation.
const AnnotationTimeZone = "topology.outpost.dev/timezone"

// MaxTimeZoneLen bounds a time zone name: the longest in the IANA
// database has 32 bytes.
const MaxTimeZoneLen = 64

// ValidTimeZone reports whether name is written as an IANA time zone
// name: "UTC", "Europe/Berlin", "America/Argentina/Buenos_Aires",
// "Etc/GMT+3". It does not say the zone exists: the hub's zone database
// does.
func ValidTimeZone(name string) error {
	if name == "" || len(name) > MaxTimeZoneLen {
		return fmt.Errorf("time zone %.80q: want 1 to %d bytes", name, MaxTimeZoneLen)
	}
	for _, part := range strings.Split(name, "/") {
		if part == "" || part == "." || part == ".." {
			return fmt.Errorf("time zone %q: not a zone name like Europe/Berlin", name)
		}
		for _, r := range part {
			switch {
			case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			case r == '_', r == '-', r == '+', r == '.':
			default:
				return fmt.Errorf("time zone %q: %q is not in a zone name", name, r)
			}
		}
	}
	return nil
}

// NodeAnnotations are the annotations a node sets on its Node through its
// status reports: the hub applies these from a report, and no other.
var NodeAnnotations = []string{AnnotationServiceRouting, AnnotationMeshAddr, AnnotationMeshAlive, AnnotationFirmware, AnnotationTimeZone}
