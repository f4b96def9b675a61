package apps_test

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"

	"github.com/outpost-mesh/outpost/test/hubtest"
)

// deployment is the configuration of a Deployment "web" in default
// with replicas and one container "web" of image.
func deployment(replicas int32, image string) *appsv1ac.DeploymentApplyConfiguration {
	labels := map[string]string{"app": "web"}
	return appsv1ac.Deployment("web", "default").WithSpec(appsv1ac.DeploymentSpec().
		WithReplicas(replicas).
		WithSelector(metav1ac.LabelSelector().WithMatchLabels(labels)).
		WithTemplate(corev1ac.PodTemplateSpec().WithLabels(labels).WithSpec(corev1ac.PodSpec().
			WithContainers(corev1ac.Container().WithName("web").WithImage(image)))))
}

// TestApplyDeployment: client-go's typed Apply of Deployments works on a
// real hub with its registry rules and controllers: it creates, changes
// the spec (bumping generation), conflicts on another manager's fields
// and forces, while the deployment controller writes status alongside.
func TestApplyDeployment(t *testing.T) {
	h := hubtest.Start(t)
	ctx := context.Background()
	deps := h.Client.AppsV1().Deployments("default")
	d, err := deps.Apply(ctx, deployment(1, "web:1"), metav1.ApplyOptions{FieldManager: "deployer"})
	if err != nil {
		t.Fatalf("apply to create: %v", err)
	}
	if d.UID == "" || d.Generation != 1 || *d.Spec.Replicas != 1 || d.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType {
		t.Fatalf("created %+v, want uid, generation 1, replicas 1 and the default strategy", d)
	}
	if len(d.ManagedFields) != 1 || d.ManagedFields[0].Manager != "deployer" || d.ManagedFields[0].Operation != metav1.ManagedFieldsOperationApply || d.ManagedFields[0].APIVersion != "apps/v1" {
		t.Fatalf("managedFields %+v, want deployer's apply of apps/v1", d.ManagedFields)
	}
	// The defaulted strategy is not the applier's: it did not apply it.
	if strings.Contains(string(d.ManagedFields[0].FieldsV1.Raw), "strategy") {
		t.Errorf("deployer owns the defaulted strategy: %s", d.ManagedFields[0].FieldsV1.Raw)
	}

	if d, err = deps.Apply(ctx, deployment(2, "web:2"), metav1.ApplyOptions{FieldManager: "deployer"}); err != nil {
		t.Fatalf("apply of a changed spec: %v", err)
	}
	if *d.Spec.Replicas != 2 || d.Spec.Template.Spec.Containers[0].Image != "web:2" || d.Generation != 2 {
		t.Fatalf("after the change: replicas %d, image %s, generation %d", *d.Spec.Replicas, d.Spec.Template.Spec.Containers[0].Image, d.Generation)
	}

	_, err = deps.Apply(ctx, deployment(2, "web:3"), metav1.ApplyOptions{FieldManager: "intruder"})
	if !apierrors.IsConflict(err) || !strings.Contains(err.Error(), `conflict with "deployer"`) || !strings.Contains(err.Error(), `.spec.template.spec.containers[name="web"].image`) {
		t.Fatalf("another manager's apply of the image = %v, want a conflict naming deployer and the image", err)
	}
	if d, err = deps.Apply(ctx, deployment(2, "web:3"), metav1.ApplyOptions{FieldManager: "intruder", Force: true}); err != nil {
		t.Fatalf("forced apply: %v", err)
	}
	if d.Spec.Template.Spec.Containers[0].Image != "web:3" {
		t.Fatalf("after the forced apply: image %s", d.Spec.Template.Spec.Containers[0].Image)
	}
	owners := map[string]bool{}
	for _, e := range d.ManagedFields {
		owners[e.Manager+"/"+string(e.Operation)+"/"+e.Subresource] = true
	}
	if !owners["deployer/Apply/"] || !owners["intruder/Apply/"] {
		t.Fatalf("managers %v, want deployer's and intruder's applies", owners)
	}
}
