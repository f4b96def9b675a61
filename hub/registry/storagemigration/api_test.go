package storagemigration_test

import (
	"context"
	"reflect"
	"slices"
	"testing"

	svmv1 "k8s.io/api/storagemigration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/hub/hubd"
	"github.com/outpost-mesh/outpost/hub/registry/typed/typedtest"
	"github.com/outpost-mesh/outpost/test/hubtest"
)

// TestStorageVersionMigrationAPI: a migration is created with an empty
// status, refused without a resource, kept to its resource, marked done
// through its status, and printed with upstream's columns.
func TestStorageVersionMigrationAPI(t *testing.T) {
	// Without the hub's controllers: its migrator would act on the
	// migration this test marks itself.
	h := hubtest.Start(t, func(c *hubd.Config) { c.Controllers = false })
	ctx := context.Background()
	svms := h.Client.StoragemigrationV1().StorageVersionMigrations()

	m, err := svms.Create(ctx, &svmv1.StorageVersionMigration{
		ObjectMeta: metav1.ObjectMeta{Name: "secrets"},
		Spec:       svmv1.StorageVersionMigrationSpec{Resource: metav1.GroupResource{Resource: "secrets"}},
		Status:     svmv1.StorageVersionMigrationStatus{ResourceVersion: "1"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create migration: %v", err)
	}
	if m.Status.ResourceVersion != "" {
		t.Errorf("created migration: status %+v, want empty", m.Status)
	}
	_, err = svms.Create(ctx, &svmv1.StorageVersionMigration{ObjectMeta: metav1.ObjectMeta{Name: "nothing"}}, metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) || !hasCause(err, "spec.resource.resource") {
		t.Errorf("create migration without resource: %v, want 422 at spec.resource.resource", err)
	}
	m.Spec.Resource.Resource = "configmaps"
	_, err = svms.Update(ctx, m, metav1.UpdateOptions{})
	if !apierrors.IsInvalid(err) || !hasCause(err, "spec") {
		t.Errorf("change a migration's resource: %v, want 422 at spec", err)
	}
	m.Spec.Resource.Resource = "secrets"
	m.Status = svmv1.StorageVersionMigrationStatus{ResourceVersion: m.ResourceVersion, Conditions: []metav1.Condition{{
		Type: string(svmv1.MigrationSucceeded), Status: metav1.ConditionTrue, Reason: "NothingToMigrate", LastTransitionTime: metav1.Now()}}}
	if _, err := svms.UpdateStatus(ctx, m, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("mark migration succeeded: %v", err)
	}

	tbl := typedtest.Table(t, h.Client.StoragemigrationV1().RESTClient(), "/apis/storagemigration.k8s.io/v1/storageversionmigrations")
	names := typedtest.ColumnNames(tbl)
	if want := []string{"Name", "Resource"}; !reflect.DeepEqual(names, want) || len(tbl.Rows) != 1 {
		t.Errorf("migrations as a Table: columns %q, %d rows; want %q, 1", names, len(tbl.Rows), want)
	}
}

// hasCause reports whether err, a 422, has a cause at field f.
func hasCause(err error, f string) bool {
	s, ok := err.(apierrors.APIStatus)
	if !ok || s.Status().Details == nil {
		return false
	}
	return slices.ContainsFunc(s.Status().Details.Causes, func(c metav1.StatusCause) bool { return c.Field == f })
}
