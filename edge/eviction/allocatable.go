package eviction

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Capacity returns the node's capacity: cpus cores, the machine's memory
// and nodefs's size from r (left out when unread), and maxPods pods.
func Capacity(cpus int, r Readings, maxPods int64) corev1.ResourceList {
	c := corev1.ResourceList{
		corev1.ResourceCPU:  *resource.NewMilliQuantity(int64(cpus)*1000, resource.DecimalSI),
		corev1.ResourcePods: *resource.NewQuantity(maxPods, resource.DecimalSI),
	}
	if r.MemoryTotal > 0 {
		c[corev1.ResourceMemory] = *resource.NewQuantity(r.MemoryTotal, resource.BinarySI)
	}
	if o, ok := r.Signals[SignalNodeFsAvailable]; ok {
		c[corev1.ResourceEphemeralStorage] = *resource.NewQuantity(o.Capacity, resource.BinarySI)
	}
	return c
}

// Allocatable returns what pods may have of capacity, by kubelet's
// formula: capacity less system-reserved, kube-reserved and, for memory
// and ephemeral-storage, the hard eviction threshold of memory.available
// and nodefs.available; never below zero.
func Allocatable(capacity, systemReserved, kubeReserved corev1.ResourceList, thresholds []Threshold) corev1.ResourceList {
	out := corev1.ResourceList{}
	for name, q := range capacity {
		v := q.DeepCopy()
		if r, ok := systemReserved[name]; ok {
			v.Sub(r)
		}
		if r, ok := kubeReserved[name]; ok {
			v.Sub(r)
		}
		for _, t := range thresholds {
			if t.GracePeriod != 0 {
				continue
			}
			if (name == corev1.ResourceMemory && t.Signal == SignalMemoryAvailable) ||
				(name == corev1.ResourceEphemeralStorage && t.Signal == SignalNodeFsAvailable) {
				v.Sub(*t.Value.Of(q.Value()))
			}
		}
		if v.Sign() < 0 {
			v = *resource.NewQuantity(0, q.Format)
		}
		out[name] = v
	}
	return out
}

// Reserved returns capacity less system-reserved and kube-reserved (not
// the eviction threshold), what kubelet limits the pods' root cgroup to.
func Reserved(capacity, systemReserved, kubeReserved corev1.ResourceList) corev1.ResourceList {
	return Allocatable(capacity, systemReserved, kubeReserved, nil)
}
