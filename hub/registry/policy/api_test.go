package policy_test

import (
	"context"
	"slices"
	"testing"

	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/outpost-mesh/outpost/hub/hubd"
	"github.com/outpost-mesh/outpost/hub/registry/typed/typedtest"
	"github.com/outpost-mesh/outpost/test/hubtest"
)

// TestAPI serves disruption budgets through a real hub and client-go: a
// valid one is stored without the status its client sent and with
// generation 1, bad ones are refused with 422 and the field at fault, the
// status subresource changes only the status, a spec change counts a
// generation, and kubectl's table has upstream's columns. The hub runs no
// controllers: the disruption controller would write the status this
// test writes itself.
func TestAPI(t *testing.T) {
	h := hubtest.Start(t, func(c *hubd.Config) { c.Controllers = false })
	ctx := context.Background()
	pdbs := h.Client.PolicyV1().PodDisruptionBudgets("default")

	p, err := pdbs.Create(ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: new(intstr.FromInt32(2)),
			Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
		},
		Status: policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 5},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pdb: %v", err)
	}
	if p.Status.DisruptionsAllowed != 0 || p.Generation != 1 {
		t.Errorf("created pdb: status %+v, generation %d; want empty status and generation 1", p.Status, p.Generation)
	}

	bad := []struct {
		name  string
		spec  policyv1.PodDisruptionBudgetSpec
		field string
	}{
		{"both", policyv1.PodDisruptionBudgetSpec{MinAvailable: new(intstr.FromInt32(1)), MaxUnavailable: new(intstr.FromInt32(1))}, "spec"},
		{"over-100", policyv1.PodDisruptionBudgetSpec{MaxUnavailable: new(intstr.FromString("101%"))}, "spec.maxUnavailable"},
		{"bad-selector", policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{
			MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: metav1.LabelSelectorOpIn}}}},
			"spec.selector.matchExpressions[0].values"},
		{"bad-policy", policyv1.PodDisruptionBudgetSpec{UnhealthyPodEvictionPolicy: new(policyv1.UnhealthyPodEvictionPolicyType("Sometimes"))},
			"spec.unhealthyPodEvictionPolicy"},
	}
	for _, tt := range bad {
		_, err := pdbs.Create(ctx, &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: tt.name}, Spec: tt.spec}, metav1.CreateOptions{})
		if got := typedtest.Causes(t, "create pdb "+tt.name, err); !slices.Contains(got, tt.field) {
			t.Errorf("create pdb %s: causes %v, want %s", tt.name, got, tt.field)
		}
	}

	// The disruption controller's write: status only.
	p.Status = policyv1.PodDisruptionBudgetStatus{ObservedGeneration: 1, DisruptionsAllowed: 1, CurrentHealthy: 3, DesiredHealthy: 2, ExpectedPods: 3}
	p.Spec.MinAvailable = new(intstr.FromInt32(1)) // ignored on the status subresource
	p, err = pdbs.UpdateStatus(ctx, p, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("update status: %v", err)
	}
	if p.Status.DisruptionsAllowed != 1 || p.Spec.MinAvailable.IntValue() != 2 || p.Generation != 1 {
		t.Errorf("after status update: min available %v, status %+v, generation %d; want 2, the new status, 1",
			p.Spec.MinAvailable, p.Status, p.Generation)
	}
	neg := p.DeepCopy()
	neg.Status.ExpectedPods = -1
	_, err = pdbs.UpdateStatus(ctx, neg, metav1.UpdateOptions{})
	if got := typedtest.Causes(t, "update status with negative count", err); !slices.Contains(got, "status.expectedPods") {
		t.Errorf("update status with negative count: causes %v, want status.expectedPods", got)
	}

	// A user's write: spec only, counted in generation.
	p.Spec.MinAvailable = nil
	p.Spec.MaxUnavailable = new(intstr.FromString("25%"))
	p.Status.DisruptionsAllowed = 7
	p, err = pdbs.Update(ctx, p, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("update spec: %v", err)
	}
	if p.Status.DisruptionsAllowed != 1 || p.Generation != 2 {
		t.Errorf("after spec update: status %+v, generation %d; want the stored status and generation 2", p.Status, p.Generation)
	}

	tbl := typedtest.Table(t, h.Client.PolicyV1().RESTClient(), "/apis/policy/v1/namespaces/default/poddisruptionbudgets")
	names := typedtest.ColumnNames(tbl)
	if want := []string{"Name", "Min Available", "Max Unavailable", "Allowed Disruptions", "Age"}; !slices.Equal(names, want) {
		t.Errorf("table columns %q, want %q", names, want)
	}
	if len(tbl.Rows) != 1 {
		t.Fatalf("table rows %v, want one", tbl.Rows)
	}
	// JSON numbers decode as float64.
	if cells, want := tbl.Rows[0].Cells[:4], []interface{}{"web", "N/A", "25%", float64(1)}; !slices.Equal(cells, want) {
		t.Errorf("table row %v, want %v and an age", tbl.Rows[0].Cells, want)
	}

	if err := pdbs.Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Errorf("delete: %v", err)
	}
}
