package policy

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating/patch"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/outpost-mesh/outpost/hub/apiserver"
)

// MutatingConfig is what a Mutator decides with.
type MutatingConfig struct {
	// Policies and Bindings return the MutatingAdmissionPolicies and
	// their bindings there are now, as an informer's lister does; both
	// non-nil. The Mutator does not modify what they return.
	Policies func() []*admissionregistrationv1.MutatingAdmissionPolicy
	Bindings func() []*admissionregistrationv1.MutatingAdmissionPolicyBinding
	// Namespace returns the namespace named name, or an error for which
	// apierrors.IsNotFound holds; non-nil.
	Namespace func(name string) (*corev1.Namespace, error)
	// Params looks up bindings' params, or nil: policies with a paramKind
	// then fail to configure.
	Params Params
	// Authorizer answers CEL's authorizer variable, or nil.
	Authorizer Authorizer
	// TypeConverter returns the schema objects of kind merge by under
	// ApplyConfiguration mutations. When it is nil, or returns nil, the
	// default is used: k8s.io/api's schema for typed objects (built on
	// first use), and one deduced from each object for custom resources.
	TypeConverter func(kind schema.GroupVersionKind) managedfields.TypeConverter
}

// Mutator is the MutatingAdmissionPolicy admission plugin: it applies
// the mutations of the bound policies that match a write to its object,
// as upstream's plugin does. Safe for concurrent use.
type Mutator struct {
	cfg   MutatingConfig
	match matcher
	cache cache[*mutations]
}

var _ apiserver.MutatingAdmission = (*Mutator)(nil)

// NewMutator returns a Mutator deciding with cfg.
func NewMutator(cfg MutatingConfig) *Mutator {
	return &Mutator{cfg: cfg, match: matcher{namespace: cfg.Namespace}}
}

// Handles reports whether policies may apply to writes of resource: all
// but the admission configuration resources.
func (m *Mutator) Handles(resource schema.GroupResource) bool {
	return resource.Group != admissionregistrationv1.GroupName || !exempt[resource.Resource]
}

// mutatingHook is a policy with those of its bindings there are.
type mutatingHook struct {
	policy   *admissionregistrationv1.MutatingAdmissionPolicy
	bindings []*admissionregistrationv1.MutatingAdmissionPolicyBinding
}

// bound returns the policies that have bindings, by name, each with its
// bindings by name. Bindings of missing policies are left out.
func (m *Mutator) bound() []mutatingHook {
	byPolicy := map[string][]*admissionregistrationv1.MutatingAdmissionPolicyBinding{}
	for _, b := range m.cfg.Bindings() {
		byPolicy[b.Spec.PolicyName] = append(byPolicy[b.Spec.PolicyName], b)
	}
	if len(byPolicy) == 0 {
		return nil
	}
	var out []mutatingHook
	for _, p := range m.cfg.Policies() {
		if bs := byPolicy[p.Name]; len(bs) > 0 {
			slices.SortFunc(bs, func(a, b *admissionregistrationv1.MutatingAdmissionPolicyBinding) int {
				return cmp.Compare(a.Name, b.Name)
			})
			out = append(out, mutatingHook{policy: p, bindings: bs})
		}
	}
	slices.SortFunc(out, func(a, b mutatingHook) int { return cmp.Compare(a.policy.Name, b.policy.Name) })
	return out
}

// invocation is one policy applied through one binding with one param.
type invocation struct {
	policy  *admissionregistrationv1.MutatingAdmissionPolicy
	binding *admissionregistrationv1.MutatingAdmissionPolicyBinding
	param   runtime.Object
	muts    *mutations
	key     invocationKey
}

// invocationKey names an invocation for reinvocation, as upstream's.
type invocationKey struct {
	policy, binding, paramNamespace, paramName string
}

// policyError is a failure of a policy (binding nil for the policy's
// own), which denies the write unless the policy's failurePolicy is
// Ignore.
type policyError struct {
	policy  *admissionregistrationv1.MutatingAdmissionPolicy
	binding *admissionregistrationv1.MutatingAdmissionPolicyBinding
	err     error
	reason  metav1.StatusReason
}

// Error is upstream's message of the failure.
func (e policyError) Error() string {
	if e.binding != nil {
		return fmt.Sprintf("policy '%s' with binding '%s' denied request: %s", e.policy.Name, e.binding.Name, e.err)
	}
	return fmt.Sprintf("policy %q denied request: %s", e.policy.Name, e.err)
}

// Mutate applies the mutations of every bound policy that matches the
// write to a.Object, replacing it with the mutated object when they
// changed it, and refuses the write on a failure of a policy whose
// failurePolicy is Fail, in upstream's words.
func (m *Mutator) Mutate(ctx context.Context, a *apiserver.AdmissionAttributes) error {
	hooks := m.bound()
	if len(hooks) == 0 {
		return nil
	}
	attrs, err := newAttributes(ctx, *a)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	invs, errs := m.invocations(attrs, hooks)
	if len(invs) > 0 {
		w, err := m.newWrite(attrs, invs)
		if err != nil {
			return err
		}
		more, err := w.run(ctx)
		if err != nil {
			return err
		}
		errs = append(errs, more...)
		if w.va.Dirty {
			a.Object = w.va.VersionedObject.Object()
		}
	}
	return mutationDenial(attrs, errs)
}

// invocations returns the invocations of the policies that match the
// write, and the configuration errors of those that could not be had.
func (m *Mutator) invocations(attrs admission.Attributes, hooks []mutatingHook) ([]invocation, []policyError) {
	var invs []invocation
	var errs []policyError
	configError := func(p *admissionregistrationv1.MutatingAdmissionPolicy, b *admissionregistrationv1.MutatingAdmissionPolicyBinding, err error) {
		if b == nil {
			err = fmt.Errorf("failed to configure policy: %w", err)
		} else {
			err = fmt.Errorf("failed to configure binding: %w", err)
		}
		errs = append(errs, policyError{policy: p, binding: b, err: err})
	}
	for _, h := range hooks {
		p := h.policy
		ok, err := m.match.constraintsMatch(attrs, p.Spec.MatchConstraints)
		if err != nil {
			configError(p, nil, err)
			continue
		}
		if !ok {
			continue
		}
		muts := m.cache.get(keyOf(&p.ObjectMeta), len(hooks), func() *mutations { return compileMutating(p) })
		if muts.err != nil {
			configError(p, nil, muts.err)
			continue
		}
		kind, namespaced, hasParams, err := paramKind(m.cfg.Params, p.Spec.ParamKind)
		if err != nil {
			configError(p, nil, err)
			continue
		}
		for _, b := range h.bindings {
			if ok, err := m.match.bindingMatches(attrs, b.Spec.MatchResources); err != nil || !ok {
				if err != nil {
					configError(p, b, err)
				}
				continue
			}
			params := []runtime.Object{nil}
			if hasParams {
				if params, err = collectParams(m.cfg.Params, kind, namespaced, b.Spec.ParamRef, attrs.GetNamespace()); err != nil {
					configError(p, b, err)
					continue
				}
			}
			for _, param := range params {
				invs = append(invs, invocation{policy: p, binding: b, param: param, muts: muts, key: keyFor(p, b, param)})
			}
		}
	}
	return invs, errs
}

// keyFor returns the key of the invocation of p through b with param.
func keyFor(p *admissionregistrationv1.MutatingAdmissionPolicy, b *admissionregistrationv1.MutatingAdmissionPolicyBinding, param runtime.Object) invocationKey {
	k := invocationKey{policy: p.Name, binding: b.Name}
	if pm, err := meta.Accessor(param); param != nil && err == nil {
		k.paramNamespace, k.paramName = pm.GetNamespace(), pm.GetName()
	}
	return k
}

// write is the mutating of one write by its invocations.
type write struct {
	m     *Mutator
	invs  []invocation
	va    *admission.VersionedAttributes
	ns    *corev1.Namespace
	authz authorizer.UnconditionalAuthorizer
	// invoked are the IfNeeded invocations that ran since the object
	// last changed; reinvoke those to run again in the second pass.
	invoked, reinvoke sets.Set[invocationKey]
}

// newWrite readies the mutating of a write: its namespace (for CEL's
// namespaceObject; an error is the client's answer) and the object the
// mutations change in turn.
func (m *Mutator) newWrite(attrs admission.Attributes, invs []invocation) (*write, error) {
	ns, err := m.namespaceOf(attrs)
	if err != nil {
		return nil, err
	}
	return &write{
		m: m, invs: invs, ns: ns, authz: cachingAuthorizer(m.cfg.Authorizer),
		va: &admission.VersionedAttributes{
			Attributes:         attrs,
			VersionedKind:      attrs.GetKind(),
			VersionedObject:    admission.NewLazyObject(attrs.GetObject()),
			VersionedOldObject: admission.NewLazyObject(attrs.GetOldObject()),
		},
		invoked: sets.New[invocationKey](), reinvoke: sets.New[invocationKey](),
	}, nil
}

// namespaceOf returns the namespace of a namespaced write, nil for
// cluster-scoped writes and for writes of namespaces, as upstream's
// mutating plugin looks it up.
func (m *Mutator) namespaceOf(attrs admission.Attributes) (*corev1.Namespace, error) {
	name := attrs.GetNamespace()
	if name == "" || attrs.GetKind() == corev1.SchemeGroupVersion.WithKind("Namespace") {
		return nil, nil
	}
	ns, err := m.cfg.Namespace(name)
	if err != nil {
		var se *apierrors.StatusError
		if errors.As(err, &se) {
			return nil, se
		}
		return nil, apierrors.NewNotFound(namespacesResource, name)
	}
	return ns, nil
}

// run applies the invocations in order, then, as upstream's reinvocation
// does once, applies again those of IfNeeded policies that ran before
// the object last changed. It returns the policies' failures, or the
// client's answer at once.
func (w *write) run(ctx context.Context) ([]policyError, error) {
	errs, err := w.pass(ctx, false)
	if err != nil || !w.va.Dirty {
		return errs, err
	}
	// A mutation was applied: upstream's chain runs again, reinvoking
	// the IfNeeded invocations that ran.
	w.reinvoke = w.reinvoke.Union(w.invoked)
	if w.reinvoke.Len() == 0 {
		return errs, nil
	}
	more, err := w.pass(ctx, true)
	return append(errs, more...), err
}

// pass applies the invocations (only those to reinvoke, on reinvocation)
// in order, each policy's mutations in order, each to the object the one
// before left.
func (w *write) pass(ctx context.Context, reinvocation bool) ([]policyError, error) {
	var errs []policyError
	for _, inv := range w.invs {
		ctx := inv.muts.compiler.CreateContext(ctx)
		if inv.muts.matcher != nil {
			r := inv.muts.matcher.Match(ctx, w.va, inv.param, w.authz)
			if r.Error != nil {
				errs = append(errs, policyError{policy: inv.policy, binding: inv.binding, err: r.Error, reason: metav1.StatusReasonInvalid})
				continue
			}
			if !r.Matches {
				continue
			}
		}
		if reinvocation && !w.reinvoke.Has(inv.key) {
			continue
		}
		before := w.va.VersionedObject.Object()
		for _, p := range inv.muts.patchers {
			if err := w.apply(ctx, p, inv.param); err != nil {
				var se *apierrors.StatusError
				if errors.As(err, &se) {
					return nil, se
				}
				errs = append(errs, policyError{policy: inv.policy, binding: inv.binding, err: err, reason: metav1.StatusReasonInvalid})
			}
		}
		if !equality.Semantic.DeepEqual(before, w.va.VersionedObject.Object()) {
			w.reinvoke = w.reinvoke.Union(w.invoked)
			w.invoked = sets.New[invocationKey]()
		}
		if inv.policy.Spec.ReinvocationPolicy == admissionregistrationv1.IfNeededReinvocationPolicy {
			w.invoked.Insert(inv.key)
		}
	}
	return errs, nil
}

// apply applies one mutation with param to the object.
func (w *write) apply(ctx context.Context, p patch.Patcher, param runtime.Object) error {
	obj := w.va.VersionedObject.Object()
	if obj == nil {
		return nil
	}
	var tc managedfields.TypeConverter
	if w.m.cfg.TypeConverter != nil {
		tc = w.m.cfg.TypeConverter(w.va.VersionedKind)
	}
	if tc == nil {
		tc = defaultTypeConverter(obj)
	}
	patched, err := p.Patch(ctx, patch.Request{
		MatchedResource:     w.va.GetResource(),
		VersionedAttributes: w.va,
		ObjectInterfaces:    newObjectInterfaces(obj),
		OptionalVariables:   plugincel.OptionalVariableBindings{VersionedParams: param, Authorizer: w.authz},
		Namespace:           w.ns,
		TypeConverter:       tc,
	}, celconfig.RuntimeCELCostBudget)
	if err != nil {
		return err
	}
	if patched, err = retyped(patched, obj); err != nil {
		return err
	}
	w.va.UpdateObject(patched)
	return nil
}

// mutationDenial is the client's answer to the failures of mutating
// policies: nil when every failed policy ignores its failures, else a
// Forbidden (403) with the first deciding failure's message and reason
// and every deciding one as a cause, as upstream's.
func mutationDenial(attrs admission.Attributes, errs []policyError) error {
	var se *apierrors.StatusError
	for _, e := range errs {
		if f := e.policy.Spec.FailurePolicy; f != nil && *f == admissionregistrationv1.Ignore {
			continue
		}
		if se == nil {
			if !errors.As(admission.NewForbidden(attrs, errors.New("admission request denied by policy")), &se) {
				return apierrors.NewInternalError(errors.New("failed to create status error"))
			}
			se.ErrStatus.Message = e.Error()
			if e.reason != "" {
				se.ErrStatus.Reason = e.reason
			}
		}
		se.ErrStatus.Details.Causes = append(se.ErrStatus.Details.Causes, metav1.StatusCause{Message: e.Error()})
	}
	if se == nil {
		return nil
	}
	return se
}
