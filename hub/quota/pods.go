package quota

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/validation"
	resourcehelper "k8s.io/component-helpers/resource"
)

// podNames are the quota resources of pods, beyond count/pods.
var podNames = map[corev1.ResourceName]bool{
	corev1.ResourceCPU: true, corev1.ResourceMemory: true, corev1.ResourceEphemeralStorage: true,
	corev1.ResourceRequestsCPU: true, corev1.ResourceRequestsMemory: true, corev1.ResourceRequestsEphemeralStorage: true,
	corev1.ResourceLimitsCPU: true, corev1.ResourceLimitsMemory: true, corev1.ResourceLimitsEphemeralStorage: true,
}

// podMatches reports the compute resources of pods: the fixed ones,
// huge pages, and requests of extended resources.
func podMatches(n corev1.ResourceName) bool {
	if podNames[n] || strings.HasPrefix(string(n), corev1.ResourceHugePagesPrefix) || strings.HasPrefix(string(n), corev1.ResourceRequestsHugePagesPrefix) {
		return true
	}
	name, ok := strings.CutPrefix(string(n), corev1.DefaultResourceRequestsPrefix)
	return ok && IsExtended(corev1.ResourceName(name))
}

// IsExtended reports whether name is an extended resource, as upstream
// decides: one outside the kubernetes.io domain, not itself a quota
// requests. name, whose quota name requests.<name> is valid.
func IsExtended(name corev1.ResourceName) bool {
	s := string(name)
	if !strings.Contains(s, "/") || strings.Contains(s, corev1.ResourceDefaultNamespacePrefix) || strings.HasPrefix(s, corev1.DefaultResourceRequestsPrefix) {
		return false
	}
	return len(validation.IsQualifiedName(corev1.DefaultResourceRequestsPrefix+s)) == 0
}

// podUsage adds a pod's compute use, as upstream's, unless it no longer
// counts (Counts): then only its object count remains.
func podUsage(obj runtime.Object, now time.Time, list corev1.ResourceList) error {
	pod, err := typed[*corev1.Pod](obj)
	if err != nil {
		return err
	}
	if !Counts(pod, now) {
		delete(list, corev1.ResourcePods)
		return nil
	}
	opts := resourcehelper.PodResourcesOptions{UseStatusResources: true}
	for n, q := range Compute(resourcehelper.PodRequests(pod, opts), resourcehelper.PodLimits(pod, opts)) {
		list[n] = q
	}
	return nil
}

// Counts reports whether pod counts in the pods quota and its compute
// resources at now: not once it has succeeded or failed, nor once its
// deletion's grace period is past (a pod stuck terminating on a lost
// node must not keep its owner from replacing it).
func Counts(pod *corev1.Pod, now time.Time) bool {
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return false
	}
	if pod.DeletionTimestamp != nil && pod.DeletionGracePeriodSeconds != nil {
		grace := time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
		if now.After(pod.DeletionTimestamp.Add(grace)) {
			return false
		}
	}
	return true
}

// Compute returns the quota resources of a pod (or a container) with
// requests and limits: pods 1, cpu and requests.cpu from the cpu
// request, limits.cpu from its limit, the same for memory and ephemeral
// storage, huge pages under both names, and requests.<name> for each
// extended resource requested.
func Compute(requests, limits corev1.ResourceList) corev1.ResourceList {
	out := corev1.ResourceList{corev1.ResourcePods: *resource.NewQuantity(1, resource.DecimalSI)}
	both := []struct{ res, req, lim corev1.ResourceName }{
		{corev1.ResourceCPU, corev1.ResourceRequestsCPU, corev1.ResourceLimitsCPU},
		{corev1.ResourceMemory, corev1.ResourceRequestsMemory, corev1.ResourceLimitsMemory},
		{corev1.ResourceEphemeralStorage, corev1.ResourceRequestsEphemeralStorage, corev1.ResourceLimitsEphemeralStorage},
	}
	for _, b := range both {
		if q, ok := requests[b.res]; ok {
			out[b.res], out[b.req] = q.DeepCopy(), q.DeepCopy()
		}
		if q, ok := limits[b.res]; ok {
			out[b.lim] = q.DeepCopy()
		}
	}
	for n, q := range requests {
		if strings.HasPrefix(string(n), corev1.ResourceHugePagesPrefix) {
			out[n] = q.DeepCopy()
			out[corev1.DefaultResourceRequestsPrefix+n] = q.DeepCopy()
		}
		if IsExtended(n) {
			out[corev1.DefaultResourceRequestsPrefix+n] = q.DeepCopy()
		}
	}
	return out
}

// Scopes returns the scopes of q as selector requirements, as upstream
// reads them: each of spec.scopes as Exists, then the expressions of
// spec.scopeSelector.
func Scopes(q *corev1.ResourceQuota) []corev1.ScopedResourceSelectorRequirement {
	var out []corev1.ScopedResourceSelectorRequirement
	for _, s := range q.Spec.Scopes {
		out = append(out, corev1.ScopedResourceSelectorRequirement{ScopeName: s, Operator: corev1.ScopeSelectorOpExists})
	}
	if q.Spec.ScopeSelector != nil {
		out = append(out, q.Spec.ScopeSelector.MatchExpressions...)
	}
	return out
}

// InScopes reports whether obj, of gr, is in every one of scopes. With
// no scopes every object is; with any, only pods can be, as upstream's
// evaluators of other resources select nothing by scope.
func InScopes(gr schema.GroupResource, obj runtime.Object, scopes []corev1.ScopedResourceSelectorRequirement) (bool, error) {
	if len(scopes) == 0 {
		return true, nil
	}
	e, ok := evaluators[gr]
	if !ok || e.scope == nil {
		return false, nil
	}
	for _, s := range scopes {
		in, err := e.scope(s, obj)
		if err != nil || !in {
			return false, err
		}
	}
	return true, nil
}

// podScope reports whether a pod is in scope s, as upstream's pod
// evaluator decides.
func podScope(s corev1.ScopedResourceSelectorRequirement, obj runtime.Object) (bool, error) {
	pod, err := typed[*corev1.Pod](obj)
	if err != nil {
		return false, err
	}
	switch s.ScopeName {
	case corev1.ResourceQuotaScopeTerminating:
		return IsTerminating(pod), nil
	case corev1.ResourceQuotaScopeNotTerminating:
		return !IsTerminating(pod), nil
	case corev1.ResourceQuotaScopeBestEffort:
		return IsBestEffort(pod), nil
	case corev1.ResourceQuotaScopeNotBestEffort:
		return !IsBestEffort(pod), nil
	case corev1.ResourceQuotaScopePriorityClass:
		if s.Operator == corev1.ScopeSelectorOpExists {
			return pod.Spec.PriorityClassName != "", nil
		}
		return priorityClassIn(s, pod.Spec.PriorityClassName)
	case corev1.ResourceQuotaScopeCrossNamespacePodAffinity:
		return usesCrossNamespaceAffinity(pod), nil
	}
	return false, nil
}

// IsTerminating reports whether pod has an active deadline: the pods
// the Terminating scope selects.
func IsTerminating(pod *corev1.Pod) bool {
	return pod.Spec.ActiveDeadlineSeconds != nil && *pod.Spec.ActiveDeadlineSeconds >= 0
}

// IsBestEffort reports whether pod is of the BestEffort QoS class: the
// one in its status, or, before one is set, no cpu or memory request or
// limit in any container or the pod's own resources.
func IsBestEffort(pod *corev1.Pod) bool {
	if pod.Status.QOSClass != "" {
		return pod.Status.QOSClass == corev1.PodQOSBestEffort
	}
	lists := []corev1.ResourceList{}
	if pod.Spec.Resources != nil {
		lists = append(lists, pod.Spec.Resources.Requests, pod.Spec.Resources.Limits)
	}
	for _, cs := range [][]corev1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for _, c := range cs {
			lists = append(lists, c.Resources.Requests, c.Resources.Limits)
		}
	}
	for _, l := range lists {
		for _, n := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			if q, ok := l[n]; ok && q.Sign() > 0 {
				return false
			}
		}
	}
	return true
}

// priorityClassIn matches a pod's priority class against s, an In,
// NotIn or DoesNotExist requirement, as a label selector on the key
// PriorityClass.
func priorityClassIn(s corev1.ScopedResourceSelectorRequirement, class string) (bool, error) {
	ops := map[corev1.ScopeSelectorOperator]selection.Operator{
		corev1.ScopeSelectorOpIn: selection.In, corev1.ScopeSelectorOpNotIn: selection.NotIn,
		corev1.ScopeSelectorOpExists: selection.Exists, corev1.ScopeSelectorOpDoesNotExist: selection.DoesNotExist,
	}
	op, ok := ops[s.Operator]
	if !ok {
		return false, fmt.Errorf("quota: unknown scope selector operator %q", s.Operator)
	}
	r, err := labels.NewRequirement(string(s.ScopeName), op, s.Values)
	if err != nil {
		return false, fmt.Errorf("quota: scope selector: %w", err)
	}
	return labels.NewSelector().Add(*r).Matches(labels.Set{string(s.ScopeName): class}), nil
}

// usesCrossNamespaceAffinity reports whether a pod affinity or
// anti-affinity term of pod names namespaces or selects them.
func usesCrossNamespaceAffinity(pod *corev1.Pod) bool {
	a := pod.Spec.Affinity
	if a == nil {
		return false
	}
	var terms []corev1.PodAffinityTerm
	if pa := a.PodAffinity; pa != nil {
		terms = append(terms, pa.RequiredDuringSchedulingIgnoredDuringExecution...)
		for _, w := range pa.PreferredDuringSchedulingIgnoredDuringExecution {
			terms = append(terms, w.PodAffinityTerm)
		}
	}
	if pa := a.PodAntiAffinity; pa != nil {
		terms = append(terms, pa.RequiredDuringSchedulingIgnoredDuringExecution...)
		for _, w := range pa.PreferredDuringSchedulingIgnoredDuringExecution {
			terms = append(terms, w.PodAffinityTerm)
		}
	}
	for _, t := range terms {
		if len(t.Namespaces) > 0 || t.NamespaceSelector != nil {
			return true
		}
	}
	return false
}

// PodConstraints returns why pod may not be created under a quota of
// names, as upstream's (a compatibility rule it keeps): when the quota
// limits cpu or memory, every container must state the request or limit
// that is limited, unless the pod states its resources as a whole. nil
// means it may.
func PodConstraints(pod *corev1.Pod, names []corev1.ResourceName) error {
	if resourcehelper.IsPodLevelResourcesSet(pod) {
		return nil
	}
	var required []corev1.ResourceName
	for _, n := range names {
		switch n {
		case corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceRequestsCPU, corev1.ResourceRequestsMemory, corev1.ResourceLimitsCPU, corev1.ResourceLimitsMemory:
			required = append(required, n)
		}
	}
	missing := map[corev1.ResourceName][]string{}
	for _, cs := range [][]corev1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for _, c := range cs {
			have := Compute(c.Resources.Requests, c.Resources.Limits)
			for _, n := range required {
				if _, ok := have[n]; !ok && !slices.Contains(missing[n], c.Name) {
					missing[n] = append(missing[n], c.Name)
				}
			}
		}
	}
	if len(missing) == 0 {
		return nil
	}
	var msgs []string
	for _, n := range slices.Sorted(maps.Keys(missing)) {
		names := missing[n]
		slices.Sort(names)
		msgs = append(msgs, fmt.Sprintf("%s for: %s", n, strings.Join(names, ",")))
	}
	return fmt.Errorf("must specify %s", strings.Join(msgs, "; "))
}
