package rbac

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/outpost-mesh/outpost/hub/registry/typed"
	"github.com/outpost-mesh/outpost/hub/registry/typed/typedtest"
)

var (
	created = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	now     = created.Add(49 * time.Hour)
)

// rulesFor returns the rules of the resource plural, ages measured at now.
func rulesFor(t *testing.T, plural string) typed.All {
	t.Helper()
	for _, r := range ResourcesWithClock(func() time.Time { return now }) {
		if r.Plural == plural {
			return r.Rules.(typed.All)
		}
	}
	t.Fatalf("no resource %s", plural)
	return nil
}

var (
	readPods = rbacv1.PolicyRule{Verbs: []string{"get", "list"}, APIGroups: []string{""}, Resources: []string{"pods"}}
	healthz  = rbacv1.PolicyRule{Verbs: []string{"get"}, NonResourceURLs: []string{"/healthz"}}
)

// create runs a create's steps on obj and returns its validation errors.
func create(rules typed.All, obj runtime.Object) []string {
	rules.Default(obj)
	rules.PrepareForCreate(obj)
	return typedtest.ErrStrings(rules.Validate(obj))
}

func TestValidateRole(t *testing.T) {
	rules := rulesFor(t, "roles")
	tests := []struct {
		name string
		edit func(*rbacv1.Role)
		want []string
	}{
		{"pod reader", func(*rbacv1.Role) {}, nil},
		{"no rules", func(r *rbacv1.Role) { r.Rules = nil }, nil},
		{"name with capitals and colon", func(r *rbacv1.Role) { r.Name = "System:Edge_Reader" }, nil},
		{"name with slash", func(r *rbacv1.Role) { r.Name = "edge/reader" }, []string{"metadata.name: Invalid value"}},
		{"name dot-dot", func(r *rbacv1.Role) { r.Name = ".." }, []string{"metadata.name: Invalid value"}},
		{"no namespace", func(r *rbacv1.Role) { r.Namespace = "" }, []string{"metadata.namespace: Required value"}},
		{"no verbs", func(r *rbacv1.Role) { r.Rules[0].Verbs = nil }, []string{"rules[0].verbs: Required value"}},
		{"no api groups", func(r *rbacv1.Role) { r.Rules[0].APIGroups = nil }, []string{"rules[0].apiGroups: Required value"}},
		{"no resources", func(r *rbacv1.Role) { r.Rules[0].Resources = nil }, []string{"rules[0].resources: Required value"}},
		{"resource names of two resources", func(r *rbacv1.Role) {
			r.Rules[0].Resources = []string{"pods", "services"}
			r.Rules[0].ResourceNames = []string{"web"}
		}, nil},
		{"non-resource URL", func(r *rbacv1.Role) { r.Rules = append(r.Rules, healthz) },
			[]string{"rules[1].nonResourceURLs: Invalid value"}},
		{"empty rule", func(r *rbacv1.Role) { r.Rules = append(r.Rules, rbacv1.PolicyRule{}) },
			[]string{"rules[1].verbs: Required value", "rules[1].apiGroups: Required value", "rules[1].resources: Required value"}},
	}
	for _, tt := range tests {
		r := &rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Name: "pod-reader", Namespace: "default"},
			Rules:      []rbacv1.PolicyRule{*readPods.DeepCopy()},
		}
		tt.edit(r)
		if got := create(rules, r); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Validate(role with %s) = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestValidateClusterRole(t *testing.T) {
	rules := rulesFor(t, "clusterroles")
	selector := func(labels map[string]string, exprs ...metav1.LabelSelectorRequirement) *rbacv1.AggregationRule {
		return &rbacv1.AggregationRule{ClusterRoleSelectors: []metav1.LabelSelector{{MatchLabels: labels, MatchExpressions: exprs}}}
	}
	tests := []struct {
		name string
		edit func(*rbacv1.ClusterRole)
		want []string
	}{
		{"reader of pods and healthz", func(*rbacv1.ClusterRole) {}, nil},
		{"namespace set", func(r *rbacv1.ClusterRole) { r.Namespace = "default" }, []string{"metadata.namespace: Forbidden"}},
		{"mixed rule", func(r *rbacv1.ClusterRole) { r.Rules[1].Resources = []string{"pods"} },
			[]string{"rules[1].nonResourceURLs: Invalid value"}},
		{"non-resource rule without verbs", func(r *rbacv1.ClusterRole) { r.Rules[1].Verbs = nil },
			[]string{"rules[1].verbs: Required value"}},
		{"aggregation", func(r *rbacv1.ClusterRole) {
			r.Rules = nil
			r.AggregationRule = selector(map[string]string{"rbac.outpost.dev/aggregate-to-view": "true"})
		}, nil},
		{"aggregation without selectors", func(r *rbacv1.ClusterRole) { r.AggregationRule = &rbacv1.AggregationRule{} },
			[]string{"aggregationRule.clusterRoleSelectors: Required value"}},
		{"aggregation by a bad key", func(r *rbacv1.ClusterRole) { r.AggregationRule = selector(map[string]string{"bad key": "true"}) },
			[]string{"aggregationRule.clusterRoleSelectors[0].matchLabels: Invalid value", "aggregationRule.clusterRoleSelectors[0]: Invalid value"}},
		{"aggregation by a bad operator", func(r *rbacv1.ClusterRole) {
			r.AggregationRule = selector(nil, metav1.LabelSelectorRequirement{Key: "k", Operator: "Near", Values: []string{"v"}})
		}, []string{"aggregationRule.clusterRoleSelectors[0].matchExpressions[0].operator: Invalid value", "aggregationRule.clusterRoleSelectors[0]: Invalid value"}},
	}
	for _, tt := range tests {
		r := &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: "edge:reader"},
			Rules:      []rbacv1.PolicyRule{*readPods.DeepCopy(), *healthz.DeepCopy()},
		}
		tt.edit(r)
		if got := create(rules, r); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Validate(clusterrole with %s) = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestValidateClusterRoleUpdate(t *testing.T) {
	rules := rulesFor(t, "clusterroles")
	old := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "view", ResourceVersion: "7", CreationTimestamp: metav1.NewTime(created)},
		AggregationRule: &rbacv1.AggregationRule{ClusterRoleSelectors: []metav1.LabelSelector{{
			MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpIn, Values: []string{"edge"}}},
		}}},
	}
	// Stored before label values were checked.
	oldInvalid := old.DeepCopy()
	oldInvalid.AggregationRule.ClusterRoleSelectors[0].MatchExpressions[0].Values = []string{"edge site"}
	tests := []struct {
		name string
		old  *rbacv1.ClusterRole
		edit func(*rbacv1.ClusterRole)
		want []string
	}{
		{"add a rule", old, func(r *rbacv1.ClusterRole) { r.Rules = append(r.Rules, readPods) }, nil},
		{"rename", old, func(r *rbacv1.ClusterRole) { r.Name = "edit" }, []string{"metadata.name: Invalid value"}},
		{"rule without verbs", old, func(r *rbacv1.ClusterRole) { r.Rules = []rbacv1.PolicyRule{{NonResourceURLs: []string{"/"}}} },
			[]string{"rules[0].verbs: Required value"}},
		{"invalid value", old, func(r *rbacv1.ClusterRole) {
			r.AggregationRule.ClusterRoleSelectors[0].MatchExpressions[0].Values = []string{"edge site"}
		}, []string{"aggregationRule.clusterRoleSelectors[0].matchExpressions[0].values[0]: Invalid value", "aggregationRule.clusterRoleSelectors[0]: Invalid value"}},
		// As upstream: the stored value does not parse, so it fails even unchanged.
		{"invalid value kept", oldInvalid, func(r *rbacv1.ClusterRole) { r.Labels = map[string]string{"a": "b"} },
			[]string{"aggregationRule.clusterRoleSelectors[0].matchExpressions[0].values[0]: Invalid value", "aggregationRule.clusterRoleSelectors[0]: Invalid value"}},
	}
	for _, tt := range tests {
		r := tt.old.DeepCopy()
		tt.edit(r)
		rules.PrepareForUpdate(r, tt.old)
		if got := typedtest.ErrStrings(rules.ValidateUpdate(r, tt.old)); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ValidateUpdate(clusterrole %s) = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestValidateRoleBinding(t *testing.T) {
	rules := rulesFor(t, "rolebindings")
	tests := []struct {
		name string
		edit func(*rbacv1.RoleBinding)
		want []string
	}{
		{"user, group and service account", func(*rbacv1.RoleBinding) {}, nil},
		{"cluster role", func(b *rbacv1.RoleBinding) { b.RoleRef.Kind = "ClusterRole" }, nil},
		{"no subjects", func(b *rbacv1.RoleBinding) { b.Subjects = nil }, nil},
		{"service account of another namespace", func(b *rbacv1.RoleBinding) { b.Subjects[2].Namespace = "kube-system" }, nil},
		{"roleRef of another group", func(b *rbacv1.RoleBinding) { b.RoleRef.APIGroup = "outpost.dev" },
			[]string{"roleRef.apiGroup: Unsupported value"}},
		{"roleRef kind", func(b *rbacv1.RoleBinding) { b.RoleRef.Kind = "User" }, []string{"roleRef.kind: Unsupported value"}},
		{"roleRef without name", func(b *rbacv1.RoleBinding) { b.RoleRef.Name = "" }, []string{"roleRef.name: Required value"}},
		{"roleRef bad name", func(b *rbacv1.RoleBinding) { b.RoleRef.Name = "a/b" }, []string{"roleRef.name: Invalid value"}},
		{"name with percent", func(b *rbacv1.RoleBinding) { b.Name = "100%" }, []string{"metadata.name: Invalid value"}},
		{"subject without name", func(b *rbacv1.RoleBinding) { b.Subjects[0].Name = "" }, []string{"subjects[0].name: Required value"}},
		{"subject kind", func(b *rbacv1.RoleBinding) { b.Subjects[0].Kind = "Node" }, []string{"subjects[0].kind: Unsupported value"}},
		{"user of another group", func(b *rbacv1.RoleBinding) { b.Subjects[0].APIGroup = "outpost.dev" },
			[]string{"subjects[0].apiGroup: Unsupported value"}},
		{"service account in a group", func(b *rbacv1.RoleBinding) { b.Subjects[2].APIGroup = rbacv1.GroupName },
			[]string{"subjects[2].apiGroup: Unsupported value"}},
		{"service account bad name", func(b *rbacv1.RoleBinding) { b.Subjects[2].Name = "Agent" },
			[]string{"subjects[2].name: Invalid value"}},
	}
	for _, tt := range tests {
		b := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "read-pods", Namespace: "default"},
			RoleRef:    rbacv1.RoleRef{Kind: "Role", Name: "pod-reader"},
			Subjects: []rbacv1.Subject{
				{Kind: rbacv1.UserKind, Name: "jane@example.com"},
				{Kind: rbacv1.GroupKind, Name: "system:nodes"},
				{Kind: rbacv1.ServiceAccountKind, Name: "agent"},
			},
		}
		tt.edit(b)
		if got := create(rules, b); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Validate(rolebinding with %s) = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestValidateClusterRoleBinding(t *testing.T) {
	rules := rulesFor(t, "clusterrolebindings")
	tests := []struct {
		name string
		edit func(*rbacv1.ClusterRoleBinding)
		want []string
	}{
		{"group and service account", func(*rbacv1.ClusterRoleBinding) {}, nil},
		{"role", func(b *rbacv1.ClusterRoleBinding) { b.RoleRef.Kind = "Role" }, []string{"roleRef.kind: Unsupported value"}},
		{"service account without namespace", func(b *rbacv1.ClusterRoleBinding) { b.Subjects[1].Namespace = "" },
			[]string{"subjects[1].namespace: Required value"}},
		{"namespace set", func(b *rbacv1.ClusterRoleBinding) { b.Namespace = "default" }, []string{"metadata.namespace: Forbidden"}},
	}
	for _, tt := range tests {
		b := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "system:node"},
			RoleRef:    rbacv1.RoleRef{Kind: "ClusterRole", Name: "system:node"},
			Subjects: []rbacv1.Subject{
				{Kind: rbacv1.GroupKind, Name: "system:nodes"},
				{Kind: rbacv1.ServiceAccountKind, Name: "agent", Namespace: "kube-system"},
			},
		}
		tt.edit(b)
		if got := create(rules, b); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Validate(clusterrolebinding with %s) = %q, want %q", tt.name, got, tt.want)
		}
	}
}

// TestDefaults: bindings get upstream's API groups where they leave them
// out, and nothing else changes.
func TestDefaults(t *testing.T) {
	b := &rbacv1.RoleBinding{
		RoleRef: rbacv1.RoleRef{Kind: "Role", Name: "pod-reader"},
		Subjects: []rbacv1.Subject{
			{Kind: rbacv1.UserKind, Name: "jane"},
			{Kind: rbacv1.GroupKind, Name: "ops"},
			{Kind: rbacv1.ServiceAccountKind, Name: "agent"},
			{Kind: "Node", Name: "edge-1"},
			{Kind: rbacv1.UserKind, Name: "bob", APIGroup: "outpost.dev"},
		},
	}
	rulesFor(t, "rolebindings").Default(b)
	want := []string{rbacv1.GroupName, rbacv1.GroupName, rbacv1.GroupName, "", "", "outpost.dev"}
	got := []string{b.RoleRef.APIGroup}
	for _, s := range b.Subjects {
		got = append(got, s.APIGroup)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Default(rolebinding) API groups = %q, want %q", got, want)
	}
	cb := &rbacv1.ClusterRoleBinding{RoleRef: rbacv1.RoleRef{Kind: "ClusterRole", Name: "view"}, Subjects: []rbacv1.Subject{{Kind: rbacv1.GroupKind, Name: "ops"}}}
	rulesFor(t, "clusterrolebindings").Default(cb)
	if cb.RoleRef.APIGroup != rbacv1.GroupName || cb.Subjects[0].APIGroup != rbacv1.GroupName {
		t.Errorf("Default(clusterrolebinding) = %+v, want API groups %s", cb, rbacv1.GroupName)
	}
}

func TestValidateBindingUpdate(t *testing.T) {
	rb := rulesFor(t, "rolebindings")
	old := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "read-pods", Namespace: "default", ResourceVersion: "3", CreationTimestamp: metav1.NewTime(created)},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "pod-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "jane"}},
	}
	tests := []struct {
		name string
		edit func(*rbacv1.RoleBinding)
		want []string
	}{
		{"add a subject", func(b *rbacv1.RoleBinding) {
			b.Subjects = append(b.Subjects, rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "ops"})
		}, nil},
		{"another role", func(b *rbacv1.RoleBinding) { b.RoleRef.Name = "pod-writer" }, []string{"roleRef: Invalid value"}},
		{"a cluster role", func(b *rbacv1.RoleBinding) { b.RoleRef.Kind = "ClusterRole" }, []string{"roleRef: Invalid value"}},
		{"another namespace", func(b *rbacv1.RoleBinding) { b.Namespace = "kube-system" }, []string{"metadata.namespace: Invalid value"}},
	}
	for _, tt := range tests {
		b := old.DeepCopy()
		tt.edit(b)
		rb.Default(b)
		rb.PrepareForUpdate(b, old)
		errs := rb.ValidateUpdate(b, old)
		if got := typedtest.ErrStrings(errs); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ValidateUpdate(rolebinding %s) = %q, want %q", tt.name, got, tt.want)
		}
		for _, e := range errs {
			if e.Field == "roleRef" && e.Detail != "cannot change roleRef" {
				t.Errorf("ValidateUpdate(rolebinding %s) says %q, want upstream's %q", tt.name, e.Detail, "cannot change roleRef")
			}
		}
	}

	crb := rulesFor(t, "clusterrolebindings")
	cold := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "ops-view", ResourceVersion: "4", CreationTimestamp: metav1.NewTime(created)},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"},
	}
	c := cold.DeepCopy()
	c.RoleRef.Name = "edit"
	if got, want := typedtest.ErrStrings(crb.ValidateUpdate(c, cold)), []string{"roleRef: Invalid value"}; !reflect.DeepEqual(got, want) {
		t.Errorf("ValidateUpdate(clusterrolebinding to edit) = %q, want %q", got, want)
	}
}

func TestColumnsAndRows(t *testing.T) {
	meta := metav1.ObjectMeta{Name: "n", Namespace: "default", CreationTimestamp: metav1.NewTime(created)}
	subjects := []rbacv1.Subject{
		{Kind: rbacv1.UserKind, Name: "jane"},
		{Kind: rbacv1.ServiceAccountKind, Name: "agent"},
		{Kind: rbacv1.GroupKind, Name: "ops"},
		{Kind: rbacv1.UserKind, Name: "bob"},
		{Kind: rbacv1.ServiceAccountKind, Name: "sync", Namespace: "kube-system"},
		{Kind: "Node", Name: "edge-1"},
	}
	tests := []struct {
		plural  string
		obj     runtime.Object
		columns string // names, wide ones marked with *
		row     []interface{}
	}{
		{"roles", &rbacv1.Role{ObjectMeta: meta}, "Name Created At", []interface{}{"n", "2025-03-01T12:00:00Z"}},
		{"clusterroles", &rbacv1.ClusterRole{ObjectMeta: meta}, "Name Created At", []interface{}{"n", "2025-03-01T12:00:00Z"}},
		{"rolebindings", &rbacv1.RoleBinding{ObjectMeta: meta, RoleRef: rbacv1.RoleRef{Kind: "Role", Name: "pod-reader"}, Subjects: subjects},
			"Name Role Age Users* Groups* ServiceAccounts*",
			[]interface{}{"n", "Role/pod-reader", "2d1h", "jane, bob", "ops", "/agent, kube-system/sync"}},
		{"clusterrolebindings", &rbacv1.ClusterRoleBinding{ObjectMeta: meta, RoleRef: rbacv1.RoleRef{Kind: "ClusterRole", Name: "view"}},
			"Name Role Age Users* Groups* ServiceAccounts*",
			[]interface{}{"n", "ClusterRole/view", "2d1h", "", "", ""}},
	}
	for _, tt := range tests {
		rules := rulesFor(t, tt.plural)
		var names []string
		for _, c := range rules.Columns() {
			if c.Priority == 1 {
				c.Name += "*"
			}
			names = append(names, c.Name)
		}
		if got := strings.Join(names, " "); got != tt.columns {
			t.Errorf("%s: Columns() = %s, want %s", tt.plural, got, tt.columns)
		}
		if got := rules.Row(tt.obj); !reflect.DeepEqual(got, tt.row) {
			t.Errorf("%s: Row() = %#v, want %#v", tt.plural, got, tt.row)
		}
	}
}

// TestResources checks what `kubectl api-resources` shows, as upstream:
// no short names or categories, roles and rolebindings namespaced, and
// every one creatable with a PUT.
func TestResources(t *testing.T) {
	var got []string
	for _, r := range Resources() {
		got = append(got, fmt.Sprintf("%s %s %s/%s namespaced=%v short=%v categories=%v status=%v put=%v",
			r.Plural, r.Singular, r.GroupVersion, r.Kind, r.Namespaced, r.ShortNames, r.Categories, r.Status,
			r.Rules.(typed.All).AllowCreateOnUpdate()))
	}
	want := []string{
		"roles role rbac.authorization.k8s.io/v1/Role namespaced=true short=[] categories=[] status=false put=true",
		"clusterroles clusterrole rbac.authorization.k8s.io/v1/ClusterRole namespaced=false short=[] categories=[] status=false put=true",
		"rolebindings rolebinding rbac.authorization.k8s.io/v1/RoleBinding namespaced=true short=[] categories=[] status=false put=true",
		"clusterrolebindings clusterrolebinding rbac.authorization.k8s.io/v1/ClusterRoleBinding namespaced=false short=[] categories=[] status=false put=true",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Resources() =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestWrongType: the rules, given an object of another type, neither
// panic nor accept it.
func TestWrongType(t *testing.T) { typedtest.WrongType(t, Resources()) }
