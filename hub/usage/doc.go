// Package usage keeps the resource usage the nodes report over sync (the
// latest of each node, in memory only) and serves it as metrics.k8s.io's
// NodeMetrics and PodMetrics, read-only, as metrics-server does, for
// kubectl top; and the counters of the nodes' relays for their site peers
// as Prometheus metrics (RelayCollector). Only the hub's composition root
// imports it.
package usage
