package autoscaling

import (
	"errors"
	"fmt"
	"slices"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/validate/content"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The bounds of a behavior's rules, as upstream's.
const (
	// MaxPeriodSeconds is the longest period of a scaling policy.
	MaxPeriodSeconds int32 = 1800
	// MaxStabilizationWindowSeconds is the longest stabilization window.
	MaxStabilizationWindowSeconds int32 = 3600
)

var (
	metadataPath = field.NewPath("metadata")
	specPath     = field.NewPath("spec")
	statusPath   = field.NewPath("status")
)

// refOptions say what a CrossVersionObjectReference's apiVersion may be,
// as upstream's CrossVersionObjectReferenceValidationOptions.
type refOptions struct {
	allowEmptyGroup, allowInvalid bool
}

// specOptions are the options of a spec's validation, as upstream's
// HorizontalPodAutoscalerSpecValidationOptions.
type specOptions struct {
	minReplicasLowerBound int32
	scaleTargetRef        refOptions
	objectMetrics         refOptions
}

// validationOptions are upstream's options for a create (old nil) or an
// update of old to hpa. The HPAScaleToZero gate is off, as upstream's
// default: minReplicas 0 stays only on autoscalers that already had it.
// An apiVersion is checked only when it or the kind changes, so that
// autoscalers stored before the check remain updatable, and may lack a
// group for a ReplicationController, the one scalable core kind.
func validationOptions(hpa, old *autoscalingv2.HorizontalPodAutoscaler) specOptions {
	opts := specOptions{minReplicasLowerBound: 1, objectMetrics: refOptions{allowEmptyGroup: true}}
	if old != nil && old.Spec.MinReplicas != nil && *old.Spec.MinReplicas == 0 {
		opts.minReplicasLowerBound = 0
	}
	ref := hpa.Spec.ScaleTargetRef
	switch {
	case old != nil && old.Spec.ScaleTargetRef.APIVersion == ref.APIVersion && old.Spec.ScaleTargetRef.Kind == ref.Kind:
		opts.scaleTargetRef.allowInvalid = true
	case ref.Kind == "ReplicationController":
		opts.scaleTargetRef.allowEmptyGroup = true
	}
	if old != nil {
		for _, m := range old.Spec.Metrics {
			if m.Type == autoscalingv2.ObjectMetricSourceType && m.Object != nil && validateAPIVersion(m.Object.DescribedObject, opts.objectMetrics) != nil {
				opts.objectMetrics.allowInvalid = true
				break
			}
		}
	}
	return opts
}

func validateHPA(hpa *autoscalingv2.HorizontalPodAutoscaler) field.ErrorList {
	errs := apivalidation.ValidateObjectMeta(&hpa.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, metadataPath)
	return append(errs, validateSpec(&hpa.Spec, validationOptions(hpa, nil))...)
}

func validateHPAUpdate(hpa, old *autoscalingv2.HorizontalPodAutoscaler) field.ErrorList {
	errs := apivalidation.ValidateObjectMetaUpdate(&hpa.ObjectMeta, &old.ObjectMeta, metadataPath)
	return append(errs, validateSpec(&hpa.Spec, validationOptions(hpa, old))...)
}

// validateHPAStatusUpdate checks a status update: no negative replica
// count.
func validateHPAStatusUpdate(hpa, old *autoscalingv2.HorizontalPodAutoscaler) field.ErrorList {
	errs := apivalidation.ValidateObjectMetaUpdate(&hpa.ObjectMeta, &old.ObjectMeta, metadataPath)
	errs = append(errs, apivalidation.ValidateNonnegativeField(int64(hpa.Status.CurrentReplicas), statusPath.Child("currentReplicas"))...)
	return append(errs, apivalidation.ValidateNonnegativeField(int64(hpa.Status.DesiredReplicas), statusPath.Child("desiredReplicas"))...)
}

func validateSpec(s *autoscalingv2.HorizontalPodAutoscalerSpec, opts specOptions) field.ErrorList {
	var errs field.ErrorList
	if s.MinReplicas != nil && *s.MinReplicas < opts.minReplicasLowerBound {
		errs = append(errs, field.Invalid(specPath.Child("minReplicas"), *s.MinReplicas, fmt.Sprintf("must be greater than or equal to %d", opts.minReplicasLowerBound)))
	}
	if s.MaxReplicas < 1 {
		errs = append(errs, field.Invalid(specPath.Child("maxReplicas"), s.MaxReplicas, "must be greater than 0"))
	}
	if s.MinReplicas != nil && s.MaxReplicas < *s.MinReplicas {
		errs = append(errs, field.Invalid(specPath.Child("maxReplicas"), s.MaxReplicas, "must be greater than or equal to `minReplicas`"))
	}
	errs = append(errs, validateRef(s.ScaleTargetRef, specPath.Child("scaleTargetRef"), opts.scaleTargetRef)...)
	errs = append(errs, validateMetrics(s.Metrics, specPath.Child("metrics"), s.MinReplicas, opts.objectMetrics)...)
	return append(errs, validateBehavior(s.Behavior, specPath.Child("behavior"))...)
}

// validateRef checks a reference to an object: a kind and a name that are
// path segments, and an apiVersion as opts allow.
func validateRef(ref autoscalingv2.CrossVersionObjectReference, fldPath *field.Path, opts refOptions) field.ErrorList {
	var errs field.ErrorList
	for _, f := range []struct{ name, value string }{{"kind", ref.Kind}, {"name", ref.Name}} {
		if f.value == "" {
			errs = append(errs, field.Required(fldPath.Child(f.name), ""))
			continue
		}
		for _, msg := range content.IsPathSegmentName(f.value) {
			errs = append(errs, field.Invalid(fldPath.Child(f.name), f.value, msg))
		}
	}
	if err := validateAPIVersion(ref, opts); err != nil {
		errs = append(errs, field.Invalid(fldPath.Child("apiVersion"), ref.APIVersion, err.Error()))
	}
	return errs
}

// validateAPIVersion returns why ref's apiVersion is refused, or nil.
func validateAPIVersion(ref autoscalingv2.CrossVersionObjectReference, opts refOptions) error {
	if opts.allowInvalid {
		return nil
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return err
	}
	if !opts.allowEmptyGroup && gv.Group == "" {
		return errors.New("apiVersion must specify API group")
	}
	return nil
}

// validateMetrics checks each metric, and that an autoscaler that may
// scale to zero has an Object or External metric to wake it.
func validateMetrics(metrics []autoscalingv2.MetricSpec, fldPath *field.Path, minReplicas *int32, opts refOptions) field.ErrorList {
	var errs field.ErrorList
	wakes := false
	for i := range metrics {
		errs = append(errs, validateMetricSpec(&metrics[i], fldPath.Index(i), opts)...)
		if t := metrics[i].Type; t == autoscalingv2.ObjectMetricSourceType || t == autoscalingv2.ExternalMetricSourceType {
			wakes = true
		}
	}
	if minReplicas != nil && *minReplicas == 0 && !wakes {
		errs = append(errs, field.Forbidden(fldPath, "must specify at least one Object or External metric to support scaling to zero replicas"))
	}
	return errs
}

// validMetricSourceTypes are the metric types, sorted as upstream lists
// them.
var validMetricSourceTypes = []string{"ContainerResource", "External", "Object", "Pods", "Resource"}

// validateMetricSpec checks one metric: a known type whose source, and
// only it, is set and valid (only the first source set is checked).
func validateMetricSpec(m *autoscalingv2.MetricSpec, fldPath *field.Path, opts refOptions) field.ErrorList {
	var errs field.ErrorList
	if m.Type == "" {
		errs = append(errs, field.Required(fldPath.Child("type"), "must specify a metric source type"))
	}
	if !slices.Contains(validMetricSourceTypes, string(m.Type)) {
		errs = append(errs, field.NotSupported(fldPath.Child("type"), m.Type, validMetricSourceTypes))
	}
	type source struct {
		name  string
		set   bool
		check func() field.ErrorList
	}
	sources := []source{
		{"object", m.Object != nil, func() field.ErrorList { return validateObjectSource(m.Object, fldPath.Child("object"), opts) }},
		{"external", m.External != nil, func() field.ErrorList { return validateExternalSource(m.External, fldPath.Child("external")) }},
		{"pods", m.Pods != nil, func() field.ErrorList { return validatePodsSource(m.Pods, fldPath.Child("pods")) }},
		{"resource", m.Resource != nil, func() field.ErrorList { return validateResourceSource(m.Resource, fldPath.Child("resource")) }},
		{"containerResource", m.ContainerResource != nil, func() field.ErrorList {
			return validateContainerResourceSource(m.ContainerResource, fldPath.Child("containerResource"))
		}},
	}
	var present []string
	for _, s := range sources {
		if !s.set {
			continue
		}
		present = append(present, s.name)
		if len(present) == 1 {
			errs = append(errs, s.check()...)
		}
	}
	expected := ""
	for i, t := range []autoscalingv2.MetricSourceType{autoscalingv2.ObjectMetricSourceType, autoscalingv2.ExternalMetricSourceType, autoscalingv2.PodsMetricSourceType, autoscalingv2.ResourceMetricSourceType, autoscalingv2.ContainerResourceMetricSourceType} {
		if m.Type == t {
			expected = sources[i].name
			if !sources[i].set {
				errs = append(errs, field.Required(fldPath.Child(expected), "must populate information for the given metric source"))
			}
		}
	}
	if expected == "" {
		errs = append(errs, field.NotSupported(fldPath.Child("type"), m.Type, validMetricSourceTypes))
	}
	if len(present) != 1 {
		for _, name := range present {
			if name != expected {
				errs = append(errs, field.Forbidden(fldPath.Child(name), "must populate the given metric source only"))
			}
		}
	}
	return errs
}

func validateObjectSource(s *autoscalingv2.ObjectMetricSource, fldPath *field.Path, opts refOptions) field.ErrorList {
	errs := validateRef(s.DescribedObject, fldPath.Child("describedObject"), opts)
	errs = append(errs, validateMetricIdentifier(s.Metric, fldPath.Child("metric"))...)
	errs = append(errs, validateMetricTarget(s.Target, fldPath.Child("target"))...)
	if s.Target.Value == nil && s.Target.AverageValue == nil {
		errs = append(errs, field.Required(fldPath.Child("target", "averageValue"), "must set either a target value or averageValue"))
	}
	return errs
}

func validateExternalSource(s *autoscalingv2.ExternalMetricSource, fldPath *field.Path) field.ErrorList {
	errs := validateMetricIdentifier(s.Metric, fldPath.Child("metric"))
	errs = append(errs, validateMetricTarget(s.Target, fldPath.Child("target"))...)
	if s.Target.Value == nil && s.Target.AverageValue == nil {
		errs = append(errs, field.Required(fldPath.Child("target", "averageValue"), "must set either a target value for metric or a per-pod target"))
	}
	if s.Target.Value != nil && s.Target.AverageValue != nil {
		errs = append(errs, field.Forbidden(fldPath.Child("target", "value"), "may not set both a target value for metric and a per-pod target"))
	}
	return errs
}

func validatePodsSource(s *autoscalingv2.PodsMetricSource, fldPath *field.Path) field.ErrorList {
	errs := validateMetricIdentifier(s.Metric, fldPath.Child("metric"))
	errs = append(errs, validateMetricTarget(s.Target, fldPath.Child("target"))...)
	if s.Target.AverageValue == nil {
		errs = append(errs, field.Required(fldPath.Child("target", "averageValue"), "must specify a positive target averageValue"))
	}
	return errs
}

// validateContainerResourceSource checks a container resource metric: a
// resource name, a container that is a DNS label, and a resource target.
// Upstream also checks the name is one of a container's resources
// (core validation's ValidateContainerResourceName); not done here.
func validateContainerResourceSource(s *autoscalingv2.ContainerResourceMetricSource, fldPath *field.Path) field.ErrorList {
	errs := validateResourceName(s.Name, fldPath)
	if s.Container == "" {
		errs = append(errs, field.Required(fldPath.Child("container"), "must specify a container"))
	} else {
		for _, msg := range content.IsDNS1123Label(s.Container) {
			errs = append(errs, field.Invalid(fldPath.Child("container"), s.Container, msg))
		}
	}
	return append(errs, validateResourceTarget(s.Target, fldPath)...)
}

func validateResourceSource(s *autoscalingv2.ResourceMetricSource, fldPath *field.Path) field.ErrorList {
	return append(validateResourceName(s.Name, fldPath), validateResourceTarget(s.Target, fldPath)...)
}

// validateResourceName requires the resource name of a Resource or
// ContainerResource metric.
func validateResourceName(name corev1.ResourceName, fldPath *field.Path) field.ErrorList {
	if name == "" {
		return field.ErrorList{field.Required(fldPath.Child("name"), "must specify a resource name")}
	}
	return nil
}

// validateResourceTarget checks the target of a Resource or
// ContainerResource metric: one of a utilization and an average value.
func validateResourceTarget(t autoscalingv2.MetricTarget, fldPath *field.Path) field.ErrorList {
	errs := validateMetricTarget(t, fldPath.Child("target"))
	if t.AverageUtilization == nil && t.AverageValue == nil {
		errs = append(errs, field.Required(fldPath.Child("target", "averageUtilization"), "must set either a target raw value or a target utilization"))
	}
	if t.AverageUtilization != nil && t.AverageValue != nil {
		errs = append(errs, field.Forbidden(fldPath.Child("target", "averageValue"), "may not set both a target raw value and a target utilization"))
	}
	return errs
}

func validateMetricTarget(t autoscalingv2.MetricTarget, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	if t.Type == "" {
		errs = append(errs, field.Required(fldPath.Child("type"), "must specify a metric target type"))
	}
	switch t.Type {
	case autoscalingv2.UtilizationMetricType, autoscalingv2.ValueMetricType, autoscalingv2.AverageValueMetricType:
	default:
		errs = append(errs, field.Invalid(fldPath.Child("type"), t.Type, "must be either Utilization, Value, or AverageValue"))
	}
	if t.Value != nil && t.Value.Sign() != 1 {
		errs = append(errs, field.Invalid(fldPath.Child("value"), t.Value, "must be positive"))
	}
	if t.AverageValue != nil && t.AverageValue.Sign() != 1 {
		errs = append(errs, field.Invalid(fldPath.Child("averageValue"), t.AverageValue, "must be positive"))
	}
	if t.AverageUtilization != nil && *t.AverageUtilization < 1 {
		errs = append(errs, field.Invalid(fldPath.Child("averageUtilization"), t.AverageUtilization, "must be greater than 0"))
	}
	return errs
}

func validateMetricIdentifier(id autoscalingv2.MetricIdentifier, fldPath *field.Path) field.ErrorList {
	if id.Name == "" {
		return field.ErrorList{field.Required(fldPath.Child("name"), "must specify a metric name")}
	}
	var errs field.ErrorList
	for _, msg := range content.IsPathSegmentName(id.Name) {
		errs = append(errs, field.Invalid(fldPath.Child("name"), id.Name, msg))
	}
	return errs
}

func validateBehavior(b *autoscalingv2.HorizontalPodAutoscalerBehavior, fldPath *field.Path) field.ErrorList {
	if b == nil {
		return nil
	}
	errs := validateScalingRules(b.ScaleUp, fldPath.Child("scaleUp"))
	return append(errs, validateScalingRules(b.ScaleDown, fldPath.Child("scaleDown"))...)
}

// validSelectPolicies and validPolicyTypes are sorted as upstream lists
// them.
var (
	validSelectPolicies = []string{"Disabled", "Max", "Min"}
	validPolicyTypes    = []string{"Percent", "Pods"}
)

func validateScalingRules(r *autoscalingv2.HPAScalingRules, fldPath *field.Path) field.ErrorList {
	if r == nil {
		return nil
	}
	var errs field.ErrorList
	if w := r.StabilizationWindowSeconds; w != nil && *w < 0 {
		errs = append(errs, field.Invalid(fldPath.Child("stabilizationWindowSeconds"), w, "must be greater than or equal to zero"))
	}
	if w := r.StabilizationWindowSeconds; w != nil && *w > MaxStabilizationWindowSeconds {
		errs = append(errs, field.Invalid(fldPath.Child("stabilizationWindowSeconds"), w, fmt.Sprintf("must be less than or equal to %v", MaxStabilizationWindowSeconds)))
	}
	if p := r.SelectPolicy; p != nil && !slices.Contains(validSelectPolicies, string(*p)) {
		errs = append(errs, field.NotSupported(fldPath.Child("selectPolicy"), p, validSelectPolicies))
	}
	policies := fldPath.Child("policies")
	if len(r.Policies) == 0 {
		errs = append(errs, field.Required(policies, "must specify at least one Policy"))
	}
	for i, p := range r.Policies {
		errs = append(errs, validateScalingPolicy(p, policies.Index(i))...)
	}
	if t := r.Tolerance; t != nil && t.Sign() < 0 {
		errs = append(errs, field.Invalid(fldPath.Child("tolerance"), t.String(), "must be greater than or equal to 0"))
	}
	return errs
}

func validateScalingPolicy(p autoscalingv2.HPAScalingPolicy, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	if !slices.Contains(validPolicyTypes, string(p.Type)) {
		errs = append(errs, field.NotSupported(fldPath.Child("type"), p.Type, validPolicyTypes))
	}
	if p.Value <= 0 {
		errs = append(errs, field.Invalid(fldPath.Child("value"), p.Value, "must be greater than zero"))
	}
	if p.PeriodSeconds <= 0 {
		errs = append(errs, field.Invalid(fldPath.Child("periodSeconds"), p.PeriodSeconds, "must be greater than zero"))
	}
	if p.PeriodSeconds > MaxPeriodSeconds {
		errs = append(errs, field.Invalid(fldPath.Child("periodSeconds"), p.PeriodSeconds, fmt.Sprintf("must be less than or equal to %v", MaxPeriodSeconds)))
	}
	return errs
}
