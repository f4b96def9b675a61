// Package childhub runs a hub as a child process for the benchmarks: start
// it, wait for its kubeconfig, stop or kill it, make what nodes join it
// with (its CA's pin, a bootstrap token), and capture CPU and heap
// profiles of it. It also measures processes, the hub or the benchmark
// itself: memory and CPU from /proc, peak RSS reset per phase, waiting for
// memory to settle, and the size of a data dir on disk.
package childhub
