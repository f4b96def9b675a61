package hubd_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/outpost-mesh/outpost/internal/wait"
	"github.com/outpost-mesh/outpost/test/hubtest"
)

// TestRBAC drives the hub's RBAC as a user sees it, through a real hub:
// the bootstrap roles with view, edit and admin aggregated; a service
// account that may do nothing, then reads one namespace through view and
// gets upstream's 403 elsewhere and on writes; and the escalation checks
// on the roles and bindings it writes.
func TestRBAC(t *testing.T) {
	h := hubtest.Start(t)
	ctx := context.Background()
	admin := h.Client
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}

	// The bootstrap policy, with the aggregated roles filled in by the
	// aggregation controller.
	for _, name := range []string{"cluster-admin", "admin", "edit", "view", "system:discovery", "system:basic-user"} {
		cr, err := admin.RbacV1().ClusterRoles().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("bootstrap clusterrole %s: %v", name, err)
		}
		if cr.Annotations[rbacv1.AutoUpdateAnnotationKey] != "true" {
			t.Errorf("clusterrole %s annotations = %v, want autoupdate true", name, cr.Annotations)
		}
	}
	wait.For(t, 20*time.Second, "view, edit and admin aggregated", func() (bool, string) {
		for _, name := range []string{"view", "edit", "admin"} {
			cr, err := admin.RbacV1().ClusterRoles().Get(ctx, name, metav1.GetOptions{})
			if err != nil || !slices.ContainsFunc(cr.Rules, func(r rbacv1.PolicyRule) bool { return slices.Contains(r.Resources, "pods") }) {
				return false, fmt.Sprintf("%s: %v", name, err)
			}
		}
		return true, ""
	})

	for _, ns := range []string{"a", "b"} {
		must(admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}))
	}
	alice := saClient(t, h, "a", "alice")
	const aliceName = "system:serviceaccount:a:alice"

	_, err := alice.CoreV1().Pods("a").List(ctx, metav1.ListOptions{})
	wantForbidden(t, "list pods without a role", err, `pods is forbidden: User "`+aliceName+`" cannot list resource "pods" in API group "" in the namespace "a"`)

	must(admin.RbacV1().RoleBindings("a").Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "alice-views"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "a", Name: "alice"}},
	}, metav1.CreateOptions{}))
	wait.For(t, 10*time.Second, "alice to read pods in a", func() (bool, string) {
		_, err := alice.CoreV1().Pods("a").List(ctx, metav1.ListOptions{})
		return err == nil, fmt.Sprint(err)
	})
	_, err = alice.CoreV1().Pods("b").List(ctx, metav1.ListOptions{})
	wantForbidden(t, "list pods in another namespace", err, `User "`+aliceName+`" cannot list resource "pods" in API group "" in the namespace "b"`)
	_, err = alice.CoreV1().ConfigMaps("a").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{})
	wantForbidden(t, "create a configmap as a viewer", err, `User "`+aliceName+`" cannot create resource "configmaps" in API group "" in the namespace "a"`)
	_, err = alice.CoreV1().Secrets("a").List(ctx, metav1.ListOptions{})
	wantForbidden(t, "list secrets as a viewer", err, `cannot list resource "secrets"`)
	_, err = alice.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	wantForbidden(t, "list nodes", err, `User "`+aliceName+`" cannot list resource "nodes" in API group "" at the cluster scope`)

	// Alice may write roles and bindings in a, and read pods there
	// (through view): she may grant what she holds, not more.
	must(admin.RbacV1().Roles("a").Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "rbac-writer"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{rbacv1.GroupName}, Resources: []string{"roles", "rolebindings"},
			Verbs: []string{"get", "list", "create", "update", "delete"}}},
	}, metav1.CreateOptions{}))
	must(admin.RbacV1().RoleBindings("a").Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "alice-writes-rbac"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "rbac-writer"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "a", Name: "alice"}},
	}, metav1.CreateOptions{}))
	readPods := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "read-pods"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list"}}}}
	wait.For(t, 10*time.Second, "alice to create a role she holds", func() (bool, string) {
		_, err := alice.RbacV1().Roles("a").Create(ctx, readPods, metav1.CreateOptions{})
		return err == nil, fmt.Sprint(err)
	})
	_, err = alice.RbacV1().Roles("a").Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "delete-pods"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"delete"}}}}, metav1.CreateOptions{})
	wantForbidden(t, "create a role granting more", err, `user "`+aliceName+`" (groups=["system:serviceaccounts" "system:serviceaccounts:a" "system:authenticated"]) is attempting to grant RBAC permissions not currently held`)
	editBinding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "alice-edits"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "a", Name: "alice"}},
	}
	_, err = alice.RbacV1().RoleBindings("a").Create(ctx, editBinding, metav1.CreateOptions{})
	wantForbidden(t, "bind a role granting more", err, "is attempting to grant RBAC permissions not currently held")
	_, err = alice.RbacV1().RoleBindings("a").Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "to-nothing"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "missing"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "x"}},
	}, metav1.CreateOptions{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("bind a missing role = %v, want 404", err)
	}

	// The bind verb on edit lets her bind it without holding it.
	must(admin.RbacV1().Roles("a").Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "bind-edit"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{rbacv1.GroupName}, Resources: []string{"clusterroles"},
			ResourceNames: []string{"edit"}, Verbs: []string{"bind"}}},
	}, metav1.CreateOptions{}))
	must(admin.RbacV1().RoleBindings("a").Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "alice-binds-edit"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "bind-edit"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "a", Name: "alice"}},
	}, metav1.CreateOptions{}))
	wait.For(t, 10*time.Second, "alice to bind edit", func() (bool, string) {
		_, err := alice.RbacV1().RoleBindings("a").Create(ctx, editBinding, metav1.CreateOptions{})
		return err == nil, fmt.Sprint(err)
	})
	wait.For(t, 10*time.Second, "alice to create a configmap as an editor", func() (bool, string) {
		_, err := alice.CoreV1().ConfigMaps("a").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{})
		return err == nil, fmt.Sprint(err)
	})
}

// saClient returns a client of service account ns/name, which it
// creates, with a token the hub issues for it.
func saClient(t *testing.T, h *hubtest.Hub, ns, name string) kubernetes.Interface {
	t.Helper()
	ctx := context.Background()
	if _, err := h.Client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	tr, err := h.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.AnonymousClientConfig(h.Config)
	cfg.BearerToken = tr.Status.Token
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// wantForbidden fails t unless err is a 403 whose message contains want.
func wantForbidden(t *testing.T, what string, err error, want string) {
	t.Helper()
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), want) {
		t.Errorf("%s = %v, want 403 with %q", what, err, want)
	}
}
