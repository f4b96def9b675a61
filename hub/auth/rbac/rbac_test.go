package rbac

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/hub/auth"
	"github.com/outpost-mesh/outpost/hub/controllers/clusterroleaggregation"
)

// fakePolicy is an in-memory Policy: the objects as given, no store, no
// watch. err, when set, fails every list.
type fakePolicy struct {
	roles               []*rbacv1.Role
	clusterRoles        []*rbacv1.ClusterRole
	roleBindings        []*rbacv1.RoleBinding
	clusterRoleBindings []*rbacv1.ClusterRoleBinding
	err                 error
}

var _ Policy = (*fakePolicy)(nil)

func (f *fakePolicy) GetRole(_ context.Context, ns, name string) (*rbacv1.Role, error) {
	for _, r := range f.roles {
		if r.Namespace == ns && r.Name == name {
			return r, nil
		}
	}
	return nil, nil
}

func (f *fakePolicy) GetClusterRole(_ context.Context, name string) (*rbacv1.ClusterRole, error) {
	for _, r := range f.clusterRoles {
		if r.Name == name {
			return r, nil
		}
	}
	return nil, nil
}

func (f *fakePolicy) ListRoleBindings(_ context.Context, ns string) ([]*rbacv1.RoleBinding, error) {
	if f.err != nil {
		return nil, f.err
	}
	var out []*rbacv1.RoleBinding
	for _, b := range f.roleBindings {
		if b.Namespace == ns {
			out = append(out, b)
		}
	}
	return out, nil
}

func (f *fakePolicy) ListClusterRoleBindings(context.Context) ([]*rbacv1.ClusterRoleBinding, error) {
	if f.err != nil {
		return nil, f.err
	}
	return f.clusterRoleBindings, nil
}

// withBootstrap adds the bootstrap roles, aggregated, and bindings to f.
func withBootstrap(t *testing.T, f *fakePolicy) *fakePolicy {
	t.Helper()
	roles, err := clusterroleaggregation.Aggregate(ClusterRoles())
	if err != nil {
		t.Fatalf("Aggregate(ClusterRoles()) error %v", err)
	}
	for i := range roles {
		f.clusterRoles = append(f.clusterRoles, &roles[i])
	}
	bindings := ClusterRoleBindings()
	for i := range bindings {
		f.clusterRoleBindings = append(f.clusterRoleBindings, &bindings[i])
	}
	return f
}

func res(verb, group, resource, sub, ns, name string) auth.Attributes {
	return auth.Attributes{ResourceRequest: true, Verb: verb, APIGroup: group, Resource: resource, Subresource: sub, Namespace: ns, Name: name}
}

func nonRes(verb, path string) auth.Attributes {
	return auth.Attributes{Verb: verb, Path: path}
}

func TestRuleAllows(t *testing.T) {
	r := func(b rule) rbacv1.PolicyRule { return b.done() }
	tests := []struct {
		name string
		rule rbacv1.PolicyRule
		a    auth.Attributes
		want bool
	}{
		{"exact", r(verbs("get").groups("").resources("pods")), res("get", "", "pods", "", "ns", "p"), true},
		{"other verb", r(verbs("get").groups("").resources("pods")), res("list", "", "pods", "", "ns", ""), false},
		{"verb *", r(verbs("*").groups("").resources("pods")), res("deletecollection", "", "pods", "", "ns", ""), true},
		{"other group", r(verbs("get").groups("apps").resources("pods")), res("get", "", "pods", "", "ns", "p"), false},
		{"group *", r(verbs("get").groups("*").resources("deployments")), res("get", "apps", "deployments", "", "ns", "d"), true},
		{"resource *", r(verbs("get").groups("").resources("*")), res("get", "", "secrets", "", "ns", "s"), true},
		{"resource * covers subresources", r(verbs("get").groups("").resources("*")), res("get", "", "pods", "log", "ns", "p"), true},
		{"resource does not cover subresource", r(verbs("get").groups("").resources("pods")), res("get", "", "pods", "log", "ns", "p"), false},
		{"subresource exact", r(verbs("get").groups("").resources("pods/log")), res("get", "", "pods", "log", "ns", "p"), true},
		{"subresource does not cover resource", r(verbs("get").groups("").resources("pods/log")), res("get", "", "pods", "", "ns", "p"), false},
		{"*/subresource", r(verbs("get").groups("*").resources("*/scale")), res("get", "apps", "deployments", "scale", "ns", "d"), true},
		{"*/subresource other subresource", r(verbs("get").groups("*").resources("*/scale")), res("get", "apps", "deployments", "status", "ns", "d"), false},
		{"*/subresource without subresource", r(verbs("get").groups("*").resources("*/scale")), res("get", "apps", "deployments", "", "ns", "d"), false},
		{"resourceNames with the name", r(verbs("get").groups("").resources("configmaps").names("a", "b")), res("get", "", "configmaps", "", "ns", "b"), true},
		{"resourceNames other name", r(verbs("get").groups("").resources("configmaps").names("a")), res("get", "", "configmaps", "", "ns", "c"), false},
		{"resourceNames list without name", r(verbs("list").groups("").resources("configmaps").names("a")), res("list", "", "configmaps", "", "ns", ""), false},
		{"resourceNames list with field selector name", r(verbs("list").groups("").resources("configmaps").names("a")), res("list", "", "configmaps", "", "ns", "a"), true},
		{"resourceNames watch without name", r(verbs("watch").groups("").resources("configmaps").names("a")), res("watch", "", "configmaps", "", "ns", ""), false},
		{"resourceNames create", r(verbs("create").groups("").resources("configmaps").names("a")), res("create", "", "configmaps", "", "ns", ""), false},
		{"resourceNames create with name from body", r(verbs("create").groups("").resources("nodes").names("n1")), res("create", "", "nodes", "", "", "n1"), false},
		{"resourceNames create of subresource", r(verbs("create").groups("").resources("serviceaccounts/token").names("sa")), res("create", "", "serviceaccounts", "token", "ns", "sa"), true},
		{"resourceNames deletecollection", r(verbs("deletecollection").groups("").resources("pods").names("p")), res("deletecollection", "", "pods", "", "ns", ""), false},
		{"no resourceNames create", r(verbs("create").groups("").resources("configmaps")), res("create", "", "configmaps", "", "ns", ""), true},
		{"resource rule does not match URL", r(verbs("get").groups("*").resources("*")), nonRes("get", "/healthz"), false},
		{"URL exact", r(verbs("get").urls("/healthz")), nonRes("get", "/healthz"), true},
		{"URL exact not prefix", r(verbs("get").urls("/healthz")), nonRes("get", "/healthz/etcd"), false},
		{"URL *", r(verbs("get").urls("*")), nonRes("get", "/anything"), true},
		{"URL prefix *", r(verbs("get").urls("/healthz/*")), nonRes("get", "/healthz/etcd"), true},
		{"URL prefix * without slash", r(verbs("get").urls("/healthz*")), nonRes("get", "/healthzfoo"), true},
		{"URL prefix * does not match parent", r(verbs("get").urls("/healthz/*")), nonRes("get", "/healthz"), false},
		{"URL other verb", r(verbs("get").urls("/metrics")), nonRes("post", "/metrics"), false},
		{"URL rule does not match resource", r(verbs("get").urls("*")), res("get", "", "pods", "", "ns", "p"), false},
	}
	for _, tt := range tests {
		if got := RuleAllows(tt.a, &tt.rule); got != tt.want {
			t.Errorf("%s: RuleAllows(%+v, %v) = %v, want %v", tt.name, tt.a, compactString(tt.rule), got, tt.want)
		}
	}
}

func clusterRoleObj(name string, rs ...rule) *rbacv1.ClusterRole {
	return &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules(rs...)}
}

func roleObj(ns, name string, rs ...rule) *rbacv1.Role {
	return &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Rules: rules(rs...)}
}

func roleBinding(ns, name, kind, role string, subjects ...rbacv1.Subject) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: kind, Name: role},
		Subjects:   subjects,
	}
}

func crb(name, role string, subjects ...rbacv1.Subject) *rbacv1.ClusterRoleBinding {
	return &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   subjects,
	}
}

func userSubject(name string) rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: name}
}

func groupSubject(name string) rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: name}
}

func saSubject(ns, name string) rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}
}

func TestAuthorize(t *testing.T) {
	alice := auth.User{Name: "alice", Groups: []string{auth.AuthenticatedGroup}}
	bob := auth.User{Name: "bob", Groups: []string{"dev", auth.AuthenticatedGroup}}
	sa := auth.ServiceAccountUser("team", "builder")
	policy := withBootstrap(t, &fakePolicy{
		clusterRoles: []*rbacv1.ClusterRole{
			clusterRoleObj("pod-reader", verbs(readVerbs...).groups("").resources("pods")),
			clusterRoleObj("node-reader", verbs(readVerbs...).groups("").resources("nodes")),
		},
		roles: []*rbacv1.Role{
			roleObj("team", "cm-writer", verbs("update").groups("").resources("configmaps").names("settings")),
		},
		clusterRoleBindings: []*rbacv1.ClusterRoleBinding{
			crb("nodes-for-dev", "node-reader", groupSubject("dev")),
			crb("dangling", "no-such-role", userSubject("carol")),
		},
		roleBindings: []*rbacv1.RoleBinding{
			// A RoleBinding to a ClusterRole grants in its namespace only.
			roleBinding("team", "alice-pods", "ClusterRole", "pod-reader", userSubject("alice")),
			roleBinding("team", "cm", "Role", "cm-writer", groupSubject("dev")),
			// A ServiceAccount subject without a namespace is the binding's.
			roleBinding("team", "builder-edit", "ClusterRole", "edit", rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: "builder"}),
			roleBinding("other", "builder-view", "ClusterRole", "view", saSubject("team", "builder")),
			roleBinding("other", "dangling-role", "Role", "gone", userSubject("carol")),
		},
	})
	z := New(policy)
	tests := []struct {
		name   string
		u      auth.User
		a      auth.Attributes
		want   bool
		reason string
	}{
		{"rolebinding to clusterrole in its namespace", alice, res("list", "", "pods", "", "team", ""), true,
			`RBAC: allowed by RoleBinding "alice-pods/team" of ClusterRole "pod-reader" to User "alice"`},
		{"rolebinding to clusterrole in another namespace", alice, res("list", "", "pods", "", "other", ""), false, ""},
		{"rolebinding to clusterrole at cluster scope", alice, res("list", "", "pods", "", "", ""), false, ""},
		{"group clusterrolebinding", bob, res("get", "", "nodes", "", "", "n1"), true,
			`RBAC: allowed by ClusterRoleBinding "nodes-for-dev" of ClusterRole "node-reader" to Group "dev"`},
		{"group not held", alice, res("get", "", "nodes", "", "", "n1"), false, ""},
		{"role with resourceNames", bob, res("update", "", "configmaps", "", "team", "settings"), true,
			`RBAC: allowed by RoleBinding "cm/team" of Role "cm-writer" to Group "dev"`},
		{"role with resourceNames other name", bob, res("update", "", "configmaps", "", "team", "other"), false, ""},
		{"service account in binding's namespace", sa, res("create", "apps", "deployments", "", "team", ""), true,
			`RBAC: allowed by RoleBinding "builder-edit/team" of ClusterRole "edit" to ServiceAccount "builder/team"`},
		{"service account bound in another namespace", sa, res("get", "apps", "deployments", "", "other", "d"), true,
			`RBAC: allowed by RoleBinding "builder-view/other" of ClusterRole "view" to ServiceAccount "builder/team"`},
		{"service account view cannot write", sa, res("create", "apps", "deployments", "", "other", ""), false, ""},
		{"namesake of a service account in another namespace", auth.ServiceAccountUser("elsewhere", "builder"), res("create", "apps", "deployments", "", "team", ""), false, ""},
		{"masters", auth.User{Name: "root", Groups: []string{auth.MastersGroup}}, res("delete", "", "secrets", "", "x", "s"), true,
			`RBAC: allowed by ClusterRoleBinding "cluster-admin" of ClusterRole "cluster-admin" to Group "system:masters"`},
		{"discovery", alice, nonRes("get", "/apis/apps/v1"), true,
			`RBAC: allowed by ClusterRoleBinding "system:discovery" of ClusterRole "system:discovery" to Group "system:authenticated"`},
		{"anonymous healthz", auth.Anonymous, nonRes("get", "/healthz"), true,
			`RBAC: allowed by ClusterRoleBinding "system:public-info-viewer" of ClusterRole "system:public-info-viewer" to Group "system:unauthenticated"`},
		{"anonymous discovery", auth.Anonymous, nonRes("get", "/api"), false, ""},
		{"metrics", alice, nonRes("get", "/metrics"), false, ""},
		{"dangling clusterrole", auth.User{Name: "carol"}, res("get", "", "pods", "", "", "p"), false,
			`RBAC: clusterrole.rbac.authorization.k8s.io "no-such-role" not found`},
		{"dangling clusterrole and role", auth.User{Name: "carol"}, res("get", "", "pods", "", "other", "p"), false,
			`RBAC: [clusterrole.rbac.authorization.k8s.io "no-such-role" not found, role.rbac.authorization.k8s.io "gone" not found]`},
		{"scheduler binds", auth.User{Name: auth.SchedulerUser}, res("create", "", "pods", "binding", "x", "p"), true,
			`RBAC: allowed by ClusterRoleBinding "system:kube-scheduler" of ClusterRole "system:kube-scheduler" to User "system:kube-scheduler"`},
		{"deployment controller", auth.ServiceAccountUser("kube-system", "deployment-controller"), res("create", "apps", "replicasets", "", "x", ""), true,
			`RBAC: allowed by ClusterRoleBinding "system:controller:deployment-controller" of ClusterRole "system:controller:deployment-controller" to ServiceAccount "deployment-controller/kube-system"`},
	}
	for _, tt := range tests {
		d, err := z.Authorize(context.Background(), tt.u, tt.a)
		want := auth.Decision{Allowed: tt.want, Reason: tt.reason}
		if err != nil || d != want {
			t.Errorf("%s: Authorize(%v, %+v) = %+v, %v, want %+v, nil", tt.name, tt.u, tt.a, d, err, want)
		}
	}
}

func TestAuthorizeLookupFailure(t *testing.T) {
	failing := errors.New("store down")
	z := New(&fakePolicy{err: failing})
	u := auth.User{Name: "alice"}
	a := res("get", "", "pods", "", "ns", "p")
	d, err := z.Authorize(context.Background(), u, a)
	if !errors.Is(err, failing) || d != (auth.Decision{}) {
		t.Errorf("Authorize(%v, %+v) = %+v, %v, want {}, an error wrapping %v", u, a, d, err, failing)
	}
	rules, err := z.RulesFor(context.Background(), u, "ns")
	if !errors.Is(err, failing) || len(rules) != 0 {
		t.Errorf("RulesFor(%v, ns) = %v, %v, want none, an error wrapping %v", u, rules, err, failing)
	}
}

func TestForbiddenMessage(t *testing.T) {
	u := auth.User{Name: "x"}
	tests := []struct {
		a    auth.Attributes
		want string
	}{
		{res("list", "", "pods", "", "y", ""), `User "x" cannot list resource "pods" in API group "" in the namespace "y"`},
		{res("list", "", "nodes", "", "", ""), `User "x" cannot list resource "nodes" in API group "" at the cluster scope`},
		{res("get", "", "pods", "log", "y", "p"), `User "x" cannot get resource "pods/log" in API group "" in the namespace "y"`},
		{res("create", "apps", "deployments", "", "y", ""), `User "x" cannot create resource "deployments" in API group "apps" in the namespace "y"`},
		{nonRes("get", "/foo"), `User "x" cannot get path "/foo"`},
	}
	z := New(&fakePolicy{})
	for _, tt := range tests {
		d, err := z.Authorize(context.Background(), u, tt.a)
		if err != nil || d.Allowed {
			t.Fatalf("Authorize(%v, %+v) = %+v, %v, want denied", u, tt.a, d, err)
		}
		if got := auth.ForbiddenMessage(u, tt.a, d.Reason); got != tt.want {
			t.Errorf("ForbiddenMessage(%v, %+v, %q) = %q, want %q", u, tt.a, d.Reason, got, tt.want)
		}
	}
}

func TestRulesFor(t *testing.T) {
	policy := &fakePolicy{
		clusterRoles: []*rbacv1.ClusterRole{
			clusterRoleObj("a", verbs("get").groups("").resources("nodes")),
			clusterRoleObj("b", verbs("list").groups("").resources("pods")),
		},
		clusterRoleBindings: []*rbacv1.ClusterRoleBinding{
			crb("a", "a", groupSubject("g")),
			crb("not-mine", "a", userSubject("someone")),
		},
		roleBindings: []*rbacv1.RoleBinding{
			roleBinding("ns", "b", "ClusterRole", "b", userSubject("u")),
			roleBinding("ns", "gone", "Role", "gone", userSubject("u")),
		},
	}
	z := New(policy)
	u := auth.User{Name: "u", Groups: []string{"g"}}
	tests := []struct {
		ns        string
		want      []string
		wantError bool
	}{
		{"", []string{`{APIGroups:[""], Resources:["nodes"], Verbs:["get"]}`}, false},
		{"ns", []string{`{APIGroups:[""], Resources:["nodes"], Verbs:["get"]}`, `{APIGroups:[""], Resources:["pods"], Verbs:["list"]}`}, true},
		{"other", []string{`{APIGroups:[""], Resources:["nodes"], Verbs:["get"]}`}, false},
	}
	for _, tt := range tests {
		rules, err := z.RulesFor(context.Background(), u, tt.ns)
		var got []string
		for _, r := range rules {
			got = append(got, compactString(r))
		}
		if fmt.Sprint(got) != fmt.Sprint(tt.want) || (err != nil) != tt.wantError || (err != nil && !errors.Is(err, ErrRoleNotFound)) {
			t.Errorf("RulesFor(%v, %q) = %v, %v, want %v, error %v", u, tt.ns, got, err, tt.want, tt.wantError)
		}
	}
}

func TestConfirmNoEscalation(t *testing.T) {
	policy := withBootstrap(t, &fakePolicy{
		roleBindings: []*rbacv1.RoleBinding{
			roleBinding("team", "alice-edit", "ClusterRole", "edit", userSubject("alice")),
			roleBinding("team", "alice-gone", "Role", "gone", userSubject("alice")),
		},
	})
	z := New(policy)
	alice := auth.User{Name: "alice", Groups: []string{"dev", auth.AuthenticatedGroup}}
	root := auth.User{Name: "root", Groups: []string{auth.MastersGroup}}
	tests := []struct {
		name  string
		u     auth.User
		ns    string
		rules []rbacv1.PolicyRule
		want  string // "" for no error
	}{
		{"held in namespace", alice, "team", rules(verbs("get", "list").groups("").resources("pods", "configmaps")), ""},
		{"held: subresource", alice, "team", rules(verbs("create").groups("").resources("pods/exec")), ""},
		{"nothing", alice, "team", nil, ""},
		{"masters hold everything", root, "", rules(verbs("*").groups("*").resources("*"), verbs("*").urls("*")), ""},
		{"not held in another namespace", alice, "other", rules(verbs("get").groups("").resources("pods")),
			"user \"alice\" (groups=[\"dev\" \"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n" +
				`{APIGroups:[""], Resources:["pods"], Verbs:["get"]}`},
		{"partly held, compacted and sorted", alice, "team", rules(
			verbs("get", "list", "escalate", "bind").groups(rbacGroup).resources("roles"),
			verbs("get", "update").groups("").resources("resourcequotas"),
			verbs("get").urls("/metrics"),
			verbs("get").groups("").resources("nodes").names("n1"),
		), "user \"alice\" (groups=[\"dev\" \"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n" +
			`{APIGroups:[""], Resources:["nodes"], ResourceNames:["n1"], Verbs:["get"]}` + "\n" +
			`{APIGroups:[""], Resources:["resourcequotas"], Verbs:["update"]}` + "\n" +
			`{APIGroups:["rbac.authorization.k8s.io"], Resources:["roles"], Verbs:["bind" "escalate" "get" "list"]}` + "\n" +
			`{NonResourceURLs:["/metrics"], Verbs:["get"]}` +
			`; resolution errors: [role.rbac.authorization.k8s.io "gone" not found]`},
	}
	for _, tt := range tests {
		err := z.ConfirmNoEscalation(context.Background(), tt.u, tt.ns, tt.rules)
		got := ""
		if err != nil {
			got = err.Error()
			var e *EscalationError
			if !errors.As(err, &e) {
				t.Errorf("%s: ConfirmNoEscalation error %T, want *EscalationError", tt.name, err)
			}
		}
		if got != tt.want {
			t.Errorf("%s: ConfirmNoEscalation(%v, %q, ...) = %q, want %q", tt.name, tt.u, tt.ns, got, tt.want)
		}
	}
}

func TestCovers(t *testing.T) {
	tests := []struct {
		owner, servant []rbacv1.PolicyRule
		want           bool
		missing        int
	}{
		{rules(verbs("*").groups("*").resources("*")), rules(verbs("get", "delete").groups("apps").resources("deployments", "deployments/scale")), true, 0},
		{rules(verbs("get").groups("").resources("*/scale")), rules(verbs("get").groups("").resources("replicationcontrollers/scale")), true, 0},
		{rules(verbs("get").groups("").resources("pods")), rules(verbs("get").groups("").resources("pods").names("a")), true, 0},
		{rules(verbs("get").groups("").resources("pods").names("a")), rules(verbs("get").groups("").resources("pods")), false, 1},
		{rules(verbs("get").urls("/healthz/*")), rules(verbs("get").urls("/healthz/etcd", "/livez")), false, 1},
		{rules(verbs("get", "list").groups("").resources("pods")), rules(verbs("get", "list", "watch").groups("", "apps").resources("pods")), false, 4},
	}
	for _, tt := range tests {
		got, missing := Covers(tt.owner, tt.servant)
		if got != tt.want || len(missing) != tt.missing {
			t.Errorf("Covers(%v, %v) = %v, %v, want %v, %d missing", tt.owner, tt.servant, got, missing, tt.want, tt.missing)
		}
	}
}

func TestCompactString(t *testing.T) {
	r := rbacv1.PolicyRule{Verbs: []string{"get", "list"}, APIGroups: []string{""}, Resources: []string{"pods"}, ResourceNames: []string{"a"}}
	want := `{APIGroups:[""], Resources:["pods"], ResourceNames:["a"], Verbs:["get" "list"]}`
	if got := compactString(r); got != want {
		t.Errorf("compactString(%v) = %s, want %s", r, got, want)
	}
	if got := strings.Count(compactString(rbacv1.PolicyRule{}), ":"); got != 0 {
		t.Errorf("compactString(empty) has %d fields, want 0", got)
	}
}
