package hubd

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TestBinding: pods/binding places a pod and marks it scheduled, as
// upstream's does, over the condition a failed attempt left; a bound pod
// cannot be bound again.
func TestBinding(t *testing.T) {
	h, _ := startHub(t, t.TempDir(), noControllers)
	cs, err := kubernetes.NewForConfig(adminConfig(t, h))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	pods := cs.CoreV1().Pods("default")
	pod, err := pods.Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable", Message: "0/0 nodes are available"}}
	if _, err := pods.UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	bind := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Target: corev1.ObjectReference{Kind: "Node", Name: "edge-1"}}
	if err := pods.Bind(ctx, bind, metav1.CreateOptions{}); err != nil {
		t.Fatalf("bind: %v", err)
	}
	got, err := pods.Get(ctx, "p", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.NodeName != "edge-1" {
		t.Errorf("nodeName after binding = %q, want edge-1", got.Spec.NodeName)
	}
	if c := got.Status.Conditions; len(c) != 1 || c[0].Type != corev1.PodScheduled || c[0].Status != corev1.ConditionTrue || c[0].Reason != "" {
		t.Errorf("conditions after binding = %+v, want PodScheduled=True alone", c)
	}
	bind.Target.Name = "edge-2"
	if err := pods.Bind(ctx, bind, metav1.CreateOptions{}); !apierrors.IsConflict(err) {
		t.Errorf("second binding = %v, want Conflict", err)
	}
}
