package cgroups

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
)

// Annotations kubelet marks pods with that do not come from the API.
const (
	// AnnotationConfigSource names where a pod came from: "api", or
	// "file" for a static pod.
	AnnotationConfigSource = "kubernetes.io/config.source"
	// AnnotationConfigMirror is on a static pod's mirror in the API.
	AnnotationConfigMirror = "kubernetes.io/config.mirror"
)

// SystemCriticalPriority is the lowest priority of a critical pod
// (system-cluster-critical and system-node-critical are at or above it).
const SystemCriticalPriority int32 = 2_000_000_000

// OOM score adjustments, as kubelet's: the agent runs at AgentOOMScoreAdj,
// Guaranteed containers just above it, BestEffort ones are killed first.
const (
	AgentOOMScoreAdj      = -999
	GuaranteedOOMScoreAdj = -997
	BestEffortOOMScoreAdj = 1000
)

// IsStatic reports whether pod is a static pod: one whose config source
// annotation says it came from somewhere other than the API.
func IsStatic(pod *corev1.Pod) bool {
	src, ok := pod.Annotations[AnnotationConfigSource]
	return ok && src != "api"
}

// IsCritical reports whether pod is critical as kubelet sees it: static,
// a mirror of a static pod, or of a priority at or above
// SystemCriticalPriority. Critical pods are never evicted.
func IsCritical(pod *corev1.Pod) bool {
	if IsStatic(pod) {
		return true
	}
	if _, ok := pod.Annotations[AnnotationConfigMirror]; ok {
		return true
	}
	return pod.Spec.Priority != nil && *pod.Spec.Priority >= SystemCriticalPriority
}

func isNodeCritical(pod *corev1.Pod) bool {
	return IsCritical(pod) && pod.Spec.PriorityClassName == "system-node-critical"
}

// QOSClass returns pod's QoS class: the one in its status when set (it
// never changes once set), else ComputeQOS.
func QOSClass(pod *corev1.Pod) corev1.PodQOSClass {
	if pod.Status.QOSClass != "" {
		return pod.Status.QOSClass
	}
	return ComputeQOS(pod)
}

// ComputeQOS returns pod's QoS class by upstream's rules: BestEffort when
// no container (init containers included) requests or limits cpu or
// memory; Guaranteed when every container limits both and the summed
// requests equal the summed limits; Burstable otherwise. Pod-level
// resources, when set, decide alone. A request left out where a limit is
// set counts as the limit, as the API server defaults it (a static pod's
// manifest is not defaulted).
func ComputeQOS(pod *corev1.Pod) corev1.PodQOSClass {
	if resourcehelper.IsPodLevelResourcesSet(pod) && pod.Spec.Resources != nil {
		return qosOf([]corev1.ResourceRequirements{*pod.Spec.Resources})
	}
	all := make([]corev1.ResourceRequirements, 0, len(pod.Spec.Containers)+len(pod.Spec.InitContainers))
	for i := range pod.Spec.Containers {
		all = append(all, pod.Spec.Containers[i].Resources)
	}
	for i := range pod.Spec.InitContainers {
		all = append(all, pod.Spec.InitContainers[i].Resources)
	}
	return qosOf(all)
}

func qosOf(all []corev1.ResourceRequirements) corev1.PodQOSClass {
	requests, limits := corev1.ResourceList{}, corev1.ResourceList{}
	guaranteed := true
	add := func(l corev1.ResourceList, name corev1.ResourceName, q resource.Quantity) {
		if v, ok := l[name]; ok {
			q.Add(v)
		}
		l[name] = q
	}
	for _, r := range all {
		for name, q := range effectiveRequests(r) {
			if qosResource(name) && q.Sign() > 0 {
				add(requests, name, q.DeepCopy())
			}
		}
		var cpu, mem bool
		for name, q := range r.Limits {
			if !qosResource(name) || q.Sign() <= 0 {
				continue
			}
			cpu = cpu || name == corev1.ResourceCPU
			mem = mem || name == corev1.ResourceMemory
			add(limits, name, q.DeepCopy())
		}
		if !cpu || !mem {
			guaranteed = false
		}
	}
	if len(requests) == 0 && len(limits) == 0 {
		return corev1.PodQOSBestEffort
	}
	if guaranteed {
		for name, req := range requests {
			if lim, ok := limits[name]; !ok || lim.Cmp(req) != 0 {
				guaranteed = false
				break
			}
		}
	}
	if guaranteed && len(requests) == len(limits) {
		return corev1.PodQOSGuaranteed
	}
	return corev1.PodQOSBurstable
}

func qosResource(name corev1.ResourceName) bool {
	return name == corev1.ResourceCPU || name == corev1.ResourceMemory
}

// effectiveRequests returns r's requests with each limit that has no
// request standing in for it. The caller must not modify the result,
// which may be r.Requests.
func effectiveRequests(r corev1.ResourceRequirements) corev1.ResourceList {
	missing := false
	for name := range r.Limits {
		if _, ok := r.Requests[name]; !ok {
			missing = true
			break
		}
	}
	if !missing {
		return r.Requests
	}
	out := make(corev1.ResourceList, len(r.Limits)+len(r.Requests))
	for name, q := range r.Requests {
		out[name] = q
	}
	for name, q := range r.Limits {
		if _, ok := out[name]; !ok {
			out[name] = q.DeepCopy()
		}
	}
	return out
}

// DefaultRequests returns pod with every container's (and the pod-level)
// missing requests set to its limits, as the API server defaults a pod:
// pod itself when nothing is missing, else a copy. Callers that sum
// requests (admission, eviction, the pod cgroup) use it so that a static
// pod counts as it would through the API. The caller must not modify the
// result.
func DefaultRequests(pod *corev1.Pod) *corev1.Pod {
	needs := func(r corev1.ResourceRequirements) bool {
		for name := range r.Limits {
			if _, ok := r.Requests[name]; !ok {
				return true
			}
		}
		return false
	}
	any := pod.Spec.Resources != nil && needs(*pod.Spec.Resources)
	for i := range pod.Spec.Containers {
		any = any || needs(pod.Spec.Containers[i].Resources)
	}
	for i := range pod.Spec.InitContainers {
		any = any || needs(pod.Spec.InitContainers[i].Resources)
	}
	if !any {
		return pod
	}
	p := pod.DeepCopy()
	fill := func(r *corev1.ResourceRequirements) {
		if needs(*r) {
			r.Requests = effectiveRequests(*r)
		}
	}
	if p.Spec.Resources != nil {
		fill(p.Spec.Resources)
	}
	for i := range p.Spec.Containers {
		fill(&p.Spec.Containers[i].Resources)
	}
	for i := range p.Spec.InitContainers {
		fill(&p.Spec.InitContainers[i].Resources)
	}
	return p
}

// OOMScoreAdj returns the oom_score_adj for container c of pod on a node
// of memoryCapacity bytes, as kubelet sets it: GuaranteedOOMScoreAdj for
// Guaranteed and node-critical pods, BestEffortOOMScoreAdj for BestEffort
// ones, and for Burstable ones 1000 less the container's share of memory
// in thousandths, kept within 1000+GuaranteedOOMScoreAdj and 999. A
// sidecar (an init container that restarts Always) scores no higher than
// the pod's least-requesting app container.
func OOMScoreAdj(pod *corev1.Pod, c *corev1.Container, memoryCapacity int64) int {
	if isNodeCritical(pod) {
		return GuaranteedOOMScoreAdj
	}
	switch QOSClass(pod) {
	case corev1.PodQOSGuaranteed:
		return GuaranteedOOMScoreAdj
	case corev1.PodQOSBestEffort:
		return BestEffortOOMScoreAdj
	}
	if memoryCapacity <= 0 {
		return BestEffortOOMScoreAdj - 1
	}
	memReq := func(c *corev1.Container) int64 {
		q := effectiveRequests(c.Resources)[corev1.ResourceMemory]
		return q.Value()
	}
	var extra int64
	if resourcehelper.IsPodLevelRequestsSet(pod) {
		extra = remainingPodMemoryPerContainer(pod)
	}
	adj := 1000 - 1000*(memReq(c)+extra)/memoryCapacity
	if isSidecar(pod, c) && len(pod.Spec.Containers) > 0 {
		least := memReq(&pod.Spec.Containers[0])
		for i := range pod.Spec.Containers[1:] {
			least = min(least, memReq(&pod.Spec.Containers[i+1]))
		}
		adj = min(adj, 1000-1000*(least+extra)/memoryCapacity)
	}
	if adj < 1000+GuaranteedOOMScoreAdj {
		return 1000 + GuaranteedOOMScoreAdj
	}
	if adj >= BestEffortOOMScoreAdj {
		return BestEffortOOMScoreAdj - 1
	}
	return int(adj)
}

func isSidecar(pod *corev1.Pod, c *corev1.Container) bool {
	if c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		return false
	}
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == c.Name {
			return true
		}
	}
	return false
}

// remainingPodMemoryPerContainer is the pod-level memory request that its
// containers' requests leave over, shared out among the containers that
// run with the app (app containers and sidecars).
func remainingPodMemoryPerContainer(pod *corev1.Pod) int64 {
	podReq := pod.Spec.Resources.Requests[corev1.ResourceMemory]
	var sum int64
	n := int64(len(pod.Spec.Containers))
	for i := range pod.Spec.Containers {
		q := effectiveRequests(pod.Spec.Containers[i].Resources)[corev1.ResourceMemory]
		sum += q.Value()
	}
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			q := effectiveRequests(c.Resources)[corev1.ResourceMemory]
			sum += q.Value()
			n++
		}
	}
	if n == 0 || podReq.Value() <= sum {
		return 0
	}
	return (podReq.Value() - sum) / n
}
