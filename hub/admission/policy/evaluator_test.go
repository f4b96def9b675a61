package policy

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/auth"
)

// deploymentsRule selects creates and updates of apps/v1 deployments.
var deploymentsRule = admissionregistrationv1.NamedRuleWithOperations{
	RuleWithOperations: admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
		Rule: admissionregistrationv1.Rule{
			APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"deployments"},
		},
	},
}

// newPolicy is a policy of the name with the defaults the API sets,
// matching rules, validating with validations.
func newPolicy(name string, rules []admissionregistrationv1.NamedRuleWithOperations, validations ...admissionregistrationv1.Validation) *admissionregistrationv1.ValidatingAdmissionPolicy {
	return &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), Generation: 1},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{},
				ObjectSelector:    &metav1.LabelSelector{},
				MatchPolicy:       ptr.To(admissionregistrationv1.Equivalent),
				ResourceRules:     rules,
			},
			Validations: validations,
		},
	}
}

// newBinding binds policy with actions.
func newBinding(name, policy string, actions ...admissionregistrationv1.ValidationAction) *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	if len(actions) == 0 {
		actions = []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}
	}
	return &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: policy, ValidationActions: actions},
	}
}

// replicasPolicy is the upstream documentation's example: deployments
// may have at most 5 replicas.
func replicasPolicy() *admissionregistrationv1.ValidatingAdmissionPolicy {
	return newPolicy("demo-policy.example.com", []admissionregistrationv1.NamedRuleWithOperations{deploymentsRule},
		admissionregistrationv1.Validation{Expression: "object.spec.replicas <= 5"})
}

// world is what a test Evaluator sees: policies, bindings, namespaces
// and params, changeable between writes.
type world struct {
	mu         sync.Mutex
	policies   []*admissionregistrationv1.ValidatingAdmissionPolicy
	bindings   []*admissionregistrationv1.ValidatingAdmissionPolicyBinding
	namespaces map[string]*corev1.Namespace
	params     []runtime.Object // ConfigMaps
	log        bytes.Buffer
}

func (w *world) Namespaced(kind schema.GroupVersionKind) (bool, error) {
	if kind != corev1.SchemeGroupVersion.WithKind("ConfigMap") {
		return false, apierrors.NewNotFound(schema.GroupResource{}, kind.Kind)
	}
	return true, nil
}

func (w *world) Get(kind schema.GroupVersionKind, namespace, name string) (runtime.Object, error) {
	for _, p := range w.params {
		if m := p.(*corev1.ConfigMap); m.Namespace == namespace && m.Name == name {
			return p, nil
		}
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, name)
}

func (w *world) List(kind schema.GroupVersionKind, namespace string, sel labels.Selector) ([]runtime.Object, error) {
	var out []runtime.Object
	for _, p := range w.params {
		if m := p.(*corev1.ConfigMap); m.Namespace == namespace && sel.Matches(labels.Set(m.Labels)) {
			out = append(out, p)
		}
	}
	return out, nil
}

// evaluator returns an Evaluator over w.
func (w *world) evaluator() *Evaluator {
	return New(Config{
		Policies: func() []*admissionregistrationv1.ValidatingAdmissionPolicy { return w.policies },
		Bindings: func() []*admissionregistrationv1.ValidatingAdmissionPolicyBinding { return w.bindings },
		Namespace: func(name string) (*corev1.Namespace, error) {
			if ns, ok := w.namespaces[name]; ok {
				return ns, nil
			}
			return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, name)
		},
		Params: w,
		Logger: slog.New(slog.NewTextHandler(&syncWriter{w: &w.log, mu: &w.mu}, nil)),
	})
}

// syncWriter serializes writes to a buffer.
type syncWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// newWorld is a world with namespace default, labelled env=prod.
func newWorld() *world {
	return &world{namespaces: map[string]*corev1.Namespace{
		"default": {ObjectMeta: metav1.ObjectMeta{Name: "default", Labels: map[string]string{"env": "prod"}}},
		"dev":     {ObjectMeta: metav1.ObjectMeta{Name: "dev", Labels: map[string]string{"env": "dev"}}},
	}}
}

// deployment is a typed deployment in namespace with replicas, its kind
// unset as the server's Go objects may have it.
func deployment(namespace string, replicas int32) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: namespace, Labels: map[string]string{"app": "web"}},
		Spec:       appsv1.DeploymentSpec{Replicas: ptr.To(replicas)},
	}
}

// createOf is the attributes of a create of obj.
func createOf(gr schema.GroupResource, obj runtime.Object) apiserver.AdmissionAttributes {
	m, _ := obj.(metav1.Object)
	return apiserver.AdmissionAttributes{Operation: apiserver.Create, Resource: gr, Namespace: m.GetNamespace(), Name: m.GetName(), Object: obj}
}

var deploymentsGR = schema.GroupResource{Group: "apps", Resource: "deployments"}

// wantDenied checks err is upstream's denial with code and message.
func wantDenied(t *testing.T, err error, code int32, reason metav1.StatusReason, msg string) {
	t.Helper()
	se, ok := err.(*apierrors.StatusError)
	if !ok {
		t.Fatalf("Admit = %v, want a StatusError", err)
	}
	if se.ErrStatus.Code != code || se.ErrStatus.Reason != reason || se.ErrStatus.Message != msg {
		t.Fatalf("Admit = %d %s %q, want %d %s %q", se.ErrStatus.Code, se.ErrStatus.Reason, se.ErrStatus.Message, code, reason, msg)
	}
}

// TestReplicasPolicy: the upstream docs' example denies a deployment of 6
// replicas, typed or unstructured, with upstream's message and 422, and
// admits 5; policies bound to nothing and bindings of missing policies
// do nothing.
func TestReplicasPolicy(t *testing.T) {
	w := newWorld()
	w.policies = []*admissionregistrationv1.ValidatingAdmissionPolicy{replicasPolicy()}
	e := w.evaluator()
	ctx := context.Background()
	if err := e.Admit(ctx, createOf(deploymentsGR, deployment("default", 6))); err != nil {
		t.Fatalf("unbound policy: Admit = %v, want nil", err)
	}
	w.bindings = []*admissionregistrationv1.ValidatingAdmissionPolicyBinding{newBinding("orphan", "missing")}
	if err := e.Admit(ctx, createOf(deploymentsGR, deployment("default", 6))); err != nil {
		t.Fatalf("binding without a policy: Admit = %v, want nil", err)
	}
	w.bindings = append(w.bindings, newBinding("demo-binding-test.example.com", "demo-policy.example.com"))
	const msg = `deployments.apps "web" is forbidden: ValidatingAdmissionPolicy 'demo-policy.example.com' with binding 'demo-binding-test.example.com' denied request: failed expression: object.spec.replicas <= 5`
	wantDenied(t, e.Admit(ctx, createOf(deploymentsGR, deployment("default", 6))), 422, metav1.StatusReasonInvalid, msg)
	if err := e.Admit(ctx, createOf(deploymentsGR, deployment("default", 5))); err != nil {
		t.Fatalf("5 replicas: Admit = %v, want nil", err)
	}

	u := &unstructured.Unstructured{}
	u.SetAPIVersion("apps/v1")
	u.SetKind("Deployment")
	u.SetName("web")
	u.SetNamespace("default")
	_ = unstructured.SetNestedField(u.Object, int64(7), "spec", "replicas")
	wantDenied(t, e.Admit(ctx, createOf(deploymentsGR, u)), 422, metav1.StatusReasonInvalid, msg)

	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default"}}
	if err := e.Admit(ctx, createOf(schema.GroupResource{Resource: "pods"}, pod)); err != nil {
		t.Fatalf("a pod, which the policy does not match: Admit = %v", err)
	}
	if e.Handles(schema.GroupResource{Group: "admissionregistration.k8s.io", Resource: "validatingadmissionpolicies"}) || !e.Handles(deploymentsGR) {
		t.Errorf("Handles: want all but the admission configuration resources")
	}
}

// TestMessagesAndReasons: message, messageExpression (with variables and
// the request), and reason with its status code.
func TestMessagesAndReasons(t *testing.T) {
	tests := []struct {
		name string
		v    admissionregistrationv1.Validation
		vars []admissionregistrationv1.Variable
		code int32
		want string
	}{
		{"message", admissionregistrationv1.Validation{Expression: "object.spec.replicas <= 5", Message: " too many "}, nil, 422, "too many"},
		{"messageExpression", admissionregistrationv1.Validation{Expression: "object.spec.replicas <= 5", Message: "unused",
			MessageExpression: `"replicas " + string(object.spec.replicas) + " of " + request.name + " by " + request.userInfo.username`}, nil, 422, "replicas 6 of web by alice"},
		{"messageExpression not a usable string falls back", admissionregistrationv1.Validation{Expression: "false", Message: "fallback", MessageExpression: `"a\nb"`}, nil, 422, "fallback"},
		{"variables", admissionregistrationv1.Validation{Expression: "variables.ok", MessageExpression: `"max " + string(variables.max)`},
			[]admissionregistrationv1.Variable{{Name: "max", Expression: "5"}, {Name: "ok", Expression: "object.spec.replicas <= variables.max"}}, 422, "max 5"},
		{"reason Forbidden", admissionregistrationv1.Validation{Expression: "false", Reason: ptr.To(metav1.StatusReasonForbidden)}, nil, 403, "failed expression: false"},
		{"reason Unauthorized", admissionregistrationv1.Validation{Expression: "false", Reason: ptr.To(metav1.StatusReasonUnauthorized)}, nil, 401, "failed expression: false"},
		{"reason RequestEntityTooLarge", admissionregistrationv1.Validation{Expression: "false", Reason: ptr.To(metav1.StatusReasonRequestEntityTooLarge)}, nil, 413, "failed expression: false"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld()
			p := newPolicy("p", []admissionregistrationv1.NamedRuleWithOperations{deploymentsRule}, tt.v)
			p.Spec.Variables = tt.vars
			w.policies = []*admissionregistrationv1.ValidatingAdmissionPolicy{p}
			w.bindings = []*admissionregistrationv1.ValidatingAdmissionPolicyBinding{newBinding("b", "p")}
			ctx := auth.WithUser(context.Background(), auth.User{Name: "alice"})
			err := w.evaluator().Admit(ctx, createOf(deploymentsGR, deployment("default", 6)))
			reason := metav1.StatusReasonInvalid
			if tt.v.Reason != nil {
				reason = *tt.v.Reason
			}
			wantDenied(t, err, tt.code, reason, `deployments.apps "web" is forbidden: ValidatingAdmissionPolicy 'p' with binding 'b' denied request: `+tt.want)
		})
	}
}

// TestParams: a binding's paramRef names a ConfigMap whose data sets the
// limit; a missing one is Denied or Allowed as its
// parameterNotFoundAction says; a selector applies each ConfigMap.
func TestParams(t *testing.T) {
	w := newWorld()
	p := newPolicy("limit", []admissionregistrationv1.NamedRuleWithOperations{deploymentsRule},
		admissionregistrationv1.Validation{Expression: "object.spec.replicas <= int(params.data.max)",
			MessageExpression: `params.kind + " " + params.metadata.name + " allows " + params.data.max`})
	p.Spec.ParamKind = &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"}
	b := newBinding("b", "limit")
	b.Spec.ParamRef = &admissionregistrationv1.ParamRef{Name: "limits", ParameterNotFoundAction: ptr.To(admissionregistrationv1.DenyAction)}
	w.policies = []*admissionregistrationv1.ValidatingAdmissionPolicy{p}
	w.bindings = []*admissionregistrationv1.ValidatingAdmissionPolicyBinding{b}
	e := w.evaluator()
	ctx := context.Background()
	const prefix = `deployments.apps "web" is forbidden: ValidatingAdmissionPolicy 'limit' with binding 'b' denied request: `

	wantDenied(t, e.Admit(ctx, createOf(deploymentsGR, deployment("default", 1))), 422, metav1.StatusReasonInvalid,
		prefix+"failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction")
	b.Spec.ParamRef.ParameterNotFoundAction = ptr.To(admissionregistrationv1.AllowAction)
	if err := e.Admit(ctx, createOf(deploymentsGR, deployment("default", 100))); err != nil {
		t.Fatalf("missing params with Allow: Admit = %v, want nil", err)
	}

	w.params = []runtime.Object{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "limits", Namespace: "default", Labels: map[string]string{"limit": "yes"}}, Data: map[string]string{"max": "3"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "strict", Namespace: "default", Labels: map[string]string{"limit": "yes"}}, Data: map[string]string{"max": "1"}},
	}
	wantDenied(t, e.Admit(ctx, createOf(deploymentsGR, deployment("default", 4))), 422, metav1.StatusReasonInvalid, prefix+"ConfigMap limits allows 3")
	if err := e.Admit(ctx, createOf(deploymentsGR, deployment("default", 2))); err != nil {
		t.Fatalf("2 replicas, limit 3: Admit = %v", err)
	}
	if err := e.Admit(ctx, createOf(deploymentsGR, deployment("dev", 9))); err != nil {
		t.Fatalf("in dev, which has no limits and Allow: Admit = %v", err)
	}

	b.Spec.ParamRef = &admissionregistrationv1.ParamRef{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"limit": "yes"}}}
	wantDenied(t, e.Admit(ctx, createOf(deploymentsGR, deployment("default", 2))), 422, metav1.StatusReasonInvalid, prefix+"ConfigMap strict allows 1")

	p.Spec.ParamKind = &admissionregistrationv1.ParamKind{APIVersion: "example.com/v1", Kind: "Limit"}
	p.Generation++
	wantDenied(t, e.Admit(ctx, createOf(deploymentsGR, deployment("default", 2))), 422, metav1.StatusReasonInvalid,
		`deployments.apps "web" is forbidden: ValidatingAdmissionPolicy 'limit' denied request: failed to configure policy: failed to find resource referenced by paramKind: 'example.com/v1, Kind=Limit'`)
}

// TestMatching: matchConditions, namespaceSelector and objectSelector
// of the policy, and the binding's matchResources, narrow what is judged.
func TestMatching(t *testing.T) {
	w := newWorld()
	p := replicasPolicy()
	w.policies = []*admissionregistrationv1.ValidatingAdmissionPolicy{p}
	b := newBinding("b", p.Name)
	w.bindings = []*admissionregistrationv1.ValidatingAdmissionPolicyBinding{b}
	e := w.evaluator()
	ctx := context.Background()
	denied := func(ns string) bool {
		err := e.Admit(ctx, createOf(deploymentsGR, deployment(ns, 6)))
		if err != nil && !apierrors.IsInvalid(err) {
			t.Fatalf("Admit = %v, want nil or Invalid", err)
		}
		return err != nil
	}
	if !denied("default") || !denied("dev") {
		t.Fatalf("without selectors, want both namespaces judged")
	}
	p.Spec.MatchConstraints.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}
	if !denied("default") || denied("dev") {
		t.Fatalf("namespaceSelector env=prod: want default judged, dev not")
	}
	p.Spec.MatchConstraints.NamespaceSelector = &metav1.LabelSelector{}
	b.Spec.MatchResources = &admissionregistrationv1.MatchResources{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "dev"}},
		ObjectSelector:    &metav1.LabelSelector{},
	}
	if denied("default") || !denied("dev") {
		t.Fatalf("binding's namespaceSelector env=dev: want dev judged, default not")
	}
	b.Spec.MatchResources.ObjectSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "other"}}
	if denied("dev") {
		t.Fatalf("binding's objectSelector app=other: want web not judged")
	}
	b.Spec.MatchResources = nil

	p.Spec.MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "not-system", Expression: `request.namespace != "dev"`}}
	p.Generation++
	if !denied("default") || denied("dev") {
		t.Fatalf("matchCondition namespace != dev: want default judged, dev not")
	}
	p.Spec.MatchConstraints.ExcludeResourceRules = []admissionregistrationv1.NamedRuleWithOperations{deploymentsRule}
	if denied("default") {
		t.Fatalf("excluded: want nothing judged")
	}
}

// TestFailurePolicy: a runtime error (a missing field) and a compile
// error deny under Fail with upstream's message, and admit under Ignore.
func TestFailurePolicy(t *testing.T) {
	tests := []struct {
		name, expr, want string
	}{
		{"runtime error", "object.spec.nothing == 1", "expression 'object.spec.nothing == 1' resulted in error: no such key: nothing"},
		{"compile error", "object.spec.replicas <", "compilation error: compilation failed: ERROR: <input>:1:23: Syntax error: mismatched input '<EOF>'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld()
			p := newPolicy("p", []admissionregistrationv1.NamedRuleWithOperations{deploymentsRule}, admissionregistrationv1.Validation{Expression: tt.expr})
			w.policies = []*admissionregistrationv1.ValidatingAdmissionPolicy{p}
			w.bindings = []*admissionregistrationv1.ValidatingAdmissionPolicyBinding{newBinding("b", "p")}
			e := w.evaluator()
			err := e.Admit(context.Background(), createOf(deploymentsGR, deployment("default", 1)))
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "ValidatingAdmissionPolicy 'p' with binding 'b' denied request: "+tt.want) {
				t.Fatalf("Fail: Admit = %v, want Invalid with %q", err, tt.want)
			}
			p.Spec.FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
			p.Generation++
			if err := e.Admit(context.Background(), createOf(deploymentsGR, deployment("default", 1))); err != nil {
				t.Fatalf("Ignore: Admit = %v, want nil", err)
			}
		})
	}
}

// TestWarnAndAudit: bindings that only Warn or Audit admit the write and
// log the failure, in upstream's words.
func TestWarnAndAudit(t *testing.T) {
	w := newWorld()
	w.policies = []*admissionregistrationv1.ValidatingAdmissionPolicy{replicasPolicy()}
	w.bindings = []*admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		newBinding("warn", "demo-policy.example.com", admissionregistrationv1.Warn, admissionregistrationv1.Audit),
	}
	if err := w.evaluator().Admit(context.Background(), createOf(deploymentsGR, deployment("default", 6))); err != nil {
		t.Fatalf("Admit = %v, want nil", err)
	}
	w.mu.Lock()
	log := w.log.String()
	w.mu.Unlock()
	for _, want := range []string{
		"Validation failed for ValidatingAdmissionPolicy 'demo-policy.example.com' with binding 'warn': failed expression: object.spec.replicas <= 5",
		"validation.policy.admission.k8s.io/validation_failure",
		`\"expressionIndex\":0`,
	} {
		if !strings.Contains(log, want) {
			t.Errorf("log %s\nwant it to contain %s", log, want)
		}
	}
}

// TestNamespaceObjectAndOldObject: CEL sees namespaceObject and, on
// update, oldObject.
func TestNamespaceObjectAndOldObject(t *testing.T) {
	w := newWorld()
	p := newPolicy("p", []admissionregistrationv1.NamedRuleWithOperations{deploymentsRule},
		admissionregistrationv1.Validation{Expression: `namespaceObject.metadata.labels.env != "prod" || oldObject == null || object.spec.replicas >= oldObject.spec.replicas`, Message: "no scaling down in prod"})
	w.policies = []*admissionregistrationv1.ValidatingAdmissionPolicy{p}
	w.bindings = []*admissionregistrationv1.ValidatingAdmissionPolicyBinding{newBinding("b", "p")}
	e := w.evaluator()
	update := func(ns string, from, to int32) error {
		a := createOf(deploymentsGR, deployment(ns, to))
		a.Operation, a.OldObject = apiserver.Update, deployment(ns, from)
		return e.Admit(context.Background(), a)
	}
	if err := update("default", 3, 2); !apierrors.IsInvalid(err) || !strings.HasSuffix(err.Error(), "no scaling down in prod") {
		t.Fatalf("scale down in prod: Admit = %v", err)
	}
	if err := update("default", 2, 3); err != nil {
		t.Fatalf("scale up in prod: Admit = %v", err)
	}
	if err := update("dev", 3, 2); err != nil {
		t.Fatalf("scale down in dev: Admit = %v", err)
	}
}

// TestCostLimit: an expression over the per-call cost limit fails, and
// under Fail denies with upstream's message.
func TestCostLimit(t *testing.T) {
	w := newWorld()
	p := newPolicy("p", []admissionregistrationv1.NamedRuleWithOperations{deploymentsRule}, admissionregistrationv1.Validation{
		Expression: `[1,2,3,4,5,6,7,8,9,10].all(a, [1,2,3,4,5,6,7,8,9,10].all(b, [1,2,3,4,5,6,7,8,9,10].all(c, [1,2,3,4,5,6,7,8,9,10].all(d, [1,2,3,4,5,6,7,8,9,10].all(e, [1,2,3,4,5,6,7,8,9,10].all(f, string(a+b+c+d+e+f).size() > 0))))))`,
	})
	w.policies = []*admissionregistrationv1.ValidatingAdmissionPolicy{p}
	w.bindings = []*admissionregistrationv1.ValidatingAdmissionPolicyBinding{newBinding("b", "p")}
	err := w.evaluator().Admit(context.Background(), createOf(deploymentsGR, deployment("default", 1)))
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "operation cancelled: actual cost limit exceeded") {
		t.Fatalf("Admit = %v, want a cost limit denial", err)
	}
}

// authzFunc is an Authorizer of a function.
type authzFunc func(u auth.User, a auth.Attributes) auth.Decision

func (f authzFunc) Authorize(_ context.Context, u auth.User, a auth.Attributes) (auth.Decision, error) {
	return f(u, a), nil
}

// TestAuthorizer: CEL's authorizer asks the hub's Authorizer about the
// requesting user.
func TestAuthorizer(t *testing.T) {
	w := newWorld()
	p := newPolicy("p", []admissionregistrationv1.NamedRuleWithOperations{deploymentsRule}, admissionregistrationv1.Validation{
		Expression: `authorizer.group('apps').resource('deployments').namespace('default').check('scale').allowed()`,
		Message:    "may not scale",
	})
	w.policies = []*admissionregistrationv1.ValidatingAdmissionPolicy{p}
	w.bindings = []*admissionregistrationv1.ValidatingAdmissionPolicyBinding{newBinding("b", "p")}
	e := w.evaluator()
	e.cfg.Authorizer = authzFunc(func(u auth.User, a auth.Attributes) auth.Decision {
		return auth.Decision{Allowed: u.Name == "alice" && a.Verb == "scale" && a.APIGroup == "apps" && a.Resource == "deployments" && a.Namespace == "default"}
	})
	as := func(name string) error {
		return e.Admit(auth.WithUser(context.Background(), auth.User{Name: name}), createOf(deploymentsGR, deployment("default", 1)))
	}
	if err := as("alice"); err != nil {
		t.Fatalf("alice: Admit = %v, want nil", err)
	}
	if err := as("bob"); !apierrors.IsInvalid(err) || !strings.HasSuffix(err.Error(), "may not scale") {
		t.Fatalf("bob: Admit = %v, want Invalid: may not scale", err)
	}
}
