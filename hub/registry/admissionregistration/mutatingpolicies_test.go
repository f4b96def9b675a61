package admissionregistration_test

import (
	"context"
	"reflect"
	"slices"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/outpost-mesh/outpost/hub/registry/typed/typedtest"
)

// deploymentsRule matches creates and updates of Deployments.
func deploymentsRule(ops ...admissionregistrationv1.OperationType) *admissionregistrationv1.MatchResources {
	return &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
		RuleWithOperations: admissionregistrationv1.RuleWithOperations{Operations: ops,
			Rule: admissionregistrationv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"deployments"}}}}}}
}

// applyConfiguration is a mutation merging expr's Object{}.
func applyConfiguration(expr string) admissionregistrationv1.Mutation {
	return admissionregistrationv1.Mutation{PatchType: admissionregistrationv1.PatchTypeApplyConfiguration,
		ApplyConfiguration: &admissionregistrationv1.ApplyConfiguration{Expression: expr}}
}

// jsonPatch is a mutation applying expr's JSONPatch{} list.
func jsonPatch(expr string) admissionregistrationv1.Mutation {
	return admissionregistrationv1.Mutation{PatchType: admissionregistrationv1.PatchTypeJSONPatch,
		JSONPatch: &admissionregistrationv1.JSONPatch{Expression: expr}}
}

// TestMutatingAdmissionPolicyAPI: mutating policies and their bindings
// are defaulted, refused with upstream's field paths where upstream
// refuses them (their CEL compiled at write time), count generations,
// and print upstream's columns.
func TestMutatingAdmissionPolicyAPI(t *testing.T) {
	cs := start(t)
	ctx := context.Background()
	ar := cs.AdmissionregistrationV1()

	p, err := ar.MutatingAdmissionPolicies().Create(ctx, &admissionregistrationv1.MutatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "replicas"},
		Spec: admissionregistrationv1.MutatingAdmissionPolicySpec{
			ParamKind:          &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"},
			MatchConstraints:   deploymentsRule(admissionregistrationv1.Create),
			Variables:          []admissionregistrationv1.Variable{{Name: "n", Expression: "int(params.data.replicas)"}},
			Mutations:          []admissionregistrationv1.Mutation{applyConfiguration("Object{spec: Object.spec{replicas: variables.n}}"), jsonPatch(`[JSONPatch{op: "add", path: "/metadata/labels/x", value: "y"}]`)},
			ReinvocationPolicy: admissionregistrationv1.NeverReinvocationPolicy,
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create policy: %v", err)
	}
	mc := p.Spec.MatchConstraints
	if *p.Spec.FailurePolicy != admissionregistrationv1.Fail || *mc.MatchPolicy != admissionregistrationv1.Equivalent || mc.NamespaceSelector == nil ||
		mc.ObjectSelector == nil || *mc.ResourceRules[0].Scope != admissionregistrationv1.AllScopes || p.Generation != 1 {
		t.Errorf("created policy %+v: defaults or generation missing", p.Spec)
	}
	p, err = ar.MutatingAdmissionPolicies().Patch(ctx, "replicas", types.MergePatchType, []byte(`{"spec":{"reinvocationPolicy":"IfNeeded"}}`), metav1.PatchOptions{})
	if err != nil || p.Generation != 2 || p.Spec.ReinvocationPolicy != admissionregistrationv1.IfNeededReinvocationPolicy {
		t.Errorf("patch reinvocationPolicy: %v, generation %d", err, p.Generation)
	}

	bad := []struct {
		name   string
		spec   admissionregistrationv1.MutatingAdmissionPolicySpec
		fields []string
	}{
		{"empty", admissionregistrationv1.MutatingAdmissionPolicySpec{},
			[]string{"spec.matchConstraints", "spec.mutations", "spec.reinvocationPolicy"}},
		{"no rules, delete, bad reinvocation", admissionregistrationv1.MutatingAdmissionPolicySpec{
			MatchConstraints: deploymentsRule(admissionregistrationv1.Delete), ReinvocationPolicy: "Always",
			Mutations: []admissionregistrationv1.Mutation{applyConfiguration("Object{}")}},
			[]string{"spec.matchConstraints.resourceRules.operations", "spec.reinvocationPolicy"}},
		{"patch types", admissionregistrationv1.MutatingAdmissionPolicySpec{
			MatchConstraints: deploymentsRule(admissionregistrationv1.Create), ReinvocationPolicy: admissionregistrationv1.NeverReinvocationPolicy,
			Mutations: []admissionregistrationv1.Mutation{
				{}, {PatchType: "Merge"}, {PatchType: admissionregistrationv1.PatchTypeJSONPatch},
				{PatchType: admissionregistrationv1.PatchTypeApplyConfiguration, JSONPatch: &admissionregistrationv1.JSONPatch{Expression: "[]"}},
			}},
			[]string{"spec.mutations[0].patchType", "spec.mutations[1].patchType", "spec.mutations[2].jsonPatch",
				"spec.mutations[3].applyConfiguration", "spec.mutations[3].jsonPatch"}},
		{"expressions", admissionregistrationv1.MutatingAdmissionPolicySpec{
			MatchConstraints: deploymentsRule(admissionregistrationv1.Create), ReinvocationPolicy: admissionregistrationv1.NeverReinvocationPolicy,
			Variables:       []admissionregistrationv1.Variable{{Name: "in", Expression: "1"}, {Name: "ok", Expression: "object.("}},
			MatchConditions: []admissionregistrationv1.MatchCondition{{Name: "m", Expression: "params.x"}},
			Mutations: []admissionregistrationv1.Mutation{
				applyConfiguration(`"not an object"`), jsonPatch(`Object{}`), applyConfiguration("  "),
			}},
			[]string{"spec.variables[0].name", "spec.variables[1].expression", "spec.matchConditions[0].expression",
				"spec.mutations[0].applyConfiguration.expression", "spec.mutations[1].jsonPatch.expression", "spec.mutations[2].applyConfiguration.expression"}},
	}
	for _, tc := range bad {
		_, err := ar.MutatingAdmissionPolicies().Create(ctx, &admissionregistrationv1.MutatingAdmissionPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "bad"}, Spec: tc.spec}, metav1.CreateOptions{})
		got := typedtest.Causes(t, tc.name, err)
		for _, f := range tc.fields {
			if !slices.Contains(got, f) {
				t.Errorf("%s: causes %v, want %s", tc.name, got, f)
			}
		}
	}

	b, err := ar.MutatingAdmissionPolicyBindings().Create(ctx, &admissionregistrationv1.MutatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "replicas"},
		Spec: admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{PolicyName: "replicas",
			ParamRef:       &admissionregistrationv1.ParamRef{Name: "limits", Namespace: "default", ParameterNotFoundAction: new(admissionregistrationv1.DenyAction)},
			MatchResources: &admissionregistrationv1.MatchResources{}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create binding: %v", err)
	}
	if m := b.Spec.MatchResources; m.NamespaceSelector == nil || m.ObjectSelector == nil || *m.MatchPolicy != admissionregistrationv1.Equivalent {
		t.Errorf("binding defaults missing: %+v", m)
	}
	_, err = ar.MutatingAdmissionPolicyBindings().Create(ctx, &admissionregistrationv1.MutatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "bad"},
		Spec: admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{ParamRef: &admissionregistrationv1.ParamRef{},
			MatchResources: deploymentsRule(admissionregistrationv1.Connect)},
	}, metav1.CreateOptions{})
	got := typedtest.Causes(t, "bad binding", err)
	for _, f := range []string{"spec.policyName", "spec.paramRef", "spec.paramRef.parameterNotFoundAction", "spec.matchResources.resourceRules.operations"} {
		if !slices.Contains(got, f) {
			t.Errorf("bad binding: causes %v, want %s", got, f)
		}
	}

	for _, tc := range []struct {
		path string
		cols []string
		row  []any
	}{
		{"mutatingadmissionpolicies", []string{"Name", "Mutations", "ParamKind", "Age"}, []any{"replicas", float64(2), "v1/ConfigMap"}},
		{"mutatingadmissionpolicybindings", []string{"Name", "PolicyName", "ParamRef", "Age"}, []any{"replicas", "replicas", "default/limits"}},
	} {
		tbl := typedtest.Table(t, ar.RESTClient(), "/apis/admissionregistration.k8s.io/v1/"+tc.path)
		if names := typedtest.ColumnNames(tbl); !reflect.DeepEqual(names, tc.cols) || len(tbl.Rows) != 1 ||
			!reflect.DeepEqual(tbl.Rows[0].Cells[:len(tc.row)], tc.row) {
			t.Errorf("%s as a Table: columns %q, rows %v; want %q, %v", tc.path, names, tbl.Rows, tc.cols, tc.row)
		}
	}

	res, err := cs.Discovery().ServerResourcesForGroupVersion("admissionregistration.k8s.io/v1")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range res.APIResources {
		names = append(names, r.Name)
	}
	for _, want := range []string{"mutatingadmissionpolicies", "mutatingadmissionpolicybindings"} {
		if !slices.Contains(names, want) {
			t.Errorf("discovery lists %v, want %s", names, want)
		}
	}
}
