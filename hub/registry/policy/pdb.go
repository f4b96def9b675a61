// Package policy holds the hub's rules for the policy/v1 resource
// poddisruptionbudgets: their validation, status subresource and printer
// columns, as upstream Kubernetes defines them. It stores budgets; the
// disruption controller that computes their status and the eviction
// subresource that honours them are not its.
package policy

import (
	"slices"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/validate/content"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/registry/apps"
	"github.com/outpost-mesh/outpost/hub/registry/typed"
)

// Resources returns the policy/v1 resources, with ages in printed tables
// measured against the wall clock.
func Resources() []apiserver.Resource { return ResourcesWithClock(nil) }

// ResourcesWithClock is Resources with ages measured against now, or the
// wall clock if now is nil. Tests use it to get stable Table rows.
func ResourcesWithClock(now func() time.Time) []apiserver.Resource {
	return []apiserver.Resource{{
		GroupVersion: policyv1.SchemeGroupVersion,
		Kind:         "PodDisruptionBudget",
		Plural:       "poddisruptionbudgets",
		Singular:     "poddisruptionbudget",
		ShortNames:   []string{"pdb"},
		Namespaced:   true,
		New:          func() runtime.Object { return &policyv1.PodDisruptionBudget{} },
		NewList:      func() runtime.Object { return &policyv1.PodDisruptionBudgetList{} },
		AddToScheme:  policyv1.AddToScheme,
		Status:       true,
		Generation:   true,
		Rules:        pdbRules(now),
	}}
}

// pdbRules are the rules of disruption budgets, with ages in their Table
// rows measured against now (nil is the wall clock). A budget has no
// defaults in policy/v1 and no field selectors beyond metadata's; a PUT
// does not create one.
func pdbRules(now func() time.Time) *typed.Rules[*policyv1.PodDisruptionBudget] {
	return &typed.Rules[*policyv1.PodDisruptionBudget]{
		Now:           now,
		PrepareCreate: func(p *policyv1.PodDisruptionBudget) { p.Status = policyv1.PodDisruptionBudgetStatus{} },
		PrepareUpdate: func(p, old *policyv1.PodDisruptionBudget) { p.Status = old.Status },
		Check:         validatePDB,
		CheckUpdate:   validatePDBUpdate,
		CheckStatus:   validatePDBStatusUpdate,
		TableColumns:  pdbColumns(),
		TableRow:      pdbRow,
	}
}

var (
	metadataPath = field.NewPath("metadata")
	specPath     = field.NewPath("spec")
	statusPath   = field.NewPath("status")
)

// validName is the name rule of disruption budgets. Upstream's policy
// validation has none of its own, so its generic one applies: any name
// that is safe as one segment of a URL path.
func validName(name string, prefix bool) []string {
	if prefix {
		return content.IsPathSegmentPrefix(name)
	}
	return content.IsPathSegmentName(name)
}

func validatePDB(p *policyv1.PodDisruptionBudget) field.ErrorList {
	errs := apivalidation.ValidateObjectMeta(&p.ObjectMeta, true, validName, metadataPath)
	return append(errs, validateSpec(&p.Spec, false)...)
}

// validatePDBUpdate checks an update of budget old to p. The spec may
// change; label values of its selector may stay invalid if old's already
// were, for budgets stored before they were checked.
func validatePDBUpdate(p, old *policyv1.PodDisruptionBudget) field.ErrorList {
	errs := apivalidation.ValidateObjectMetaUpdate(&p.ObjectMeta, &old.ObjectMeta, metadataPath)
	return append(errs, validateSpec(&p.Spec, hasInvalidLabelValue(old.Spec.Selector))...)
}

// hasInvalidLabelValue reports whether s has a label value that
// validation now refuses.
func hasInvalidLabelValue(s *metav1.LabelSelector) bool {
	var strict metav1validation.LabelSelectorValidationOptions
	return s != nil && len(metav1validation.ValidateLabelSelector(s, strict, nil)) > 0
}

// validUnhealthyPodEvictionPolicies are the values of
// spec.unhealthyPodEvictionPolicy, sorted as upstream lists them.
var validUnhealthyPodEvictionPolicies = []policyv1.UnhealthyPodEvictionPolicyType{policyv1.AlwaysAllow, policyv1.IfHealthyBudget}

// validateSpec checks a budget's spec: at most one of minAvailable and
// maxUnavailable, each a count or a percentage of at most 100%, a valid
// selector (invalid label values allowed with invalidValues) and a known
// eviction policy for unhealthy pods.
func validateSpec(s *policyv1.PodDisruptionBudgetSpec, invalidValues bool) field.ErrorList {
	var errs field.ErrorList
	if s.MinAvailable != nil && s.MaxUnavailable != nil {
		errs = append(errs, field.Invalid(specPath, s, "minAvailable and maxUnavailable cannot be both set"))
	}
	errs = append(errs, apps.ValidateIntOrPercent(s.MinAvailable, specPath.Child("minAvailable"))...)
	errs = append(errs, apps.NotOver100Percent(s.MinAvailable, specPath.Child("minAvailable"))...)
	errs = append(errs, apps.ValidateIntOrPercent(s.MaxUnavailable, specPath.Child("maxUnavailable"))...)
	errs = append(errs, apps.NotOver100Percent(s.MaxUnavailable, specPath.Child("maxUnavailable"))...)
	opts := metav1validation.LabelSelectorValidationOptions{AllowInvalidLabelValueInSelector: invalidValues}
	errs = append(errs, metav1validation.ValidateLabelSelector(s.Selector, opts, specPath.Child("selector"))...)
	if p := s.UnhealthyPodEvictionPolicy; p != nil && !slices.Contains(validUnhealthyPodEvictionPolicies, *p) {
		errs = append(errs, field.NotSupported(specPath.Child("unhealthyPodEvictionPolicy"), *p, validUnhealthyPodEvictionPolicies))
	}
	return errs
}

// validatePDBStatusUpdate checks an update of budget old's status to p's:
// valid conditions and no negative count.
func validatePDBStatusUpdate(p, old *policyv1.PodDisruptionBudget) field.ErrorList {
	errs := apivalidation.ValidateObjectMetaUpdate(&p.ObjectMeta, &old.ObjectMeta, metadataPath)
	s := &p.Status
	errs = append(errs, metav1validation.ValidateConditions(s.Conditions, statusPath.Child("conditions"))...)
	for _, c := range []struct {
		name string
		n    int32
	}{
		{"disruptionsAllowed", s.DisruptionsAllowed},
		{"currentHealthy", s.CurrentHealthy},
		{"desiredHealthy", s.DesiredHealthy},
		{"expectedPods", s.ExpectedPods},
	} {
		errs = append(errs, apivalidation.ValidateNonnegativeField(int64(c.n), statusPath.Child(c.name))...)
	}
	return errs
}

func pdbColumns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{
		{Name: "Name", Type: "string", Format: "name", Description: metav1.ObjectMeta{}.SwaggerDoc()["name"]},
		{Name: "Min Available", Type: "string", Description: "The minimum number of pods that must be available."},
		{Name: "Max Unavailable", Type: "string", Description: "The maximum number of pods that may be unavailable."},
		{Name: "Allowed Disruptions", Type: "integer", Description: "Calculated number of pods that may be disrupted at this time."},
		{Name: "Age", Type: "string", Description: metav1.ObjectMeta{}.SwaggerDoc()["creationTimestamp"]},
	}
}

// pdbRow is a budget's row: "N/A" for whichever of minAvailable and
// maxUnavailable it leaves unset.
func pdbRow(p *policyv1.PodDisruptionBudget, now time.Time) []interface{} {
	minAvailable, maxUnavailable := "N/A", "N/A"
	if v := p.Spec.MinAvailable; v != nil {
		minAvailable = v.String()
	}
	if v := p.Spec.MaxUnavailable; v != nil {
		maxUnavailable = v.String()
	}
	age := "<unknown>"
	if !p.CreationTimestamp.IsZero() {
		age = duration.HumanDuration(now.Sub(p.CreationTimestamp.Time))
	}
	return []interface{}{p.Name, minAvailable, maxUnavailable, int64(p.Status.DisruptionsAllowed), age}
}
