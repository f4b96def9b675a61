package hubd

import (
	"context"
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TestBootstrapRBACReconciled restarts a hub whose bootstrap policy an
// admin changed: a rule removed from a bootstrap role and a subject from
// a bootstrap binding come back, extra rules stay, and a role the admin
// protected with autoupdate "false" is left as the admin made it.
func TestBootstrapRBACReconciled(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	h, stop := startHub(t, dir, noControllers)
	cs, err := kubernetes.NewForConfig(adminConfig(t, h))
	if err != nil {
		t.Fatal(err)
	}
	roles, bindings := cs.RbacV1().ClusterRoles(), cs.RbacV1().ClusterRoleBindings()
	extra := rbacv1.PolicyRule{Verbs: []string{"get"}, NonResourceURLs: []string{"/extra"}}
	discovery, err := roles.Get(ctx, "system:discovery", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wantDiscovery := discovery.Rules
	discovery.Rules = []rbacv1.PolicyRule{extra}
	if _, err := roles.Update(ctx, discovery, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	basic, err := roles.Get(ctx, "system:basic-user", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	basic.Annotations[rbacv1.AutoUpdateAnnotationKey] = "false"
	basic.Rules = []rbacv1.PolicyRule{extra}
	if _, err := roles.Update(ctx, basic, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	admins, err := bindings.Get(ctx, "cluster-admin", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	admins.Subjects = nil
	if _, err := bindings.Update(ctx, admins, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	stop()

	h, stop = startHub(t, dir, noControllers)
	defer stop()
	if cs, err = kubernetes.NewForConfig(adminConfig(t, h)); err != nil {
		t.Fatal(err)
	}
	roles, bindings = cs.RbacV1().ClusterRoles(), cs.RbacV1().ClusterRoleBindings()
	discovery, err = roles.Get(ctx, "system:discovery", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Missing rules come back broken down, one URL each, as upstream's
	// reconciliation adds them.
	for _, r := range append(wantDiscovery, extra) {
		for _, url := range r.NonResourceURLs {
			if !slices.ContainsFunc(discovery.Rules, func(have rbacv1.PolicyRule) bool { return slices.Contains(have.NonResourceURLs, url) }) {
				t.Errorf("system:discovery after restart has %v, want %s too", discovery.Rules, url)
			}
		}
	}
	basic, err = roles.Get(ctx, "system:basic-user", metav1.GetOptions{})
	if err != nil || len(basic.Rules) != 1 || basic.Rules[0].NonResourceURLs[0] != "/extra" {
		t.Errorf("protected system:basic-user after restart = %v, %v; want only the admin's rule", basic.Rules, err)
	}
	admins, err = bindings.Get(ctx, "cluster-admin", metav1.GetOptions{})
	if err != nil || len(admins.Subjects) != 1 || admins.Subjects[0].Name != "system:masters" {
		t.Errorf("cluster-admin binding after restart = %v, %v; want system:masters back", admins.Subjects, err)
	}
}
