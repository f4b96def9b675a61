package typed

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

func TestSteps(t *testing.T) {
	at := time.Date(2026, 12, 7, 5, 0, 0, 0, time.UTC)
	var got []string
	r := &Rules[*corev1.ConfigMap]{
		Now:           func() time.Time { return at },
		Defaults:      func(cm *corev1.ConfigMap) { got = append(got, "default "+cm.Name) },
		PrepareCreate: func(cm *corev1.ConfigMap) { got = append(got, "create "+cm.Name) },
		PrepareUpdate: func(cm, old *corev1.ConfigMap) { got = append(got, "update "+cm.Name+" "+old.Name) },
		Check: func(cm *corev1.ConfigMap) field.ErrorList {
			return field.ErrorList{field.Required(field.NewPath("data"), cm.Name)}
		},
		CheckUpdate:  func(cm, old *corev1.ConfigMap) field.ErrorList { return nil },
		FieldSet:     func(cm *corev1.ConfigMap) fields.Set { return fields.Set{"k": cm.Name} },
		TableColumns: []metav1.TableColumnDefinition{{Name: "Name"}, {Name: "Now"}},
		TableRow: func(cm *corev1.ConfigMap, now time.Time) []interface{} {
			return []interface{}{cm.Name, now.Format(time.RFC3339)}
		},
	}
	a := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a"}}
	b := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "b"}}
	r.Default(a)
	r.PrepareForCreate(a)
	r.PrepareForUpdate(a, b)
	if want := []string{"default a", "create a", "update a b"}; len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("steps ran %q, want %q", got, want)
	}
	if errs := r.Validate(a); len(errs) != 1 || errs[0].Type != field.ErrorTypeRequired {
		t.Errorf("Validate = %v", errs)
	}
	if errs := r.ValidateStatusUpdate(a, b); errs != nil {
		t.Errorf("ValidateStatusUpdate without CheckStatus = %v, want none", errs)
	}
	if f := r.Fields(a); f["k"] != "a" {
		t.Errorf("Fields = %v", f)
	}
	if row := r.Row(a); len(row) != 2 || row[1] != "2026-12-07T05:00:00Z" {
		t.Errorf("Row = %v, want the name and the rules' clock", row)
	}
	cols := r.Columns()
	cols[0].Name = "changed"
	if r.Columns()[0].Name != "Name" {
		t.Error("Columns handed out the rules' own slice")
	}
	if r.AllowCreateOnUpdate() {
		t.Error("AllowCreateOnUpdate without CreateOnUpdate")
	}

	// Nothing but the checks: every other step does nothing.
	bare := &Rules[*corev1.ConfigMap]{Check: r.Check, CheckUpdate: r.CheckUpdate}
	got = nil
	bare.Default(a)
	bare.PrepareForCreate(a)
	bare.PrepareForUpdate(a, b)
	if len(got) != 0 {
		t.Errorf("bare rules ran %q", got)
	}
	if f := bare.Fields(a); f == nil || len(f) != 0 {
		t.Errorf("bare Fields = %v, want an empty set", f)
	}
	if row := bare.Row(a); len(row) != 0 {
		t.Errorf("bare Row = %v, want no cells", row)
	}
}

func TestAge(t *testing.T) {
	now := time.Date(2026, 12, 7, 5, 0, 0, 0, time.UTC)
	tests := []struct {
		created metav1.Time
		want    string
	}{
		{metav1.Time{}, "<unknown>"},
		{metav1.NewTime(now.Add(-90 * time.Second)), "90s"},
		{metav1.NewTime(now.Add(-26 * time.Hour)), "26h"},
		{metav1.NewTime(now.Add(-400 * 24 * time.Hour)), "400d"},
	}
	for _, tt := range tests {
		if got := Age(now, tt.created); got != tt.want {
			t.Errorf("Age(%v, %v) = %q, want %q", now, tt.created, got, tt.want)
		}
	}
}
