package apps

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/outpost-mesh/outpost/hub/registry/core"
)

// Checks shared by the workloads, worded as upstream's apps validation.

var (
	metadataPath = field.NewPath("metadata")
	specPath     = field.NewPath("spec")
	statusPath   = field.NewPath("status")
)

// validateSelector checks a workload's spec.selector at fld: it must be
// set, valid and select something. kind names the workload in the message
// for an empty selector.
func validateSelector(s *metav1.LabelSelector, kind string, fld *field.Path) field.ErrorList {
	if s == nil {
		return field.ErrorList{field.Required(fld, "")}
	}
	errs := metav1validation.ValidateLabelSelector(s, metav1validation.LabelSelectorValidationOptions{}, fld)
	if len(s.MatchLabels)+len(s.MatchExpressions) == 0 {
		errs = append(errs, field.Invalid(fld, s, "empty selector is invalid for "+kind))
	}
	return errs
}

// validateTemplateSelected checks that selector s selects the labels of
// pod template t at fld. A selector that does not parse was reported by
// validateSelector.
func validateTemplateSelected(s *metav1.LabelSelector, t *corev1.PodTemplateSpec, fld *field.Path) field.ErrorList {
	sel, err := metav1.LabelSelectorAsSelector(s)
	if err != nil || sel.Empty() || sel.Matches(labels.Set(t.Labels)) {
		return nil
	}
	return field.ErrorList{field.Invalid(fld.Child("metadata", "labels"), t.Labels, "`selector` does not match template `labels`")}
}

// validateReplicaTemplate checks the pod template of a workload whose pods
// run forever: selected by s, a valid template, restartPolicy Always and no
// activeDeadlineSeconds. kind names the workload in messages.
func validateReplicaTemplate(s *metav1.LabelSelector, t *corev1.PodTemplateSpec, kind string, fld *field.Path) field.ErrorList {
	errs := validateTemplateSelected(s, t, fld)
	errs = append(errs, core.ValidatePodTemplate(t, fld)...)
	if t.Spec.RestartPolicy != corev1.RestartPolicyAlways {
		errs = append(errs, field.NotSupported(fld.Child("spec", "restartPolicy"), t.Spec.RestartPolicy, []corev1.RestartPolicy{corev1.RestartPolicyAlways}))
	}
	if t.Spec.ActiveDeadlineSeconds != nil {
		errs = append(errs, field.Forbidden(fld.Child("spec", "activeDeadlineSeconds"), "activeDeadlineSeconds in "+kind+" is not Supported"))
	}
	return errs
}

// nonNegative checks that the value at fld, if set, is not negative.
func nonNegative[T int32 | int64](v *T, fld *field.Path) field.ErrorList {
	if v == nil {
		return nil
	}
	return apivalidation.ValidateNonnegativeField(int64(*v), fld)
}

// ValidateIntOrPercent checks that v at fld is a non-negative integer or a
// percentage such as "25%", as upstream's ValidatePositiveIntOrPercent. A
// nil v is zero. Policy's disruption budgets share it.
func ValidateIntOrPercent(v *intstr.IntOrString, fld *field.Path) field.ErrorList {
	if v == nil {
		return nil
	}
	switch v.Type {
	case intstr.String:
		var errs field.ErrorList
		for _, msg := range validation.IsValidPercent(v.StrVal) {
			errs = append(errs, field.Invalid(fld, v, msg))
		}
		return errs
	case intstr.Int:
		return apivalidation.ValidateNonnegativeField(int64(v.IntValue()), fld)
	default:
		return field.ErrorList{field.Invalid(fld, v, "must be an integer or percentage (e.g '5%')")}
	}
}

// percent returns the value of a valid percentage v ("25%" is 25).
func percent(v *intstr.IntOrString) (int, bool) {
	if v == nil || v.Type != intstr.String || len(validation.IsValidPercent(v.StrVal)) > 0 {
		return 0, false
	}
	n, err := strconv.Atoi(v.StrVal[:len(v.StrVal)-1])
	return n, err == nil
}

// intOrPercent is the number of v, whether an integer or a percentage; nil
// is zero.
func intOrPercent(v *intstr.IntOrString) int {
	if n, ok := percent(v); ok {
		return n
	}
	if v == nil || v.Type != intstr.Int {
		return 0
	}
	return v.IntValue()
}

// NotOver100Percent checks that v at fld, if a percentage, is at most 100%,
// as upstream's IsNotMoreThan100Percent.
func NotOver100Percent(v *intstr.IntOrString, fld *field.Path) field.ErrorList {
	if n, ok := percent(v); ok && n > 100 {
		return field.ErrorList{field.Invalid(fld, v, "must not be greater than 100%")}
	}
	return nil
}

// counter is one counter of a workload's status, named as its field.
type counter = core.ReplicaCount

// validateCollisionCount checks that a status's collisionCount at fld is not
// negative and was not decremented from old.
func validateCollisionCount(v, old *int32, fld *field.Path) field.ErrorList {
	errs := nonNegative(v, fld)
	if old != nil && (v == nil || *v < *old) {
		var n int32
		if v != nil {
			n = *v
		}
		errs = append(errs, field.Invalid(fld, n, "cannot be decremented"))
	}
	return errs
}
