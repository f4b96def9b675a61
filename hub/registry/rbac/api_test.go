package rbac_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/outpost-mesh/outpost/hub/registry/typed/typedtest"
	"github.com/outpost-mesh/outpost/test/hubtest"
)

// table gets path as a Table and returns its column names, the wide ones
// marked with *, and its rows' cells.
func table(t *testing.T, c kubernetes.Interface, path string) (string, [][]interface{}) {
	t.Helper()
	tbl := typedtest.Table(t, c.RbacV1().RESTClient(), path)
	var names []string
	for _, c := range tbl.ColumnDefinitions {
		if c.Priority == 1 {
			c.Name += "*"
		}
		names = append(names, c.Name)
	}
	var rows [][]interface{}
	for _, r := range tbl.Rows {
		rows = append(rows, r.Cells)
	}
	return strings.Join(names, " "), rows
}

// TestAPI serves the four kinds through a real hub and client-go: valid
// objects are stored with their defaults, bad ones refused with 422 and the
// field at fault, a binding's roleRef may not change, and kubectl's tables
// have upstream's columns.
func TestAPI(t *testing.T) {
	h := hubtest.Start(t)
	ctx := context.Background()
	c := h.Client.RbacV1()

	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "pod-reader"},
		Rules:      []rbacv1.PolicyRule{{Verbs: []string{"get", "list", "watch"}, APIGroups: []string{""}, Resources: []string{"pods"}}},
	}
	if _, err := c.Roles("default").Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create role: %v", err)
	}
	// Created with a PUT, as kubectl auth reconcile does.
	view := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "edge:view"},
		Rules: []rbacv1.PolicyRule{
			{Verbs: []string{"get"}, APIGroups: []string{"", "apps"}, Resources: []string{"pods", "deployments"}},
			{Verbs: []string{"get"}, NonResourceURLs: []string{"/healthz", "/version"}},
		},
	}
	if _, err := c.ClusterRoles().Update(ctx, view, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("create clusterrole with a PUT: %v", err)
	}
	rb, err := c.RoleBindings("default").Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "read-pods"},
		RoleRef:    rbacv1.RoleRef{Kind: "Role", Name: "pod-reader"},
		Subjects: []rbacv1.Subject{
			{Kind: rbacv1.UserKind, Name: "jane"},
			{Kind: rbacv1.GroupKind, Name: "ops"},
			{Kind: rbacv1.ServiceAccountKind, Name: "agent", Namespace: "default"},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create rolebinding: %v", err)
	}
	if rb.RoleRef.APIGroup != rbacv1.GroupName || rb.Subjects[0].APIGroup != rbacv1.GroupName || rb.Subjects[2].APIGroup != "" {
		t.Errorf("created rolebinding %+v, want API groups defaulted", rb)
	}
	crb, err := c.ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "edge:view"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edge:view"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.GroupKind, Name: "system:nodes"}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create clusterrolebinding: %v", err)
	}

	// Bad objects.
	_, err = c.Roles("default").Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "urls"},
		Rules:      []rbacv1.PolicyRule{{Verbs: []string{"get"}, NonResourceURLs: []string{"/healthz"}}},
	}, metav1.CreateOptions{})
	if got := typedtest.Causes(t, "create role with a non-resource URL", err); !slices.Contains(got, "rules[0].nonResourceURLs") {
		t.Errorf("create role with a non-resource URL: causes %v, want rules[0].nonResourceURLs", got)
	}
	_, err = c.ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "bad"},
		RoleRef:    rbacv1.RoleRef{Kind: "Role", Name: "pod-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "agent"}},
	}, metav1.CreateOptions{})
	if got := typedtest.Causes(t, "create clusterrolebinding to a role", err); !slices.Contains(got, "roleRef.kind") || !slices.Contains(got, "subjects[0].namespace") {
		t.Errorf("create clusterrolebinding to a role: causes %v, want roleRef.kind and subjects[0].namespace", got)
	}

	// roleRef is immutable; subjects are not.
	rb.RoleRef.Kind, rb.RoleRef.Name = "ClusterRole", "edge:view"
	_, err = c.RoleBindings("default").Update(ctx, rb, metav1.UpdateOptions{})
	if got := typedtest.Causes(t, "change roleRef", err); !slices.Contains(got, "roleRef") || !strings.Contains(err.Error(), "cannot change roleRef") {
		t.Errorf("change roleRef: %v (causes %v), want roleRef: cannot change roleRef", err, got)
	}
	crb.Subjects = append(crb.Subjects, rbacv1.Subject{Kind: rbacv1.UserKind, Name: "bob"})
	if _, err := c.ClusterRoleBindings().Update(ctx, crb, metav1.UpdateOptions{}); err != nil {
		t.Errorf("add a subject: %v", err)
	}

	tables := []struct {
		path    string
		columns string
		cells   []interface{} // but the time ones
	}{
		{"/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles", "Name Created At", []interface{}{"pod-reader"}},
		{"/apis/rbac.authorization.k8s.io/v1/clusterroles/edge:view", "Name Created At", []interface{}{"edge:view"}},
		{"/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings", "Name Role Age Users* Groups* ServiceAccounts*",
			[]interface{}{"read-pods", "Role/pod-reader", "jane", "ops", "default/agent"}},
		{"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/edge:view", "Name Role Age Users* Groups* ServiceAccounts*",
			[]interface{}{"edge:view", "ClusterRole/edge:view", "bob", "system:nodes", ""}},
	}
	for _, tt := range tables {
		columns, rows := table(t, h.Client, tt.path)
		if columns != tt.columns {
			t.Errorf("%s: columns %s, want %s", tt.path, columns, tt.columns)
		}
		if len(rows) != 1 {
			t.Errorf("%s: rows %v, want one", tt.path, rows)
			continue
		}
		timeCell := 1 // Created At, or Age after Role
		if len(rows[0]) > 2 {
			timeCell = 2
		}
		cells := slices.Delete(slices.Clone(rows[0]), timeCell, timeCell+1)
		if !slices.Equal(cells, tt.cells) {
			t.Errorf("%s: cells %v, want %v and a time", tt.path, rows[0], tt.cells)
		}
	}
}
