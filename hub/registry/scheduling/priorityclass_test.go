package scheduling

import (
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/hub/registry/typed"
	"github.com/outpost-mesh/outpost/hub/registry/typed/typedtest"
)

var (
	created = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	now     = created.Add(26 * time.Hour)
	rules   = ResourcesWithClock(func() time.Time { return now })[0].Rules.(typed.All)
)

func class() *schedulingv1.PriorityClass {
	return &schedulingv1.PriorityClass{
		ObjectMeta:  metav1.ObjectMeta{Name: "gateway-critical", ResourceVersion: "7", CreationTimestamp: metav1.NewTime(created)},
		Value:       100000,
		Description: "Pods that carry a site's uplink.",
	}
}

func TestDefaults(t *testing.T) {
	never := corev1.PreemptNever
	tests := []struct {
		policy *corev1.PreemptionPolicy
		want   corev1.PreemptionPolicy
	}{
		{nil, corev1.PreemptLowerPriority},
		{&never, corev1.PreemptNever},
	}
	for _, tt := range tests {
		pc := class()
		pc.PreemptionPolicy = tt.policy
		rules.Default(pc)
		if pc.PreemptionPolicy == nil || *pc.PreemptionPolicy != tt.want {
			t.Errorf("Default(class with policy %v) = %v, want %v", tt.policy, pc.PreemptionPolicy, tt.want)
		}
	}
}

func TestValidate(t *testing.T) {
	system := func(i int) func(*schedulingv1.PriorityClass) {
		return func(pc *schedulingv1.PriorityClass) { *pc = *SystemPriorityClasses()[i] }
	}
	tests := []struct {
		name string
		edit func(*schedulingv1.PriorityClass)
		want []string
	}{
		{"valid", func(*schedulingv1.PriorityClass) {}, nil},
		{"negative", func(pc *schedulingv1.PriorityClass) { pc.Value = -10 }, nil},
		{"highest user value", func(pc *schedulingv1.PriorityClass) { pc.Value = HighestUserDefinablePriority }, nil},
		{"global default", func(pc *schedulingv1.PriorityClass) { pc.GlobalDefault = true }, nil},
		{"system-node-critical", system(0), nil},
		{"system-cluster-critical", system(1), nil},
		{"above user values", func(pc *schedulingv1.PriorityClass) { pc.Value = HighestUserDefinablePriority + 1 }, []string{"value: Forbidden"}},
		{"system prefix", func(pc *schedulingv1.PriorityClass) { pc.Name = "system-gateway" }, []string{"metadata.name: Forbidden"}},
		{"system class with another value", func(pc *schedulingv1.PriorityClass) {
			system(1)(pc)
			pc.Value = 5
		}, []string{"metadata.name: Forbidden"}},
		{"system class as default", func(pc *schedulingv1.PriorityClass) {
			system(0)(pc)
			pc.GlobalDefault = true
		}, []string{"metadata.name: Forbidden"}},
		{"unknown policy", func(pc *schedulingv1.PriorityClass) { pc.PreemptionPolicy = new(corev1.PreemptionPolicy("Always")) },
			[]string{"preemptionPolicy: Unsupported value"}},
		{"namespaced", func(pc *schedulingv1.PriorityClass) { pc.Namespace = "default" }, []string{"metadata.namespace: Forbidden"}},
	}
	for _, tt := range tests {
		pc := class()
		tt.edit(pc)
		rules.Default(pc)
		if got := typedtest.ErrStrings(rules.Validate(pc)); !typedtest.SameErrs(got, tt.want) {
			t.Errorf("Validate(class with %s) = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestValidateUpdate(t *testing.T) {
	old := class()
	rules.Default(old)
	tests := []struct {
		name string
		edit func(*schedulingv1.PriorityClass)
		want []string
	}{
		{"description", func(pc *schedulingv1.PriorityClass) { pc.Description = "Uplink pods." }, nil},
		{"global default", func(pc *schedulingv1.PriorityClass) { pc.GlobalDefault = true }, nil},
		{"value", func(pc *schedulingv1.PriorityClass) { pc.Value++ }, []string{"value: Forbidden"}},
		{"policy", func(pc *schedulingv1.PriorityClass) { pc.PreemptionPolicy = new(corev1.PreemptNever) }, []string{"preemptionPolicy: Invalid value"}},
	}
	for _, tt := range tests {
		pc := old.DeepCopy()
		tt.edit(pc)
		rules.PrepareForUpdate(pc, old)
		if got := typedtest.ErrStrings(rules.ValidateUpdate(pc, old)); !typedtest.SameErrs(got, tt.want) {
			t.Errorf("ValidateUpdate(class %s) = %q, want %q", tt.name, got, tt.want)
		}
	}
}

// TestSystemPriorityClasses: upstream's two classes, each a new object
// ready for Ensure.
func TestSystemPriorityClasses(t *testing.T) {
	got := map[string]int32{}
	for _, pc := range SystemPriorityClasses() {
		got[pc.Name] = pc.Value
		if pc.APIVersion != "scheduling.k8s.io/v1" || pc.Kind != "PriorityClass" || pc.GlobalDefault || pc.Description == "" {
			t.Errorf("SystemPriorityClasses() %s = %+v, want typed, not the default, described", pc.Name, pc)
		}
	}
	want := map[string]int32{"system-cluster-critical": 2000000000, "system-node-critical": 2000001000}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("SystemPriorityClasses() = %v, want %v", got, want)
	}
	SystemPriorityClasses()[0].Value = 1
	if SystemPriorityClasses()[0].Value == 1 {
		t.Errorf("SystemPriorityClasses() returned a shared object")
	}
}

func TestRow(t *testing.T) {
	pc := class()
	rules.Default(pc)
	if got, want := rules.Row(pc), []interface{}{"gateway-critical", int64(100000), false, "26h", "PreemptLowerPriority"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Row(%s) = %#v, want %#v", pc.Name, got, want)
	}
	var names []string
	for _, c := range rules.Columns() {
		names = append(names, c.Name)
	}
	if want := []string{"Name", "Value", "Global-Default", "Age", "PreemptionPolicy"}; !reflect.DeepEqual(names, want) {
		t.Errorf("Columns() = %q, want %q", names, want)
	}
}

func TestResources(t *testing.T) {
	rs := Resources()
	if len(rs) != 1 {
		t.Fatalf("Resources() has %d resources, want priorityclasses alone", len(rs))
	}
	r := rs[0]
	if r.GroupVersion != schedulingv1.SchemeGroupVersion || r.Plural != "priorityclasses" || r.Singular != "priorityclass" || r.Kind != "PriorityClass" ||
		r.Namespaced || !reflect.DeepEqual(r.ShortNames, []string{"pc"}) || len(r.Categories) > 0 || r.Status || r.Scale != nil ||
		r.Rules.(typed.All).AllowCreateOnUpdate() {
		t.Errorf("priorityclasses resource = %+v", r)
	}
}

// TestWrongType: the rules, given an object of another type, neither
// panic nor accept it.
func TestWrongType(t *testing.T) { typedtest.WrongType(t, Resources()) }
