package webhook

import (
	"errors"
	"slices"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	"k8s.io/apiserver/pkg/cel/environment"

	"github.com/outpost-mesh/outpost/hub/webhookclient"
)

// defaultTimeout is a webhook's timeout when its configuration sets none,
// as v1's default.
const defaultTimeout = 10 * time.Second

// hook is one webhook of a configuration, compiled: its selectors parsed,
// its matchConditions compiled, its client ready. Immutable once built
// but for its client's connections.
type hook struct {
	// name is the webhook's name; config its configuration's.
	name, config string
	mutating     bool
	rules        []admissionregistrationv1.RuleWithOperations
	// nsSelector and objSelector are the parsed selectors, or the error
	// parsing them, answered 500 when the webhook would be called.
	nsSelector, objSelector labels.Selector
	selectorErr             error
	// matcher evaluates the matchConditions; nil without any.
	matcher     matchconditions.Matcher
	ignore      bool // failurePolicy Ignore
	reinvoke    bool // reinvocationPolicy IfNeeded
	sideEffects *admissionregistrationv1.SideEffectClass
	versions    []string // admissionReviewVersions
	timeout     time.Duration
	// client posts the AdmissionReview, or clientErr says why it
	// cannot.
	client    *webhookclient.Client
	clientErr error
}

// configHooks are the hooks of one configuration.
type configHooks struct {
	name  string
	hooks []*hook
}

func (c *configHooks) close() {
	for _, h := range c.hooks {
		if h.client != nil {
			h.client.Close()
		}
	}
}

// cacheKey identifies a configuration's generation: a change of it gets
// a new resourceVersion, and a re-created one a new uid.
type cacheKey struct {
	mutating bool
	uid      types.UID
	rv       string
}

// mutatingHooks returns the hooks of cs in upstream's order: by
// configuration name, then as listed.
func (d *Dispatcher) mutatingHooks(cs []*admissionregistrationv1.MutatingWebhookConfiguration) []*hook {
	keys := make([]cacheKey, len(cs))
	for i, c := range cs {
		keys[i] = cacheKey{true, c.UID, c.ResourceVersion}
	}
	return d.hooks(true, keys, func(i int) *configHooks { return d.compileMutating(cs[i]) })
}

// validatingHooks is mutatingHooks for validating configurations.
func (d *Dispatcher) validatingHooks(cs []*admissionregistrationv1.ValidatingWebhookConfiguration) []*hook {
	keys := make([]cacheKey, len(cs))
	for i, c := range cs {
		keys[i] = cacheKey{false, c.UID, c.ResourceVersion}
	}
	return d.hooks(false, keys, func(i int) *configHooks { return d.compileValidating(cs[i]) })
}

// hooks returns the hooks of the configurations keys name, compiling
// those not cached with compile, and drops from the cache the
// configurations of that kind no longer listed.
func (d *Dispatcher) hooks(mutating bool, keys []cacheKey, compile func(i int) *configHooks) []*hook {
	d.mu.Lock()
	defer d.mu.Unlock()
	listed := make(map[cacheKey]bool, len(keys))
	cs := make([]*configHooks, len(keys))
	for i, k := range keys {
		listed[k] = true
		c := d.cache[k]
		if c == nil {
			c = compile(i)
			d.cache[k] = c
		}
		cs[i] = c
	}
	for k, c := range d.cache {
		if k.mutating == mutating && !listed[k] {
			c.close()
			delete(d.cache, k)
		}
	}
	slices.SortStableFunc(cs, func(a, b *configHooks) int { return strings.Compare(a.name, b.name) })
	var out []*hook
	for _, c := range cs {
		out = append(out, c.hooks...)
	}
	return out
}

func (d *Dispatcher) compileMutating(c *admissionregistrationv1.MutatingWebhookConfiguration) *configHooks {
	ch := &configHooks{name: c.Name}
	for _, w := range c.Webhooks {
		h := d.compile(true, c.Name, w.Name, w.ClientConfig, w.Rules, w.FailurePolicy, w.NamespaceSelector, w.ObjectSelector,
			w.SideEffects, w.TimeoutSeconds, w.AdmissionReviewVersions, w.MatchConditions)
		h.reinvoke = w.ReinvocationPolicy != nil && *w.ReinvocationPolicy == admissionregistrationv1.IfNeededReinvocationPolicy
		ch.hooks = append(ch.hooks, h)
	}
	return ch
}

func (d *Dispatcher) compileValidating(c *admissionregistrationv1.ValidatingWebhookConfiguration) *configHooks {
	ch := &configHooks{name: c.Name}
	for _, w := range c.Webhooks {
		ch.hooks = append(ch.hooks, d.compile(false, c.Name, w.Name, w.ClientConfig, w.Rules, w.FailurePolicy, w.NamespaceSelector, w.ObjectSelector,
			w.SideEffects, w.TimeoutSeconds, w.AdmissionReviewVersions, w.MatchConditions))
	}
	return ch
}

// compile builds the hook of one webhook from the fields both kinds share.
func (d *Dispatcher) compile(mutating bool, config, name string, cc admissionregistrationv1.WebhookClientConfig, rules []admissionregistrationv1.RuleWithOperations,
	fp *admissionregistrationv1.FailurePolicyType, nsSel, objSel *metav1.LabelSelector, se *admissionregistrationv1.SideEffectClass,
	timeout *int32, versions []string, conds []admissionregistrationv1.MatchCondition) *hook {
	h := &hook{
		name: name, config: config, mutating: mutating, rules: rules, sideEffects: se, versions: versions,
		ignore:  fp != nil && *fp == admissionregistrationv1.Ignore,
		timeout: defaultTimeout,
	}
	if timeout != nil {
		h.timeout = time.Duration(*timeout) * time.Second
	}
	var err1, err2 error
	h.nsSelector, err1 = selector(nsSel)
	h.objSelector, err2 = selector(objSel)
	h.selectorErr = errors.Join(err1, err2)
	if len(conds) > 0 {
		exprs := make([]plugincel.ExpressionAccessor, len(conds))
		for i, c := range conds {
			exprs[i] = &matchconditions.MatchCondition{Name: c.Name, Expression: c.Expression}
		}
		kind := "validating"
		if h.mutating {
			kind = "admit"
		}
		h.matcher = matchconditions.NewMatcher(d.compiler.CompileCondition(exprs,
			plugincel.OptionalVariableDeclarations{HasParams: false, HasAuthorizer: true},
			environment.StoredExpressions), fp, "webhook", kind, name)
	}
	h.client, h.clientErr = d.newClient(cc)
	return h
}

// selector parses a webhook's label selector; nil selects everything, as
// the v1 default {} does.
func selector(s *metav1.LabelSelector) (labels.Selector, error) {
	if s == nil {
		return labels.Everything(), nil
	}
	return metav1.LabelSelectorAsSelector(s)
}

// newClient returns the URL and the client of a webhook (see package
// webhookclient).
func (d *Dispatcher) newClient(cc admissionregistrationv1.WebhookClientConfig) (*webhookclient.Client, error) {
	cfg := webhookclient.Config{URL: cc.URL, CABundle: cc.CABundle}
	if s := cc.Service; s != nil {
		cfg.Service = &webhookclient.Service{Namespace: s.Namespace, Name: s.Name, Path: s.Path, Port: s.Port}
	}
	var dial webhookclient.DialService
	if d.cfg.DialService != nil {
		dial = d.cfg.DialService
	}
	return webhookclient.New(cfg, dial)
}
