package hubd

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/outpost-mesh/outpost/internal/wait"
)

// TestEndpointsOfBoundPods: the endpoints of a Service list its bound, ready
// pods. The scheduler trims the status of bound pods in its cache, so it
// must have informers of its own: sharing the controllers' would hide
// every pod's IP and readiness from them.
func TestEndpointsOfBoundPods(t *testing.T) {
	h, _ := startHub(t, t.TempDir())
	cs := kubernetes.NewForConfigOrDie(adminConfig(t, h))
	ctx := context.Background()
	labels := map[string]string{"app": "x"}
	p, err := cs.CoreV1().Pods("default").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "x", Labels: labels},
		Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "c", Image: "i"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Services("default").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "x"},
		Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Port: 443, TargetPort: intstr.FromInt32(8443)}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p.Status = corev1.PodStatus{QOSClass: p.Status.QOSClass, Phase: corev1.PodRunning, PodIP: "10.42.0.5", PodIPs: []corev1.PodIP{{IP: "10.42.0.5"}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	if _, err := cs.CoreV1().Pods("default").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 20*time.Second, "the service's slice to list the pod", func() (bool, string) {
		l, err := cs.DiscoveryV1().EndpointSlices("default").List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=x"})
		if err != nil {
			return false, err.Error()
		}
		for _, s := range l.Items {
			if len(s.Endpoints) > 0 {
				return true, ""
			}
		}
		return false, fmt.Sprint(l.Items)
	})
}
