package storagemigration

import (
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	svmv1 "k8s.io/api/storagemigration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/registry/typed"
	"github.com/outpost-mesh/outpost/hub/registry/typed/typedtest"
)

var rules = Resources()[0].Rules.(typed.All)

func errStrings(errs field.ErrorList) []string {
	out := make([]string, 0, len(errs))
	for _, e := range errs {
		out = append(out, fmt.Sprintf("%s: %s", e.Field, e.Type))
	}
	slices.Sort(out)
	return out
}

func sameErrs(got, want []string) bool {
	slices.Sort(want)
	return reflect.DeepEqual(got, want) || len(got) == 0 && len(want) == 0
}

func migration(mutate func(*svmv1.StorageVersionMigration)) *svmv1.StorageVersionMigration {
	m := &svmv1.StorageVersionMigration{
		ObjectMeta: metav1.ObjectMeta{Name: "secrets", ResourceVersion: "5"},
		Spec:       svmv1.StorageVersionMigrationSpec{Resource: metav1.GroupResource{Resource: "secrets"}},
	}
	if mutate != nil {
		mutate(m)
	}
	return m
}

func condition(t svmv1.MigrationConditionType, s metav1.ConditionStatus) metav1.Condition {
	return metav1.Condition{Type: string(t), Status: s, Reason: "Migrated", LastTransitionTime: metav1.NewTime(time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC))}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		m    *svmv1.StorageVersionMigration
		want []string
	}{
		{"core", migration(nil), nil},
		{"grouped", migration(func(m *svmv1.StorageVersionMigration) {
			m.Spec.Resource = metav1.GroupResource{Group: "apps", Resource: "deployments"}
		}), nil},
		{"no resource", migration(func(m *svmv1.StorageVersionMigration) { m.Spec.Resource.Resource = "" }), []string{"spec.resource.resource: Required value"}},
		{"bad resource", migration(func(m *svmv1.StorageVersionMigration) { m.Spec.Resource.Resource = "Secrets" }),
			[]string{"spec.resource.resource: Invalid value"}},
		{"bad group", migration(func(m *svmv1.StorageVersionMigration) { m.Spec.Resource.Group = "Apps_v1" }), []string{"spec.resource.group: Invalid value"}},
	} {
		rules.PrepareForCreate(tc.m)
		if got := errStrings(rules.Validate(tc.m)); !sameErrs(got, tc.want) {
			t.Errorf("Validate(%s) = %q, want %q", tc.name, got, tc.want)
		}
	}
	old := migration(nil)
	m := migration(func(m *svmv1.StorageVersionMigration) { m.Spec.Resource.Resource = "configmaps" })
	if got := errStrings(rules.ValidateUpdate(m, old)); !sameErrs(got, []string{"spec: Invalid value"}) {
		t.Errorf("ValidateUpdate(other resource) = %q, want spec immutable", got)
	}
}

func TestValidateStatus(t *testing.T) {
	sv := rules.(apiserver.StatusValidator)
	running := svmv1.StorageVersionMigrationStatus{ResourceVersion: "42",
		Conditions: []metav1.Condition{condition(svmv1.MigrationRunning, metav1.ConditionTrue)}}
	succeeded := svmv1.StorageVersionMigrationStatus{ResourceVersion: "42",
		Conditions: []metav1.Condition{condition(svmv1.MigrationSucceeded, metav1.ConditionTrue)}}
	for _, tc := range []struct {
		name     string
		old, new svmv1.StorageVersionMigrationStatus
		want     []string
	}{
		{"start", svmv1.StorageVersionMigrationStatus{}, running, nil},
		{"succeed", running, succeeded, nil},
		// Upstream checks the format only when it is set (conformance's
		// storage_version_migration.go writes conditions without one).
		{"no resource version", svmv1.StorageVersionMigrationStatus{}, svmv1.StorageVersionMigrationStatus{}, nil},
		{"conditions without resource version", svmv1.StorageVersionMigrationStatus{},
			svmv1.StorageVersionMigrationStatus{Conditions: running.Conditions}, nil},
		{"malformed resource version", svmv1.StorageVersionMigrationStatus{},
			svmv1.StorageVersionMigrationStatus{ResourceVersion: "x1"}, []string{"status.resourceVersion: Invalid value"}},
		{"resource version removed", running, svmv1.StorageVersionMigrationStatus{Conditions: running.Conditions},
			[]string{"status.resourceVersion: Invalid value"}},
		{"other resource version", running, svmv1.StorageVersionMigrationStatus{ResourceVersion: "43", Conditions: running.Conditions},
			[]string{"status.resourceVersion: Invalid value"}},
		// Upstream's migrator leaves Running true when it succeeds.
		{"succeeded and running", running, svmv1.StorageVersionMigrationStatus{ResourceVersion: "42",
			Conditions: append(slices.Clone(succeeded.Conditions), running.Conditions...)}, nil},
		{"succeeded and failed", running, svmv1.StorageVersionMigrationStatus{ResourceVersion: "42",
			Conditions: append(slices.Clone(succeeded.Conditions), condition(svmv1.MigrationFailed, metav1.ConditionTrue))}, []string{"status.conditions: Invalid value"}},
		{"success taken back", succeeded, running, []string{"status.conditions: Invalid value"}},
		{"condition without reason", running, svmv1.StorageVersionMigrationStatus{ResourceVersion: "42",
			Conditions: []metav1.Condition{{Type: "Running", Status: metav1.ConditionTrue, LastTransitionTime: metav1.Now()}}},
			[]string{"status.conditions[0].reason: Required value"}},
	} {
		old := migration(func(m *svmv1.StorageVersionMigration) { m.Status = tc.old })
		m := migration(func(m *svmv1.StorageVersionMigration) { m.Status = tc.new })
		if got := errStrings(sv.ValidateStatusUpdate(m, old)); !sameErrs(got, tc.want) {
			t.Errorf("ValidateStatusUpdate(%s) = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestRow(t *testing.T) {
	m := migration(func(m *svmv1.StorageVersionMigration) {
		m.Spec.Resource = metav1.GroupResource{Group: "apps", Resource: "deployments"}
	})
	if got, want := rules.Row(m), []interface{}{"secrets", "deployments.apps"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Row = %#v, want %#v", got, want)
	}
}

// TestWrongType: the rules, given an object of another type, neither
// panic nor accept it.
func TestWrongType(t *testing.T) { typedtest.WrongType(t, Resources()) }
