package admissionregistration

import (
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/api/validation/path"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/sets"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/outpost-mesh/outpost/hub/registry/typed"
)

var specPath = field.NewPath("spec")

var (
	validationReasons = sets.New(string(metav1.StatusReasonForbidden), string(metav1.StatusReasonInvalid), string(metav1.StatusReasonRequestEntityTooLarge))
	validationActions = sets.New(string(admissionregistrationv1.Deny), string(admissionregistrationv1.Warn), string(admissionregistrationv1.Audit))
)

func policyRules(o options) *typed.Rules[*admissionregistrationv1.ValidatingAdmissionPolicy] {
	check := func(p *admissionregistrationv1.ValidatingAdmissionPolicy) field.ErrorList {
		errs := apivalidation.ValidateObjectMeta(&p.ObjectMeta, false, apivalidation.NameIsDNSSubdomain, metadataPath)
		errs = append(errs, validatePolicySpec(&p.Spec)...)
		if o.policyCheck != nil {
			errs = append(errs, o.policyCheck(p)...)
		}
		return errs
	}
	return &typed.Rules[*admissionregistrationv1.ValidatingAdmissionPolicy]{
		Now:      o.now,
		Defaults: defaultPolicy,
		PrepareCreate: func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Status = admissionregistrationv1.ValidatingAdmissionPolicyStatus{}
		},
		Check: check,
		CheckUpdate: func(p, old *admissionregistrationv1.ValidatingAdmissionPolicy) field.ErrorList {
			return append(check(p), apivalidation.ValidateObjectMetaUpdate(&p.ObjectMeta, &old.ObjectMeta, metadataPath)...)
		},
		TableColumns: []metav1.TableColumnDefinition{
			typed.NameColumn,
			{Name: "Validations", Type: "integer", Description: "Validations indicates the number of validation rules defined in this configuration"},
			{Name: "ParamKind", Type: "string", Description: "ParamKind specifies the kind of resources used to parameterize this policy"},
			typed.AgeColumn,
		},
		TableRow: func(p *admissionregistrationv1.ValidatingAdmissionPolicy, now time.Time) []any {
			return []any{p.Name, int64(len(p.Spec.Validations)), paramKindCell(p.Spec.ParamKind), typed.Age(now, p.CreationTimestamp)}
		},
	}
}

// paramKindCell is a policy's PARAMKIND cell: apiVersion/kind, or
// <unset>.
func paramKindCell(pk *admissionregistrationv1.ParamKind) string {
	if pk == nil {
		return "<unset>"
	}
	return pk.APIVersion + "/" + pk.Kind
}

func bindingRules(o options) *typed.Rules[*admissionregistrationv1.ValidatingAdmissionPolicyBinding] {
	check := func(b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) field.ErrorList {
		errs := apivalidation.ValidateObjectMeta(&b.ObjectMeta, false, apivalidation.NameIsDNSSubdomain, metadataPath)
		return append(errs, validateBindingSpec(&b.Spec)...)
	}
	return &typed.Rules[*admissionregistrationv1.ValidatingAdmissionPolicyBinding]{
		Now: o.now,
		Defaults: func(b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
			defaultMatchResources(b.Spec.MatchResources)
		},
		Check: check,
		CheckUpdate: func(b, old *admissionregistrationv1.ValidatingAdmissionPolicyBinding) field.ErrorList {
			return append(check(b), apivalidation.ValidateObjectMetaUpdate(&b.ObjectMeta, &old.ObjectMeta, metadataPath)...)
		},
		TableColumns: []metav1.TableColumnDefinition{
			typed.NameColumn,
			{Name: "PolicyName", Type: "string", Description: "PolicyName references a ValidatingAdmissionPolicy name which the ValidatingAdmissionPolicyBinding binds to."},
			{Name: "ParamRef", Type: "string", Description: "ParamRef specifies the parameter resource used to configure the admission control policy."},
			typed.AgeColumn,
		},
		TableRow: func(b *admissionregistrationv1.ValidatingAdmissionPolicyBinding, now time.Time) []any {
			ref := "<unset>"
			if pr := b.Spec.ParamRef; pr != nil {
				switch {
				case pr.Name != "" && pr.Namespace != "":
					ref = pr.Namespace + "/" + pr.Name
				case pr.Name != "":
					ref = "*/" + pr.Name
				case pr.Selector != nil:
					ref = metav1.FormatLabelSelector(pr.Selector)
				}
			}
			return []any{b.Name, b.Spec.PolicyName, ref, typed.Age(now, b.CreationTimestamp)}
		},
	}
}

// defaultPolicy applies v1's defaults: failurePolicy Fail and those of
// its matchConstraints.
func defaultPolicy(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
	if p.Spec.FailurePolicy == nil {
		p.Spec.FailurePolicy = new(admissionregistrationv1.Fail)
	}
	defaultMatchResources(p.Spec.MatchConstraints)
}

// defaultMatchResources applies v1's defaults to m, if any: matchPolicy
// Equivalent, empty selectors, and rules of every scope.
func defaultMatchResources(m *admissionregistrationv1.MatchResources) {
	if m == nil {
		return
	}
	if m.MatchPolicy == nil {
		m.MatchPolicy = new(admissionregistrationv1.Equivalent)
	}
	if m.NamespaceSelector == nil {
		m.NamespaceSelector = &metav1.LabelSelector{}
	}
	if m.ObjectSelector == nil {
		m.ObjectSelector = &metav1.LabelSelector{}
	}
	for _, rs := range [][]admissionregistrationv1.NamedRuleWithOperations{m.ResourceRules, m.ExcludeResourceRules} {
		for i := range rs {
			if rs[i].Scope == nil {
				rs[i].Scope = new(admissionregistrationv1.AllScopes)
			}
		}
	}
}

// validatePolicySpec checks a policy's structure as upstream does; its
// matchConditions are compiled, its other expressions left to the
// policy check.
func validatePolicySpec(s *admissionregistrationv1.ValidatingAdmissionPolicySpec) field.ErrorList {
	var errs field.ErrorList
	if s.FailurePolicy == nil {
		errs = append(errs, field.Required(specPath.Child("failurePolicy"), ""))
	} else if !supportedFailurePolicies.Has(string(*s.FailurePolicy)) {
		errs = append(errs, field.NotSupported(specPath.Child("failurePolicy"), *s.FailurePolicy, sets.List(supportedFailurePolicies)))
	}
	if s.ParamKind != nil {
		errs = append(errs, validateParamKind(s.ParamKind, specPath.Child("paramKind"))...)
	}
	if s.MatchConstraints == nil {
		errs = append(errs, field.Required(specPath.Child("matchConstraints"), ""))
	} else {
		errs = append(errs, validateMatchResources(s.MatchConstraints, specPath.Child("matchConstraints"))...)
		if len(s.MatchConstraints.ResourceRules) == 0 {
			errs = append(errs, field.Required(specPath.Child("matchConstraints", "resourceRules"), ""))
		}
	}
	errs = append(errs, validateMatchConditions(s.MatchConditions, nil, s.ParamKind != nil, specPath.Child("matchConditions"))...)
	for i, v := range s.Variables {
		vp := specPath.Child("variables").Index(i)
		if strings.TrimSpace(v.Name) == "" {
			errs = append(errs, field.Required(vp.Child("name"), "name is not specified"))
		}
		if strings.TrimSpace(v.Expression) == "" {
			errs = append(errs, field.Required(vp.Child("expression"), "expression is not specified"))
		}
	}
	if len(s.Validations) == 0 && len(s.AuditAnnotations) == 0 {
		msg := "validations or auditAnnotations must contain at least one item"
		return append(errs, field.Required(specPath.Child("validations"), msg), field.Required(specPath.Child("auditAnnotations"), msg))
	}
	for i, v := range s.Validations {
		errs = append(errs, validateValidation(&v, specPath.Child("validations").Index(i))...)
	}
	if len(s.AuditAnnotations) > 20 {
		errs = append(errs, field.Invalid(specPath.Child("auditAnnotations"), s.AuditAnnotations, "must not have more than 20 auditAnnotations"))
	}
	keys := sets.New[string]()
	for i, a := range s.AuditAnnotations {
		ap := specPath.Child("auditAnnotations").Index(i)
		if strings.TrimSpace(a.ValueExpression) == "" {
			errs = append(errs, field.Required(ap.Child("valueExpression"), "valueExpression is not specified"))
		}
		if keys.Has(a.Key) {
			errs = append(errs, field.Duplicate(ap.Child("key"), a.Key))
		}
		keys.Insert(a.Key)
	}
	return errs
}

func validateValidation(v *admissionregistrationv1.Validation, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if strings.TrimSpace(v.Expression) == "" {
		errs = append(errs, field.Required(p.Child("expression"), "expression is not specified"))
	}
	if v.MessageExpression != "" && strings.TrimSpace(v.MessageExpression) == "" {
		errs = append(errs, field.Invalid(p.Child("messageExpression"), v.MessageExpression, "must be non-empty if specified"))
	}
	msg := strings.TrimSpace(v.Message)
	if v.Message != "" && msg == "" {
		errs = append(errs, field.Invalid(p.Child("message"), v.Message, "message must be non-empty if specified"))
	} else if strings.ContainsAny(msg, "\n\r") {
		errs = append(errs, field.Invalid(p.Child("message"), v.Message, "message must not contain line breaks"))
	}
	if v.Reason != nil && !validationReasons.Has(string(*v.Reason)) {
		errs = append(errs, field.NotSupported(p.Child("reason"), *v.Reason, sets.List(validationReasons)))
	}
	return errs
}

func validateParamKind(pk *admissionregistrationv1.ParamKind, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch {
	case pk.APIVersion == "":
		errs = append(errs, field.Required(p.Child("apiVersion"), ""))
	case strings.Count(pk.APIVersion, "/") > 1:
		errs = append(errs, field.Invalid(p.Child("apiVersion"), pk.APIVersion, "unexpected GroupVersion string: "+pk.APIVersion))
	default:
		group, version, ok := strings.Cut(pk.APIVersion, "/")
		if !ok {
			group, version = "", group
		}
		if group != "" {
			if msgs := utilvalidation.IsDNS1123Subdomain(group); len(msgs) > 0 {
				errs = append(errs, field.Invalid(p.Child("apiVersion"), group, strings.Join(msgs, ",")))
			}
		}
		if version == "" {
			errs = append(errs, field.Invalid(p.Child("apiVersion"), pk.APIVersion, "version must be specified"))
		} else if msgs := utilvalidation.IsDNS1035Label(version); len(msgs) > 0 {
			errs = append(errs, field.Invalid(p.Child("apiVersion"), version, strings.Join(msgs, ",")))
		}
	}
	if pk.Kind == "" {
		errs = append(errs, field.Required(p.Child("kind"), ""))
	} else if msgs := utilvalidation.IsDNS1035Label(strings.ToLower(pk.Kind)); len(msgs) > 0 {
		errs = append(errs, field.Invalid(p.Child("kind"), pk.Kind, "may have mixed case, but should otherwise match: "+strings.Join(msgs, ",")))
	}
	return errs
}

func validateMatchResources(m *admissionregistrationv1.MatchResources, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if m.MatchPolicy == nil {
		errs = append(errs, field.Required(p.Child("matchPolicy"), ""))
	} else if !supportedMatchPolicies.Has(string(*m.MatchPolicy)) {
		errs = append(errs, field.NotSupported(p.Child("matchPolicy"), *m.MatchPolicy, sets.List(supportedMatchPolicies)))
	}
	for _, s := range []struct {
		name string
		sel  *metav1.LabelSelector
	}{{"namespaceSelector", m.NamespaceSelector}, {"objectSelector", m.ObjectSelector}} {
		if s.sel == nil {
			errs = append(errs, field.Required(p.Child(s.name), ""))
		} else {
			errs = append(errs, metav1validation.ValidateLabelSelector(s.sel, metav1validation.LabelSelectorValidationOptions{}, p.Child(s.name))...)
		}
	}
	for _, rs := range []struct {
		name  string
		rules []admissionregistrationv1.NamedRuleWithOperations
	}{{"resourceRules", m.ResourceRules}, {"excludeResourceRules", m.ExcludeResourceRules}} {
		for i := range rs.rules {
			errs = append(errs, validateNamedRule(&rs.rules[i], p.Child(rs.name).Index(i))...)
		}
	}
	return errs
}

func validateNamedRule(r *admissionregistrationv1.NamedRuleWithOperations, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	names := sets.New[string]()
	for i, n := range r.ResourceNames {
		for _, msg := range path.ValidatePathSegmentName(n, false) {
			errs = append(errs, field.Invalid(p.Child("resourceNames").Index(i), n, msg))
		}
		if names.Has(n) {
			errs = append(errs, field.Duplicate(p.Child("resourceNames").Index(i), n))
		}
		names.Insert(n)
	}
	return append(errs, validateRuleWithOperations(&r.RuleWithOperations, p)...)
}

// validateBindingSpec checks a binding as upstream does: a policy name,
// a paramRef with a name or a selector, its match resources, and its
// validation actions.
func validateBindingSpec(s *admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec) field.ErrorList {
	var errs field.ErrorList
	if s.PolicyName == "" {
		errs = append(errs, field.Required(specPath.Child("policyName"), ""))
	} else {
		for _, msg := range apivalidation.NameIsDNSSubdomain(s.PolicyName, false) {
			errs = append(errs, field.Invalid(specPath.Child("policyName"), s.PolicyName, msg))
		}
	}
	if pr := s.ParamRef; pr != nil {
		errs = append(errs, validateParamRef(pr, specPath.Child("paramRef"))...)
	}
	if s.MatchResources != nil {
		errs = append(errs, validateMatchResources(s.MatchResources, specPath.Child("matchResouces"))...)
	}
	ap := specPath.Child("validationActions")
	seen := sets.New[string]()
	for i, a := range s.ValidationActions {
		if !validationActions.Has(string(a)) {
			errs = append(errs, field.NotSupported(ap.Index(i), a, sets.List(validationActions)))
		}
		if seen.Has(string(a)) {
			errs = append(errs, field.Duplicate(ap.Index(i), a))
		}
		seen.Insert(string(a))
	}
	if seen.Has(string(admissionregistrationv1.Deny)) && seen.Has(string(admissionregistrationv1.Warn)) {
		errs = append(errs, field.Invalid(ap, s.ValidationActions, "must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)"))
	}
	if seen.Len() == 0 {
		errs = append(errs, field.Required(ap, "at least one validation action is required"))
	}
	return errs
}

func validateParamRef(pr *admissionregistrationv1.ParamRef, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch {
	case pr.Name != "" && pr.Selector != nil:
		errs = append(errs, field.Forbidden(p.Child("name"), `name and selector are mutually exclusive`))
	case pr.Name == "" && pr.Selector == nil:
		errs = append(errs, field.Required(p, `one of name or selector must be specified`))
	case pr.Name != "":
		for _, msg := range path.ValidatePathSegmentName(pr.Name, false) {
			errs = append(errs, field.Invalid(p.Child("name"), pr.Name, msg))
		}
	default:
		errs = append(errs, metav1validation.ValidateLabelSelector(pr.Selector, metav1validation.LabelSelectorValidationOptions{}, p.Child("selector"))...)
	}
	if pr.Namespace != "" {
		for _, msg := range apivalidation.ValidateNamespaceName(pr.Namespace, false) {
			errs = append(errs, field.Invalid(p.Child("namespace"), pr.Namespace, msg))
		}
	}
	if a := pr.ParameterNotFoundAction; a == nil {
		errs = append(errs, field.Required(p.Child("parameterNotFoundAction"), ""))
	} else if *a != admissionregistrationv1.DenyAction && *a != admissionregistrationv1.AllowAction {
		errs = append(errs, field.NotSupported(p.Child("parameterNotFoundAction"), *a, []string{string(admissionregistrationv1.AllowAction), string(admissionregistrationv1.DenyAction)}))
	}
	return errs
}
