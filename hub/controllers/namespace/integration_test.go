package namespace_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/outpost-mesh/outpost/hub/controllers"
	"github.com/outpost-mesh/outpost/hub/controllers/namespace"
	"github.com/outpost-mesh/outpost/hub/hubd"
	"github.com/outpost-mesh/outpost/internal/testlog"
	"github.com/outpost-mesh/outpost/internal/wait"
	"github.com/outpost-mesh/outpost/test/hubtest"
)

// startController runs the namespace controller alone against a real hub
// until the test ends.
func startController(t *testing.T) *hubtest.Hub {
	t.Helper()
	h := hubtest.Start(t, func(c *hubd.Config) { c.Controllers = false })
	inf := informers.NewSharedInformerFactory(h.Client, 0)
	events := record.NewBroadcaster()
	events.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: h.Client.CoreV1().Events("")})
	t.Cleanup(events.Shutdown)
	nc, err := namespace.New(controllers.Context{
		Client: h.Client, Metadata: h.Metadata, Informers: inf, Clock: clock.RealClock{},
		Events: func(component string) record.EventRecorder {
			return events.NewRecorder(scheme.Scheme, corev1.EventSource{Component: component})
		},
		Logger: testlog.New(t, slog.LevelInfo),
	})
	if err != nil {
		t.Fatal(err)
	}
	bg := wait.Start(t, 30*time.Second, "namespace controller Run", nc.Run)
	stop := make(chan struct{})
	inf.Start(stop)
	t.Cleanup(func() {
		if err := bg.Stop(); err != nil {
			t.Errorf("Run = %v", err)
		}
		close(stop)
		inf.Shutdown()
	})
	return h
}

func condition(ns *corev1.Namespace, typ corev1.NamespaceConditionType) *corev1.NamespaceCondition {
	for i := range ns.Status.Conditions {
		if ns.Status.Conditions[i].Type == typ {
			return &ns.Status.Conditions[i]
		}
	}
	return nil
}

// TestNamespaceDeletion: a namespace with a ConfigMap, a Pod and a
// Service is deleted completely; while it is Terminating, creating in it
// gets upstream's 403, and what blocks shows in its conditions.
func TestNamespaceDeletion(t *testing.T) {
	h := startController(t)
	ctx := context.Background()
	c := h.Client.CoreV1()
	if _, err := c.Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "doomed"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ConfigMaps("doomed").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "plain"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ConfigMaps("doomed").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "held", Finalizers: []string{"example.com/hold"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Services("doomed").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A pod on a node (no kubelet here): its deletion is graceful, and
	// the test plays the kubelet that confirms it.
	grace := int64(10)
	if _, err := c.Pods("doomed").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-1"},
		Spec: corev1.PodSpec{NodeName: "edge-1", TerminationGracePeriodSeconds: &grace, Containers: []corev1.Container{{Name: "c", Image: "nginx"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	bg := metav1.DeletePropagationBackground
	if err := c.Namespaces().Delete(ctx, "doomed", metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
		t.Fatal(err)
	}
	ns, err := c.Namespaces().Get(ctx, "doomed", metav1.GetOptions{})
	if err != nil || ns.Status.Phase != corev1.NamespaceTerminating {
		t.Fatalf("deleted namespace: %v %v, want Terminating", ns, err)
	}

	// Creating in it is refused as upstream.
	_, err = c.ConfigMaps("doomed").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "late"}}, metav1.CreateOptions{})
	var se *apierrors.StatusError
	if !apierrors.IsForbidden(err) || !errors.As(err, &se) {
		t.Fatalf("create in a Terminating namespace: %v, want 403", err)
	}
	if want := `configmaps "late" is forbidden: unable to create new content in namespace doomed because it is being terminated`; se.ErrStatus.Message != want {
		t.Errorf("refusal %q, want %q", se.ErrStatus.Message, want)
	}
	if d := se.ErrStatus.Details; d == nil || len(d.Causes) != 1 || d.Causes[0].Type != corev1.NamespaceTerminatingCause {
		t.Errorf("refusal details %+v, want the NamespaceTerminating cause", d)
	}

	// What can go goes; what blocks shows in the conditions.
	wait.For(t, 30*time.Second, "the namespace's conditions to name what remains", func() (bool, string) {
		ns, err := c.Namespaces().Get(ctx, "doomed", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		cr, fr := condition(ns, corev1.NamespaceContentRemaining), condition(ns, corev1.NamespaceFinalizersRemaining)
		if cr == nil || fr == nil {
			return false, fmt.Sprintf("conditions %+v", ns.Status.Conditions)
		}
		ok := cr.Status == corev1.ConditionTrue && strings.Contains(cr.Message, "configmaps. has 1 resource instances") &&
			strings.Contains(cr.Message, "pods. has 1 resource instances") &&
			fr.Status == corev1.ConditionTrue && fr.Message == "Some content in the namespace has finalizers remaining: example.com/hold in 1 resource instances"
		return ok, fmt.Sprintf("conditions %+v", ns.Status.Conditions)
	})
	for what, get := range map[string]func() error{
		"configmap plain": func() error { _, err := c.ConfigMaps("doomed").Get(ctx, "plain", metav1.GetOptions{}); return err },
		"service web":     func() error { _, err := c.Services("doomed").Get(ctx, "web", metav1.GetOptions{}); return err },
	} {
		if err := get(); !apierrors.IsNotFound(err) {
			t.Errorf("%s in a Terminating namespace: %v, want deleted", what, err)
		}
	}
	pod, err := c.Pods("doomed").Get(ctx, "web-1", metav1.GetOptions{})
	if err != nil || pod.DeletionTimestamp == nil {
		t.Fatalf("pod on a node: %v %v, want it marked for deletion", pod, err)
	}

	// The finalizer's owner and the kubelet finish; the namespace goes.
	held, err := c.ConfigMaps("doomed").Get(ctx, "held", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	held.Finalizers = nil
	if _, err := c.ConfigMaps("doomed").Update(ctx, held, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.Pods("doomed").Delete(ctx, "web-1", *metav1.NewDeleteOptions(0)); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 45*time.Second, "the namespace to go", func() (bool, string) {
		ns, err := c.Namespaces().Get(ctx, "doomed", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		return false, fmt.Sprintf("%v %+v", err, ns.Status)
	})
	// The name is free again.
	if _, err := c.Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "doomed"}}, metav1.CreateOptions{}); err != nil {
		t.Errorf("create the namespace again: %v", err)
	}
	if _, err := c.ConfigMaps("doomed").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "fresh"}}, metav1.CreateOptions{}); err != nil {
		t.Errorf("create in the new namespace: %v", err)
	}
}

// TestEmptyNamespace: a namespace without content goes at once.
func TestEmptyNamespace(t *testing.T) {
	h := startController(t)
	ctx := context.Background()
	c := h.Client.CoreV1()
	if _, err := c.Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "empty"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.Namespaces().Delete(ctx, "empty", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 30*time.Second, "the empty namespace to go", func() (bool, string) {
		_, err := c.Namespaces().Get(ctx, "empty", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}
