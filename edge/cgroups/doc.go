// Package cgroups owns the edge agent's pod cgroups as kubelet's cgroupfs
// driver lays them out: a pod's QoS class and its containers' OOM score
// adjustment, the pod-level limits, the kubepods tree under a root of the
// agent's own, and the readings (memory working set, CPU, OOM kills) of a
// pod's cgroup. It runs on cgroup v1 (the hybrid layout included) and on
// cgroup v2, detected at New.
package cgroups
