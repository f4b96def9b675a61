package scheduling_test

import (
	"context"
	"reflect"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/hub/registry/scheduling"
	"github.com/outpost-mesh/outpost/hub/registry/typed/typedtest"
	"github.com/outpost-mesh/outpost/test/hubtest"
)

// TestPriorityClassAPI: a started hub has the system classes; others are
// created with their default, refused where upstream refuses them, and
// printed with upstream's columns.
func TestPriorityClassAPI(t *testing.T) {
	h := hubtest.Start(t)
	ctx := context.Background()
	pcs := h.Client.SchedulingV1().PriorityClasses()

	for _, want := range scheduling.SystemPriorityClasses() {
		got, err := pcs.Get(ctx, want.Name, metav1.GetOptions{})
		if err != nil || got.Value != want.Value || got.PreemptionPolicy == nil || *got.PreemptionPolicy != corev1.PreemptLowerPriority {
			t.Errorf("get %s after start = %+v, %v; want value %d, PreemptLowerPriority", want.Name, got, err, want.Value)
		}
	}

	pc, err := pcs.Create(ctx, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "uplink"}, Value: 1000}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create priorityclass: %v", err)
	}
	if pc.PreemptionPolicy == nil || *pc.PreemptionPolicy != corev1.PreemptLowerPriority {
		t.Errorf("created priorityclass: preemptionPolicy %v, want PreemptLowerPriority", pc.PreemptionPolicy)
	}
	pc.Value = 2000
	_, err = pcs.Update(ctx, pc, metav1.UpdateOptions{})
	if got := typedtest.Causes(t, "change a priorityclass's value", err); !slices.Contains(got, "value") {
		t.Errorf("change a priorityclass's value: causes %v, want value", got)
	}

	for _, tt := range []struct {
		pc    *schedulingv1.PriorityClass
		field string
	}{
		{&schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "system-uplink"}, Value: 1000}, "metadata.name"},
		{&schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "too-high"}, Value: scheduling.HighestUserDefinablePriority + 1}, "value"},
	} {
		_, err := pcs.Create(ctx, tt.pc, metav1.CreateOptions{})
		if got := typedtest.Causes(t, "create priorityclass "+tt.pc.Name, err); !slices.Contains(got, tt.field) {
			t.Errorf("create priorityclass %s: causes %v, want %s", tt.pc.Name, got, tt.field)
		}
	}

	tbl := typedtest.Table(t, h.Client.SchedulingV1().RESTClient(), "/apis/scheduling.k8s.io/v1/priorityclasses")
	names := typedtest.ColumnNames(tbl)
	if want := []string{"Name", "Value", "Global-Default", "Age", "PreemptionPolicy"}; !reflect.DeepEqual(names, want) || len(tbl.Rows) != 3 {
		t.Errorf("priorityclasses as a Table: columns %q, %d rows; want %q, 3", names, len(tbl.Rows), want)
	}
}
