package tcnat

import (
	"errors"
	"fmt"
	"math/bits"
	"path/filepath"
	"slices"
)

// Config says where a node's dataplane lives.
type Config struct {
	// PinDir is a directory on a bpffs mount, one per node, holding the
	// node's maps and links, e.g. /sys/fs/bpf/outpost/<node>/tcnat.
	// Required; made if missing. It must not be ebpflb's PinDir: Remove
	// takes the directory away.
	PinDir string
	// HostNetNS is the path of the network namespace that plays the
	// node, where Interfaces are and the nftables table is made: "" for
	// the agent's own.
	HostNetNS string
	// Interfaces are the names of the node's LAN interfaces (Ethernet
	// or veth): traffic arriving on them to a NodePort or external IP is
	// translated, and replies leaving through them translated back.
	// Required. Each must exist when New is called.
	Interfaces []string
	// Table names the nf_tables tables (ip and ip6) holding the
	// masquerade rule. Two agents on one machine need different ones,
	// and it must not be nftlb's table.
	Table string
	// MasqueradeMark is the packet mark bit the ingress program sets on
	// a flow that is to be masqueraded (not ExternalLocal); the table's
	// postrouting chain masquerades packets that carry it and clears it.
	MasqueradeMark uint32
	// MasqueradePortMin and MasqueradePortMax bound the source ports
	// masquerading picks. The range must not hold a NodePort: a
	// backend's reply to a masqueraded flow arrives at the node's
	// address and the masquerade port, and where that pair is also a
	// NodePort frontend the ingress program, which runs before
	// conntrack, would take the reply for a new flow. Default 32768 to
	// 60999, Linux's ephemeral ports, above Kubernetes' default NodePort
	// range (30000-32767).
	MasqueradePortMin, MasqueradePortMax uint16
	// FlowEntries is how many flows the conntrack and reverse maps
	// remember each; the least recently used are forgotten first (a
	// forgotten flow picks a backend again, a forgotten reply goes out
	// untranslated). Default 65536, some 15 MiB of kernel memory for the
	// two maps (entries are allocated up front).
	FlowEntries int
	// AffinityEntries is how many (client, frontend) ClientIP
	// affinities are remembered; the least recently used are forgotten
	// first. Default 16384, some 1.5 MiB (LRU maps allocate up front).
	AffinityEntries int
}

// DefaultConfig returns the defaults, PinDir and Interfaces left for the
// caller.
func DefaultConfig() Config {
	return Config{
		HostNetNS:         "",              // the agent's own network namespace
		Table:             "outpost-tcnat", // one per agent
		MasqueradeMark:    0x4000,          // kube-proxy's masquerade bit (14), as nftlb's
		MasqueradePortMin: 32768,           // Linux's ephemeral ports, above the NodePorts
		MasqueradePortMax: 60999,
		FlowEntries:       65536,
		AffinityEntries:   16384,
	}
}

func (c *Config) setDefaults() {
	d := DefaultConfig()
	if c.Table == "" {
		c.Table = d.Table
	}
	if c.MasqueradeMark == 0 {
		c.MasqueradeMark = d.MasqueradeMark
	}
	if c.MasqueradePortMin == 0 && c.MasqueradePortMax == 0 {
		c.MasqueradePortMin, c.MasqueradePortMax = d.MasqueradePortMin, d.MasqueradePortMax
	}
	if c.FlowEntries == 0 {
		c.FlowEntries = d.FlowEntries
	}
	if c.AffinityEntries == 0 {
		c.AffinityEntries = d.AffinityEntries
	}
}

// maxIfName is IFNAMSIZ less the terminating zero.
const maxIfName = 15

// Validate reports the first problem of c.
func (c *Config) Validate() error {
	switch {
	case c.PinDir == "" || !filepath.IsAbs(c.PinDir):
		return fmt.Errorf("pin dir %q: not an absolute path", c.PinDir)
	case c.HostNetNS != "" && !filepath.IsAbs(c.HostNetNS):
		return fmt.Errorf("host netns %q: want an absolute path", c.HostNetNS)
	case len(c.Interfaces) == 0:
		return errors.New("no interfaces")
	case c.Table == "" || len(c.Table) > 31:
		return fmt.Errorf("table name %q: want 1 to 31 bytes", c.Table)
	case bits.OnesCount32(c.MasqueradeMark) != 1:
		return fmt.Errorf("masquerade mark %#x: want one bit", c.MasqueradeMark)
	case c.MasqueradePortMin == 0 || c.MasqueradePortMin > c.MasqueradePortMax:
		return fmt.Errorf("masquerade ports %d-%d", c.MasqueradePortMin, c.MasqueradePortMax)
	case c.FlowEntries < 1 || c.AffinityEntries < 1:
		return errors.New("flow and affinity entries must be positive")
	}
	for i, name := range c.Interfaces {
		if name == "" || len(name) > maxIfName || filepath.Base(name) != name || name == "." || name == ".." {
			return fmt.Errorf("interface name %q", name)
		}
		if slices.Contains(c.Interfaces[:i], name) {
			return fmt.Errorf("interface %q twice", name)
		}
	}
	return nil
}
