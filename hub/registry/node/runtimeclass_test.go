package node

import (
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/hub/registry/typed"
	"github.com/outpost-mesh/outpost/hub/registry/typed/typedtest"
)

var (
	created = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	now     = created.Add(26 * time.Hour)
	rules   = ResourcesWithClock(func() time.Time { return now })[0].Rules.(typed.All)
)

func runtimeClass() *nodev1.RuntimeClass {
	return &nodev1.RuntimeClass{
		ObjectMeta: metav1.ObjectMeta{Name: "gvisor", ResourceVersion: "7", CreationTimestamp: metav1.NewTime(created)},
		Handler:    "runsc",
		Overhead:   &nodev1.Overhead{PodFixed: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("64Mi")}},
		Scheduling: &nodev1.Scheduling{
			NodeSelector: map[string]string{"sandbox.outpost.dev/gvisor": "true"},
			Tolerations:  []corev1.Toleration{{Key: "sandbox", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
		},
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(*nodev1.RuntimeClass)
		want []string
	}{
		{"valid", func(*nodev1.RuntimeClass) {}, nil},
		{"handler only", func(rc *nodev1.RuntimeClass) { rc.Overhead, rc.Scheduling = nil, nil }, nil},
		{"extended resource overhead", func(rc *nodev1.RuntimeClass) {
			rc.Overhead.PodFixed["example.com/vm-slot"] = resource.MustParse("1")
		}, nil},
		{"no handler", func(rc *nodev1.RuntimeClass) { rc.Handler = "" }, []string{"handler: Invalid value"}},
		{"handler not a label", func(rc *nodev1.RuntimeClass) { rc.Handler = "run.sc" }, []string{"handler: Invalid value"}},
		{"negative overhead", func(rc *nodev1.RuntimeClass) { rc.Overhead.PodFixed[corev1.ResourceCPU] = resource.MustParse("-1") },
			[]string{"overhead.limits[cpu]: Invalid value"}},
		{"unknown resource", func(rc *nodev1.RuntimeClass) { rc.Overhead.PodFixed["gpus"] = resource.MustParse("1") },
			// Not a standard resource, nor one for containers: two
			// errors, as upstream's.
			[]string{"overhead.limits[gpus]: Invalid value", "overhead.limits[gpus]: Invalid value"}},
		{"bad node selector", func(rc *nodev1.RuntimeClass) { rc.Scheduling.NodeSelector["sandbox"] = "-yes-" },
			[]string{"scheduling.nodeSelector: Invalid value"}},
		{"bad toleration", func(rc *nodev1.RuntimeClass) { rc.Scheduling.Tolerations[0].Operator = "Like" },
			[]string{"scheduling.tolerations[0].operator: Unsupported value"}},
		{"toleration seconds without NoExecute", func(rc *nodev1.RuntimeClass) { rc.Scheduling.Tolerations[0].TolerationSeconds = new(int64(30)) },
			[]string{"scheduling.tolerations[0].effect: Invalid value"}},
		{"namespaced", func(rc *nodev1.RuntimeClass) { rc.Namespace = "default" }, []string{"metadata.namespace: Forbidden"}},
	}
	for _, tt := range tests {
		rc := runtimeClass()
		tt.edit(rc)
		rules.Default(rc)
		rules.PrepareForCreate(rc)
		if got := typedtest.ErrStrings(rules.Validate(rc)); !typedtest.SameErrs(got, tt.want) {
			t.Errorf("Validate(runtimeclass with %s) = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestValidateUpdate(t *testing.T) {
	old := runtimeClass()
	tests := []struct {
		name string
		edit func(*nodev1.RuntimeClass)
		want []string
	}{
		{"new overhead", func(rc *nodev1.RuntimeClass) {
			rc.Overhead.PodFixed[corev1.ResourceMemory] = resource.MustParse("128Mi")
		}, nil},
		{"new tolerations", func(rc *nodev1.RuntimeClass) { rc.Scheduling.Tolerations = nil }, nil},
		{"new handler", func(rc *nodev1.RuntimeClass) { rc.Handler = "kata" }, []string{"handler: Invalid value"}},
		{"bad overhead", func(rc *nodev1.RuntimeClass) { rc.Overhead.PodFixed[corev1.ResourceMemory] = resource.MustParse("-1") },
			[]string{"overhead.limits[memory]: Invalid value"}},
	}
	for _, tt := range tests {
		rc := old.DeepCopy()
		tt.edit(rc)
		rules.PrepareForUpdate(rc, old)
		if got := typedtest.ErrStrings(rules.ValidateUpdate(rc, old)); !typedtest.SameErrs(got, tt.want) {
			t.Errorf("ValidateUpdate(runtimeclass %s) = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestRow(t *testing.T) {
	if got, want := rules.Row(runtimeClass()), []interface{}{"gvisor", "runsc", "26h"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Row(gvisor) = %#v, want %#v", got, want)
	}
	var names []string
	for _, c := range rules.Columns() {
		names = append(names, c.Name)
	}
	if want := []string{"Name", "Handler", "Age"}; !reflect.DeepEqual(names, want) {
		t.Errorf("Columns() = %q, want %q", names, want)
	}
}

func TestResources(t *testing.T) {
	rs := Resources()
	if len(rs) != 1 {
		t.Fatalf("Resources() has %d resources, want runtimeclasses alone", len(rs))
	}
	r := rs[0]
	if r.GroupVersion != nodev1.SchemeGroupVersion || r.Plural != "runtimeclasses" || r.Singular != "runtimeclass" || r.Kind != "RuntimeClass" ||
		r.Namespaced || len(r.ShortNames) > 0 || len(r.Categories) > 0 || r.Status || r.Generation || r.Scale != nil ||
		!r.Rules.(typed.All).AllowCreateOnUpdate() {
		t.Errorf("runtimeclasses resource = %+v", r)
	}
}

// TestWrongType: the rules, given an object of another type, neither
// panic nor accept it.
func TestWrongType(t *testing.T) { typedtest.WrongType(t, Resources()) }
