// Package edgenode runs a real edge node for the benchmarks that need real
// pods (`outpost bench density`, `outpost bench streams`): an outpost-edge
// agent as a child process on a data dir of its own, with the containerd
// it manages, joined to a hub run by childhub. It isolates the benchmark
// in a network namespace of its own first, imports a busybox image into
// the node's containerd, and removes every process, mount, network
// namespace, link and cgroup of the node at the end, or as a power cut
// would for a reboot. Only the benchmarks and `outpost bench` import it.
package edgenode
