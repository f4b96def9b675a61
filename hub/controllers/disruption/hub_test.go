package disruption_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/outpost-mesh/outpost/internal/wait"
	"github.com/outpost-mesh/outpost/test/hubtest"
)

// TestBudgetsOnARealHub runs a hub with its controllers and evicts pods
// through client-go, as kubectl drain does: a budget of minAvailable 2
// over 3 ready pods allows one disruption; the first eviction spends it,
// the next is refused with 429 until a replacement pod is ready and the
// controller has counted it; a pending pod and a pod no budget covers go
// at once; dry runs spend nothing; a pod two budgets cover is refused.
func TestBudgetsOnARealHub(t *testing.T) {
	h := hubtest.Start(t)
	ctx := context.Background()
	pods := h.Client.CoreV1().Pods("default")
	pdbs := h.Client.PolicyV1().PodDisruptionBudgets("default")

	// runningPod creates a pod and plays its kubelet: Running and Ready.
	// No node is involved: the pod names a scheduler that does not run,
	// so nothing else touches it.
	runningPod := func(name, app string, ready bool) {
		t.Helper()
		p, err := pods.Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": app}},
			Spec:       corev1.PodSpec{SchedulerName: "test-nobody", Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !ready {
			return // Pending, as created
		}
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
		if _, err := pods.UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	evict := func(name string, dry bool) error {
		ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}}
		if dry {
			ev.DeleteOptions = &metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}
		}
		return pods.EvictV1(ctx, ev)
	}
	gone := func(name string) {
		t.Helper()
		wait.For(t, 30*time.Second, "pod "+name+" deleted", func() (bool, string) {
			p, err := pods.Get(ctx, name, metav1.GetOptions{})
			return apierrors.IsNotFound(err) || err == nil && p.DeletionTimestamp != nil, fmt.Sprintf("%v", err)
		})
	}
	status := func() policyv1.PodDisruptionBudgetStatus {
		t.Helper()
		b, err := pdbs.Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return b.Status
	}
	budgetIs := func(what string, expected, healthy, desired, allowed int32) {
		t.Helper()
		wait.For(t, 30*time.Second, what, func() (bool, string) {
			st := status()
			ok := st.ObservedGeneration == 1 && st.ExpectedPods == expected && st.CurrentHealthy == healthy &&
				st.DesiredHealthy == desired && st.DisruptionsAllowed == allowed
			return ok, fmt.Sprintf("status %+v", st)
		})
	}

	if _, err := pdbs.Create(ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: new(intstr.FromInt32(2)),
			Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	budgetIs("empty budget computed", 0, 0, 2, 0)
	for _, name := range []string{"web-0", "web-1", "web-2"} {
		runningPod(name, "web", true)
	}
	budgetIs("budget over 3 ready pods", 3, 3, 2, 1)
	st := status()
	if c := st.Conditions; len(c) != 1 || c[0].Type != policyv1.DisruptionAllowedCondition || c[0].Status != metav1.ConditionTrue || c[0].Reason != policyv1.SufficientPodsReason {
		t.Errorf("conditions %+v, want DisruptionAllowed True for SufficientPods", c)
	}

	// A dry run spends nothing and deletes nothing.
	if err := evict("web-0", true); err != nil {
		t.Fatalf("dry-run eviction: %v", err)
	}
	if p, err := pods.Get(ctx, "web-0", metav1.GetOptions{}); err != nil || p.DeletionTimestamp != nil {
		t.Fatalf("after a dry-run eviction: %v, %v; want the pod untouched", p.DeletionTimestamp, err)
	}
	if st := status(); st.DisruptionsAllowed != 1 || len(st.DisruptedPods) != 0 {
		t.Fatalf("after a dry-run eviction: status %+v, want the disruption unspent", st)
	}

	// The first eviction spends the one disruption.
	if err := evict("web-0", false); err != nil {
		t.Fatalf("first eviction: %v", err)
	}
	gone("web-0")
	if st := status(); st.DisruptionsAllowed != 0 {
		t.Errorf("after the first eviction: status %+v, want no disruption left", st)
	}

	// The next is refused, as upstream, with the budget as the cause.
	err := evict("web-1", false)
	if !apierrors.IsTooManyRequests(err) {
		t.Fatalf("second eviction = %v, want 429", err)
	}
	if st := err.(apierrors.APIStatus).Status(); st.Message != "Cannot evict pod as it would violate the pod's disruption budget." ||
		st.Details == nil || len(st.Details.Causes) != 1 || st.Details.Causes[0].Type != policyv1.DisruptionBudgetCause {
		t.Errorf("second eviction: status %+v, want upstream's message and a DisruptionBudget cause", st)
	}
	if _, err := pods.Get(ctx, "web-1", metav1.GetOptions{}); err != nil {
		t.Fatalf("pod of a refused eviction: %v, want it kept", err)
	}
	budgetIs("budget after one eviction", 2, 2, 2, 0)

	// A pending pod the budget covers is not running: it goes at once.
	runningPod("web-pending", "web", false)
	if err := evict("web-pending", false); err != nil {
		t.Fatalf("eviction of a pending pod: %v", err)
	}
	gone("web-pending")

	// A replacement becomes ready; once the controller has counted it,
	// eviction goes through again.
	runningPod("web-3", "web", true)
	wait.For(t, 30*time.Second, "eviction of web-1 allowed again", func() (bool, string) {
		err := evict("web-1", false)
		return err == nil, fmt.Sprintf("evict: %v; budget %+v", err, status())
	})
	gone("web-1")

	// kubectl drain on a pod no budget covers: a plain eviction.
	runningPod("lonely", "other", true)
	if err := evict("lonely", false); err != nil {
		t.Fatalf("eviction of a pod without a budget: %v", err)
	}
	gone("lonely")
	if err := evict("missing", false); !apierrors.IsNotFound(err) {
		t.Errorf("eviction of a missing pod = %v, want 404", err)
	}

	// Two budgets over one pod: refused, as upstream.
	if _, err := pdbs.Create(ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "web-too"},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: new(intstr.FromInt32(1)),
			Selector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = evict("web-2", false)
	if s, ok := err.(apierrors.APIStatus); !ok || s.Status().Code != 500 {
		t.Errorf("eviction of a pod two budgets cover = %v, want 500", err)
	}

	// maxUnavailable over pods without controllers: they cannot be
	// counted, so nothing is expected and nothing allowed.
	wait.For(t, 30*time.Second, "scale-based budget over unmanaged pods computed", func() (bool, string) {
		b, err := pdbs.Get(ctx, "web-too", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return b.Status.ObservedGeneration == 1 && b.Status.ExpectedPods == 0 && b.Status.DisruptionsAllowed == 0 && b.Status.CurrentHealthy == 2,
			fmt.Sprintf("status %+v", b.Status)
	})
}

// TestScaleBudgetsOnARealHub: a maxUnavailable budget counts the scale
// of the Deployment behind its pods, reached through their ReplicaSet or,
// for a pod the Deployment controls directly, through the Deployment's
// scale subresource; a pod whose controller is of a kind the hub does
// not serve fails the budget safe, with SyncFailed.
func TestScaleBudgetsOnARealHub(t *testing.T) {
	h := hubtest.Start(t)
	ctx := context.Background()
	pdbs := h.Client.PolicyV1().PodDisruptionBudgets("default")
	labels := map[string]string{"app": "dep"}
	dep, err := h.Client.AppsV1().Deployments("default").Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "dep"},
		Spec: appsv1.DeploymentSpec{
			Replicas: new(int32(3)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	controlled := func(name, app string, ref metav1.OwnerReference) {
		t.Helper()
		ref.Controller = new(true)
		if _, err := h.Client.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": app}, OwnerReferences: []metav1.OwnerReference{ref}},
			Spec:       corev1.PodSpec{SchedulerName: "test-nobody", Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	controlled("direct", "dep", metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: dep.Name, UID: dep.UID})
	for _, name := range []string{"dep", "odd"} {
		if _, err := pdbs.Create(ctx, &policyv1.PodDisruptionBudget{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: policyv1.PodDisruptionBudgetSpec{
				MaxUnavailable: new(intstr.FromString("34%")),
				Selector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// 3 replicas: 34% of them, rounded up, is 2 that may be unavailable,
	// so 1 must stay.
	// No pod is ready (there are no nodes).
	wait.For(t, 60*time.Second, "budget over a Deployment's pods", func() (bool, string) {
		b, err := pdbs.Get(ctx, "dep", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		st := b.Status
		list, _ := h.Client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=dep"})
		return st.ObservedGeneration == 1 && st.ExpectedPods == 3 && st.DesiredHealthy == 1 && st.DisruptionsAllowed == 0 && len(list.Items) == 4,
			fmt.Sprintf("status %+v, %d pods", st, len(list.Items))
	})

	controlled("odd", "odd", metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Widget", Name: "w", UID: "0000-widget"})
	wait.For(t, 30*time.Second, "budget over a pod of an unknown controller failed safe", func() (bool, string) {
		b, err := pdbs.Get(ctx, "odd", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range b.Status.Conditions {
			if c.Type == policyv1.DisruptionAllowedCondition && c.Reason == policyv1.SyncFailedReason && c.Status == metav1.ConditionFalse {
				return b.Status.DisruptionsAllowed == 0, fmt.Sprintf("status %+v", b.Status)
			}
		}
		return false, fmt.Sprintf("status %+v", b.Status)
	})
}
