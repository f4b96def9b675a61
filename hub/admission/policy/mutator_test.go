package policy

import (
	"context"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/outpost-mesh/outpost/hub/apiserver"
)

// newMutatingPolicy is a policy of the name with the defaults the API
// sets, matching creates and updates of deployments, with mutations.
func newMutatingPolicy(name string, mutations ...admissionregistrationv1.Mutation) *admissionregistrationv1.MutatingAdmissionPolicy {
	return &admissionregistrationv1.MutatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), Generation: 1},
		Spec: admissionregistrationv1.MutatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{},
				ObjectSelector:    &metav1.LabelSelector{},
				MatchPolicy:       ptr.To(admissionregistrationv1.Equivalent),
				ResourceRules:     []admissionregistrationv1.NamedRuleWithOperations{deploymentsRule},
			},
			Mutations:          mutations,
			ReinvocationPolicy: admissionregistrationv1.NeverReinvocationPolicy,
		},
	}
}

// applyConfig is an ApplyConfiguration mutation of expr.
func applyConfig(expr string) admissionregistrationv1.Mutation {
	return admissionregistrationv1.Mutation{PatchType: admissionregistrationv1.PatchTypeApplyConfiguration,
		ApplyConfiguration: &admissionregistrationv1.ApplyConfiguration{Expression: expr}}
}

// jsonPatchOf is a JSONPatch mutation of expr.
func jsonPatchOf(expr string) admissionregistrationv1.Mutation {
	return admissionregistrationv1.Mutation{PatchType: admissionregistrationv1.PatchTypeJSONPatch,
		JSONPatch: &admissionregistrationv1.JSONPatch{Expression: expr}}
}

// mutatingBinding binds policy.
func mutatingBinding(name, policy string) *admissionregistrationv1.MutatingAdmissionPolicyBinding {
	return &admissionregistrationv1.MutatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{PolicyName: policy},
	}
}

// mutator returns a Mutator over w's namespaces and params and the
// policies and bindings given, each bound by "<policy>-binding" unless
// bindings are given.
func (w *world) mutator(policies []*admissionregistrationv1.MutatingAdmissionPolicy, bindings ...*admissionregistrationv1.MutatingAdmissionPolicyBinding) *Mutator {
	if bindings == nil {
		for _, p := range policies {
			bindings = append(bindings, mutatingBinding(p.Name+"-binding", p.Name))
		}
	}
	return NewMutator(MutatingConfig{
		Policies: func() []*admissionregistrationv1.MutatingAdmissionPolicy { return policies },
		Bindings: func() []*admissionregistrationv1.MutatingAdmissionPolicyBinding { return bindings },
		Namespace: func(name string) (*corev1.Namespace, error) {
			if ns, ok := w.namespaces[name]; ok {
				return ns, nil
			}
			return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, name)
		},
		Params: w,
	})
}

// mutate runs m on a create of obj and returns the object to write.
func mutate(t *testing.T, m *Mutator, obj runtime.Object) (runtime.Object, error) {
	t.Helper()
	a := createOf(deploymentsGR, obj)
	err := m.Mutate(context.Background(), &a)
	return a.Object, err
}

// mustMutate is mutate of a deployment that must succeed.
func mustMutate(t *testing.T, m *Mutator, d *appsv1.Deployment) *appsv1.Deployment {
	t.Helper()
	out, err := mutate(t, m, d)
	if err != nil {
		t.Fatalf("Mutate = %v", err)
	}
	got, ok := out.(*appsv1.Deployment)
	if !ok {
		t.Fatalf("Mutate gave a %T, want a *appsv1.Deployment", out)
	}
	return got
}

// TestMutatorApplyConfiguration: the conformance examples merge an
// Object{} into typed and unstructured deployments, leaving the rest
// and the caller's object as they were; a binding's namespaceSelector
// narrows where.
func TestMutatorApplyConfiguration(t *testing.T) {
	w := newWorld()
	p := newMutatingPolicy("replicas",
		applyConfig(`Object{spec: Object.spec{replicas: 1337}}`),
		applyConfig(`Object{metadata: Object.metadata{annotations: {"mutated-by": "admission-policy"}}}`))
	b := mutatingBinding("b", "replicas")
	b.Spec.MatchResources = &admissionregistrationv1.MatchResources{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}},
		ObjectSelector:    &metav1.LabelSelector{},
	}
	m := w.mutator([]*admissionregistrationv1.MutatingAdmissionPolicy{p}, b)

	in := deployment("default", 1)
	got := mustMutate(t, m, in)
	if *got.Spec.Replicas != 1337 || got.Annotations["mutated-by"] != "admission-policy" || got.Labels["app"] != "web" {
		t.Errorf("Mutate(typed) = replicas %d, annotations %v, labels %v; want 1337, mutated-by, app=web", *got.Spec.Replicas, got.Annotations, got.Labels)
	}
	if *in.Spec.Replicas != 1 || in.Annotations != nil {
		t.Errorf("Mutate changed the caller's object: %+v", in)
	}
	if got := mustMutate(t, m, deployment("dev", 1)); *got.Spec.Replicas != 1 {
		t.Errorf("Mutate in dev (not selected) = %d replicas, want 1", *got.Spec.Replicas)
	}

	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": "web", "namespace": "default"},
		"spec":     map[string]any{"replicas": int64(2)},
	}}
	out, err := mutate(t, m, u)
	if err != nil {
		t.Fatalf("Mutate(unstructured) = %v", err)
	}
	r, _, _ := unstructured.NestedInt64(out.(*unstructured.Unstructured).Object, "spec", "replicas")
	if r != 1337 {
		t.Errorf("Mutate(unstructured) replicas = %d, want 1337", r)
	}
}

// TestMutatorJSONPatch: JSONPatch{} operations apply in order; a failed
// test operation leaves the object as it was.
func TestMutatorJSONPatch(t *testing.T) {
	w := newWorld()
	m := w.mutator([]*admissionregistrationv1.MutatingAdmissionPolicy{newMutatingPolicy("patch",
		jsonPatchOf(`[JSONPatch{op: "add", path: "/metadata/labels/team", value: "edge"}, JSONPatch{op: "replace", path: "/spec/replicas", value: object.spec.replicas * 2}]`),
		jsonPatchOf(`[JSONPatch{op: "test", path: "/spec/replicas", value: 99}, JSONPatch{op: "add", path: "/metadata/labels/never", value: "x"}]`),
		jsonPatchOf(`[JSONPatch{op: "add", path: "/metadata/labels/" + jsonpatch.escapeKey("a/b"), value: "c"}]`),
	)})
	got := mustMutate(t, m, deployment("default", 3))
	if *got.Spec.Replicas != 6 || got.Labels["team"] != "edge" || got.Labels["a/b"] != "c" || got.Labels["never"] != "" {
		t.Errorf("Mutate = replicas %d, labels %v; want 6 and team=edge, a/b=c", *got.Spec.Replicas, got.Labels)
	}
}

// TestMutatorParamsAndVariables: params and variables feed the
// mutations, one invocation per param; missing params with Deny refuse
// the write.
func TestMutatorParamsAndVariables(t *testing.T) {
	w := newWorld()
	p := newMutatingPolicy("sized", applyConfig(`Object{spec: Object.spec{replicas: variables.size}}`),
		jsonPatchOf(`[JSONPatch{op: "add", path: "/metadata/labels/" + params.metadata.name, value: params.data.size}]`))
	p.Spec.ParamKind = &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"}
	p.Spec.Variables = []admissionregistrationv1.Variable{{Name: "size", Expression: "int(params.data.size)"}}
	b := mutatingBinding("b", "sized")
	b.Spec.ParamRef = &admissionregistrationv1.ParamRef{Name: "small", ParameterNotFoundAction: ptr.To(admissionregistrationv1.DenyAction)}
	m := w.mutator([]*admissionregistrationv1.MutatingAdmissionPolicy{p}, b)

	_, err := mutate(t, m, deployment("default", 1))
	wantDenied(t, err, 403, metav1.StatusReasonForbidden,
		"policy 'sized' with binding 'b' denied request: failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction")

	w.params = []runtime.Object{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "small", Namespace: "default", Labels: map[string]string{"size": "yes"}}, Data: map[string]string{"size": "2"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "tiny", Namespace: "default", Labels: map[string]string{"size": "yes"}}, Data: map[string]string{"size": "1"}},
	}
	if got := mustMutate(t, m, deployment("default", 9)); *got.Spec.Replicas != 2 || got.Labels["small"] != "2" {
		t.Errorf("Mutate with param small = replicas %d, labels %v", *got.Spec.Replicas, got.Labels)
	}
	b.Spec.ParamRef = &admissionregistrationv1.ParamRef{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"size": "yes"}}}
	if got := mustMutate(t, m, deployment("default", 9)); *got.Spec.Replicas != 1 || got.Labels["small"] != "2" || got.Labels["tiny"] != "1" {
		t.Errorf("Mutate with both params = replicas %d, labels %v; want the last's 1 and both labels", *got.Spec.Replicas, got.Labels)
	}
}

// TestMutatorMatchConditionsAndFailurePolicy: matchConditions decide
// whether a policy mutates; errors (of matchConditions, of evaluation,
// of mutating atomic fields) refuse the write under Fail with upstream's
// message and are ignored under Ignore, where the other mutations still
// apply.
func TestMutatorMatchConditionsAndFailurePolicy(t *testing.T) {
	w := newWorld()
	cond := newMutatingPolicy("cond", applyConfig(`Object{spec: Object.spec{replicas: 7}}`))
	cond.Spec.MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "big", Expression: "object.spec.replicas > 3"}}
	m := w.mutator([]*admissionregistrationv1.MutatingAdmissionPolicy{cond})
	if got := mustMutate(t, m, deployment("default", 1)); *got.Spec.Replicas != 1 {
		t.Errorf("matchCondition false: replicas %d, want 1", *got.Spec.Replicas)
	}
	if got := mustMutate(t, m, deployment("default", 5)); *got.Spec.Replicas != 7 {
		t.Errorf("matchCondition true: replicas %d, want 7", *got.Spec.Replicas)
	}

	bad := newMutatingPolicy("bad",
		applyConfig(`Object{spec: Object.spec{replicas: int(object.metadata.name)}}`),
		applyConfig(`Object{spec: Object.spec{selector: Object.spec.selector{matchLabels: {"a": "b"}}}}`),
		applyConfig(`Object{metadata: Object.metadata{labels: {"ok": "yes"}}}`))
	m = w.mutator([]*admissionregistrationv1.MutatingAdmissionPolicy{bad})
	_, err := mutate(t, m, deployment("default", 1))
	se, ok := err.(*apierrors.StatusError)
	if !ok || se.ErrStatus.Code != 403 || se.ErrStatus.Reason != metav1.StatusReasonInvalid || len(se.ErrStatus.Details.Causes) != 2 ||
		!strings.HasPrefix(se.ErrStatus.Message, "policy 'bad' with binding 'bad-binding' denied request: ") ||
		!strings.Contains(se.ErrStatus.Details.Causes[1].Message, "may not mutate atomic arrays, maps or structs: .spec.selector") {
		t.Fatalf("Mutate under Fail = %#v, want a 403 Invalid with two causes", err)
	}
	bad.Spec.FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
	if got := mustMutate(t, m, deployment("default", 1)); got.Labels["ok"] != "yes" || *got.Spec.Replicas != 1 {
		t.Errorf("Mutate under Ignore = labels %v, replicas %d; want ok=yes, 1", got.Labels, *got.Spec.Replicas)
	}

	cond.Spec.MatchConditions[0].Expression = "object.spec.replicas > object.metadata.name"
	cond.Generation++
	m = w.mutator([]*admissionregistrationv1.MutatingAdmissionPolicy{cond})
	if _, err := mutate(t, m, deployment("default", 1)); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "policy 'cond' with binding 'cond-binding' denied request") {
		t.Errorf("matchCondition error under Fail: Mutate = %v", err)
	}
}

// TestMutatorReinvocation: an IfNeeded policy that ran before another
// changed the object runs again and sees the change; a Never one does
// not.
func TestMutatorReinvocation(t *testing.T) {
	w := newWorld()
	for _, tc := range []struct {
		policy admissionregistrationv1.ReinvocationPolicyType
		want   string
	}{{admissionregistrationv1.IfNeededReinvocationPolicy, "true"}, {admissionregistrationv1.NeverReinvocationPolicy, "false"}} {
		a := newMutatingPolicy("a", applyConfig(`Object{metadata: Object.metadata{annotations: {"seen-b": string("b" in object.metadata.labels)}}}`))
		a.Spec.ReinvocationPolicy = tc.policy
		b := newMutatingPolicy("b", applyConfig(`Object{metadata: Object.metadata{labels: {"b": "yes"}}}`))
		m := w.mutator([]*admissionregistrationv1.MutatingAdmissionPolicy{b, a})
		if got := mustMutate(t, m, deployment("default", 1)); got.Annotations["seen-b"] != tc.want || got.Labels["b"] != "yes" {
			t.Errorf("%s: annotations %v, labels %v; want seen-b=%s", tc.policy, got.Annotations, got.Labels, tc.want)
		}
	}
}

// TestMutatorNotApplicable: policies without bindings, of other
// resources, and the admission configuration resources leave writes
// alone; a missing namespace is the client's 404.
func TestMutatorNotApplicable(t *testing.T) {
	w := newWorld()
	p := newMutatingPolicy("p", applyConfig(`Object{spec: Object.spec{replicas: 2}}`))
	m := w.mutator([]*admissionregistrationv1.MutatingAdmissionPolicy{p}, mutatingBinding("b", "other"))
	if got := mustMutate(t, m, deployment("default", 1)); *got.Spec.Replicas != 1 {
		t.Errorf("unbound policy mutated: %d", *got.Spec.Replicas)
	}
	if m.Handles(schema.GroupResource{Group: "admissionregistration.k8s.io", Resource: "mutatingadmissionpolicies"}) || !m.Handles(deploymentsGR) {
		t.Error("Handles: want deployments and not mutatingadmissionpolicies")
	}
	m = w.mutator([]*admissionregistrationv1.MutatingAdmissionPolicy{p})
	a := apiserver.AdmissionAttributes{Operation: apiserver.Create, Resource: deploymentsGR, Namespace: "gone", Name: "web", Object: deployment("gone", 1)}
	if err := m.Mutate(context.Background(), &a); !apierrors.IsNotFound(err) {
		t.Errorf("missing namespace: Mutate = %v, want NotFound", err)
	}
}

// FuzzMutator: whatever the expressions of a policy that got stored,
// mutating a write gives an object of the write's type or a status
// error, never a panic.
func FuzzMutator(f *testing.F) {
	for _, seed := range [][2]string{
		{`Object{spec: Object.spec{replicas: 3}}`, `[JSONPatch{op: "add", path: "/metadata/labels/a", value: "b"}]`},
		{`Object{metadata: Object.metadata{annotations: {"x": object.metadata.name}}}`, `[JSONPatch{op: "remove", path: "/spec"}]`},
		{`Object{spec: Object.spec{template: Object.spec.template{spec: Object.spec.template.spec{containers: [Object.spec.template.spec.containers{name: "c"}]}}}}`, `[JSONPatch{op: "move", from: "/x", path: "/y"}]`},
		{`object.(`, `[JSONPatch{op: "replace", path: "/spec/replicas", value: "not a number"}]`},
		{`Object{status: Object.status{replicas: -1}}`, `[JSONPatch{op: "copy", from: "/metadata", path: "/spec/template/metadata"}]`},
	} {
		f.Add(seed[0], seed[1])
	}
	w := newWorld()
	f.Fuzz(func(t *testing.T, apply, jsonPatch string) {
		p := newMutatingPolicy("fuzz", applyConfig(apply), jsonPatchOf(jsonPatch))
		p.Spec.FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
		m := w.mutator([]*admissionregistrationv1.MutatingAdmissionPolicy{p})
		out, err := mutate(t, m, deployment("default", 1))
		if err != nil {
			if _, ok := err.(*apierrors.StatusError); !ok {
				t.Fatalf("Mutate = %v, want a StatusError", err)
			}
			return
		}
		if _, ok := out.(*appsv1.Deployment); !ok {
			t.Fatalf("Mutate gave a %T", out)
		}
	})
}
