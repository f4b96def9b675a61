package eviction

import (
	"fmt"
	"slices"
	"strings"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"

	"github.com/outpost-mesh/outpost/edge/cgroups"
)

// Admission rejection reasons, word for word as kubelet's, since users
// read them in a rejected pod's status.
const (
	ReasonOutOfCPU              = "OutOfcpu"
	ReasonOutOfMemory           = "OutOfmemory"
	ReasonOutOfEphemeralStorage = "OutOfephemeral-storage"
	ReasonOutOfPods             = "OutOfpods"
	reasonOutOfPrefix           = "OutOf"
)

// AdmitResult is whether a pod may run on the node and, if not, why.
type AdmitResult struct {
	Admit   bool
	Reason  string // such as OutOfcpu; "" when admitted
	Message string
}

// Admit reports whether pod fits the node's allocatable next to the pods
// already admitted, as kubelet's admission predicate (the scheduler's
// NodeResourcesFit): too many pods first, then cpu, memory,
// ephemeral-storage and extended resources the node offers, by requests
// counted as upstream (init containers as the larger of the largest of
// them and the sum of the app containers, sidecars added, pod-level
// resources, overhead). Only the first shortfall is reported. Pure.
func Admit(pod *corev1.Pod, admitted []*corev1.Pod, allocatable corev1.ResourceList) AdmitResult {
	used := map[corev1.ResourceName]int64{}
	for _, p := range admitted {
		for name, v := range requestValues(p) {
			used[name] += v
		}
	}
	if maxPods := allocatable.Pods().Value(); int64(len(admitted))+1 > maxPods {
		return outOf(corev1.ResourcePods, 1, int64(len(admitted)), maxPods)
	}
	req := requestValues(pod)
	names := []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage}
	var extended []corev1.ResourceName
	for name := range req {
		if !slices.Contains(names, name) {
			extended = append(extended, name)
		}
	}
	slices.Sort(extended)
	for _, name := range append(names, extended...) {
		r := req[name]
		if r <= 0 {
			continue
		}
		a, offered := allocatable[name]
		if !offered && isExtended(name) {
			// A resource the node does not know (cluster-level, or DRA) is
			// not the node's to refuse, as kubelet drops it.
			continue
		}
		capacity := a.Value()
		if name == corev1.ResourceCPU {
			capacity = a.MilliValue()
		}
		if r > capacity-used[name] {
			return outOf(name, r, used[name], capacity)
		}
	}
	return AdmitResult{Admit: true}
}

// isExtended reports whether name is an extended resource: domain
// qualified outside kubernetes.io.
func isExtended(name corev1.ResourceName) bool {
	s := string(name)
	return strings.Contains(s, "/") && !strings.Contains(s, corev1.ResourceDefaultNamespacePrefix) &&
		!strings.HasPrefix(s, corev1.DefaultResourceRequestsPrefix)
}

// requestValues returns pod's requests in cpu millicores and plain
// units for the rest.
func requestValues(pod *corev1.Pod) map[corev1.ResourceName]int64 {
	out := map[corev1.ResourceName]int64{}
	for name, q := range resourcehelper.PodRequests(cgroups.DefaultRequests(pod), resourcehelper.PodResourcesOptions{}) {
		if name == corev1.ResourceCPU {
			out[name] = q.MilliValue()
		} else {
			out[name] = q.Value()
		}
	}
	return out
}

func outOf(name corev1.ResourceName, requested, used, capacity int64) AdmitResult {
	var reason string
	switch name {
	case corev1.ResourceCPU:
		reason = ReasonOutOfCPU
	case corev1.ResourceMemory:
		reason = ReasonOutOfMemory
	case corev1.ResourceEphemeralStorage:
		reason = ReasonOutOfEphemeralStorage
	case corev1.ResourcePods:
		reason = ReasonOutOfPods
	default:
		reason = reasonOutOfPrefix + string(name)
	}
	return AdmitResult{
		Reason: reason,
		Message: fmt.Sprintf("Node didn't have enough resource: %s, requested: %d, used: %d, capacity: %d",
			name, requested, used, capacity),
	}
}

// AdmitUnderPressure reports whether pod may start while the node has the
// pressure conditions, as kubelet's eviction manager admits: critical
// pods always; under memory pressure alone, pods that are not BestEffort
// and BestEffort ones tolerating the memory-pressure taint; under any
// other pressure, none. Pure.
func AdmitUnderPressure(pod *corev1.Pod, pressure []corev1.NodeConditionType) AdmitResult {
	if len(pressure) == 0 || cgroups.IsCritical(pod) {
		return AdmitResult{Admit: true}
	}
	if len(pressure) == 1 && pressure[0] == corev1.NodeMemoryPressure {
		if cgroups.QOSClass(pod) != corev1.PodQOSBestEffort {
			return AdmitResult{Admit: true}
		}
		taint := corev1.Taint{Key: corev1.TaintNodeMemoryPressure, Effect: corev1.TaintEffectNoSchedule}
		if corev1helpers.TolerationsTolerateTaint(logr.Discard(), pod.Spec.Tolerations, &taint, true) {
			return AdmitResult{Admit: true}
		}
	}
	return AdmitResult{Reason: Reason, Message: fmt.Sprintf(nodeConditionMessageFmt, pressure)}
}
