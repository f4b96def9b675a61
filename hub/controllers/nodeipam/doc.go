// Package nodeipam gives each Node a pod CIDR of its own from the
// cluster's range, as upstream's node IPAM controller does with its range
// allocator: a block of the cluster CIDR in spec.podCIDR and
// spec.podCIDRs for every node that has none, never the same block to two
// nodes, and the block back to the range when the Node goes. Set and
// Allocator are its pure core; Controller is the thin client-go shell.
package nodeipam
