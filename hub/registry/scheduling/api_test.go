package scheduling_test

import (
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/hub/registry/scheduling"
	"github.com/outpost-mesh/outpost/test/hubtest"
)

// causes returns the field paths of a 422's causes, failing t on another
// error.
func causes(t *testing.T, what string, err error) []string {
	t.Helper()
	if !apierrors.IsInvalid(err) {
		t.Fatalf("%s: %v, want 422 Invalid", what, err)
	}
	var fields []string
	if s, ok := err.(apierrors.APIStatus); ok && s.Status().Details != nil {
		for _, c := range s.Status().Details.Causes {
			fields = append(fields, c.Field)
		}
	}
	return fields
}

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
	if got := causes(t, "change a priorityclass's value", err); !slices.Contains(got, "value") {
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
		if got := causes(t, "create priorityclass "+tt.pc.Name, err); !slices.Contains(got, tt.field) {
			t.Errorf("create priorityclass %s: causes %v, want %s", tt.pc.Name, got, tt.field)
		}
	}

	raw, err := h.Client.SchedulingV1().RESTClient().Get().AbsPath("/apis/scheduling.k8s.io/v1/priorityclasses").
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(ctx)
	if err != nil {
		t.Fatalf("list priorityclasses as a Table: %v", err)
	}
	var tbl metav1.Table
	if err := json.Unmarshal(raw, &tbl); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range tbl.ColumnDefinitions {
		names = append(names, c.Name)
	}
	if want := []string{"Name", "Value", "Global-Default", "Age", "PreemptionPolicy"}; !reflect.DeepEqual(names, want) || len(tbl.Rows) != 3 {
		t.Errorf("priorityclasses as a Table: columns %q, %d rows; want %q, 3", names, len(tbl.Rows), want)
	}
}
