// Package netd owns the node's pod network: the bridge that holds the pod
// CIDR's gateway, a network namespace and veth per pod with its IP lease
// (kept across agent restarts through a LeaseStore), the node's routes and
// nf_tables rules for masquerade and hostPorts, and the pod's hosts and
// resolver files (netd/podfiles). The edge agent drives it through Network;
// netd imports nothing from hub or edge.
//
// Beside it in this tree: the service routing table (netd/services) and
// its two dataplanes, eBPF socket load-balancing (netd/ebpflb) and the
// nftables fallback (netd/nftlb); the node-local DNS server (netd/dns);
// and the site overlay (netd/overlay).
package netd
