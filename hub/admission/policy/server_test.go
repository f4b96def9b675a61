package policy_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/outpost-mesh/outpost/hub/admission/policy"
	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/registry/apps"
	"github.com/outpost-mesh/outpost/hub/registry/core"
	"github.com/outpost-mesh/outpost/hub/store/badgerstore"
)

// TestServerRefusesDeployment: a real server over a real store, with the
// Evaluator as its admission, refuses client-go's create of a deployment
// of 6 replicas with upstream's status and message, and stores one of 5.
func TestServerRefusesDeployment(t *testing.T) {
	st, err := badgerstore.Open(badgerstore.DefaultConfig(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })

	vap := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "demo-policy.example.com", UID: "u1", Generation: 1},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{},
				ObjectSelector:    &metav1.LabelSelector{},
				MatchPolicy:       ptr.To(admissionregistrationv1.Equivalent),
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"deployments"}},
				}}},
			},
			Validations: []admissionregistrationv1.Validation{{Expression: "object.spec.replicas <= 5"}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "demo-binding-test.example.com"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        vap.Name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}
	var cs kubernetes.Interface
	eval := policy.New(policy.Config{
		Policies: func() []*admissionregistrationv1.ValidatingAdmissionPolicy {
			return []*admissionregistrationv1.ValidatingAdmissionPolicy{vap}
		},
		Bindings: func() []*admissionregistrationv1.ValidatingAdmissionPolicyBinding {
			return []*admissionregistrationv1.ValidatingAdmissionPolicyBinding{binding}
		},
		Namespace: func(name string) (*corev1.Namespace, error) {
			return cs.CoreV1().Namespaces().Get(context.Background(), name, metav1.GetOptions{})
		},
	})
	srv, err := apiserver.New(apiserver.Config{
		Store:     st,
		Resources: append(core.Resources(), apps.Resources()...),
		Admission: eval,
	})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	t.Cleanup(srv.Shutdown)
	ns := &corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}, ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	if err := srv.Ensure(context.Background(), []runtime.Object{ns}...); err != nil {
		t.Fatal(err)
	}
	if cs, err = kubernetes.NewForConfig(&rest.Config{Host: hs.URL, QPS: -1}); err != nil {
		t.Fatal(err)
	}

	ctx := context.Background()
	deps := cs.AppsV1().Deployments("default")
	_, err = deps.Create(ctx, newDeployment(6), metav1.CreateOptions{})
	const want = `deployments.apps "nginx" is forbidden: ValidatingAdmissionPolicy 'demo-policy.example.com' with binding 'demo-binding-test.example.com' denied request: failed expression: object.spec.replicas <= 5`
	var se *apierrors.StatusError
	if !apierrors.IsInvalid(err) || !errors.As(err, &se) || se.ErrStatus.Code != 422 || se.ErrStatus.Message != want {
		t.Fatalf("create of 6 replicas = %v, want 422 %q", err, want)
	}
	if _, err := deps.Get(ctx, "nginx", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("after the refusal, get = %v, want NotFound", err)
	}
	d, err := deps.Create(ctx, newDeployment(5), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create of 5 replicas: %v", err)
	}
	d.Spec.Replicas = ptr.To[int32](8)
	if _, err := deps.Update(ctx, d, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
		t.Fatalf("update to 8 replicas = %v, want Invalid", err)
	}
}

// newDeployment is a valid deployment nginx of replicas.
func newDeployment(replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": "nginx"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "nginx"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "nginx", Image: "nginx:1.27"}}},
			},
		},
	}
}
