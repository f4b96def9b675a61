package nodeipam

import (
	"errors"
	"fmt"
	"net/netip"
)

// Config configures the Controller.
type Config struct {
	// ClusterCIDR is the range the nodes' pod CIDRs are cut from:
	// 10.42.0.0/16, K3s's, beside its 10.43.0.0/16 of services
	// (kube-controller-manager's --cluster-cidr).
	ClusterCIDR netip.Prefix
	// NodeMaskSize is the prefix length of each node's pod CIDR: 24, 254
	// pods' addresses for each of 256 nodes, upstream's default for IPv4
	// (--node-cidr-mask-size). It is longer than ClusterCIDR's by at most
	// MaxBlockBits, and leaves a block at least 4 addresses (/30 in IPv4):
	// the network's, the node's bridge, a pod and the broadcast.
	NodeMaskSize int
	// Workers is how many nodes are worked on at once: 2.
	Workers int
}

// DefaultConfig returns K3s's range in upstream's blocks.
func DefaultConfig() Config {
	return Config{
		ClusterCIDR:  netip.MustParsePrefix("10.42.0.0/16"),
		NodeMaskSize: 24,
		Workers:      2,
	}
}

// Validate reports the first field of c out of range.
func (c Config) Validate() error {
	if !c.ClusterCIDR.IsValid() {
		return errors.New("nodeipam: no cluster CIDR")
	}
	if c.ClusterCIDR.Masked() != c.ClusterCIDR {
		return fmt.Errorf("nodeipam: cluster CIDR %v has host bits set: use %v", c.ClusterCIDR, c.ClusterCIDR.Masked())
	}
	if longest := c.ClusterCIDR.Addr().BitLen() - 2; c.NodeMaskSize > longest {
		return fmt.Errorf("nodeipam: node CIDR mask size %d leaves a node fewer than 4 addresses: use at most %d", c.NodeMaskSize, longest)
	}
	if _, err := NewSet(c.ClusterCIDR, c.NodeMaskSize); err != nil {
		return err
	}
	if c.Workers <= 0 {
		return errors.New("nodeipam: Workers must be positive")
	}
	return nil
}
