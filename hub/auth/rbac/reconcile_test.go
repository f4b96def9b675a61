package rbac

import (
	"reflect"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func bootstrapRole(t *testing.T, name string) *rbacv1.ClusterRole {
	t.Helper()
	for _, r := range ClusterRoles() {
		if r.Name == name {
			return &r
		}
	}
	t.Fatalf("no bootstrap ClusterRole %s", name)
	return nil
}

func bootstrapBinding(t *testing.T, name string) *rbacv1.ClusterRoleBinding {
	t.Helper()
	for _, b := range ClusterRoleBindings() {
		if b.Name == name {
			return &b
		}
	}
	t.Fatalf("no bootstrap ClusterRoleBinding %s", name)
	return nil
}

func TestReconcileClusterRole(t *testing.T) {
	basic := bootstrapRole(t, "system:basic-user")
	extra := rules(verbs("get").groups("example.com").resources("widgets"))[0]

	older := basic.DeepCopy() // an older release's role, one rule short, plus one of the admin's own
	older.Rules = []rbacv1.PolicyRule{basic.Rules[0], extra}
	older.Labels = map[string]string{"mine": "yes"}
	older.Annotations = nil

	protected := older.DeepCopy()
	protected.Annotations = map[string]string{rbacv1.AutoUpdateAnnotationKey: "false"}

	admin := bootstrapRole(t, "admin")
	aggregated := admin.DeepCopy() // as the aggregation controller left it
	aggregated.Rules = rules(verbs("get").groups("").resources("pods"))

	var noAggregation = basic.DeepCopy() // an admin that removed its aggregation
	noAggregation.Name = "admin"
	noAggregation.Rules = aggregated.Rules

	type want struct {
		op        Operation
		rules     []rbacv1.PolicyRule
		selectors int
		missing   int
		protected bool
	}
	tests := []struct {
		name     string
		expected *rbacv1.ClusterRole
		existing *rbacv1.ClusterRole
		want     want
	}{
		{"absent", basic, nil, want{op: OpCreate, rules: basic.Rules, missing: len(basic.Rules)}},
		{"same", basic, basic, want{op: OpNone}},
		{"older: missing rule added, extra kept", basic, older, want{op: OpUpdate, rules: []rbacv1.PolicyRule{basic.Rules[0], extra, basic.Rules[1]}, missing: 1}},
		{"protected", basic, protected, want{op: OpNone, missing: 1, protected: true}},
		{"aggregated keeps its rules", admin, aggregated, want{op: OpNone}},
		{"aggregation restored", admin, noAggregation, want{op: OpUpdate, rules: aggregated.Rules, selectors: 1}},
	}
	for _, tt := range tests {
		got, err := ReconcileClusterRole(tt.expected, tt.existing)
		if err != nil {
			t.Errorf("%s: ReconcileClusterRole error %v", tt.name, err)
			continue
		}
		g := want{op: got.Op, missing: len(got.Missing), protected: got.Protected}
		if got.Role != nil {
			g.rules = got.Role.Rules
			if got.Role.AggregationRule != nil {
				g.selectors = len(got.Role.AggregationRule.ClusterRoleSelectors)
			}
			if got.Role.Labels[BootstrapLabel] != BootstrapLabelValue || got.Role.Annotations[rbacv1.AutoUpdateAnnotationKey] != "true" {
				t.Errorf("%s: ReconcileClusterRole role has labels %v, annotations %v, want the bootstrap ones", tt.name, got.Role.Labels, got.Role.Annotations)
			}
			if tt.existing != nil && got.Role.Labels["mine"] != tt.existing.Labels["mine"] {
				t.Errorf("%s: ReconcileClusterRole dropped label mine: %v", tt.name, got.Role.Labels)
			}
		}
		if !reflect.DeepEqual(g, tt.want) {
			t.Errorf("%s: ReconcileClusterRole(%s, existing) = %+v, want %+v", tt.name, tt.expected.Name, g, tt.want)
		}
	}
	if older.Annotations != nil || len(older.Rules) != 2 {
		t.Errorf("ReconcileClusterRole modified existing: %+v", older)
	}
}

func TestReconcileClusterRoleBinding(t *testing.T) {
	pub := bootstrapBinding(t, "system:public-info-viewer")

	narrowed := pub.DeepCopy() // unauthenticated removed, one added
	narrowed.Subjects = append(narrowed.Subjects[:1:1], userSubject("probe"))

	protected := narrowed.DeepCopy()
	protected.Annotations = map[string]string{rbacv1.AutoUpdateAnnotationKey: "false"}

	otherRole := pub.DeepCopy()
	otherRole.RoleRef.Name = "view"
	otherRole.UID = "u1"

	tests := []struct {
		name      string
		existing  *rbacv1.ClusterRoleBinding
		op        Operation
		subjects  []rbacv1.Subject
		missing   int
		protected bool
	}{
		{"absent", nil, OpCreate, pub.Subjects, 2, false},
		{"same", pub, OpNone, nil, 0, false},
		{"missing subject added, extra kept", narrowed, OpUpdate,
			[]rbacv1.Subject{pub.Subjects[0], userSubject("probe"), pub.Subjects[1]}, 1, false},
		{"protected", protected, OpNone, nil, 1, true},
		{"other role recreated", otherRole, OpRecreate, pub.Subjects, 0, false},
	}
	for _, tt := range tests {
		got, err := ReconcileClusterRoleBinding(pub, tt.existing)
		if err != nil {
			t.Errorf("%s: ReconcileClusterRoleBinding error %v", tt.name, err)
			continue
		}
		var subjects []rbacv1.Subject
		if got.Binding != nil {
			subjects = got.Binding.Subjects
			if got.Binding.RoleRef != pub.RoleRef {
				t.Errorf("%s: ReconcileClusterRoleBinding roleRef = %+v, want %+v", tt.name, got.Binding.RoleRef, pub.RoleRef)
			}
		}
		if got.Op != tt.op || !reflect.DeepEqual(subjects, tt.subjects) || len(got.Missing) != tt.missing || got.Protected != tt.protected {
			t.Errorf("%s: ReconcileClusterRoleBinding(%s, existing) = %s %v missing %v protected %v, want %s %v missing %d protected %v",
				tt.name, pub.Name, got.Op, subjects, got.Missing, got.Protected, tt.op, tt.subjects, tt.missing, tt.protected)
		}
	}
}

// An existing role whose metadata differs only in what the API server
// sets is left alone.
func TestReconcileClusterRoleServerFields(t *testing.T) {
	basic := bootstrapRole(t, "system:basic-user")
	stored := basic.DeepCopy()
	stored.UID = "u"
	stored.ResourceVersion = "7"
	stored.CreationTimestamp = metav1.Unix(1, 0)
	got, err := ReconcileClusterRole(basic, stored)
	if err != nil || got.Op != OpNone || got.Role != nil {
		t.Errorf("ReconcileClusterRole(%s, stored) = %+v, %v, want none", basic.Name, got, err)
	}
}
