package cgroups

import (
	corev1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"
)

// Resources are the limits set on a cgroup, in the units of cgroup v1;
// cgroup v2's are derived. A zero limit is no limit.
type Resources struct {
	CPUShares   uint64 // cpu.shares (cpu.weight on v2); 0 leaves the kernel's default
	CPUQuota    int64  // µs of CPU time a CPUPeriod; 0 for no limit
	CPUPeriod   int64  // µs; 0 for QuotaPeriod
	MemoryLimit int64  // bytes; 0 for no limit
	PidsLimit   int64  // processes; 0 for no limit
}

// PodResources returns the limits of pod's cgroup as kubelet sets them:
// cpu shares from the summed cpu requests (MinShares for a BestEffort
// pod); a cpu quota and a memory limit from the summed limits, where
// every container (init containers included) sets that limit, as for any
// Guaranteed pod; and pidsLimit. Sums count init containers and the pod's
// overhead as upstream (the larger of the init containers' and the app
// containers' sum), and pod-level resources where set. Requests missing
// where limits are set count as the limits.
func PodResources(pod *corev1.Pod, pidsLimit int64) Resources {
	pod = DefaultRequests(pod)
	r := Resources{PidsLimit: max(pidsLimit, 0)}
	qos := QOSClass(pod)
	if qos == corev1.PodQOSBestEffort {
		r.CPUShares = MinShares
		return r
	}
	reqs := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	limits := resourcehelper.PodLimits(pod, resourcehelper.PodResourcesOptions{})
	cpuDeclared, memDeclared := true, true
	check := func(cs []corev1.Container) {
		for i := range cs {
			if cs[i].Resources.Limits.Cpu().IsZero() {
				cpuDeclared = false
			}
			if cs[i].Resources.Limits.Memory().IsZero() {
				memDeclared = false
			}
		}
	}
	check(pod.Spec.Containers)
	check(pod.Spec.InitContainers)
	if resourcehelper.IsPodLevelLimitsSet(pod) {
		cpuDeclared = cpuDeclared || !pod.Spec.Resources.Limits.Cpu().IsZero()
		memDeclared = memDeclared || !pod.Spec.Resources.Limits.Memory().IsZero()
	}
	r.CPUShares = MilliCPUToShares(reqs.Cpu().MilliValue())
	if qos == corev1.PodQOSGuaranteed || cpuDeclared {
		r.CPUQuota, r.CPUPeriod = MilliCPUToQuota(limits.Cpu().MilliValue())
	}
	if qos == corev1.PodQOSGuaranteed || memDeclared {
		r.MemoryLimit = limits.Memory().Value()
	}
	return r
}

// BurstableShares returns the cpu shares of the burstable QoS cgroup, as
// kubelet's QoS manager sets them: from the summed cpu requests of the
// Burstable pods among pods. (BestEffort's are MinShares; Guaranteed pods
// sit under the root, weighed by their own.)
func BurstableShares(pods []*corev1.Pod) uint64 {
	var milli int64
	for _, p := range pods {
		milli += BurstableMilliCPU(p)
	}
	return MilliCPUToShares(milli)
}

// BurstableMilliCPU returns what pod adds to the burstable QoS cgroup's
// cpu requests: its own in millicores if it is Burstable, else 0. A node
// that keeps each pod's tells the shares from their sum without going
// over every pod's containers again.
func BurstableMilliCPU(pod *corev1.Pod) int64 {
	if QOSClass(pod) != corev1.PodQOSBurstable {
		return 0
	}
	reqs := resourcehelper.PodRequests(DefaultRequests(pod), resourcehelper.PodResourcesOptions{})
	return reqs.Cpu().MilliValue()
}
