// Package nodelifecycle owns the hub's view of whether each node is there:
// Presence renews the Lease of every node connected over sync, and the
// Controller marks a node whose Lease lapsed Ready=Unknown and tainted
// unreachable, keeping its pods (edge autonomy) unless the node opts in to
// eviction with the offline-tolerance annotation. From the mesh reports
// of a node's site peers it also tells an uplink that is down from a node
// that is dead (the SiteReachable condition), and holds the eviction of a
// node its site holds alive. Decide is its pure core; the rest is a thin
// client-go shell.
package nodelifecycle
