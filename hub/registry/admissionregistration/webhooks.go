// Package admissionregistration holds the hub's rules for the
// admissionregistration.k8s.io/v1 resources: mutating and validating
// webhook configurations, validating admission policies and their
// bindings (defaults, validation and printer columns, as upstream
// Kubernetes defines them). hub/admission/webhook calls the webhooks they
// configure; the policies' CEL is checked by the Option a CEL compiler
// supplies.
package admissionregistration

import (
	"fmt"
	"reflect"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/sets"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	apiservercel "k8s.io/apiserver/pkg/cel"
	"k8s.io/apiserver/pkg/cel/environment"
)

var (
	metadataPath = field.NewPath("metadata")
	webhooksPath = field.NewPath("webhooks")
)

// acceptedReviewVersions are the AdmissionReview versions the hub sends.
var acceptedReviewVersions = []string{"v1", "v1beta1"}

var (
	supportedFailurePolicies = sets.New(string(admissionregistrationv1.Ignore), string(admissionregistrationv1.Fail))
	supportedMatchPolicies   = sets.New(string(admissionregistrationv1.Exact), string(admissionregistrationv1.Equivalent))
	supportedSideEffects     = sets.New(string(admissionregistrationv1.SideEffectClassUnknown), string(admissionregistrationv1.SideEffectClassNone),
		string(admissionregistrationv1.SideEffectClassSome), string(admissionregistrationv1.SideEffectClassNoneOnDryRun))
	noSideEffects       = sets.New(string(admissionregistrationv1.SideEffectClassNone), string(admissionregistrationv1.SideEffectClassNoneOnDryRun))
	supportedOperations = sets.New(string(admissionregistrationv1.OperationAll), string(admissionregistrationv1.Create),
		string(admissionregistrationv1.Update), string(admissionregistrationv1.Delete), string(admissionregistrationv1.Connect))
	supportedReinvocation = sets.New(string(admissionregistrationv1.NeverReinvocationPolicy), string(admissionregistrationv1.IfNeededReinvocationPolicy))
	validScopes           = sets.New(string(admissionregistrationv1.ClusterScope), string(admissionregistrationv1.NamespacedScope), string(admissionregistrationv1.AllScopes))
)

// webhookOptions are what validation relaxes on an update, so that a
// configuration stored under older rules can still be changed, as
// upstream relaxes them.
type webhookOptions struct {
	ignoreMatchConditions  bool
	requireNoSideEffects   bool
	requireKnownVersion    bool
	requireUniqueNames     bool
	allowInvalidLabelValue bool
	// stored are the matchCondition expressions of the stored object,
	// compiled with the environment of stored expressions.
	stored sets.Set[string]
}

// createOptions are the rules of a create: all of them.
var createOptions = webhookOptions{requireNoSideEffects: true, requireKnownVersion: true, requireUniqueNames: true}

// commonWebhook is what both kinds of webhooks share, for validation.
type commonWebhook struct {
	name                    string
	clientConfig            admissionregistrationv1.WebhookClientConfig
	rules                   []admissionregistrationv1.RuleWithOperations
	failurePolicy           *admissionregistrationv1.FailurePolicyType
	matchPolicy             *admissionregistrationv1.MatchPolicyType
	namespaceSelector       *metav1.LabelSelector
	objectSelector          *metav1.LabelSelector
	sideEffects             *admissionregistrationv1.SideEffectClass
	timeoutSeconds          *int32
	admissionReviewVersions []string
	matchConditions         []admissionregistrationv1.MatchCondition
}

func fromMutating(w *admissionregistrationv1.MutatingWebhook) commonWebhook {
	return commonWebhook{w.Name, w.ClientConfig, w.Rules, w.FailurePolicy, w.MatchPolicy, w.NamespaceSelector, w.ObjectSelector,
		w.SideEffects, w.TimeoutSeconds, w.AdmissionReviewVersions, w.MatchConditions}
}

func fromValidating(w *admissionregistrationv1.ValidatingWebhook) commonWebhook {
	return commonWebhook{w.Name, w.ClientConfig, w.Rules, w.FailurePolicy, w.MatchPolicy, w.NamespaceSelector, w.ObjectSelector,
		w.SideEffects, w.TimeoutSeconds, w.AdmissionReviewVersions, w.MatchConditions}
}

// validateWebhooks validates a configuration of hooks.
func validateWebhooks(meta *metav1.ObjectMeta, hooks []commonWebhook, reinvocation []*admissionregistrationv1.ReinvocationPolicyType, opts webhookOptions) field.ErrorList {
	errs := apivalidation.ValidateObjectMeta(meta, false, apivalidation.NameIsDNSSubdomain, metadataPath)
	names := sets.New[string]()
	for i, h := range hooks {
		p := webhooksPath.Index(i)
		errs = append(errs, validateWebhook(h, opts, p)...)
		if reinvocation != nil && reinvocation[i] != nil && !supportedReinvocation.Has(string(*reinvocation[i])) {
			errs = append(errs, field.NotSupported(p.Child("reinvocationPolicy"), *reinvocation[i], sets.List(supportedReinvocation)))
		}
		errs = append(errs, validateReviewVersions(h.admissionReviewVersions, opts.requireKnownVersion, p.Child("admissionReviewVersions"))...)
		if opts.requireUniqueNames && h.name != "" {
			if names.Has(h.name) {
				errs = append(errs, field.Duplicate(p.Child("name"), h.name))
			}
			names.Insert(h.name)
		}
	}
	return errs
}

func validateWebhook(h commonWebhook, opts webhookOptions, p *field.Path) field.ErrorList {
	errs := utilvalidation.IsFullyQualifiedName(p.Child("name"), h.name)
	for i := range h.rules {
		errs = append(errs, validateRuleWithOperations(&h.rules[i], p.Child("rules").Index(i))...)
	}
	if h.failurePolicy != nil && !supportedFailurePolicies.Has(string(*h.failurePolicy)) {
		errs = append(errs, field.NotSupported(p.Child("failurePolicy"), *h.failurePolicy, sets.List(supportedFailurePolicies)))
	}
	if h.matchPolicy != nil && !supportedMatchPolicies.Has(string(*h.matchPolicy)) {
		errs = append(errs, field.NotSupported(p.Child("matchPolicy"), *h.matchPolicy, sets.List(supportedMatchPolicies)))
	}
	allowed := supportedSideEffects
	if opts.requireNoSideEffects {
		allowed = noSideEffects
	}
	switch {
	case h.sideEffects == nil:
		errs = append(errs, field.Required(p.Child("sideEffects"), fmt.Sprintf("must specify one of %v", strings.Join(sets.List(allowed), ", "))))
	case !allowed.Has(string(*h.sideEffects)):
		errs = append(errs, field.NotSupported(p.Child("sideEffects"), *h.sideEffects, sets.List(allowed)))
	}
	if t := h.timeoutSeconds; t != nil && (*t > 30 || *t < 1) {
		errs = append(errs, field.Invalid(p.Child("timeoutSeconds"), *t, "the timeout value must be between 1 and 30 seconds"))
	}
	selOpts := metav1validation.LabelSelectorValidationOptions{AllowInvalidLabelValueInSelector: opts.allowInvalidLabelValue}
	if h.namespaceSelector != nil {
		errs = append(errs, metav1validation.ValidateLabelSelector(h.namespaceSelector, selOpts, p.Child("namespaceSelector"))...)
	}
	if h.objectSelector != nil {
		errs = append(errs, metav1validation.ValidateLabelSelector(h.objectSelector, selOpts, p.Child("objectSelector"))...)
	}
	cc := h.clientConfig
	switch {
	case (cc.URL == nil) == (cc.Service == nil):
		errs = append(errs, field.Required(p.Child("clientConfig"), "exactly one of url or service is required"))
	case cc.URL != nil:
		errs = append(errs, validateWebhookURL(p.Child("clientConfig", "url"), *cc.URL, true)...)
	default:
		port := int32(443)
		if cc.Service.Port != nil {
			port = *cc.Service.Port
		}
		errs = append(errs, validateWebhookService(p.Child("clientConfig", "service"), cc.Service.Name, cc.Service.Namespace, cc.Service.Path, port)...)
	}
	if !opts.ignoreMatchConditions {
		errs = append(errs, validateMatchConditions(h.matchConditions, opts.stored, false, p.Child("matchConditions"))...)
	}
	return errs
}

func validateReviewVersions(versions []string, requireKnown bool, p *field.Path) field.ErrorList {
	if len(versions) == 0 {
		return field.ErrorList{field.Required(p, fmt.Sprintf("must specify one of %v", strings.Join(acceptedReviewVersions, ", ")))}
	}
	var errs field.ErrorList
	seen := map[string]bool{}
	known := false
	for i, v := range versions {
		if seen[v] {
			errs = append(errs, field.Invalid(p.Index(i), v, "duplicate version"))
			continue
		}
		seen[v] = true
		for _, msg := range utilvalidation.IsDNS1035Label(v) {
			errs = append(errs, field.Invalid(p.Index(i), v, msg))
		}
		known = known || v == "v1" || v == "v1beta1"
	}
	if requireKnown && !known {
		errs = append(errs, field.Invalid(p, versions, fmt.Sprintf("must include at least one of %v", strings.Join(acceptedReviewVersions, ", "))))
	}
	return errs
}

func validateRuleWithOperations(r *admissionregistrationv1.RuleWithOperations, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(r.Operations) == 0 {
		errs = append(errs, field.Required(p.Child("operations"), ""))
	}
	if len(r.Operations) > 1 && hasWildcard(r.Operations) {
		errs = append(errs, field.Invalid(p.Child("operations"), r.Operations, "if '*' is present, must not specify other operations"))
	}
	for i, op := range r.Operations {
		if !supportedOperations.Has(string(op)) {
			errs = append(errs, field.NotSupported(p.Child("operations").Index(i), op, sets.List(supportedOperations)))
		}
	}
	return append(errs, validateRule(&r.Rule, p)...)
}

func validateRule(r *admissionregistrationv1.Rule, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(r.APIGroups) == 0 {
		errs = append(errs, field.Required(p.Child("apiGroups"), ""))
	}
	if len(r.APIGroups) > 1 && hasWildcard(r.APIGroups) {
		errs = append(errs, field.Invalid(p.Child("apiGroups"), r.APIGroups, "if '*' is present, must not specify other API groups"))
	}
	if len(r.APIVersions) == 0 {
		errs = append(errs, field.Required(p.Child("apiVersions"), ""))
	}
	if len(r.APIVersions) > 1 && hasWildcard(r.APIVersions) {
		errs = append(errs, field.Invalid(p.Child("apiVersions"), r.APIVersions, "if '*' is present, must not specify other API versions"))
	}
	for i, v := range r.APIVersions {
		if v == "" {
			errs = append(errs, field.Required(p.Child("apiVersions").Index(i), ""))
		}
	}
	errs = append(errs, validateResources(r.Resources, p.Child("resources"))...)
	if r.Scope != nil && !validScopes.Has(string(*r.Scope)) {
		errs = append(errs, field.NotSupported(p.Child("scope"), *r.Scope, sets.List(validScopes)))
	}
	return errs
}

// validateResources checks a rule's resources and their "*" and
// "x/*", "*/x" subresource forms, as upstream does.
func validateResources(resources []string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(resources) == 0 {
		errs = append(errs, field.Required(p, ""))
	}
	withWildcardSub, withWildcardRes := sets.New[string](), sets.New[string]()
	double, single, plain := false, false, false
	for i, rs := range resources {
		if rs == "" {
			errs = append(errs, field.Required(p.Index(i), ""))
			continue
		}
		double = double || rs == "*/*"
		single = single || rs == "*"
		res, sub, ok := strings.Cut(rs, "/")
		if !ok {
			plain = rs != "*"
			continue
		}
		if withWildcardSub.Has(res) {
			errs = append(errs, field.Invalid(p.Index(i), rs, fmt.Sprintf("if '%s/*' is present, must not specify %s", res, rs)))
		}
		if withWildcardRes.Has(sub) {
			errs = append(errs, field.Invalid(p.Index(i), rs, fmt.Sprintf("if '*/%s' is present, must not specify %s", sub, rs)))
		}
		if sub == "*" {
			withWildcardSub.Insert(res)
		}
		if res == "*" {
			withWildcardRes.Insert(sub)
		}
	}
	if len(resources) > 1 && double {
		errs = append(errs, field.Invalid(p, resources, "if '*/*' is present, must not specify other resources"))
	}
	if single && plain {
		errs = append(errs, field.Invalid(p, resources, "if '*' is present, must not specify other resources without subresources"))
	}
	return errs
}

func hasWildcard[S ~string](s []S) bool {
	for _, v := range s {
		if v == "*" {
			return true
		}
	}
	return false
}

// matchConditionCompiler compiles matchConditions to find their errors,
// as upstream's stateless compiler.
var matchConditionCompiler = plugincel.NewCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))

// validateMatchConditions checks matchConditions: at most 64, named with
// qualified unique names, with expressions that compile (those already
// stored with the environment of stored expressions).
func validateMatchConditions(m []admissionregistrationv1.MatchCondition, stored sets.Set[string], params bool, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(m) > 64 {
		errs = append(errs, field.TooMany(p, len(m), 64))
	}
	names := sets.New[string]()
	for i, c := range m {
		cp := p.Index(i)
		if expr := strings.TrimSpace(c.Expression); expr == "" {
			errs = append(errs, field.Required(cp.Child("expression"), ""))
		} else {
			env := environment.NewExpressions
			if stored.Has(expr) {
				env = environment.StoredExpressions
			}
			res := matchConditionCompiler.CompileCELExpression(&matchconditions.MatchCondition{Expression: expr},
				plugincel.OptionalVariableDeclarations{HasParams: params, HasAuthorizer: true}, env)
			if res.Error != nil {
				errs = append(errs, celError(cp.Child("expression"), expr, res.Error))
			}
		}
		if c.Name == "" {
			errs = append(errs, field.Required(cp.Child("name"), ""))
		} else {
			for _, msg := range utilvalidation.IsQualifiedName(c.Name) {
				errs = append(errs, field.Invalid(cp.Child("name"), c.Name, msg))
			}
			if names.Has(c.Name) {
				errs = append(errs, field.Duplicate(cp.Child("name"), c.Name))
			}
			names.Insert(c.Name)
		}
	}
	return errs
}

// celError is the field error of a CEL compilation error.
func celError(p *field.Path, expr string, err error) *field.Error {
	if ce, ok := err.(*apiservercel.Error); ok {
		switch ce.Type {
		case apiservercel.ErrorTypeRequired:
			return field.Required(p, ce.Detail)
		case apiservercel.ErrorTypeInvalid:
			return field.Invalid(p, expr, ce.Detail)
		}
	}
	return field.InternalError(p, fmt.Errorf("unsupported error type: %w", err))
}

// updateOptions returns the options of an update replacing hooks old:
// what the stored object already breaks is not held against the update.
func updateOptions(hooks, old []commonWebhook) webhookOptions {
	o := webhookOptions{requireNoSideEffects: true, requireKnownVersion: true, requireUniqueNames: true, stored: sets.New[string]()}
	names := sets.New[string]()
	selOpts := metav1validation.LabelSelectorValidationOptions{}
	o.ignoreMatchConditions = len(hooks) == len(old)
	for i, h := range old {
		if o.ignoreMatchConditions && !reflect.DeepEqual(hooks[i].matchConditions, h.matchConditions) {
			o.ignoreMatchConditions = false
		}
		for _, c := range h.matchConditions {
			o.stored.Insert(strings.TrimSpace(c.Expression))
		}
		if h.sideEffects == nil || !noSideEffects.Has(string(*h.sideEffects)) {
			o.requireNoSideEffects = false
		}
		if len(h.admissionReviewVersions) > 0 && !hasKnownVersion(h.admissionReviewVersions) {
			o.requireKnownVersion = false
		}
		if names.Has(h.name) {
			o.requireUniqueNames = false
		}
		names.Insert(h.name)
		for _, s := range []*metav1.LabelSelector{h.namespaceSelector, h.objectSelector} {
			if s != nil && len(metav1validation.ValidateLabelSelector(s, selOpts, nil)) > 0 {
				o.allowInvalidLabelValue = true
			}
		}
	}
	return o
}

func hasKnownVersion(vs []string) bool {
	for _, v := range vs {
		if v == "v1" || v == "v1beta1" {
			return true
		}
	}
	return false
}
