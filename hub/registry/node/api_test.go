package node_test

import (
	"context"
	"reflect"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/hub/registry/typed/typedtest"
	"github.com/outpost-mesh/outpost/test/hubtest"
)

// TestRuntimeClassAPI: runtimeclasses through a real hub and client-go:
// created, refused with the field at fault, the handler kept, and printed
// with upstream's columns.
func TestRuntimeClassAPI(t *testing.T) {
	h := hubtest.Start(t)
	ctx := context.Background()
	rcs := h.Client.NodeV1().RuntimeClasses()

	rc, err := rcs.Create(ctx, &nodev1.RuntimeClass{
		ObjectMeta: metav1.ObjectMeta{Name: "gvisor"},
		Handler:    "runsc",
		Overhead:   &nodev1.Overhead{PodFixed: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create runtimeclass: %v", err)
	}
	if rc.Namespace != "" || rc.Handler != "runsc" {
		t.Errorf("created runtimeclass: namespace %q, handler %q; want none, runsc", rc.Namespace, rc.Handler)
	}
	rc.Handler = "kata"
	_, err = rcs.Update(ctx, rc, metav1.UpdateOptions{})
	if got := typedtest.Causes(t, "change a runtimeclass's handler", err); !slices.Contains(got, "handler") {
		t.Errorf("change a runtimeclass's handler: causes %v, want handler", got)
	}
	_, err = rcs.Create(ctx, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "bad"}, Handler: "run_sc"}, metav1.CreateOptions{})
	if got := typedtest.Causes(t, "create a runtimeclass with handler run_sc", err); !slices.Contains(got, "handler") {
		t.Errorf("create a runtimeclass with handler run_sc: causes %v, want handler", got)
	}

	tbl := typedtest.Table(t, h.Client.NodeV1().RESTClient(), "/apis/node.k8s.io/v1/runtimeclasses")
	names := typedtest.ColumnNames(tbl)
	if want := []string{"Name", "Handler", "Age"}; !reflect.DeepEqual(names, want) || len(tbl.Rows) != 1 || tbl.Rows[0].Cells[1] != "runsc" {
		t.Errorf("runtimeclasses as a Table: columns %q, rows %v; want %q, one of runsc", names, tbl.Rows, want)
	}
}
