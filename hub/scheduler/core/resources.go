package core

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	resourcehelper "k8s.io/component-helpers/resource"
)

// Upstream's defaults for a container that requests no cpu or memory,
// used only to score (LeastAllocated and the nodes' NonZeroRequested), so
// that best-effort pods still spread.
const (
	DefaultMilliCPURequest int64 = 100               // 0.1 core
	DefaultMemoryRequest   int64 = 200 * 1024 * 1024 // 200 MiB
)

// Resource is a set of quantities in the units the scheduler compares:
// millicores for cpu, bytes (or plain counts) for the rest.
type Resource struct {
	MilliCPU         int64
	Memory           int64
	EphemeralStorage int64
	// AllowedPodNumber is the node's allocatable "pods"; unused in requests.
	AllowedPodNumber int
	// Scalar holds extended resources, hugepages and prefixed native
	// resources; nil when there are none.
	Scalar map[corev1.ResourceName]int64
}

// resourceOf converts a resource list as upstream's framework.Resource.Add
// does: unknown unprefixed names are dropped.
func resourceOf(rl corev1.ResourceList) Resource {
	var r Resource
	r.add(rl)
	return r
}

func (r *Resource) add(rl corev1.ResourceList) {
	for name, q := range rl {
		switch name {
		case corev1.ResourceCPU:
			r.MilliCPU += q.MilliValue()
		case corev1.ResourceMemory:
			r.Memory += q.Value()
		case corev1.ResourcePods:
			r.AllowedPodNumber += int(q.Value())
		case corev1.ResourceEphemeralStorage:
			r.EphemeralStorage += q.Value()
		default:
			if isScalarResourceName(name) {
				if r.Scalar == nil {
					r.Scalar = map[corev1.ResourceName]int64{}
				}
				r.Scalar[name] += q.Value()
			}
		}
	}
}

// addResource adds o to r (sign +1) or takes it away (sign -1).
func (r *Resource) addResource(o *Resource, sign int64) {
	r.MilliCPU += sign * o.MilliCPU
	r.Memory += sign * o.Memory
	r.EphemeralStorage += sign * o.EphemeralStorage
	for name, v := range o.Scalar {
		if r.Scalar == nil {
			r.Scalar = map[corev1.ResourceName]int64{}
		}
		r.Scalar[name] += sign * v
		if r.Scalar[name] == 0 {
			delete(r.Scalar, name)
		}
	}
}

// isScalarResourceName reports whether name is counted as a scalar
// resource, as upstream's v1helper.IsScalarResourceName.
func isScalarResourceName(name corev1.ResourceName) bool {
	s := string(name)
	return isExtendedResourceName(name) ||
		strings.HasPrefix(s, corev1.ResourceHugePagesPrefix) ||
		strings.Contains(s, corev1.ResourceDefaultNamespacePrefix) ||
		strings.HasPrefix(s, corev1.ResourceAttachableVolumesPrefix)
}

// isExtendedResourceName reports whether name is an extended resource: a
// domain-qualified name outside kubernetes.io that is valid as a quota key.
func isExtendedResourceName(name corev1.ResourceName) bool {
	s := string(name)
	if !strings.Contains(s, "/") || strings.Contains(s, corev1.ResourceDefaultNamespacePrefix) ||
		strings.HasPrefix(s, corev1.DefaultResourceRequestsPrefix) {
		return false
	}
	return len(validation.IsQualifiedName(corev1.DefaultResourceRequestsPrefix+s)) == 0
}

// podRequests is what a pod asks of a node as NodeResourcesFit filters:
// containers summed, the largest init container (sidecars as upstream
// counts them), pod-level resources when set, and the overhead.
func podRequests(pod *corev1.Pod) Resource {
	return resourceOf(resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{}))
}

// assignedPodRequests is podRequests for a pod already on a node, which
// also reads the resources its status reports (in-place resize), and the
// non-zero cpu and memory the node's NonZeroRequested adds up.
func assignedPodRequests(pod *corev1.Pod) (req Resource, nonZeroCPU, nonZeroMem int64) {
	opts := resourcehelper.PodResourcesOptions{UseStatusResources: true}
	reqs := resourcehelper.PodRequests(pod, opts)
	req = resourceOf(reqs)
	missing := corev1.ResourceList{}
	if !resourcehelper.IsPodLevelRequestsSet(pod) {
		missing[corev1.ResourceCPU] = *resource.NewMilliQuantity(DefaultMilliCPURequest, resource.DecimalSI)
		missing[corev1.ResourceMemory] = *resource.NewQuantity(DefaultMemoryRequest, resource.DecimalSI)
	} else {
		if _, ok := reqs[corev1.ResourceCPU]; !ok {
			missing[corev1.ResourceCPU] = *resource.NewMilliQuantity(DefaultMilliCPURequest, resource.DecimalSI)
		}
		if _, ok := reqs[corev1.ResourceMemory]; !ok {
			missing[corev1.ResourceMemory] = *resource.NewQuantity(DefaultMemoryRequest, resource.DecimalSI)
		}
	}
	nonZero := reqs
	if len(missing) > 0 {
		opts.NonMissingContainerRequests = missing
		nonZero = resourcehelper.PodRequests(pod, opts)
	}
	cpu, mem := nonZero[corev1.ResourceCPU], nonZero[corev1.ResourceMemory]
	return req, cpu.MilliValue(), mem.Value()
}

// scoreRequests returns the pod's cpu and memory requests as the
// resource scorers see them: with the per-container defaults filled in
// for LeastAllocated (nonZero), as they are for BalancedAllocation.
func scoreRequests(pod *corev1.Pod) (nonZero, plain [2]int64) {
	defaults := corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewMilliQuantity(DefaultMilliCPURequest, resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(DefaultMemoryRequest, resource.DecimalSI),
	}
	nz := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{NonMissingContainerRequests: defaults})
	pl := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	cpu, mem := nz[corev1.ResourceCPU], nz[corev1.ResourceMemory]
	nonZero = [2]int64{cpu.MilliValue(), mem.Value()}
	cpu, mem = pl[corev1.ResourceCPU], pl[corev1.ResourceMemory]
	plain = [2]int64{cpu.MilliValue(), mem.Value()}
	return nonZero, plain
}
