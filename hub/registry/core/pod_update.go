package core

// Pod updates and status updates.

import (
	"fmt"
	"math"
	"reflect"
	"strings"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// updatablePodSpecFields is what ValidatePodUpdate upstream lets a pod
// update change, in its words.
var updatablePodSpecFields = []string{
	"`spec.containers[*].image`",
	"`spec.initContainers[*].image`",
	"`spec.activeDeadlineSeconds`",
	"`spec.tolerations` (only additions to existing tolerations)",
	"`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
}

func validatePodUpdate(pod, old *corev1.Pod) field.ErrorList {
	errs := validateObjectMetaUpdate(&pod.ObjectMeta, &old.ObjectMeta)
	errs = append(errs, validatePodMetadataAndSpec(pod)...)
	errs = append(errs, validatePodAnnotationUpdates(pod, old)...)

	cerrs, stop := validateContainerUpdates(pod.Spec.Containers, old.Spec.Containers, specPath.Child("containers"))
	errs = append(errs, cerrs...)
	if stop {
		return errs
	}
	cerrs, stop = validateContainerUpdates(pod.Spec.InitContainers, old.Spec.InitContainers, specPath.Child("initContainers"))
	errs = append(errs, cerrs...)
	if stop {
		return errs
	}

	// activeDeadlineSeconds may be set, or lowered, never raised or unset.
	adsPath := specPath.Child("activeDeadlineSeconds")
	if ads := pod.Spec.ActiveDeadlineSeconds; ads != nil {
		if *ads < 0 || *ads > math.MaxInt32 {
			return append(errs, field.Invalid(adsPath, *ads, validation.InclusiveRangeError(0, math.MaxInt32)))
		}
		if prev := old.Spec.ActiveDeadlineSeconds; prev != nil && *prev < *ads {
			return append(errs, field.Invalid(adsPath, *ads, "must be less than or equal to previous value"))
		}
	} else if old.Spec.ActiveDeadlineSeconds != nil {
		errs = append(errs, field.Invalid(adsPath, pod.Spec.ActiveDeadlineSeconds, "must not update from a positive integer to nil value"))
	}
	errs = append(errs, validateOnlyAddedTolerations(pod.Spec.Tolerations, old.Spec.Tolerations, specPath.Child("tolerations"))...)
	errs = append(errs, validateOnlyDeletedSchedulingGates(pod.Spec.SchedulingGates, old.Spec.SchedulingGates, specPath.Child("schedulingGates"))...)

	if apiequality.Semantic.DeepEqual(pod.Spec, old.Spec) {
		return errs
	}
	// Copy what may change from the old spec, then compare.
	munged := pod.Spec.DeepCopy()
	for i := range munged.Containers {
		munged.Containers[i].Image = old.Spec.Containers[i].Image
	}
	for i := range munged.InitContainers {
		munged.InitContainers[i].Image = old.Spec.InitContainers[i].Image
	}
	munged.ActiveDeadlineSeconds = old.Spec.ActiveDeadlineSeconds
	munged.SchedulingGates = old.Spec.SchedulingGates
	munged.Tolerations = old.Spec.Tolerations
	if prev := old.Spec.TerminationGracePeriodSeconds; prev != nil && *prev < 0 &&
		munged.TerminationGracePeriodSeconds != nil && *munged.TerminationGracePeriodSeconds == 1 {
		munged.TerminationGracePeriodSeconds = prev
	}
	// A pod still gated from scheduling may gain node selector terms.
	if len(old.Spec.SchedulingGates) > 0 && !apiequality.Semantic.DeepEqual(munged.NodeSelector, old.Spec.NodeSelector) {
		errs = append(errs, validateNodeSelectorAdditions(munged.NodeSelector, old.Spec.NodeSelector, specPath.Child("nodeSelector"))...)
		munged.NodeSelector = old.Spec.NodeSelector
	}
	if !apiequality.Semantic.DeepEqual(*munged, old.Spec) {
		errs = append(errs, field.Forbidden(specPath, fmt.Sprintf("pod updates may not change fields other than %s\n%v",
			strings.Join(updatablePodSpecFields, ","), specDiff(old.Spec, *munged))))
	}
	return errs
}

// specDiff describes how b differs from a, or says it cannot.
func specDiff(a, b corev1.PodSpec) (diff string) {
	defer func() {
		if recover() != nil {
			diff = "(diff unavailable)"
		}
	}()
	return cmp.Diff(a, b)
}

func validatePodAnnotationUpdates(pod, old *corev1.Pod) field.ErrorList {
	var errs field.ErrorList
	p := metadataPath.Child("annotations")
	oldV, inOld := old.Annotations[corev1.MirrorPodAnnotationKey]
	newV, inNew := pod.Annotations[corev1.MirrorPodAnnotationKey]
	switch {
	case inOld && (!inNew || newV != oldV):
		errs = append(errs, field.Forbidden(p.Key(corev1.MirrorPodAnnotationKey), "may not remove or update mirror pod annotation"))
	case !inOld && inNew:
		errs = append(errs, field.Forbidden(p.Key(corev1.MirrorPodAnnotationKey), "may not add mirror pod annotation"))
	}
	return errs
}

func validateContainerUpdates(containers, old []corev1.Container, fldPath *field.Path) (field.ErrorList, bool) {
	if len(containers) != len(old) {
		return field.ErrorList{field.Forbidden(fldPath, "pod updates may not add or remove containers")}, true
	}
	var errs field.ErrorList
	for i, c := range containers {
		if c.Image == "" {
			errs = append(errs, field.Required(fldPath.Index(i).Child("image"), ""))
		}
		if len(strings.TrimSpace(c.Image)) != len(c.Image) {
			errs = append(errs, field.Invalid(fldPath.Index(i).Child("image"), c.Image, "must not have leading or trailing whitespace"))
		}
	}
	return errs, false
}

func validateOnlyAddedTolerations(tolerations, old []corev1.Toleration, fldPath *field.Path) field.ErrorList {
	for _, o := range old {
		found := false
		for _, t := range tolerations {
			// tolerationSeconds may change.
			clone := o
			clone.TolerationSeconds = t.TolerationSeconds
			if reflect.DeepEqual(clone, t) {
				found = true
				break
			}
		}
		if !found {
			return field.ErrorList{field.Forbidden(fldPath, "existing toleration can not be modified except its tolerationSeconds")}
		}
	}
	return validateTolerations(tolerations, fldPath)
}

func validateOnlyDeletedSchedulingGates(gates, old []corev1.PodSchedulingGate, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	had := sets.New[string]()
	for _, g := range old {
		had.Insert(g.Name)
	}
	for i, g := range gates {
		if !had.Has(g.Name) {
			errs = append(errs, field.Forbidden(fldPath.Index(i).Child("name"), fmt.Sprintf("only deletion is allowed, but found new scheduling gate '%s'", g.Name)))
		}
	}
	return errs
}

func validateNodeSelectorAdditions(selector, old map[string]string, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	for k, v := range old {
		if nv, ok := selector[k]; !ok || nv != v {
			errs = append(errs, field.Invalid(fldPath.Key(k), selector[k], "only additions to spec.nodeSelector are allowed (no mutations or deletions)"))
		}
	}
	return errs
}

// Status.

var podPhases = []corev1.PodPhase{corev1.PodPending, corev1.PodRunning, corev1.PodSucceeded, corev1.PodFailed, corev1.PodUnknown}

// validatePodStatusUpdate checks a status update from a node: upstream's
// ValidatePodStatusUpdate, plus a known phase and container statuses that
// name containers of the pod (upstream tolerates strangers there; our only
// kubelet is the edge agent, which never sends them).
func validatePodStatusUpdate(pod, old *corev1.Pod) field.ErrorList {
	errs := validateObjectMetaUpdate(&pod.ObjectMeta, &old.ObjectMeta)
	errs = append(errs, validatePodAnnotationUpdates(pod, old)...)
	statusPath := field.NewPath("status")
	for i, c := range pod.Status.Conditions {
		switch c.Type {
		case corev1.PodScheduled, corev1.PodReady, corev1.PodInitialized:
		default:
			errs = append(errs, validateQualifiedName(string(c.Type), statusPath.Child("conditions").Index(i).Child("type"))...)
		}
	}
	if pod.Status.Phase != "" {
		errs = append(errs, validateEnum(pod.Status.Phase, statusPath.Child("phase"), podPhases...)...)
	}
	if pod.Spec.NodeName != old.Spec.NodeName {
		errs = append(errs, field.Forbidden(statusPath.Child("nodeName"), "may not be changed directly"))
	}
	if n := pod.Status.NominatedNodeName; n != old.Status.NominatedNodeName && n != "" {
		errs = append(errs, validateName(n, apimachineryvalidation.NameIsDNSSubdomain, statusPath.Child("nominatedNodeName"))...)
	}
	errs = append(errs, validateImmutable(pod.Status.QOSClass, old.Status.QOSClass, statusPath.Child("qosClass"))...)
	errs = append(errs, validateStatusNames(pod.Status.ContainerStatuses, pod.Spec.Containers, statusPath.Child("containerStatuses"))...)
	errs = append(errs, validateStatusNames(pod.Status.InitContainerStatuses, pod.Spec.InitContainers, statusPath.Child("initContainerStatuses"))...)
	errs = append(errs, validateContainerStateTransition(pod.Status.ContainerStatuses, old.Status.ContainerStatuses, statusPath.Child("containerStatuses"), old.Spec.RestartPolicy, nil)...)
	errs = append(errs, validateContainerStateTransition(pod.Status.InitContainerStatuses, old.Status.InitContainerStatuses, statusPath.Child("initContainerStatuses"), old.Spec.RestartPolicy, old.Spec.InitContainers)...)
	errs = append(errs, validateStatusIPs(pod.Status.PodIPs, nil, statusPath.Child("podIPs"))...)
	if len(pod.Status.HostIPs) > 0 {
		hostIPsPath := statusPath.Child("hostIPs")
		if pod.Status.HostIP != pod.Status.HostIPs[0].IP {
			errs = append(errs, field.Invalid(hostIPsPath.Index(0).Child("ip"), pod.Status.HostIPs[0].IP, "must be equal to `hostIP`"))
		}
		errs = append(errs, validateStatusIPs(nil, pod.Status.HostIPs, hostIPsPath)...)
	}
	return errs
}

func validateStatusNames(statuses []corev1.ContainerStatus, containers []corev1.Container, fldPath *field.Path) field.ErrorList {
	names := sets.New[string]()
	for _, c := range containers {
		names.Insert(c.Name)
	}
	var errs field.ErrorList
	seen := sets.New[string]()
	for i, s := range statuses {
		p := fldPath.Index(i).Child("name")
		switch {
		case !names.Has(s.Name):
			errs = append(errs, field.NotFound(p, s.Name))
		case seen.Has(s.Name):
			errs = append(errs, field.Duplicate(p, s.Name))
		}
		seen.Insert(s.Name)
	}
	return errs
}

// validateContainerStateTransition refuses to bring back to life a
// container the restart policy says stays terminated.
func validateContainerStateTransition(statuses, old []corev1.ContainerStatus, fldPath *field.Path, policy corev1.RestartPolicy, initContainers []corev1.Container) field.ErrorList {
	if policy == corev1.RestartPolicyAlways {
		return nil
	}
	sidecars := sets.New[string]()
	for _, c := range initContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			sidecars.Insert(c.Name)
		}
	}
	var errs field.ErrorList
	for i, o := range old {
		if o.State.Terminated == nil || sidecars.Has(o.Name) {
			continue
		}
		if o.State.Terminated.ExitCode != 0 && policy == corev1.RestartPolicyOnFailure {
			continue
		}
		for _, s := range statuses {
			if s.Name == o.Name && s.State.Terminated == nil {
				errs = append(errs, field.Forbidden(fldPath.Index(i).Child("state"), "may not be transitioned to non-terminated state"))
			}
		}
	}
	return errs
}

// validateStatusIPs checks podIPs or hostIPs: valid, at most one per
// family, no duplicates.
func validateStatusIPs(podIPs []corev1.PodIP, hostIPs []corev1.HostIP, fldPath *field.Path) field.ErrorList {
	ips := make([]string, 0, len(podIPs)+len(hostIPs))
	for _, ip := range podIPs {
		ips = append(ips, ip.IP)
	}
	for _, ip := range hostIPs {
		ips = append(ips, ip.IP)
	}
	var errs field.ErrorList
	for i, ip := range ips {
		errs = append(errs, validation.IsValidIP(fldPath.Index(i), ip)...)
	}
	if len(errs) > 0 || len(ips) < 2 {
		return errs
	}
	if !isDualStack(ips) {
		errs = append(errs, field.Invalid(fldPath, ips, "may specify no more than one IP for each IP family"))
	}
	for i := 1; i < len(ips); i++ {
		if ips[i] == ips[0] {
			errs = append(errs, field.Duplicate(fldPath.Index(i), ips[i]))
		}
	}
	return errs
}
