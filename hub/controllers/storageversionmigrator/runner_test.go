package storageversionmigrator

import (
	"testing"
	"time"

	svmv1 "k8s.io/api/storagemigration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestPromotable(t *testing.T) {
	at := func(name string, d time.Duration, mut ...func(*svmv1.StorageVersionMigration)) *svmv1.StorageVersionMigration {
		return migration(append([]func(*svmv1.StorageVersionMigration){func(m *svmv1.StorageVersionMigration) {
			m.Name, m.CreationTimestamp = name, metav1.NewTime(t0.Add(d))
		}}, mut...)...)
	}
	running := func(m *svmv1.StorageVersionMigration) { *m = *Started(m, "5", t0) }
	done := func(m *svmv1.StorageVersionMigration) { *m = *Succeeded(Started(m, "5", t0), 1, t0) }
	other := func(m *svmv1.StorageVersionMigration) { m.Spec.Resource.Resource = "gadgets" }
	m := at("m", 0)
	for _, tc := range []struct {
		name   string
		others []*svmv1.StorageVersionMigration
		want   bool
	}{
		{"alone", nil, true},
		{"another running", []*svmv1.StorageVersionMigration{at("a", time.Second, running)}, false},
		{"an older waiting", []*svmv1.StorageVersionMigration{at("a", -time.Second)}, false},
		{"same time, name first", []*svmv1.StorageVersionMigration{at("a", 0)}, false},
		{"same time, name after", []*svmv1.StorageVersionMigration{at("z", 0)}, true},
		{"a newer waiting", []*svmv1.StorageVersionMigration{at("a", time.Second)}, true},
		{"an older one finished", []*svmv1.StorageVersionMigration{at("a", -time.Second, done)}, true},
		{"another resource running", []*svmv1.StorageVersionMigration{at("a", -time.Second, running, other)}, true},
	} {
		if got := Promotable(m, append(tc.others, m)); got != tc.want {
			t.Errorf("Promotable(%s) = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestCompleted(t *testing.T) {
	m := Succeeded(Started(migration(), "5", t0), 2, t0)
	if !NeedsCleanup(m) {
		t.Fatalf("NeedsCleanup(succeeded, running) = false")
	}
	c := Completed(m)
	run := meta.FindStatusCondition(c.Status.Conditions, string(svmv1.MigrationRunning))
	if NeedsCleanup(c) || run.Status != metav1.ConditionFalse || run.Reason != "MigrationCompleted" || !isTrue(c, svmv1.MigrationSucceeded) {
		t.Errorf("Completed = %+v", c.Status)
	}
	if !isTrue(m, svmv1.MigrationRunning) {
		t.Errorf("Completed changed its argument")
	}
}

func TestFinishedCRD(t *testing.T) {
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.svm.outpost.dev", Generation: 3},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{Versions: []apiextensionsv1.CustomResourceDefinitionVersion{
			{Name: "v1"}, {Name: "v2", Storage: true}}},
		Status: apiextensionsv1.CustomResourceDefinitionStatus{StoredVersions: []string{"v1", "v2"}},
	}
	if got := CRDName(metav1.GroupResource{Group: "svm.outpost.dev", Resource: "widgets"}); got != crd.Name {
		t.Errorf("CRDName = %s, want %s", got, crd.Name)
	}
	mig := MigratingCondition(crd, migration(), t0)
	if mig.Status != apiextensionsv1.ConditionTrue || mig.ObservedGeneration != 3 || mig.Message != "Migration widgets is running" {
		t.Errorf("MigratingCondition = %+v", mig)
	}
	crd.Status.Conditions = []apiextensionsv1.CustomResourceDefinitionCondition{mig}
	for _, tc := range []struct {
		name       string
		generation int64
		success    bool
		reason     string
		stored     []string
	}{
		{"succeeded", 3, true, "MigrationSucceeded", []string{"v2"}},
		{"succeeded, CRD changed since", 4, true, "MigrationSucceeded", nil},
		{"failed", 3, false, "MigrationFailed", nil},
	} {
		c := crd.DeepCopy()
		c.Generation = tc.generation
		cond, stored := FinishedCRD(c, tc.success, t0)
		if cond.Status != apiextensionsv1.ConditionFalse || cond.Reason != tc.reason || cond.ObservedGeneration != tc.generation ||
			len(stored) != len(tc.stored) || (len(stored) > 0 && stored[0] != tc.stored[0]) {
			t.Errorf("FinishedCRD(%s) = %+v, %v; want reason %s, stored %v", tc.name, cond, stored, tc.reason, tc.stored)
		}
	}
}
