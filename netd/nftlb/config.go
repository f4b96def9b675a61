package nftlb

import (
	"errors"
	"fmt"
	"math/bits"
	"net/netip"
	"path/filepath"
)

// Mode says which traffic the dataplane routes.
type Mode uint8

// The modes.
const (
	// All routes every frontend for every client: the node's host
	// processes, its pods and traffic from outside. It is the fallback
	// for kernels without cgroup BPF.
	All Mode = iota + 1
	// External routes only NodePort and ExternalIP traffic that arrives
	// from outside the node: neither from a local address nor from the
	// cluster CIDR. The eBPF socket hooks route the rest.
	External
)

func (m Mode) String() string {
	switch m {
	case All:
		return "All"
	case External:
		return "External"
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// Config configures a Dataplane.
type Config struct {
	// Table names the nf_tables tables the dataplane owns, one in the ip
	// family and one in ip6. Two agents on one machine need different ones.
	Table string
	// HostNetNS is the path of the network namespace that plays the node:
	// "" for the agent's own. Every netlink socket is opened there.
	HostNetNS string
	// Mode says which traffic is routed.
	Mode Mode
	// PodCIDRs are this node's pod CIDRs, at most one IPv4 and one IPv6.
	// A pod that reaches a backend on this node is masqueraded, so that
	// the reply comes back through the node rather than straight over the
	// bridge.
	PodCIDRs []netip.Prefix
	// ClusterCIDRs hold every node's pod CIDRs, at most one IPv4 and one
	// IPv6. Traffic from them counts as coming from inside the cluster,
	// as kube-proxy's "ClusterCIDR" local-traffic detector judges it: it
	// is routed to Backends, never to ExternalBackends. Without one for a
	// family only the node's own addresses count as inside.
	ClusterCIDRs []netip.Prefix
	// MasqueradeMark is the packet mark bit that asks the postrouting
	// chain to masquerade a connection's first packet.
	MasqueradeMark uint32
}

// DefaultConfig returns a Config with the defaults set; the CIDRs are
// the caller's to fill.
func DefaultConfig() Config {
	return Config{
		Table:          "outpost-services", // one per agent
		HostNetNS:      "",                 // the agent's own network namespace
		Mode:           All,                // the fallback: no eBPF
		MasqueradeMark: 0x4000,             // kube-proxy's masquerade bit (14)
	}
}

// Validate reports the first problem of c.
func (c Config) Validate() error {
	switch {
	case c.Table == "":
		return errors.New("no table name")
	case len(c.Table) > 31:
		// Kernels before 4.14 allow no longer names.
		return fmt.Errorf("table name %q is longer than 31 bytes", c.Table)
	}
	if c.Mode != All && c.Mode != External {
		return fmt.Errorf("unknown %v", c.Mode)
	}
	if c.HostNetNS != "" && !filepath.IsAbs(c.HostNetNS) {
		return fmt.Errorf("host netns %q: want an absolute path", c.HostNetNS)
	}
	if bits.OnesCount32(c.MasqueradeMark) != 1 {
		return fmt.Errorf("masquerade mark %#x: want one bit", c.MasqueradeMark)
	}
	for _, l := range []struct {
		name string
		ps   []netip.Prefix
	}{{"pod CIDRs", c.PodCIDRs}, {"cluster CIDRs", c.ClusterCIDRs}} {
		var v4, v6 int
		for _, p := range l.ps {
			if !p.IsValid() || p.Masked() != p || p.Addr().Is4In6() || p.Addr().Zone() != "" {
				return fmt.Errorf("%s: %v is not a canonical prefix", l.name, p)
			}
			if p.Addr().Is4() {
				v4++
			} else {
				v6++
			}
		}
		if v4 > 1 || v6 > 1 {
			return fmt.Errorf("%s %v: want at most one per IP family", l.name, l.ps)
		}
	}
	return nil
}

// prefixOf returns the prefix of ps in the family of v4 (true: IPv4), or
// the zero Prefix.
func prefixOf(ps []netip.Prefix, v4 bool) netip.Prefix {
	for _, p := range ps {
		if p.Addr().Is4() == v4 {
			return p
		}
	}
	return netip.Prefix{}
}
