// Package usage measures the edge node's resource usage for
// metrics.k8s.io (kubectl top): per container the CPU rate over a window
// from the cumulative usage of its cgroup and the memory working set, and
// the node's own. It keeps only the latest report, in memory (nothing
// queues while the hub is away, nothing is written to flash), and decides
// which report is worth sending; sync/client sends it. Report and Worth
// are the pure core; Meter and the sources are the I/O around it. The
// report carries the counters of the node's relay for its site peers
// too (Config.Relayed), for the hub's metrics.
package usage
