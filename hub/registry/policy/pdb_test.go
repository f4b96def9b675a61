package policy

import (
	"reflect"
	"testing"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/registry/typed"
	"github.com/outpost-mesh/outpost/hub/registry/typed/typedtest"
)

var (
	created = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	now     = created.Add(90 * time.Minute)
	res     = ResourcesWithClock(func() time.Time { return now })[0]
	rules   = res.Rules.(typed.All)
	status  = res.Rules.(apiserver.StatusValidator)
)

func pdb() *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", ResourceVersion: "5", CreationTimestamp: metav1.NewTime(created)},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: new(intstr.FromInt32(2)),
			Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
		},
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(*policyv1.PodDisruptionBudget)
		want []string
	}{
		{"min available", func(*policyv1.PodDisruptionBudget) {}, nil},
		{"max unavailable percent", func(p *policyv1.PodDisruptionBudget) {
			p.Spec.MinAvailable = nil
			p.Spec.MaxUnavailable = new(intstr.FromString("25%"))
		}, nil},
		{"neither", func(p *policyv1.PodDisruptionBudget) { p.Spec.MinAvailable = nil }, nil},
		{"no selector", func(p *policyv1.PodDisruptionBudget) { p.Spec.Selector = nil }, nil},
		{"both", func(p *policyv1.PodDisruptionBudget) { p.Spec.MaxUnavailable = new(intstr.FromInt32(1)) },
			[]string{"spec: Invalid value"}},
		{"negative", func(p *policyv1.PodDisruptionBudget) { p.Spec.MinAvailable = new(intstr.FromInt32(-1)) },
			[]string{"spec.minAvailable: Invalid value"}},
		{"over 100%", func(p *policyv1.PodDisruptionBudget) { p.Spec.MinAvailable = new(intstr.FromString("150%")) },
			[]string{"spec.minAvailable: Invalid value"}},
		{"not a percent", func(p *policyv1.PodDisruptionBudget) {
			p.Spec.MinAvailable = nil
			p.Spec.MaxUnavailable = new(intstr.FromString("half"))
		}, []string{"spec.maxUnavailable: Invalid value"}},
		{"bad selector value", func(p *policyv1.PodDisruptionBudget) { p.Spec.Selector.MatchLabels["app"] = "web server" },
			[]string{"spec.selector.matchLabels: Invalid value"}},
		{"bad selector operator", func(p *policyv1.PodDisruptionBudget) {
			p.Spec.Selector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpExists, Values: []string{"x"}}}
		}, []string{"spec.selector.matchExpressions[0].values: Forbidden"}},
		{"eviction policy", func(p *policyv1.PodDisruptionBudget) { p.Spec.UnhealthyPodEvictionPolicy = new(policyv1.AlwaysAllow) }, nil},
		{"unknown eviction policy", func(p *policyv1.PodDisruptionBudget) {
			p.Spec.UnhealthyPodEvictionPolicy = new(policyv1.UnhealthyPodEvictionPolicyType("Never"))
		}, []string{"spec.unhealthyPodEvictionPolicy: Unsupported value"}},
		{"upper-case name", func(p *policyv1.PodDisruptionBudget) { p.Name = "Web" }, nil},
		{"name with slash", func(p *policyv1.PodDisruptionBudget) { p.Name = "web/1" }, []string{"metadata.name: Invalid value"}},
		{"no namespace", func(p *policyv1.PodDisruptionBudget) { p.Namespace = "" }, []string{"metadata.namespace: Required value"}},
	}
	for _, tt := range tests {
		p := pdb()
		tt.edit(p)
		rules.Default(p)
		rules.PrepareForCreate(p)
		if got := typedtest.ErrStrings(rules.Validate(p)); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Validate(pdb with %s) = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestValidateUpdate(t *testing.T) {
	old := pdb()
	// Stored before label values were checked.
	oldInvalid := pdb()
	oldInvalid.Spec.Selector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "app", Operator: metav1.LabelSelectorOpIn, Values: []string{"web server"}}}
	tests := []struct {
		name string
		old  *policyv1.PodDisruptionBudget
		edit func(*policyv1.PodDisruptionBudget)
		want []string
	}{
		{"spec change", old, func(p *policyv1.PodDisruptionBudget) { p.Spec.MinAvailable = new(intstr.FromString("50%")) }, nil},
		{"both set", old, func(p *policyv1.PodDisruptionBudget) { p.Spec.MaxUnavailable = new(intstr.FromInt32(1)) },
			[]string{"spec: Invalid value"}},
		{"rename", old, func(p *policyv1.PodDisruptionBudget) { p.Name = "api" }, []string{"metadata.name: Invalid value"}},
		{"invalid value added", old, func(p *policyv1.PodDisruptionBudget) { p.Spec.Selector = oldInvalid.Spec.Selector.DeepCopy() },
			[]string{"spec.selector.matchExpressions[0].values[0]: Invalid value"}},
		{"invalid value kept", oldInvalid, func(p *policyv1.PodDisruptionBudget) { p.Spec.MinAvailable = new(intstr.FromInt32(1)) }, nil},
	}
	for _, tt := range tests {
		p := tt.old.DeepCopy()
		tt.edit(p)
		rules.PrepareForUpdate(p, tt.old)
		if got := typedtest.ErrStrings(rules.ValidateUpdate(p, tt.old)); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ValidateUpdate(pdb %s) = %q, want %q", tt.name, got, tt.want)
		}
	}
}

// TestPrepare: a create may not set the status, nor an update of the main
// resource change it.
func TestPrepare(t *testing.T) {
	p := pdb()
	p.Status = policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 3, ExpectedPods: 5}
	rules.PrepareForCreate(p)
	if !reflect.DeepEqual(p.Status, policyv1.PodDisruptionBudgetStatus{}) {
		t.Errorf("PrepareForCreate left status %+v, want it empty", p.Status)
	}
	old := pdb()
	old.Status = policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 1, CurrentHealthy: 3, DesiredHealthy: 2, ExpectedPods: 3}
	p = old.DeepCopy()
	p.Status.DisruptionsAllowed = 9
	rules.PrepareForUpdate(p, old)
	if !reflect.DeepEqual(p.Status, old.Status) {
		t.Errorf("PrepareForUpdate left status %+v, want the stored %+v", p.Status, old.Status)
	}
}

func TestValidateStatusUpdate(t *testing.T) {
	old := pdb()
	cond := metav1.Condition{Type: policyv1.DisruptionAllowedCondition, Status: metav1.ConditionTrue,
		Reason: policyv1.SufficientPodsReason, LastTransitionTime: metav1.NewTime(now)}
	tests := []struct {
		name string
		edit func(*policyv1.PodDisruptionBudgetStatus)
		want []string
	}{
		{"counts", func(s *policyv1.PodDisruptionBudgetStatus) {
			*s = policyv1.PodDisruptionBudgetStatus{ObservedGeneration: 1, DisruptionsAllowed: 1, CurrentHealthy: 3, DesiredHealthy: 2, ExpectedPods: 3}
		}, nil},
		{"condition", func(s *policyv1.PodDisruptionBudgetStatus) { s.Conditions = []metav1.Condition{cond} }, nil},
		{"negative counts", func(s *policyv1.PodDisruptionBudgetStatus) {
			*s = policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: -1, CurrentHealthy: -1, DesiredHealthy: -1, ExpectedPods: -1}
		}, []string{"status.disruptionsAllowed: Invalid value", "status.currentHealthy: Invalid value",
			"status.desiredHealthy: Invalid value", "status.expectedPods: Invalid value"}},
		{"condition without reason", func(s *policyv1.PodDisruptionBudgetStatus) {
			c := cond
			c.Reason = ""
			s.Conditions = []metav1.Condition{c}
		}, []string{"status.conditions[0].reason: Required value"}},
	}
	for _, tt := range tests {
		p := old.DeepCopy()
		tt.edit(&p.Status)
		if got := typedtest.ErrStrings(status.ValidateStatusUpdate(p, old)); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ValidateStatusUpdate(pdb %s) = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestRow(t *testing.T) {
	maxPercent := pdb()
	maxPercent.Spec.MinAvailable = nil
	maxPercent.Spec.MaxUnavailable = new(intstr.FromString("25%"))
	maxPercent.Status.DisruptionsAllowed = 2
	neither := pdb()
	neither.Spec.MinAvailable = nil
	tests := []struct {
		name string
		obj  *policyv1.PodDisruptionBudget
		want []interface{}
	}{
		{"min available", pdb(), []interface{}{"web", "2", "N/A", int64(0), "90m"}},
		{"max unavailable", maxPercent, []interface{}{"web", "N/A", "25%", int64(2), "90m"}},
		{"neither", neither, []interface{}{"web", "N/A", "N/A", int64(0), "90m"}},
	}
	for _, tt := range tests {
		if got := rules.Row(tt.obj); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Row(pdb %s) = %#v, want %#v", tt.name, got, tt.want)
		}
	}
	var names []string
	for _, c := range rules.Columns() {
		names = append(names, c.Name)
	}
	if want := []string{"Name", "Min Available", "Max Unavailable", "Allowed Disruptions", "Age"}; !reflect.DeepEqual(names, want) {
		t.Errorf("Columns() = %q, want %q", names, want)
	}
}

// TestResources checks what `kubectl api-resources` shows, as upstream.
func TestResources(t *testing.T) {
	r := Resources()
	if len(r) != 1 {
		t.Fatalf("Resources() has %d resources, want poddisruptionbudgets alone", len(r))
	}
	p := r[0]
	if p.GroupVersion != policyv1.SchemeGroupVersion || p.Plural != "poddisruptionbudgets" || p.Singular != "poddisruptionbudget" ||
		p.Kind != "PodDisruptionBudget" || !p.Namespaced || !reflect.DeepEqual(p.ShortNames, []string{"pdb"}) || len(p.Categories) > 0 ||
		!p.Status || !p.Generation || p.Scale != nil || p.Rules.(typed.All).AllowCreateOnUpdate() {
		t.Errorf("poddisruptionbudgets resource = %+v", p)
	}
}

// TestWrongType: the rules, given an object of another type, neither
// panic nor accept it.
func TestWrongType(t *testing.T) { typedtest.WrongType(t, Resources()) }
