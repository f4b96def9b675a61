package coordination

import (
	"reflect"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/hub/registry/typed"
	"github.com/outpost-mesh/outpost/hub/registry/typed/typedtest"
)

var (
	created = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	now     = created.Add(26 * time.Hour)
	rules   = ResourcesWithClock(func() time.Time { return now })[0].Rules.(typed.All)
)

func lease() *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "gateway-17", Namespace: "kube-node-lease", ResourceVersion: "3", CreationTimestamp: metav1.NewTime(created)},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       new("gateway-17"),
			LeaseDurationSeconds: new(int32(40)),
			RenewTime:            new(metav1.NewMicroTime(now)),
		},
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(*coordinationv1.Lease)
		want []string
	}{
		{"node heartbeat", func(*coordinationv1.Lease) {}, nil},
		{"empty spec", func(l *coordinationv1.Lease) { l.Spec = coordinationv1.LeaseSpec{} }, nil},
		{"zero duration", func(l *coordinationv1.Lease) { l.Spec.LeaseDurationSeconds = new(int32(0)) },
			[]string{"spec.leaseDurationSeconds: Invalid value"}},
		{"negative transitions", func(l *coordinationv1.Lease) { l.Spec.LeaseTransitions = new(int32(-1)) },
			[]string{"spec.leaseTransitions: Invalid value"}},
		{"strategy", func(l *coordinationv1.Lease) {
			l.Spec.Strategy = new(coordinationv1.OldestEmulationVersion)
			l.Spec.PreferredHolder = new("gateway-18")
		}, nil},
		{"custom strategy", func(l *coordinationv1.Lease) {
			l.Spec.Strategy = new(coordinationv1.CoordinatedLeaseStrategy("outpost.dev/nearest"))
		}, nil},
		{"unknown strategy", func(l *coordinationv1.Lease) {
			l.Spec.Strategy = new(coordinationv1.CoordinatedLeaseStrategy("Youngest"))
		},
			[]string{"spec.strategy: Unsupported value"}},
		{"preferred holder without strategy", func(l *coordinationv1.Lease) { l.Spec.PreferredHolder = new("gateway-18") },
			[]string{"spec.preferredHolder: Forbidden"}},
		{"bad name", func(l *coordinationv1.Lease) { l.Name = "Gateway_17" }, []string{"metadata.name: Invalid value"}},
		{"no namespace", func(l *coordinationv1.Lease) { l.Namespace = "" }, []string{"metadata.namespace: Required value"}},
	}
	for _, tt := range tests {
		l := lease()
		tt.edit(l)
		rules.Default(l)
		rules.PrepareForCreate(l)
		if got := typedtest.ErrStrings(rules.Validate(l)); !reflect.DeepEqual(got, tt.want) && !(len(got) == 0 && len(tt.want) == 0) {
			t.Errorf("Validate(lease with %s) = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestValidateUpdate(t *testing.T) {
	old := lease()
	tests := []struct {
		name string
		edit func(*coordinationv1.Lease)
		want []string
	}{
		{"renew", func(l *coordinationv1.Lease) { l.Spec.RenewTime = new(metav1.NewMicroTime(now.Add(10 * time.Second))) }, nil},
		{"take over", func(l *coordinationv1.Lease) {
			l.Spec.HolderIdentity = new("gateway-18")
			l.Spec.LeaseTransitions = new(int32(1))
		}, nil},
		{"rename", func(l *coordinationv1.Lease) { l.Name = "gateway-18" }, []string{"metadata.name: Invalid value"}},
		{"negative duration", func(l *coordinationv1.Lease) { l.Spec.LeaseDurationSeconds = new(int32(-5)) },
			[]string{"spec.leaseDurationSeconds: Invalid value"}},
	}
	for _, tt := range tests {
		l := old.DeepCopy()
		tt.edit(l)
		rules.PrepareForUpdate(l, old)
		if got := typedtest.ErrStrings(rules.ValidateUpdate(l, old)); !reflect.DeepEqual(got, tt.want) && !(len(got) == 0 && len(tt.want) == 0) {
			t.Errorf("ValidateUpdate(lease %s) = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestRow(t *testing.T) {
	unheld := lease()
	unheld.Spec.HolderIdentity = nil
	tests := []struct {
		obj  *coordinationv1.Lease
		want []interface{}
	}{
		{lease(), []interface{}{"gateway-17", "gateway-17", "26h"}},
		{unheld, []interface{}{"gateway-17", "", "26h"}},
	}
	for _, tt := range tests {
		if got := rules.Row(tt.obj); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Row(%v) = %#v, want %#v", tt.obj.Spec.HolderIdentity, got, tt.want)
		}
	}
	var names []string
	for _, c := range rules.Columns() {
		names = append(names, c.Name)
	}
	if want := []string{"Name", "Holder", "Age"}; !reflect.DeepEqual(names, want) {
		t.Errorf("Columns() = %q, want %q", names, want)
	}
}

func TestResources(t *testing.T) {
	r := Resources()
	if len(r) != 1 {
		t.Fatalf("Resources() has %d resources, want leases alone", len(r))
	}
	l := r[0]
	if l.GroupVersion != coordinationv1.SchemeGroupVersion || l.Plural != "leases" || l.Singular != "lease" || l.Kind != "Lease" ||
		!l.Namespaced || len(l.ShortNames) > 0 || len(l.Categories) > 0 || l.Status || l.Scale != nil || !l.Rules.(typed.All).AllowCreateOnUpdate() {
		t.Errorf("leases resource = %+v", l)
	}
	if f := l.Rules.(typed.All).Fields(lease()); f == nil || len(f) != 0 {
		t.Errorf("Fields = %v, want an empty set", f)
	}
}

// TestWrongType: the rules, given an object of another type, neither
// panic nor accept it.
func TestWrongType(t *testing.T) { typedtest.WrongType(t, Resources()) }
