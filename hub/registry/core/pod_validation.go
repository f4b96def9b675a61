package core

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/validate/content"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Pod validation, after ValidatePodCreate, ValidatePodUpdate and
// ValidatePodStatusUpdate upstream, with the same field paths and
// messages. Left out: affinity terms, the fields of legacy volume plugins
// (they are only counted), Windows options, AppArmor, sysctls and the
// checks tied to alpha features.

var specPath = field.NewPath("spec")

const podDeletionCostAnnotation = "controller.kubernetes.io/pod-deletion-cost"

func validatePodCreate(pod *corev1.Pod) field.ErrorList {
	errs := validatePodMetadataAndSpec(pod)
	if len(pod.Spec.EphemeralContainers) > 0 {
		errs = append(errs, field.Forbidden(specPath.Child("ephemeralContainers"), "cannot be set on create"))
	}
	if pod.Spec.NodeName != "" && len(pod.Spec.SchedulingGates) != 0 {
		errs = append(errs, field.Forbidden(specPath.Child("nodeName"), "cannot be set until all schedulingGates have been cleared"))
	}
	return errs
}

func validatePodMetadataAndSpec(pod *corev1.Pod) field.ErrorList {
	errs := validateObjectMeta(&pod.ObjectMeta, true, apimachineryvalidation.NameIsDNSSubdomain)
	errs = append(errs, validatePodAnnotations(pod.Annotations, &pod.Spec, metadataPath.Child("annotations"))...)
	errs = append(errs, validatePodSpec(&pod.Spec, &pod.ObjectMeta, specPath, true)...)
	if pod.Spec.ServiceAccountName == "" {
		for vi, v := range pod.Spec.Volumes {
			if v.Projected == nil {
				continue
			}
			for si, src := range v.Projected.Sources {
				if src.ServiceAccountToken != nil {
					errs = append(errs, field.Forbidden(specPath.Child("volumes").Index(vi).Child("projected", "sources").Index(si).Child("serviceAccountToken"),
						"must not be specified when serviceAccountName is not set"))
				}
			}
		}
	}
	for _, list := range []struct {
		name       string
		containers []corev1.Container
	}{{"containers", pod.Spec.Containers}, {"initContainers", pod.Spec.InitContainers}} {
		for i, c := range list.containers {
			if len(c.Image) != len(strings.TrimSpace(c.Image)) {
				errs = append(errs, field.Invalid(specPath.Child(list.name).Index(i).Child("image"), c.Image, "must not have leading or trailing whitespace"))
			}
		}
	}
	return errs
}

func validatePodAnnotations(annotations map[string]string, spec *corev1.PodSpec, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	if v, ok := annotations[corev1.MirrorPodAnnotationKey]; ok && spec.NodeName == "" {
		errs = append(errs, field.Invalid(fldPath.Key(corev1.MirrorPodAnnotationKey), v, "must set spec.nodeName if mirror pod annotation is set"))
	}
	if v, ok := annotations[podDeletionCostAnnotation]; ok {
		if _, err := strconv.ParseInt(v, 10, 32); err != nil {
			errs = append(errs, field.Invalid(fldPath.Key(podDeletionCostAnnotation), v, "must be a 32bit integer"))
		}
	}
	return errs
}

// validatePodSpec checks the spec of a pod (isPod) or of a workload's pod
// template at fldPath. podMeta is nil for templates.
func validatePodSpec(spec *corev1.PodSpec, podMeta *metav1.ObjectMeta, fldPath *field.Path, isPod bool) field.ErrorList {
	var errs field.ErrorList
	if spec.TerminationGracePeriodSeconds == nil {
		errs = append(errs, field.Required(fldPath.Child("terminationGracePeriodSeconds"), ""))
	}
	gracePeriod := spec.TerminationGracePeriodSeconds

	vols, verrs := validateVolumes(spec.Volumes, podMeta, fldPath.Child("volumes"))
	errs = append(errs, verrs...)
	claimNames, cerrs := validatePodResourceClaims(spec.ResourceClaims, fldPath.Child("resourceClaims"))
	errs = append(errs, cerrs...)
	errs = append(errs, validateContainers(spec.Containers, vols, claimNames, gracePeriod, fldPath.Child("containers"), spec.RestartPolicy)...)
	errs = append(errs, validateInitContainers(spec.InitContainers, spec.Containers, vols, claimNames, gracePeriod, fldPath.Child("initContainers"), spec.RestartPolicy)...)
	errs = append(errs, validateEphemeralContainers(spec.EphemeralContainers, spec.Containers, spec.InitContainers, vols, claimNames, fldPath.Child("ephemeralContainers"), spec.RestartPolicy)...)
	if spec.Resources != nil {
		errs = append(errs, validatePodLevelResources(spec, claimNames, fldPath.Child("resources"))...)
	}

	if spec.HostNetwork {
		for i, c := range spec.Containers {
			for j, p := range c.Ports {
				// A template may leave hostPort to the pod's defaulting.
				if (isPod || p.HostPort != 0) && p.HostPort != p.ContainerPort {
					errs = append(errs, field.Invalid(fldPath.Child("containers").Index(i).Child("ports").Index(j).Child("hostPort"), p.HostPort, "must match `containerPort` when `hostNetwork` is true"))
				}
			}
		}
	}
	errs = append(errs, validateEnum(spec.RestartPolicy, fldPath.Child("restartPolicy"),
		corev1.RestartPolicyAlways, corev1.RestartPolicyOnFailure, corev1.RestartPolicyNever)...)
	errs = append(errs, validateEnum(spec.DNSPolicy, fldPath.Child("dnsPolicy"),
		corev1.DNSClusterFirstWithHostNet, corev1.DNSClusterFirst, corev1.DNSDefault, corev1.DNSNone)...)
	errs = append(errs, metav1validation.ValidateLabels(spec.NodeSelector, fldPath.Child("nodeSelector"))...)
	errs = append(errs, validatePodSecurityContext(spec, fldPath)...)
	errs = append(errs, validatePodDNSConfig(spec.DNSConfig, spec.DNSPolicy, fldPath.Child("dnsConfig"))...)
	for i, g := range spec.ReadinessGates {
		errs = append(errs, validateQualifiedName(string(g.ConditionType), fldPath.Child("readinessGates").Index(i).Child("conditionType"))...)
	}
	seenGates := sets.New[string]()
	for i, g := range spec.SchedulingGates {
		errs = append(errs, validateQualifiedName(g.Name, fldPath.Child("schedulingGates").Index(i))...)
		if seenGates.Has(g.Name) {
			errs = append(errs, field.Duplicate(fldPath.Child("schedulingGates").Index(i), g.Name))
		}
		seenGates.Insert(g.Name)
	}
	errs = append(errs, validateTopologySpreadConstraints(spec.TopologySpreadConstraints, fldPath.Child("topologySpreadConstraints"))...)
	if spec.ServiceAccountName != "" {
		errs = append(errs, validateName(spec.ServiceAccountName, apimachineryvalidation.ValidateServiceAccountName, fldPath.Child("serviceAccountName"))...)
	}
	if spec.NodeName != "" {
		errs = append(errs, validateName(spec.NodeName, apimachineryvalidation.NameIsDNSSubdomain, fldPath.Child("nodeName"))...)
	}
	if spec.ActiveDeadlineSeconds != nil {
		if v := *spec.ActiveDeadlineSeconds; v < 1 || v > math.MaxInt32 {
			errs = append(errs, field.Invalid(fldPath.Child("activeDeadlineSeconds"), v, validation.InclusiveRangeError(1, math.MaxInt32)))
		}
	}
	if spec.Hostname != "" {
		errs = append(errs, validateDNS1123Label(spec.Hostname, fldPath.Child("hostname"))...)
	}
	if spec.Subdomain != "" {
		errs = append(errs, validateDNS1123Label(spec.Subdomain, fldPath.Child("subdomain"))...)
	}
	errs = append(errs, validateTolerations(spec.Tolerations, fldPath.Child("tolerations"))...)
	for i, a := range spec.HostAliases {
		errs = append(errs, validation.IsValidIP(fldPath.Child("hostAliases").Index(i).Child("ip"), a.IP)...)
		for j, h := range a.Hostnames {
			errs = append(errs, validateDNS1123Subdomain(h, fldPath.Child("hostAliases").Index(i).Child("hostnames").Index(j))...)
		}
	}
	if spec.PriorityClassName != "" {
		errs = append(errs, validateName(spec.PriorityClassName, apimachineryvalidation.NameIsDNSSubdomain, fldPath.Child("priorityClassName"))...)
	}
	if spec.RuntimeClassName != nil {
		errs = append(errs, validateName(*spec.RuntimeClassName, apimachineryvalidation.NameIsDNSSubdomain, fldPath.Child("runtimeClassName"))...)
	}
	if spec.PreemptionPolicy != nil {
		errs = append(errs, validateEnum(*spec.PreemptionPolicy, fldPath.Child("preemptionPolicy"), corev1.PreemptLowerPriority, corev1.PreemptNever)...)
	}
	if spec.Overhead != nil {
		errs = append(errs, ValidateOverhead(spec.Overhead, fldPath.Child("overhead"))...)
	}
	if os := spec.OS; os != nil {
		if os.Name == "" {
			errs = append(errs, field.Required(fldPath.Child("os", "name"), "cannot be empty"))
		} else if os.Name != corev1.Linux && os.Name != corev1.Windows {
			errs = append(errs, field.NotSupported(fldPath.Child("os"), os.Name, []corev1.OSName{corev1.Linux, corev1.Windows}))
		}
	}
	return errs
}

// validateEnum checks that v is one of valid: Required when empty,
// NotSupported when unknown.
func validateEnum[T ~string](v T, fldPath *field.Path, valid ...T) field.ErrorList {
	if v == "" {
		return field.ErrorList{field.Required(fldPath, "")}
	}
	for _, ok := range valid {
		if v == ok {
			return nil
		}
	}
	return field.ErrorList{field.NotSupported(fldPath, v, valid)}
}

func validatePodSecurityContext(spec *corev1.PodSpec, specFldPath *field.Path) field.ErrorList {
	sc := spec.SecurityContext
	if sc == nil {
		return nil
	}
	fldPath := specFldPath.Child("securityContext")
	var errs field.ErrorList
	if sc.FSGroup != nil {
		errs = append(errs, validateID(*sc.FSGroup, validation.IsValidGroupID, fldPath.Child("fsGroup"))...)
	}
	if sc.RunAsUser != nil {
		errs = append(errs, validateID(*sc.RunAsUser, validation.IsValidUserID, fldPath.Child("runAsUser"))...)
	}
	if sc.RunAsGroup != nil {
		errs = append(errs, validateID(*sc.RunAsGroup, validation.IsValidGroupID, fldPath.Child("runAsGroup"))...)
	}
	for i, g := range sc.SupplementalGroups {
		errs = append(errs, validateID(g, validation.IsValidGroupID, fldPath.Child("supplementalGroups").Index(i))...)
	}
	if spec.ShareProcessNamespace != nil && *spec.ShareProcessNamespace && spec.HostPID {
		errs = append(errs, field.Invalid(specFldPath.Child("shareProcessNamespace"), *spec.ShareProcessNamespace, "ShareProcessNamespace and HostPID cannot both be enabled"))
	}
	if sc.FSGroupChangePolicy != nil {
		errs = append(errs, validateEnum(*sc.FSGroupChangePolicy, fldPath.Child("fsGroupChangePolicy"), corev1.FSGroupChangeOnRootMismatch, corev1.FSGroupChangeAlways)...)
	}
	return append(errs, validateSeccompProfile(sc.SeccompProfile, fldPath.Child("seccompProfile"))...)
}

func validateID(id int64, check func(int64) []string, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range check(id) {
		errs = append(errs, field.Invalid(fldPath, id, msg))
	}
	return errs
}

func validateSeccompProfile(p *corev1.SeccompProfile, fldPath *field.Path) field.ErrorList {
	if p == nil {
		return nil
	}
	switch p.Type {
	case corev1.SeccompProfileTypeLocalhost:
		if p.LocalhostProfile == nil || *p.LocalhostProfile == "" {
			return field.ErrorList{field.Required(fldPath.Child("localhostProfile"), "must be set when seccomp type is Localhost")}
		}
	case corev1.SeccompProfileTypeRuntimeDefault, corev1.SeccompProfileTypeUnconfined:
		if p.LocalhostProfile != nil {
			return field.ErrorList{field.Invalid(fldPath.Child("localhostProfile"), p.LocalhostProfile, "can only be set when seccomp type is Localhost")}
		}
	case "":
		return field.ErrorList{field.Required(fldPath.Child("type"), "type is required when seccompProfile is set")}
	default:
		return field.ErrorList{field.NotSupported(fldPath.Child("type"), p.Type, []corev1.SeccompProfileType{
			corev1.SeccompProfileTypeLocalhost, corev1.SeccompProfileTypeRuntimeDefault, corev1.SeccompProfileTypeUnconfined})}
	}
	return nil
}

const (
	maxDNSNameservers     = 3
	maxDNSSearchPaths     = 32
	maxDNSSearchListChars = 2048
)

func validatePodDNSConfig(cfg *corev1.PodDNSConfig, policy corev1.DNSPolicy, fldPath *field.Path) field.ErrorList {
	if policy == corev1.DNSNone {
		if cfg == nil {
			return field.ErrorList{field.Required(fldPath, fmt.Sprintf("must provide `dnsConfig` when `dnsPolicy` is %s", corev1.DNSNone))}
		}
		if len(cfg.Nameservers) == 0 {
			return field.ErrorList{field.Required(fldPath.Child("nameservers"), fmt.Sprintf("must provide at least one DNS nameserver when `dnsPolicy` is %s", corev1.DNSNone))}
		}
	}
	if cfg == nil {
		return nil
	}
	var errs field.ErrorList
	if len(cfg.Nameservers) > maxDNSNameservers {
		errs = append(errs, field.Invalid(fldPath.Child("nameservers"), cfg.Nameservers, fmt.Sprintf("must not have more than %v nameservers", maxDNSNameservers)))
	}
	for i, ns := range cfg.Nameservers {
		errs = append(errs, validation.IsValidIP(fldPath.Child("nameservers").Index(i), ns)...)
	}
	if len(cfg.Searches) > maxDNSSearchPaths {
		errs = append(errs, field.Invalid(fldPath.Child("searches"), cfg.Searches, fmt.Sprintf("must not have more than %v search paths", maxDNSSearchPaths)))
	}
	if len(strings.Join(cfg.Searches, " ")) > maxDNSSearchListChars {
		errs = append(errs, field.Invalid(fldPath.Child("searches"), cfg.Searches, fmt.Sprintf("must not have more than %v characters (including spaces) in the search list", maxDNSSearchListChars)))
	}
	for i, s := range cfg.Searches {
		if s == "." {
			continue
		}
		for _, msg := range validation.IsDNS1123SubdomainWithUnderscore(strings.TrimSuffix(s, ".")) {
			errs = append(errs, field.Invalid(fldPath.Child("searches").Index(i), strings.TrimSuffix(s, "."), msg))
		}
	}
	for i, o := range cfg.Options {
		if o.Name == "" {
			errs = append(errs, field.Required(fldPath.Child("options").Index(i), "must not be empty"))
		}
	}
	return errs
}

func validateTolerations(tolerations []corev1.Toleration, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, t := range tolerations {
		p := fldPath.Index(i)
		if t.Key != "" {
			errs = append(errs, metav1validation.ValidateLabelName(t.Key, p.Child("key"))...)
		}
		if t.Key == "" && t.Operator != corev1.TolerationOpExists {
			errs = append(errs, field.Invalid(p.Child("operator"), t.Operator,
				"operator must be Exists when `key` is empty, which means \"match all values and all keys\""))
		}
		if t.TolerationSeconds != nil && t.Effect != corev1.TaintEffectNoExecute {
			errs = append(errs, field.Invalid(p.Child("effect"), t.Effect, "effect must be 'NoExecute' when `tolerationSeconds` is set"))
		}
		switch t.Operator {
		case corev1.TolerationOpEqual, "":
			if msgs := content.IsLabelValue(t.Value); len(msgs) != 0 {
				errs = append(errs, field.Invalid(p.Child("operator"), t.Value, strings.Join(msgs, ";")))
			}
		case corev1.TolerationOpExists:
			if t.Value != "" {
				errs = append(errs, field.Invalid(p.Child("operator"), t.Value, "value must be empty when `operator` is 'Exists'"))
			}
		default:
			errs = append(errs, field.NotSupported(p.Child("operator"), t.Operator, []corev1.TolerationOperator{corev1.TolerationOpEqual, corev1.TolerationOpExists}))
		}
		if t.Effect != "" {
			errs = append(errs, validateTaintEffect(t.Effect, p.Child("effect"))...)
		}
	}
	return errs
}

func validateTaintEffect(effect corev1.TaintEffect, fldPath *field.Path) field.ErrorList {
	return validateEnum(effect, fldPath, corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute)
}

func validateTopologySpreadConstraints(constraints []corev1.TopologySpreadConstraint, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, c := range constraints {
		p := fldPath.Index(i)
		if c.MaxSkew <= 0 {
			errs = append(errs, field.Invalid(p.Child("maxSkew"), c.MaxSkew, "must be greater than zero"))
		}
		if c.TopologyKey == "" {
			errs = append(errs, field.Required(p.Child("topologyKey"), "can not be empty"))
		} else {
			errs = append(errs, metav1validation.ValidateLabelName(c.TopologyKey, p.Child("topologyKey"))...)
		}
		errs = append(errs, validateEnum(c.WhenUnsatisfiable, p.Child("whenUnsatisfiable"), corev1.DoNotSchedule, corev1.ScheduleAnyway)...)
		for _, other := range constraints[i+1:] {
			if c.TopologyKey == other.TopologyKey && c.WhenUnsatisfiable == other.WhenUnsatisfiable {
				errs = append(errs, field.Duplicate(p.Child("{topologyKey, whenUnsatisfiable}"), fmt.Sprintf("{%v, %v}", c.TopologyKey, c.WhenUnsatisfiable)))
			}
		}
		if c.MinDomains != nil && *c.MinDomains <= 0 {
			errs = append(errs, field.Invalid(p.Child("minDomains"), *c.MinDomains, "must be greater than 0"))
		}
		if c.LabelSelector != nil {
			errs = append(errs, metav1validation.ValidateLabelSelector(c.LabelSelector, metav1validation.LabelSelectorValidationOptions{}, p.Child("labelSelector"))...)
		}
	}
	return errs
}
