// Package eviction is the edge agent's node-pressure eviction and
// resource admission, as kubelet's eviction manager and admission
// predicates: node readings (memory, nodefs, imagefs, pids) from the
// machine, the node's capacity and allocatable, whether a pod fits, the
// MemoryPressure/DiskPressure/PIDPressure conditions and which pod to
// evict when a threshold is crossed. Decisions are pure (Core, Admit);
// Monitor is the thin shell that takes readings every 10s.
package eviction
