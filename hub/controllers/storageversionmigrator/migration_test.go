package storageversionmigrator

import (
	"strings"
	"testing"
	"time"

	svmv1 "k8s.io/api/storagemigration/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func migration(mut ...func(*svmv1.StorageVersionMigration)) *svmv1.StorageVersionMigration {
	m := &svmv1.StorageVersionMigration{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets"},
		Spec:       svmv1.StorageVersionMigrationSpec{Resource: metav1.GroupResource{Group: "svm.outpost.dev", Resource: "widgets"}},
	}
	for _, f := range mut {
		f(m)
	}
	return m
}

func TestNext(t *testing.T) {
	started := Started(migration(), "42", t0)
	for _, tc := range []struct {
		name string
		m    *svmv1.StorageVersionMigration
		want Step
	}{
		{"new", migration(), Start},
		// A status written by someone else (conformance's CRUD test)
		// without a resourceVersion: still to start.
		{"foreign condition", migration(func(m *svmv1.StorageVersionMigration) {
			m.Status.Conditions = []metav1.Condition{{Type: "TestCondition", Status: metav1.ConditionTrue}}
		}), Start},
		{"started", started, Migrate},
		{"succeeded", Succeeded(started, 3, t0), Finished},
		{"failed", Failed(migration(), "gone", t0), Finished},
	} {
		if got := Next(tc.m); got != tc.want {
			t.Errorf("Next(%s) = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestStatuses(t *testing.T) {
	m := migration()
	started := Started(m, "42", t0)
	if len(m.Status.Conditions) != 0 || m.Status.ResourceVersion != "" {
		t.Errorf("Started changed its argument: %+v", m.Status)
	}
	run := meta.FindStatusCondition(started.Status.Conditions, string(svmv1.MigrationRunning))
	if started.Status.ResourceVersion != "42" || run == nil || run.Status != metav1.ConditionTrue || run.Reason != "MigrationRunning" ||
		run.Message != "The migration is running" {
		t.Errorf("Started = %+v", started.Status)
	}
	done := Succeeded(started, 3, t0.Add(time.Minute))
	ok := meta.FindStatusCondition(done.Status.Conditions, string(svmv1.MigrationSucceeded))
	run = meta.FindStatusCondition(done.Status.Conditions, string(svmv1.MigrationRunning))
	if ok == nil || ok.Reason != "StorageVersionMigrationSucceeded" || ok.Message != "Migration completed" ||
		run == nil || run.Message != "The migration is running, 3 objects verified migrated" || !run.LastTransitionTime.Time.Equal(t0) {
		t.Errorf("Succeeded = %+v", done.Status)
	}
	failed := Failed(started, "resource does not exist in discovery", t0)
	f := meta.FindStatusCondition(failed.Status.Conditions, string(svmv1.MigrationFailed))
	if f == nil || f.Status != metav1.ConditionTrue || f.Reason != "StorageVersionMigrationFailed" || f.Message != "resource does not exist in discovery" {
		t.Errorf("Failed = %+v", failed.Status)
	}
}

func TestRunningMessage(t *testing.T) {
	for _, tc := range []struct {
		toPatch, total int
		want           string
	}{
		{0, 0, "The migration is running"},
		{2, 5, "The migration is running, 2/5 objects not yet migrated"},
		{0, 5, "The migration is running, 5 objects verified migrated"},
	} {
		if got := RunningMessage(tc.toPatch, tc.total); got != tc.want {
			t.Errorf("RunningMessage(%d, %d) = %q, want %q", tc.toPatch, tc.total, got, tc.want)
		}
	}
}

func TestToRewrite(t *testing.T) {
	for _, tc := range []struct {
		rv, list string
		want     bool
		err      bool
	}{
		{"5", "7", true, false},
		{"7", "7", true, false},
		{"8", "7", false, false},
		{"10", "9", false, false}, // numerically, not as strings
		{"", "7", false, true},
		{"x", "7", false, true},
	} {
		got, err := ToRewrite(tc.rv, tc.list)
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("ToRewrite(%q, %q) = %v, %v; want %v, error %v", tc.rv, tc.list, got, err, tc.want, tc.err)
		}
	}
}

func TestPatchBody(t *testing.T) {
	got := string(PatchBody(schema.GroupVersionKind{Group: "svm.outpost.dev", Version: "v2", Kind: "Widget"}, "17"))
	want := `{"apiVersion":"svm.outpost.dev/v2","kind":"Widget","metadata":{"resourceVersion":"17"}}`
	if got != want {
		t.Errorf("PatchBody = %s, want %s", got, want)
	}
	if got := string(PatchBody(schema.GroupVersionKind{Version: "v1", Kind: "Secret"}, "3")); !strings.HasPrefix(got, `{"apiVersion":"v1",`) {
		t.Errorf("PatchBody(core) = %s", got)
	}
}

func TestDiscovery(t *testing.T) {
	groups := &metav1.APIGroupList{Groups: []metav1.APIGroup{
		{Name: "", PreferredVersion: metav1.GroupVersionForDiscovery{Version: "v1"}},
		{Name: "svm.outpost.dev", Versions: []metav1.GroupVersionForDiscovery{{Version: "v2"}, {Version: "v1"}},
			PreferredVersion: metav1.GroupVersionForDiscovery{Version: "v2"}},
	}}
	for _, tc := range []struct {
		group, want string
		ok          bool
	}{{"", "v1", true}, {"svm.outpost.dev", "v2", true}, {"none.outpost.dev", "", false}} {
		if got, ok := PreferredVersion(groups, tc.group); got != tc.want || ok != tc.ok {
			t.Errorf("PreferredVersion(%q) = %q, %v; want %q, %v", tc.group, got, ok, tc.want, tc.ok)
		}
	}
	list := &metav1.APIResourceList{GroupVersion: "svm.outpost.dev/v2", APIResources: []metav1.APIResource{
		{Name: "widgets", Kind: "Widget", Namespaced: true, Verbs: []string{"create", "delete", "get", "list", "patch", "update", "watch"}},
		{Name: "widgets/status", Kind: "Widget", Namespaced: true, Verbs: []string{"get", "patch", "update"}},
		{Name: "readonlies", Kind: "ReadOnly", Verbs: []string{"get", "list"}},
	}}
	r, ok := FindResource(list, "widgets")
	if !ok || r.GVR != (schema.GroupVersionResource{Group: "svm.outpost.dev", Version: "v2", Resource: "widgets"}) ||
		r.Kind != "Widget" || !r.Namespaced || !r.Migratable() {
		t.Errorf("FindResource(widgets) = %+v, %v", r, ok)
	}
	if r, ok := FindResource(list, "readonlies"); !ok || r.Migratable() {
		t.Errorf("FindResource(readonlies) = %+v, %v; want found, not migratable", r, ok)
	}
	for _, name := range []string{"widgets/status", "gadgets"} {
		if r, ok := FindResource(list, name); ok {
			t.Errorf("FindResource(%s) = %+v, want none", name, r)
		}
	}
}
