package policy

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/outpost-mesh/outpost/hub/apiserver"
)

// Config is what an Evaluator decides with.
type Config struct {
	// Policies and Bindings return the ValidatingAdmissionPolicies and
	// their bindings there are now, as an informer's lister does; both
	// non-nil. The Evaluator does not modify what they return.
	Policies func() []*admissionregistrationv1.ValidatingAdmissionPolicy
	Bindings func() []*admissionregistrationv1.ValidatingAdmissionPolicyBinding
	// Namespace returns the namespace named name, or an error for which
	// apierrors.IsNotFound holds; non-nil. It gives namespaceSelectors
	// their labels and CEL its namespaceObject.
	Namespace func(name string) (*corev1.Namespace, error)
	// Params looks up bindings' params, or nil when the hub serves none:
	// policies with a paramKind then fail to configure.
	Params Params
	// Authorizer answers CEL's authorizer variable, or nil: expressions
	// that use it then fail to evaluate.
	Authorizer Authorizer
	// Logger gets the failures of Warn and Audit bindings, which the
	// hub has no warning header or audit log for; nil for slog.Default.
	Logger *slog.Logger
}

// Evaluator is the ValidatingAdmissionPolicy admission plugin. Safe for
// concurrent use.
type Evaluator struct {
	cfg   Config
	match matcher
	cache cache[*compiled]
}

var _ apiserver.Admission = (*Evaluator)(nil)

// New returns an Evaluator deciding with cfg.
func New(cfg Config) *Evaluator {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Evaluator{cfg: cfg, match: matcher{namespace: cfg.Namespace}}
}

// exempt are the resources no policy applies to, as upstream exempts
// them, so that a bad policy cannot lock out its own repair.
var exempt = map[string]bool{
	"validatingwebhookconfigurations":   true,
	"mutatingwebhookconfigurations":     true,
	"validatingadmissionpolicies":       true,
	"validatingadmissionpolicybindings": true,
	"mutatingadmissionpolicies":         true,
	"mutatingadmissionpolicybindings":   true,
}

// Handles reports whether policies may apply to writes of resource: all
// but the admission configuration resources.
func (e *Evaluator) Handles(resource schema.GroupResource) bool {
	return resource.Group != admissionregistrationv1.GroupName || !exempt[resource.Resource]
}

// hook is a policy with those of its bindings there are.
type hook struct {
	policy   *admissionregistrationv1.ValidatingAdmissionPolicy
	bindings []*admissionregistrationv1.ValidatingAdmissionPolicyBinding
}

// bound returns the policies that have bindings, by name, each with its
// bindings by name. Bindings of missing policies are left out, as
// upstream leaves them.
func (e *Evaluator) bound() []hook {
	byPolicy := map[string][]*admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	for _, b := range e.cfg.Bindings() {
		byPolicy[b.Spec.PolicyName] = append(byPolicy[b.Spec.PolicyName], b)
	}
	if len(byPolicy) == 0 {
		return nil
	}
	var out []hook
	for _, p := range e.cfg.Policies() {
		if bs := byPolicy[p.Name]; len(bs) > 0 {
			slices.SortFunc(bs, func(a, b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) int {
				return cmp.Compare(a.Name, b.Name)
			})
			out = append(out, hook{policy: p, bindings: bs})
		}
	}
	slices.SortFunc(out, func(a, b hook) int { return cmp.Compare(a.policy.Name, b.policy.Name) })
	return out
}

// denial is a deciding refusal, with the policy and binding that made
// it (binding nil for a policy's own configuration error).
type denial struct {
	decision
	policy  string
	binding string
}

// Admit judges a write by every bound policy that applies to it, and
// refuses it with the first denial, in upstream's words and status.
func (e *Evaluator) Admit(ctx context.Context, a apiserver.AdmissionAttributes) error {
	hooks := e.bound()
	if len(hooks) == 0 {
		return nil
	}
	attrs, err := newAttributes(ctx, a)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	r := &run{e: e, attrs: attrs, authz: e.authorizer(), live: len(hooks)}
	for _, h := range hooks {
		if err := r.policy(ctx, h); err != nil {
			return err
		}
	}
	if len(r.denials) == 0 {
		return nil
	}
	return denialError(attrs, r.denials[0])
}

// authorizer returns the authorizer CEL asks for one write.
func (e *Evaluator) authorizer() authorizer.UnconditionalAuthorizer {
	return cachingAuthorizer(e.cfg.Authorizer)
}

// run is the judging of one write.
type run struct {
	e       *Evaluator
	attrs   admission.Attributes
	authz   authorizer.UnconditionalAuthorizer
	live    int
	va      *admission.VersionedAttributes
	nsDone  bool
	ns      *corev1.Namespace
	denials []denial
}

// configError records a configuration error of a policy (binding "")
// or of one of its bindings, under the policy's failure policy.
func (r *run) configError(p *admissionregistrationv1.ValidatingAdmissionPolicy, binding string, err error) {
	f := admissionregistrationv1.Fail
	if p.Spec.FailurePolicy != nil {
		f = *p.Spec.FailurePolicy
	}
	var msg string
	switch {
	case f == admissionregistrationv1.Ignore:
		return
	case f != admissionregistrationv1.Fail:
		msg = fmt.Sprintf("unrecognized failure policy: '%v'", f)
	case binding == "":
		msg = fmt.Errorf("failed to configure policy: %w", err).Error()
	default:
		msg = fmt.Errorf("failed to configure binding: %w", err).Error()
	}
	r.denials = append(r.denials, denial{decision: decision{deny: true, message: msg}, policy: p.Name, binding: binding})
}

// policy judges the write by one policy and its bindings. An error is
// the client's answer at once (a namespace that cannot be had).
func (r *run) policy(ctx context.Context, h hook) error {
	p := h.policy
	ok, err := r.e.match.constraintsMatch(r.attrs, p.Spec.MatchConstraints)
	if err != nil {
		r.configError(p, "", err)
		return nil
	}
	if !ok {
		return nil
	}
	kind, namespaced, hasParams, err := paramKind(r.e.cfg.Params, p.Spec.ParamKind)
	if err != nil {
		r.configError(p, "", err)
		return nil
	}
	for _, b := range h.bindings {
		if err := r.binding(ctx, p, b, kind, namespaced, hasParams); err != nil {
			return err
		}
	}
	return nil
}

// binding judges the write by a policy through one of its bindings.
func (r *run) binding(ctx context.Context, p *admissionregistrationv1.ValidatingAdmissionPolicy, b *admissionregistrationv1.ValidatingAdmissionPolicyBinding, kind schema.GroupVersionKind, namespaced, hasParams bool) error {
	ok, err := r.e.match.bindingMatches(r.attrs, b.Spec.MatchResources)
	if err != nil {
		r.configError(p, b.Name, err)
		return nil
	}
	if !ok {
		return nil
	}
	params := []runtime.Object{nil}
	if hasParams {
		if params, err = collectParams(r.e.cfg.Params, kind, namespaced, b.Spec.ParamRef, r.attrs.GetNamespace()); err != nil {
			r.configError(p, b.Name, err)
			return nil
		}
	}
	if len(params) == 0 {
		return nil
	}
	ns, err := r.namespace()
	if err != nil {
		return err
	}
	c := r.e.cache.get(keyOf(&p.ObjectMeta), r.live, func() *compiled { return compile(p) })
	for i, param := range params {
		res := c.validate(ctx, r.versioned(), r.attrs.GetResource(), param, ns, r.authz)
		r.act(p, b, res, i)
	}
	return nil
}

// versioned returns the write as CEL sees it, made once per write.
func (r *run) versioned() *admission.VersionedAttributes {
	if r.va == nil {
		r.va = &admission.VersionedAttributes{
			Attributes:         r.attrs,
			VersionedKind:      r.attrs.GetKind(),
			VersionedObject:    admission.NewLazyObject(r.attrs.GetObject()),
			VersionedOldObject: admission.NewLazyObject(r.attrs.GetOldObject()),
		}
	}
	return r.va
}

// namespace returns the namespace of a namespaced write for CEL's
// namespaceObject, looked up once per write; nil for cluster-scoped
// writes and for writes of namespaces, as upstream's.
func (r *run) namespace() (*corev1.Namespace, error) {
	if r.nsDone {
		return r.ns, nil
	}
	name := r.attrs.GetNamespace()
	if name == "" || r.attrs.GetResource().GroupResource() == namespacesResource {
		r.nsDone = true
		return nil, nil
	}
	ns, err := r.e.cfg.Namespace(name)
	if err != nil {
		if _, ok := err.(apierrors.APIStatus); ok {
			return nil, err
		}
		return nil, apierrors.NewInternalError(err)
	}
	r.ns, r.nsDone = ns, true
	return ns, nil
}

// act applies a binding's validationActions to the decisions of its
// policy with its i-th param: Deny records the denial; Warn and Audit
// are logged, the hub having no warning header or audit log yet. Audit
// annotations are logged too.
func (r *run) act(p *admissionregistrationv1.ValidatingAdmissionPolicy, b *admissionregistrationv1.ValidatingAdmissionPolicyBinding, res result, param int) {
	log := r.e.cfg.Logger
	for i, d := range res.decisions {
		if !d.deny {
			continue
		}
		for _, action := range b.Spec.ValidationActions {
			switch action {
			case admissionregistrationv1.Deny:
				r.denials = append(r.denials, denial{decision: d, policy: p.Name, binding: b.Name})
			case admissionregistrationv1.Warn:
				log.Warn(fmt.Sprintf("Validation failed for ValidatingAdmissionPolicy '%s' with binding '%s': %s", p.Name, b.Name, d.message),
					"resource", r.attrs.GetResource().String(), "namespace", r.attrs.GetNamespace(), "name", r.attrs.GetName())
			case admissionregistrationv1.Audit:
				log.Info("validation.policy.admission.k8s.io/validation_failure", "value", auditValue(p.Name, b, i, d.message),
					"resource", r.attrs.GetResource().String(), "namespace", r.attrs.GetNamespace(), "name", r.attrs.GetName())
			}
		}
	}
	for _, a := range res.annotations {
		log.Info("audit annotation", "key", p.Name+"/"+a.key, "value", a.value, "param", param,
			"resource", r.attrs.GetResource().String(), "namespace", r.attrs.GetNamespace(), "name", r.attrs.GetName())
	}
}

// auditValue is the value of upstream's validation_failure audit
// annotation for one failure.
func auditValue(policy string, b *admissionregistrationv1.ValidatingAdmissionPolicyBinding, index int, message string) string {
	v, _ := json.Marshal([]struct {
		Message           string                                     `json:"message"`
		Policy            string                                     `json:"policy"`
		Binding           string                                     `json:"binding"`
		ExpressionIndex   int                                        `json:"expressionIndex"`
		ValidationActions []admissionregistrationv1.ValidationAction `json:"validationActions"`
	}{{message, policy, b.Name, index, b.Spec.ValidationActions}})
	return string(v)
}

// denialError is the client's answer to a denied write, as upstream's:
// a Forbidden naming the object, with the policy and binding in its
// message, and the validation's reason (Invalid when it has none) with
// that reason's status code.
func denialError(a admission.Attributes, d denial) error {
	var msg string
	if d.binding != "" {
		msg = fmt.Sprintf("ValidatingAdmissionPolicy '%s' with binding '%s' denied request: %s", d.policy, d.binding, d.message)
	} else {
		msg = fmt.Sprintf("ValidatingAdmissionPolicy '%s' denied request: %s", d.policy, d.message)
	}
	var se *apierrors.StatusError
	if !errors.As(admission.NewForbidden(a, errors.New(msg)), &se) {
		return apierrors.NewInternalError(errors.New(msg))
	}
	reason := d.reason
	if reason == "" {
		reason = metav1.StatusReasonInvalid
	}
	se.ErrStatus.Reason = reason
	se.ErrStatus.Code = reasonCode(reason)
	se.ErrStatus.Details.Causes = append(se.ErrStatus.Details.Causes, metav1.StatusCause{Message: msg})
	return se
}

// reasonCode is the status code of a validation's reason, as upstream's.
func reasonCode(r metav1.StatusReason) int32 {
	switch r {
	case metav1.StatusReasonForbidden:
		return 403
	case metav1.StatusReasonUnauthorized:
		return 401
	case metav1.StatusReasonRequestEntityTooLarge:
		return 413
	default:
		return 422
	}
}
