// Package childhub runs a hub as a child process for the benchmarks: start
// it, wait for its kubeconfig, stop or kill it, read its memory and CPU
// from /proc, and capture CPU profiles of it and of the benchmark itself.
package childhub
