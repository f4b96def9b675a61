package admissionregistration_test

import (
	"context"
	"net/http/httptest"
	"reflect"
	"slices"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/registry/admissionregistration"
	"github.com/outpost-mesh/outpost/hub/registry/typed/typedtest"
	"github.com/outpost-mesh/outpost/hub/store/badgerstore"
)

// start serves the group over a fresh store, with a policy check that
// refuses the expression "bad".
func start(t *testing.T) kubernetes.Interface {
	t.Helper()
	st, err := badgerstore.Open(badgerstore.DefaultConfig(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	check := func(p *admissionregistrationv1.ValidatingAdmissionPolicy) field.ErrorList {
		var errs field.ErrorList
		for i, v := range p.Spec.Validations {
			if v.Expression == "bad" {
				errs = append(errs, field.Invalid(field.NewPath("spec", "validations").Index(i).Child("expression"), v.Expression, "compilation failed"))
			}
		}
		return errs
	}
	srv, err := apiserver.New(apiserver.Config{Store: st, Resources: admissionregistration.Resources(admissionregistration.WithPolicyCheck(check))})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	t.Cleanup(srv.Shutdown)
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: hs.URL, QPS: -1})
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func hookURL() *string { u := "https://hooks.example.com/validate"; return &u }

// TestAPI: configurations are defaulted, refused where upstream refuses
// them, and printed with upstream's columns.
func TestAPI(t *testing.T) {
	cs := start(t)
	ctx := context.Background()
	ar := cs.AdmissionregistrationV1()

	v, err := ar.ValidatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "policy"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: "policy.example.com", ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: hookURL()},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods", "pods/status"}},
			}},
			SideEffects: new(admissionregistrationv1.SideEffectClassNone), AdmissionReviewVersions: []string{"v1"},
			MatchConditions: []admissionregistrationv1.MatchCondition{{Name: "not-system", Expression: `!request.userInfo.username.startsWith("system:")`}},
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create validating configuration: %v", err)
	}
	w := v.Webhooks[0]
	if *w.FailurePolicy != admissionregistrationv1.Fail || *w.MatchPolicy != admissionregistrationv1.Equivalent || *w.TimeoutSeconds != 10 ||
		w.NamespaceSelector == nil || w.ObjectSelector == nil || *w.Rules[0].Scope != admissionregistrationv1.AllScopes {
		t.Errorf("defaults not applied: %+v", w)
	}

	svc := admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: "default", Name: "hook"}}
	m, err := ar.MutatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "inject"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name: "inject.example.com", ClientConfig: svc, SideEffects: new(admissionregistrationv1.SideEffectClassNoneOnDryRun),
			AdmissionReviewVersions: []string{"v1", "v1beta1"},
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create mutating configuration: %v", err)
	}
	if mw := m.Webhooks[0]; *mw.ReinvocationPolicy != admissionregistrationv1.NeverReinvocationPolicy || *mw.ClientConfig.Service.Port != 443 {
		t.Errorf("mutating defaults not applied: %+v", mw)
	}

	bad := []struct {
		name   string
		hook   admissionregistrationv1.ValidatingWebhook
		fields []string
	}{
		{"no side effects, no versions", admissionregistrationv1.ValidatingWebhook{Name: "a.example.com", ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: hookURL()}},
			[]string{"webhooks[0].sideEffects", "webhooks[0].admissionReviewVersions"}},
		{"short name, both client configs, bad timeout", admissionregistrationv1.ValidatingWebhook{Name: "short",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: hookURL(), Service: svc.Service}, SideEffects: new(admissionregistrationv1.SideEffectClassSome),
			TimeoutSeconds: new(int32(31)), AdmissionReviewVersions: []string{"v2"}},
			[]string{"webhooks[0].name", "webhooks[0].clientConfig", "webhooks[0].sideEffects", "webhooks[0].timeoutSeconds", "webhooks[0].admissionReviewVersions"}},
		{"http url, bad rule, bad matchCondition", admissionregistrationv1.ValidatingWebhook{Name: "a.example.com",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: new("http://hooks.example.com?x=1")}, SideEffects: new(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			Rules: []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{"*", "CREATE"},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"*", "pods"}}}},
			MatchConditions: []admissionregistrationv1.MatchCondition{{Name: "x", Expression: "object.("}}},
			[]string{"webhooks[0].clientConfig.url", "webhooks[0].rules[0].operations", "webhooks[0].rules[0].resources", "webhooks[0].matchConditions[0].expression"}},
	}
	for _, tc := range bad {
		_, err := ar.ValidatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: "bad"}, Webhooks: []admissionregistrationv1.ValidatingWebhook{tc.hook}}, metav1.CreateOptions{})
		got := typedtest.Causes(t, tc.name, err)
		for _, f := range tc.fields {
			if !slices.Contains(got, f) {
				t.Errorf("%s: causes %v, want %s", tc.name, got, f)
			}
		}
	}

	p := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "replicas"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			ParamKind: &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"},
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{Operations: []admissionregistrationv1.OperationType{"CREATE"},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"deployments"}}}}}},
			Validations: []admissionregistrationv1.Validation{{Expression: "object.spec.replicas <= 5"}},
		},
	}
	if _, err := ar.ValidatingAdmissionPolicies().Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create policy: %v", err)
	}
	p2 := p.DeepCopy()
	p2.Name, p2.Spec.Validations, p2.Spec.MatchConstraints = "bad", []admissionregistrationv1.Validation{{Expression: "bad"}}, nil
	_, err = ar.ValidatingAdmissionPolicies().Create(ctx, p2, metav1.CreateOptions{})
	if got := typedtest.Causes(t, "bad policy", err); !slices.Contains(got, "spec.validations[0].expression") || !slices.Contains(got, "spec.matchConstraints") {
		t.Errorf("bad policy: causes %v, want the check's and spec.matchConstraints", got)
	}
	if _, err := ar.ValidatingAdmissionPolicyBindings().Create(ctx, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "replicas"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: "replicas", ValidationActions: []admissionregistrationv1.ValidationAction{"Deny"},
			ParamRef: &admissionregistrationv1.ParamRef{Name: "limits", Namespace: "default", ParameterNotFoundAction: new(admissionregistrationv1.DenyAction)}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create binding: %v", err)
	}
	_, err = ar.ValidatingAdmissionPolicyBindings().Create(ctx, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "bad"},
		Spec:       admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{ValidationActions: []admissionregistrationv1.ValidationAction{"Deny", "Warn"}},
	}, metav1.CreateOptions{})
	if got := typedtest.Causes(t, "bad binding", err); !slices.Contains(got, "spec.policyName") || !slices.Contains(got, "spec.validationActions") {
		t.Errorf("bad binding: causes %v", got)
	}

	for _, tc := range []struct {
		path string
		cols []string
		row  []any
	}{
		{"validatingwebhookconfigurations", []string{"Name", "Webhooks", "Age"}, []any{"policy", float64(1)}},
		{"mutatingwebhookconfigurations", []string{"Name", "Webhooks", "Age"}, []any{"inject", float64(1)}},
		{"validatingadmissionpolicies", []string{"Name", "Validations", "ParamKind", "Age"}, []any{"replicas", float64(1), "v1/ConfigMap"}},
		{"validatingadmissionpolicybindings", []string{"Name", "PolicyName", "ParamRef", "Age"}, []any{"replicas", "replicas", "default/limits"}},
	} {
		tbl := typedtest.Table(t, ar.RESTClient(), "/apis/admissionregistration.k8s.io/v1/"+tc.path)
		if names := typedtest.ColumnNames(tbl); !reflect.DeepEqual(names, tc.cols) || len(tbl.Rows) != 1 ||
			!reflect.DeepEqual(tbl.Rows[0].Cells[:len(tc.row)], tc.row) {
			t.Errorf("%s as a Table: columns %q, rows %v; want %q, %v", tc.path, names, tbl.Rows, tc.cols, tc.row)
		}
	}
}

// TestWrongType: the rules refuse objects of another type as internal
// errors, without panicking.
func TestWrongType(t *testing.T) { typedtest.WrongType(t, admissionregistration.Resources()) }
