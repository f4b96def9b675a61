package rbac

import (
	"context"
	"fmt"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/outpost-mesh/outpost/hub/auth"
	"github.com/outpost-mesh/outpost/hub/controllers/clusterroleaggregation"
)

func TestAggregateBootstrap(t *testing.T) {
	roles, err := clusterroleaggregation.Aggregate(ClusterRoles())
	if err != nil {
		t.Fatalf("Aggregate(ClusterRoles()) error %v", err)
	}
	byName := map[string]rbacv1.ClusterRole{}
	for _, r := range roles {
		byName[r.Name] = r
	}
	// view < edit < admin, each the union of its parts.
	tests := []struct {
		role  string
		parts []string
	}{
		{"view", []string{"system:aggregate-to-view"}},
		{"edit", []string{"system:aggregate-to-edit", "view"}},
		{"admin", []string{"system:aggregate-to-admin", "edit"}},
	}
	for _, tt := range tests {
		var want []rbacv1.PolicyRule
		for _, p := range tt.parts {
			want = append(want, byName[p].Rules...)
		}
		got := byName[tt.role].Rules
		if ok, missing := Covers(got, want); !ok {
			t.Errorf("Aggregate: %s lacks %v", tt.role, missing)
		}
		if ok, extra := Covers(want, got); !ok {
			t.Errorf("Aggregate: %s has more than %v: %v", tt.role, tt.parts, extra)
		}
	}
	// The input is not modified.
	for _, r := range ClusterRoles() {
		if r.Name == "admin" && len(r.Rules) != 0 {
			t.Errorf("ClusterRoles(): admin has rules %v, want none", r.Rules)
		}
	}
}

func TestBootstrapPolicy(t *testing.T) {
	z := New(withBootstrap(t, &fakePolicy{
		roleBindings: []*rbacv1.RoleBinding{
			roleBinding("ns", "v", "ClusterRole", "view", userSubject("viewer")),
			roleBinding("ns", "e", "ClusterRole", "edit", userSubject("editor")),
			roleBinding("ns", "a", "ClusterRole", "admin", userSubject("admin")),
		},
	}))
	user := func(name string) auth.User { return auth.User{Name: name, Groups: []string{auth.AuthenticatedGroup}} }
	tests := []struct {
		user string
		a    auth.Attributes
		want bool
	}{
		{"viewer", res("list", "", "pods", "", "ns", ""), true},
		{"viewer", res("get", "", "pods", "log", "ns", "p"), true},
		{"viewer", res("get", "", "secrets", "", "ns", "s"), false},
		{"viewer", res("list", "", "secrets", "", "ns", ""), false},
		{"viewer", res("create", "", "pods", "exec", "ns", "p"), false},
		{"viewer", res("create", "apps", "deployments", "", "ns", ""), false},
		{"editor", res("create", "apps", "deployments", "", "ns", ""), true},
		{"editor", res("patch", "apps", "deployments", "scale", "ns", "d"), true},
		{"editor", res("get", "", "secrets", "", "ns", "s"), true},
		{"editor", res("create", "", "pods", "exec", "ns", "p"), true},
		{"editor", res("create", "rbac.authorization.k8s.io", "rolebindings", "", "ns", ""), false},
		{"editor", res("update", "", "resourcequotas", "", "ns", "q"), false},
		{"admin", res("create", "rbac.authorization.k8s.io", "rolebindings", "", "ns", ""), true},
		{"admin", res("create", "authorization.k8s.io", "localsubjectaccessreviews", "", "ns", ""), true},
		{"admin", res("create", "apps", "deployments", "", "ns", ""), true},
		{"admin", res("create", "apps", "deployments", "", "other", ""), false},
		{"admin", res("create", "rbac.authorization.k8s.io", "clusterroles", "", "", ""), false},
		{"nobody", res("create", "authorization.k8s.io", "selfsubjectaccessreviews", "", "", ""), true},
		{"nobody", res("create", "authentication.k8s.io", "selfsubjectreviews", "", "", ""), true},
		{"nobody", nonRes("get", "/openapi/v3/apis/apps/v1"), true},
		{"nobody", nonRes("get", "/version"), true},
		{"nobody", nonRes("get", "/metrics"), false},
		{"nobody", res("list", "", "pods", "", "ns", ""), false},
	}
	for _, tt := range tests {
		u := user(tt.user)
		d, err := z.Authorize(context.Background(), u, tt.a)
		if err != nil || d.Allowed != tt.want {
			t.Errorf("Authorize(%v, %+v) = %+v, %v, want allowed %v", u, tt.a, d, err, tt.want)
		}
	}

	// Controllers and components as themselves.
	sa := auth.ServiceAccountUser
	idTests := []struct {
		u    auth.User
		a    auth.Attributes
		want bool
	}{
		{sa("kube-system", "replicaset-controller"), res("create", "", "pods", "", "x", ""), true},
		{sa("kube-system", "replicaset-controller"), res("delete", "", "secrets", "", "x", "s"), false},
		{sa("kube-system", "generic-garbage-collector"), res("delete", "example.com", "widgets", "", "x", "w"), true},
		{sa("kube-system", "namespace-controller"), res("update", "", "namespaces", "finalize", "x", "x"), true},
		{sa("kube-system", "disruption-controller"), res("get", "apps", "statefulsets", "scale", "x", "s"), true},
		{sa("kube-system", "clusterrole-aggregation-controller"), res("escalate", rbacGroup, "clusterroles", "", "", "admin"), true},
		{sa("kube-system", "service-account-controller"), res("create", "", "serviceaccounts", "", "x", ""), true},
		{sa("kube-system", "root-ca-cert-publisher"), res("update", "", "configmaps", "", "x", "kube-root-ca.crt"), true},
		{sa("other", "replicaset-controller"), res("create", "", "pods", "", "x", ""), false},
		{sa("kube-system", "replication-controller"), res("update", "", "replicationcontrollers", "status", "x", "rc"), true},
		{sa("kube-system", "replication-controller"), res("update", "apps", "replicasets", "status", "x", "rs"), false},
		{sa("kube-system", "storage-version-migrator-controller"), res("patch", "example.com", "widgets", "", "x", "w"), true},
		{sa("kube-system", "storage-version-migrator-controller"), res("update", "storagemigration.k8s.io", "storageversionmigrations", "status", "", "m"), true},
		{sa("kube-system", "storage-version-migrator-controller"), res("delete", "example.com", "widgets", "", "x", "w"), false},
		// What the hub's controllers do beyond their upstream roles.
		{sa("kube-system", "service-account-controller"), res("update", "", "configmaps", "", "x", "kube-root-ca.crt"), true},
		{sa("kube-system", "service-account-controller"), res("delete", "", "configmaps", "", "x", "kube-root-ca.crt"), false},
		{sa("kube-system", "deployment-controller"), res("patch", "apps", "deployments", "", "x", "d"), true},
		{sa("kube-system", "crd-controller"), res("deletecollection", "example.com", "widgets", "", "x", ""), true},
		{sa("kube-system", "crd-controller"), res("create", "example.com", "widgets", "", "x", ""), false},
		{sa("kube-system", "certificate-controller"), res("sign", certificatesGroup, "signers", "", "", "kubernetes.io/kube-apiserver-client"), true},
		{sa("kube-system", "certificate-controller"), res("sign", certificatesGroup, "signers", "", "", "example.com/mine"), false},
		{auth.User{Name: auth.ControllerManagerUser}, res("watch", "apps", "deployments", "", "", ""), true},
		{auth.User{Name: auth.ControllerManagerUser}, res("get", coordinationGroup, "leases", "", "kube-system", "kube-controller-manager"), true},
		{auth.User{Name: auth.ControllerManagerUser}, res("delete", "", "pods", "", "x", "p"), false},
		{auth.User{Name: auth.SchedulerUser}, res("patch", "", "pods", "status", "x", "p"), true},
		{auth.User{Name: auth.SchedulerUser}, res("get", "", "secrets", "", "x", "s"), false},
		{auth.User{Name: KubeProxyUser}, res("watch", discoveryGroup, "endpointslices", "", "", ""), true},
		{auth.User{Name: "m", Groups: []string{MonitoringGroup}}, nonRes("get", "/metrics"), true},
		{auth.User{Name: "m", Groups: []string{MonitoringGroup}}, nonRes("get", "/readyz/etcd"), true},
		{sa("x", "y"), nonRes("get", "/openid/v1/jwks"), true},
		{auth.User{Name: "system:node:n1", Groups: []string{auth.NodesGroup}}, res("get", "", "pods", "", "x", "p"), false},
	}
	for _, tt := range idTests {
		d, err := z.Authorize(context.Background(), tt.u, tt.a)
		if err != nil || d.Allowed != tt.want {
			t.Errorf("Authorize(%v, %+v) = %+v, %v, want allowed %v", tt.u, tt.a, d, err, tt.want)
		}
	}
}

func TestBootstrapObjects(t *testing.T) {
	roles := ClusterRoles()
	names := map[string]bool{}
	var clusterAdmin rbacv1.ClusterRole
	for _, r := range roles {
		if names[r.Name] {
			t.Errorf("ClusterRoles(): %s twice", r.Name)
		}
		names[r.Name] = true
		if r.Labels[BootstrapLabel] != BootstrapLabelValue || r.Annotations[rbacv1.AutoUpdateAnnotationKey] != "true" {
			t.Errorf("ClusterRoles(): %s has labels %v and annotations %v, want %s=%s and %s=true",
				r.Name, r.Labels, r.Annotations, BootstrapLabel, BootstrapLabelValue, rbacv1.AutoUpdateAnnotationKey)
		}
		if r.AggregationRule == nil && len(r.Rules) == 0 {
			t.Errorf("ClusterRoles(): %s has no rules", r.Name)
		}
		for _, rule := range r.Rules {
			if len(rule.Verbs) == 0 || (len(rule.Resources) > 0) == (len(rule.NonResourceURLs) > 0) || (len(rule.Resources) > 0 && len(rule.APIGroups) == 0) {
				t.Errorf("ClusterRoles(): %s has invalid rule %v", r.Name, compactString(rule))
			}
		}
		if r.Name == "cluster-admin" {
			clusterAdmin = r
		}
	}
	for _, want := range []string{
		"cluster-admin", "admin", "edit", "view", "system:aggregate-to-admin", "system:aggregate-to-edit", "system:aggregate-to-view",
		"system:basic-user", "system:discovery", "system:public-info-viewer", "system:auth-delegator",
		"system:service-account-issuer-discovery", "system:kube-scheduler", "system:kube-controller-manager",
		"system:node-proxier", "system:monitoring", "system:node",
		"system:controller:deployment-controller", "system:controller:replicaset-controller", "system:controller:daemon-set-controller",
		"system:controller:statefulset-controller", "system:controller:job-controller", "system:controller:cronjob-controller",
		"system:controller:endpoint-controller", "system:controller:endpointslice-controller", "system:controller:generic-garbage-collector",
		"system:controller:namespace-controller", "system:controller:service-account-controller", "system:controller:node-controller",
		"system:controller:ttl-after-finished-controller", "system:controller:disruption-controller",
		"system:controller:clusterrole-aggregation-controller", "system:controller:pod-garbage-collector", "system:controller:root-ca-cert-publisher",
	} {
		if !names[want] {
			t.Errorf("ClusterRoles() lacks %s", want)
		}
	}

	// cluster-admin covers every rule of every role.
	for _, r := range roles {
		if ok, missing := Covers(clusterAdmin.Rules, r.Rules); !ok {
			t.Errorf("Covers(cluster-admin, %s) = false, missing %v", r.Name, missing)
		}
	}

	bound := map[string]bool{}
	for _, b := range ClusterRoleBindings() {
		if b.RoleRef.Kind != "ClusterRole" || b.RoleRef.APIGroup != rbacv1.GroupName || !names[b.RoleRef.Name] {
			t.Errorf("ClusterRoleBindings(): %s refers to %+v, not a bootstrap ClusterRole", b.Name, b.RoleRef)
		}
		if b.Labels[BootstrapLabel] != BootstrapLabelValue || b.Annotations[rbacv1.AutoUpdateAnnotationKey] != "true" {
			t.Errorf("ClusterRoleBindings(): %s has labels %v and annotations %v", b.Name, b.Labels, b.Annotations)
		}
		if bound[b.Name] {
			t.Errorf("ClusterRoleBindings(): %s twice", b.Name)
		}
		bound[b.Name] = true
	}
	for name := range names {
		if len(name) > len(ControllerRolePrefix) && name[:len(ControllerRolePrefix)] == ControllerRolePrefix && !bound[name] {
			t.Errorf("ClusterRoleBindings(): controller role %s is not bound", name)
		}
	}

	// Each call returns objects of its own.
	a, b := ClusterRoles(), ClusterRoles()
	a[0].Rules[0].Verbs[0] = "changed"
	a[0].Labels["x"] = "y"
	if b[0].Rules[0].Verbs[0] == "changed" || b[0].Labels["x"] == "y" {
		t.Errorf("ClusterRoles() results share memory")
	}
}

func TestBootstrapBindings(t *testing.T) {
	subjects := map[string]string{}
	for _, b := range ClusterRoleBindings() {
		subjects[b.Name] = fmt.Sprint(b.Subjects)
	}
	tests := []struct {
		binding string
		want    []rbacv1.Subject
	}{
		{"cluster-admin", []rbacv1.Subject{groupSubject(auth.MastersGroup)}},
		{"system:basic-user", []rbacv1.Subject{groupSubject(auth.AuthenticatedGroup)}},
		{"system:discovery", []rbacv1.Subject{groupSubject(auth.AuthenticatedGroup)}},
		{"system:public-info-viewer", []rbacv1.Subject{groupSubject(auth.AuthenticatedGroup), groupSubject(auth.UnauthenticatedGroup)}},
		{"system:kube-scheduler", []rbacv1.Subject{userSubject(auth.SchedulerUser)}},
		{"system:kube-controller-manager", []rbacv1.Subject{userSubject(auth.ControllerManagerUser)}},
		{"system:service-account-issuer-discovery", []rbacv1.Subject{groupSubject(auth.ServiceAccountsGroup)}},
		{"system:node", nil},
		{"system:controller:job-controller", []rbacv1.Subject{saSubject("kube-system", "job-controller")}},
		{"system:controller:generic-garbage-collector", []rbacv1.Subject{saSubject("kube-system", "generic-garbage-collector")}},
	}
	for _, tt := range tests {
		if got, ok := subjects[tt.binding]; !ok || got != fmt.Sprint(tt.want) {
			t.Errorf("ClusterRoleBindings(): %s subjects = %s (found %v), want %v", tt.binding, got, ok, tt.want)
		}
	}
}
