package admissionregistration

import (
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/registry/typed"
)

// Option configures Resources.
type Option func(*options)

type options struct {
	now         func() time.Time
	policyCheck func(*admissionregistrationv1.ValidatingAdmissionPolicy) field.ErrorList
}

// WithClock measures the Age of printed tables against now.
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// WithPolicyCheck adds check's errors to those of a
// ValidatingAdmissionPolicy's validation, on create and update: the
// errors of its CEL expressions, which a CEL compiler finds (this package
// checks the policy's structure only).
func WithPolicyCheck(check func(*admissionregistrationv1.ValidatingAdmissionPolicy) field.ErrorList) Option {
	return func(o *options) { o.policyCheck = check }
}

// Resources returns the admissionregistration.k8s.io/v1 resources, all
// cluster-scoped.
func Resources(opts ...Option) []apiserver.Resource {
	var o options
	for _, f := range opts {
		f(&o)
	}
	gv := admissionregistrationv1.SchemeGroupVersion
	add := admissionregistrationv1.AddToScheme
	return []apiserver.Resource{
		{
			GroupVersion: gv, Kind: "MutatingWebhookConfiguration", Plural: "mutatingwebhookconfigurations", Singular: "mutatingwebhookconfiguration",
			Categories: []string{"api-extensions"}, AddToScheme: add, Generation: true,
			New:     func() runtime.Object { return &admissionregistrationv1.MutatingWebhookConfiguration{} },
			NewList: func() runtime.Object { return &admissionregistrationv1.MutatingWebhookConfigurationList{} },
			Rules: &typed.Rules[*admissionregistrationv1.MutatingWebhookConfiguration]{
				Now: o.now, Defaults: defaultMutating, Check: validateMutating, CheckUpdate: validateMutatingUpdate,
				TableColumns: webhookColumns(), TableRow: func(c *admissionregistrationv1.MutatingWebhookConfiguration, now time.Time) []any {
					return []any{c.Name, int64(len(c.Webhooks)), typed.Age(now, c.CreationTimestamp)}
				},
			},
		},
		{
			GroupVersion: gv, Kind: "ValidatingWebhookConfiguration", Plural: "validatingwebhookconfigurations", Singular: "validatingwebhookconfiguration",
			Categories: []string{"api-extensions"}, AddToScheme: add, Generation: true,
			New:     func() runtime.Object { return &admissionregistrationv1.ValidatingWebhookConfiguration{} },
			NewList: func() runtime.Object { return &admissionregistrationv1.ValidatingWebhookConfigurationList{} },
			Rules: &typed.Rules[*admissionregistrationv1.ValidatingWebhookConfiguration]{
				Now: o.now, Defaults: defaultValidating, Check: validateValidating, CheckUpdate: validateValidatingUpdate,
				TableColumns: webhookColumns(), TableRow: func(c *admissionregistrationv1.ValidatingWebhookConfiguration, now time.Time) []any {
					return []any{c.Name, int64(len(c.Webhooks)), typed.Age(now, c.CreationTimestamp)}
				},
			},
		},
		{
			GroupVersion: gv, Kind: "ValidatingAdmissionPolicy", Plural: "validatingadmissionpolicies", Singular: "validatingadmissionpolicy",
			Categories: []string{"api-extensions"}, AddToScheme: add, Generation: true, Status: true,
			StatusKeepsMetadata: true, // as upstream's status strategy
			New:                 func() runtime.Object { return &admissionregistrationv1.ValidatingAdmissionPolicy{} },
			NewList:             func() runtime.Object { return &admissionregistrationv1.ValidatingAdmissionPolicyList{} },
			Rules:               policyRules(o),
		},
		{
			GroupVersion: gv, Kind: "ValidatingAdmissionPolicyBinding", Plural: "validatingadmissionpolicybindings", Singular: "validatingadmissionpolicybinding",
			Categories: []string{"api-extensions"}, AddToScheme: add, Generation: true,
			New:     func() runtime.Object { return &admissionregistrationv1.ValidatingAdmissionPolicyBinding{} },
			NewList: func() runtime.Object { return &admissionregistrationv1.ValidatingAdmissionPolicyBindingList{} },
			Rules:   bindingRules(o),
		},
		{
			GroupVersion: gv, Kind: "MutatingAdmissionPolicy", Plural: "mutatingadmissionpolicies", Singular: "mutatingadmissionpolicy",
			Categories: []string{"api-extensions"}, AddToScheme: add, Generation: true,
			New:     func() runtime.Object { return &admissionregistrationv1.MutatingAdmissionPolicy{} },
			NewList: func() runtime.Object { return &admissionregistrationv1.MutatingAdmissionPolicyList{} },
			Rules:   mutatingPolicyRules(o),
		},
		{
			GroupVersion: gv, Kind: "MutatingAdmissionPolicyBinding", Plural: "mutatingadmissionpolicybindings", Singular: "mutatingadmissionpolicybinding",
			Categories: []string{"api-extensions"}, AddToScheme: add, Generation: true,
			New:     func() runtime.Object { return &admissionregistrationv1.MutatingAdmissionPolicyBinding{} },
			NewList: func() runtime.Object { return &admissionregistrationv1.MutatingAdmissionPolicyBindingList{} },
			Rules:   mutatingBindingRules(o),
		},
	}
}

// webhookColumns are upstream's columns of both webhook configurations.
func webhookColumns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{
		typed.NameColumn,
		{Name: "Webhooks", Type: "integer", Description: "Webhooks indicates the number of webhooks in the configuration."},
		typed.AgeColumn,
	}
}

// defaultRules sets a rule's scope "*", as v1's defaults do.
func defaultRules(rules []admissionregistrationv1.RuleWithOperations) {
	for i := range rules {
		if rules[i].Scope == nil {
			rules[i].Scope = new(admissionregistrationv1.AllScopes)
		}
	}
}

// defaultClientConfig sets a service's port 443.
func defaultClientConfig(cc *admissionregistrationv1.WebhookClientConfig) {
	if cc.Service != nil && cc.Service.Port == nil {
		cc.Service.Port = new(int32(443))
	}
}

// defaultCommon applies v1's defaults of the fields both kinds of
// webhooks share.
func defaultCommon(fp **admissionregistrationv1.FailurePolicyType, mp **admissionregistrationv1.MatchPolicyType,
	ns, obj **metav1.LabelSelector, timeout **int32, rules []admissionregistrationv1.RuleWithOperations, cc *admissionregistrationv1.WebhookClientConfig) {
	if *fp == nil {
		*fp = new(admissionregistrationv1.Fail)
	}
	if *mp == nil {
		*mp = new(admissionregistrationv1.Equivalent)
	}
	if *ns == nil {
		*ns = &metav1.LabelSelector{}
	}
	if *obj == nil {
		*obj = &metav1.LabelSelector{}
	}
	if *timeout == nil {
		*timeout = new(int32(10))
	}
	defaultRules(rules)
	defaultClientConfig(cc)
}

func defaultMutating(c *admissionregistrationv1.MutatingWebhookConfiguration) {
	for i := range c.Webhooks {
		w := &c.Webhooks[i]
		defaultCommon(&w.FailurePolicy, &w.MatchPolicy, &w.NamespaceSelector, &w.ObjectSelector, &w.TimeoutSeconds, w.Rules, &w.ClientConfig)
		if w.ReinvocationPolicy == nil {
			w.ReinvocationPolicy = new(admissionregistrationv1.NeverReinvocationPolicy)
		}
	}
}

func defaultValidating(c *admissionregistrationv1.ValidatingWebhookConfiguration) {
	for i := range c.Webhooks {
		w := &c.Webhooks[i]
		defaultCommon(&w.FailurePolicy, &w.MatchPolicy, &w.NamespaceSelector, &w.ObjectSelector, &w.TimeoutSeconds, w.Rules, &w.ClientConfig)
	}
}

func mutatingHooks(c *admissionregistrationv1.MutatingWebhookConfiguration) ([]commonWebhook, []*admissionregistrationv1.ReinvocationPolicyType) {
	hooks := make([]commonWebhook, len(c.Webhooks))
	reinvocation := make([]*admissionregistrationv1.ReinvocationPolicyType, len(c.Webhooks))
	for i := range c.Webhooks {
		hooks[i], reinvocation[i] = fromMutating(&c.Webhooks[i]), c.Webhooks[i].ReinvocationPolicy
	}
	return hooks, reinvocation
}

func validatingHooks(c *admissionregistrationv1.ValidatingWebhookConfiguration) []commonWebhook {
	hooks := make([]commonWebhook, len(c.Webhooks))
	for i := range c.Webhooks {
		hooks[i] = fromValidating(&c.Webhooks[i])
	}
	return hooks
}

func validateMutating(c *admissionregistrationv1.MutatingWebhookConfiguration) field.ErrorList {
	hooks, re := mutatingHooks(c)
	return validateWebhooks(&c.ObjectMeta, hooks, re, createOptions)
}

func validateMutatingUpdate(c, old *admissionregistrationv1.MutatingWebhookConfiguration) field.ErrorList {
	hooks, re := mutatingHooks(c)
	oldHooks, _ := mutatingHooks(old)
	errs := validateWebhooks(&c.ObjectMeta, hooks, re, updateOptions(hooks, oldHooks))
	return append(errs, apivalidation.ValidateObjectMetaUpdate(&c.ObjectMeta, &old.ObjectMeta, metadataPath)...)
}

func validateValidating(c *admissionregistrationv1.ValidatingWebhookConfiguration) field.ErrorList {
	return validateWebhooks(&c.ObjectMeta, validatingHooks(c), nil, createOptions)
}

func validateValidatingUpdate(c, old *admissionregistrationv1.ValidatingWebhookConfiguration) field.ErrorList {
	hooks := validatingHooks(c)
	errs := validateWebhooks(&c.ObjectMeta, hooks, nil, updateOptions(hooks, validatingHooks(old)))
	return append(errs, apivalidation.ValidateObjectMetaUpdate(&c.ObjectMeta, &old.ObjectMeta, metadataPath)...)
}
