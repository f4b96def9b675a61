package hubd

import (
	"context"
	"slices"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/outpost-mesh/outpost/internal/wait"
)

// TestMutatingAdmissionPolicy does what the conformance specs "should
// mutate a Deployment" and "... with annotations" do against a real hub:
// a policy bound in a labelled namespace merges replicas and an
// annotation into Deployments created there, once the hub's caches have
// the policy; Deployments elsewhere are left alone. Discovery lists both
// resources.
func TestMutatingAdmissionPolicy(t *testing.T) {
	h, _ := startHub(t, t.TempDir(), noControllers)
	cs, err := kubernetes.NewForConfig(adminConfig(t, h))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	res, err := cs.Discovery().ServerResourcesForGroupVersion(admissionregistrationv1.SchemeGroupVersion.String())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range res.APIResources {
		names = append(names, r.Name)
	}
	if !slices.Contains(names, "mutatingadmissionpolicies") || !slices.Contains(names, "mutatingadmissionpolicybindings") {
		t.Errorf("discovery of admissionregistration.k8s.io/v1 lists %v, want the mutating policies and bindings", names)
	}

	const unique = "map-e2e"
	for _, ns := range []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: unique, Labels: map[string]string{unique: "true"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere"}},
	} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	selector := &metav1.LabelSelector{MatchLabels: map[string]string{unique: "true"}}
	ar := cs.AdmissionregistrationV1()
	p, err := ar.MutatingAdmissionPolicies().Create(ctx, &admissionregistrationv1.MutatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: unique + ".policy.example.com"},
		Spec: admissionregistrationv1.MutatingAdmissionPolicySpec{
			ReinvocationPolicy: admissionregistrationv1.NeverReinvocationPolicy,
			MatchConstraints: &admissionregistrationv1.MatchResources{NamespaceSelector: selector,
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"deployments"}},
				}}}},
			Mutations: []admissionregistrationv1.Mutation{
				{PatchType: admissionregistrationv1.PatchTypeApplyConfiguration, ApplyConfiguration: &admissionregistrationv1.ApplyConfiguration{
					Expression: `Object{spec: Object.spec{replicas: 1337}}`}},
				{PatchType: admissionregistrationv1.PatchTypeApplyConfiguration, ApplyConfiguration: &admissionregistrationv1.ApplyConfiguration{
					Expression: `
						Object{
							metadata: Object.metadata{
								annotations: {
									"mutated-by": "admission-policy"
								}
							}
						}`}},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create policy: %v", err)
	}
	if _, err := ar.MutatingAdmissionPolicyBindings().Create(ctx, &admissionregistrationv1.MutatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: unique + ".binding.example.com"},
		Spec: admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{PolicyName: p.Name,
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: selector}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create binding: %v", err)
	}

	var got *appsv1.Deployment
	wait.For(t, 30*time.Second, "the marker Deployment to be mutated", func() (bool, string) {
		got, err = createAndDelete(ctx, cs, unique)
		if err != nil {
			return false, err.Error()
		}
		return *got.Spec.Replicas == 1337 && got.Annotations["mutated-by"] == "admission-policy",
			"replicas and annotations not mutated yet"
	})
	if got.Labels["app"] != "nginx" || got.Spec.Template.Spec.Containers[0].Image != "nginx:latest" {
		t.Errorf("mutated Deployment lost what it had: %+v", got)
	}
	if other, err := createAndDelete(ctx, cs, "elsewhere"); err != nil || *other.Spec.Replicas != 1 || other.Annotations["mutated-by"] != "" {
		t.Errorf("Deployment in an unlabelled namespace = %+v, %v; want it unmutated", other, err)
	}
}

// createAndDelete creates the conformance specs' marker Deployment in
// namespace, deletes it, and returns it as created.
func createAndDelete(ctx context.Context, cs kubernetes.Interface, namespace string) (*appsv1.Deployment, error) {
	replicas := int32(1)
	labels := map[string]string{"app": "nginx"}
	d, err := cs.AppsV1().Deployments(namespace).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "marker-deployment", Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "nginx", Image: "nginx:latest"}}},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	if err := cs.AppsV1().Deployments(namespace).Delete(ctx, d.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return nil, err
	}
	return d, nil
}
