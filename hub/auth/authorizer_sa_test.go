package auth

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

var (
	controllerManager = User{Name: "system:kube-controller-manager"}
	scheduler         = User{Name: "system:kube-scheduler"}
	saWeb             = ServiceAccountUser("default", "web")
	// A service account's name without its group is no service account.
	saNameOnly = User{Name: "system:serviceaccount:default:web"}
)

// bound sets the boundObjectRef a token request carries in its body.
func bound(a Attributes, kind, name, uid string) Attributes {
	a.BoundObject = &BoundObject{APIVersion: "v1", Kind: kind, Name: name, UID: uid}
	return a
}

// rbacDecides in a table's reason stands for Decision{NoOpinion: true}.
const rbacDecides = "(rbac)"

// TestDecideLeftToRBAC covers what the built-in rules leave to RBAC
// (service accounts, the controller manager and the scheduler) and what
// they decide themselves: nodes' token requests.
func TestDecideLeftToRBAC(t *testing.T) {
	// Each pod's UID is uid-<name>.
	runsAs := func(sa string) func(*corev1.Pod) {
		return func(p *corev1.Pod) { p.UID = types.UID("uid-" + p.Name); p.Spec.ServiceAccountName = sa }
	}
	podA := pod("default", "web-a", "edge-a", runsAs("web"))
	podB := pod("default", "web-b", "edge-b", runsAs("web"))
	defaultSA := pod("default", "plain", "edge-a", func(p *corev1.Pod) { p.UID = "uid-plain" })
	pods := []*corev1.Pod{podA, podB, defaultSA}
	const token = "POST /api/v1/namespaces/default/serviceaccounts/web/token"
	noRelation := "no relationship found between node 'edge-a' and this object"

	for _, tc := range []struct {
		user    User
		req     Attributes
		pods    []*corev1.Pod
		allowed bool
		reason  string
	}{
		// The controller manager and the scheduler get what RBAC grants
		// them, as everyone else.
		{user: controllerManager, req: req("POST /apis/apps/v1/namespaces/default/replicasets"), reason: rbacDecides},
		{user: controllerManager, req: req("DELETE /api/v1/namespaces/default/secrets/x"), reason: rbacDecides},
		{user: scheduler, req: req("POST /api/v1/namespaces/default/pods/web/binding"), reason: rbacDecides},
		{user: scheduler, req: req("GET /api/v1/nodes?watch=true"), reason: rbacDecides},
		{user: User{Name: "system:kube-proxy"}, req: req("GET /api/v1/nodes"), reason: rbacDecides},

		// Service accounts read their own namespace, but not its secrets.
		{user: saWeb, req: req("GET /api/v1/namespaces/default/pods"), reason: rbacDecides},
		{user: saWeb, req: req("GET /api/v1/namespaces/default/pods/web-a"), reason: rbacDecides},
		{user: saWeb, req: req("GET /api/v1/namespaces/default/pods/web-a/status"), reason: rbacDecides},
		{user: saWeb, req: req("GET /api/v1/namespaces/default/configmaps/kube-root-ca.crt"), reason: rbacDecides},
		{user: saWeb, req: req("GET /api/v1/namespaces/default/configmaps?watch=true"), reason: rbacDecides},
		{user: saWeb, req: req("GET /apis/apps/v1/namespaces/default/deployments"), reason: rbacDecides},
		{user: saWeb, req: req("GET /api/v1/namespaces/default"), reason: rbacDecides},
		{user: saWeb, req: req("GET /api"), allowed: true},
		{user: saWeb, req: req("GET /api/v1/namespaces/default/secrets"), reason: rbacDecides},
		{user: saWeb, req: req("GET /api/v1/namespaces/default/secrets/db"), reason: rbacDecides},
		{user: saWeb, req: req("GET /api/v1/namespaces/default/secrets?watch=1"), reason: rbacDecides},
		{user: saWeb, req: req("GET /api/v1/namespaces/default/pods/web-a/log"), reason: rbacDecides},
		{user: saWeb, req: req("GET /api/v1/namespaces/default/pods/web-a/exec"), reason: rbacDecides},
		{user: saWeb, req: req("GET /api/v1/namespaces/other/pods"), reason: rbacDecides},
		{user: saWeb, req: req("GET /api/v1/pods"), reason: rbacDecides},
		{user: saWeb, req: req("GET /api/v1/nodes"), reason: rbacDecides},
		{user: saWeb, req: req("POST /api/v1/namespaces/default/configmaps"), reason: rbacDecides},
		{user: saWeb, req: req("DELETE /api/v1/namespaces/default/pods/web-a"), reason: rbacDecides},
		{user: saWeb, req: req(token), reason: rbacDecides},
		{user: saWeb, req: req("GET /metrics"), reason: rbacDecides},
		{user: saNameOnly, req: req("GET /api/v1/namespaces/default/pods"), reason: rbacDecides},

		// A node asks tokens for its own pods' service accounts, bound to
		// those pods.
		{user: nodeA, req: bound(req(token), "Pod", "web-a", "uid-web-a"), pods: pods, allowed: true},
		{user: nodeA, req: bound(req("POST /api/v1/namespaces/default/serviceaccounts/default/token"), "Pod", "plain", "uid-plain"), pods: pods, allowed: true},
		{user: nodeA, req: bound(req(token), "Pod", "web-b", "uid-web-b"), pods: pods, reason: "node requested token bound to a pod scheduled on a different node"},
		{user: nodeA, req: bound(req(token), "Pod", "web-a", "uid-old"), pods: pods, reason: "the UID in the bound object reference (uid-old) does not match the UID in record. The object might have been deleted and then recreated"},
		{user: nodeA, req: bound(req("POST /api/v1/namespaces/default/serviceaccounts/admin/token"), "Pod", "web-a", "uid-web-a"), pods: pods, reason: noRelation},
		{user: nodeA, req: bound(req(token), "Pod", "missing", "uid-missing"), pods: pods, reason: noRelation},
		{user: nodeA, req: bound(req(token), "Pod", "web-a", ""), pods: pods, reason: "node requested token with a pod binding without a uid"},
		{user: nodeA, req: bound(req(token), "Secret", "web-a", "uid-web-a"), pods: pods, reason: "node requested token not bound to a pod"},
		{user: nodeA, req: req(token), pods: pods, reason: "node requested token not bound to a pod"},
		{user: nodeA, req: bound(req("GET /api/v1/namespaces/default/serviceaccounts/web/token"), "Pod", "web-a", "uid-web-a"), pods: pods, reason: "cannot read subresource"},
		// in another namespace, the pod of the same name is not the same pod
		{user: nodeA, req: bound(req("POST /api/v1/namespaces/other/serviceaccounts/web/token"), "Pod", "web-a", "uid-web-a"), pods: pods, reason: noRelation},
	} {
		d := Decide(tc.user, tc.req, tc.pods)
		want := Decision{Allowed: tc.allowed, Reason: tc.reason}
		switch tc.reason {
		case "-":
			want.Reason = ""
		case rbacDecides:
			want = Decision{NoOpinion: true}
		}
		if d != want {
			t.Errorf("Decide(%s, %s %s bound %+v) = %+v, want %+v", tc.user.Name, tc.req.Verb, tc.req.Path, tc.req.BoundObject, d, want)
		}
	}
}

// TestAuthorizeTokenPod checks that a node's token request looks up the
// pod its token is to be bound to, and only that.
func TestAuthorizeTokenPod(t *testing.T) {
	podA := pod("default", "web-a", "edge-a", func(p *corev1.Pod) { p.UID = "u1"; p.Spec.ServiceAccountName = "web" })
	pods := &fakePods{pods: []*corev1.Pod{podA}}
	a := bound(req("POST /api/v1/namespaces/default/serviceaccounts/web/token"), "Pod", "web-a", "u1")
	d, err := NewAuthorizer(pods, nil).Authorize(context.Background(), nodeA, a)
	if err != nil || !d.Allowed || pods.gets != 1 || pods.lists != 0 {
		t.Errorf("Authorize(node token request) = %+v, %v with %d gets, %d lists; want allowed with 1 get", d, err, pods.gets, pods.lists)
	}
	pods.gets = 0
	a.BoundObject = nil
	if d, err := NewAuthorizer(pods, nil).Authorize(context.Background(), nodeA, a); err != nil || d.Allowed || pods.gets != 0 {
		t.Errorf("Authorize(unbound node token request) = %+v, %v with %d gets; want denied without lookup", d, err, pods.gets)
	}
}

func TestNeedsBoundObject(t *testing.T) {
	for _, tc := range []struct {
		user User
		req  string
		want bool
	}{
		{nodeA, "POST /api/v1/namespaces/default/serviceaccounts/web/token", true},
		{nodeA, "GET /api/v1/namespaces/default/serviceaccounts/web", false},
		{nodeA, "POST /api/v1/namespaces/default/pods/web/binding", false},
		{admin, "POST /api/v1/namespaces/default/serviceaccounts/web/token", false},
		{saWeb, "POST /api/v1/namespaces/default/serviceaccounts/web/token", false},
		{bob, "POST /api/v1/namespaces/default/serviceaccounts/web/token", false},
	} {
		if got := NeedsBoundObject(tc.user, req(tc.req)); got != tc.want {
			t.Errorf("NeedsBoundObject(%s, %s) = %v, want %v", tc.user.Name, tc.req, got, tc.want)
		}
	}
}

func TestServiceAccountUser(t *testing.T) {
	u := ServiceAccountUser("prod", "api")
	if u.Name != "system:serviceaccount:prod:api" || strings.Join(u.Groups, ",") != "system:serviceaccounts,system:serviceaccounts:prod,system:authenticated" {
		t.Errorf("ServiceAccountUser(prod, api) = %+v", u)
	}
	for _, tc := range []struct {
		user     User
		ns, name string
		ok       bool
	}{
		{u, "prod", "api", true},
		{User{Name: "system:serviceaccount:prod:api"}, "", "", false},
		{User{Name: "system:serviceaccount:prod", Groups: []string{ServiceAccountsGroup}}, "", "", false},
		{User{Name: "system:serviceaccount::api", Groups: []string{ServiceAccountsGroup}}, "", "", false},
		{User{Name: "system:serviceaccount:prod:api:x", Groups: []string{ServiceAccountsGroup}}, "", "", false},
		{nodeA, "", "", false},
	} {
		ns, name, ok := tc.user.ServiceAccount()
		if ns != tc.ns || name != tc.name || ok != tc.ok {
			t.Errorf("%+v.ServiceAccount() = %q, %q, %v; want %q, %q, %v", tc.user, ns, name, ok, tc.ns, tc.name, tc.ok)
		}
	}
}

// fakeNext is a chained authorizer that allows what allow says and
// records what it was asked.
type fakeNext struct {
	allow func(User, Attributes) bool
	err   error
	asked []string
}

func (n *fakeNext) Authorize(_ context.Context, u User, a Attributes) (Decision, error) {
	n.asked = append(n.asked, u.Name+" "+a.Verb+" "+a.Path)
	if n.err != nil {
		return Decision{}, n.err
	}
	if n.allow(u, a) {
		return Decision{Allowed: true, Reason: "next"}, nil
	}
	return Decision{Reason: "next says no"}, nil
}

// TestAuthorizeChain checks that what the Authorizer's own rules leave
// open goes to Next, and only that.
func TestAuthorizeChain(t *testing.T) {
	next := &fakeNext{allow: func(u User, a Attributes) bool { return a.Resource == "configmaps" || a.Resource == "services" }}
	z := NewAuthorizer(&fakePods{}, next)
	for _, tc := range []struct {
		user    User
		req     string
		allowed bool
		asked   bool
	}{
		{saWeb, "GET /api/v1/namespaces/default/configmaps", true, true},
		{saWeb, "GET /api/v1/namespaces/default/secrets", false, true},
		{controllerManager, "POST /apis/apps/v1/namespaces/default/replicasets", false, true},
		{Anonymous, "GET /api/v1/namespaces/default/configmaps", true, true},
		{Anonymous, "GET /healthz", true, false},
		{saWeb, "GET /apis", true, false},
		{User{Name: "root", Groups: []string{MastersGroup}}, "DELETE /api/v1/nodes/a", true, false},
		{nodeA, "GET /api/v1/nodes", true, false},
		{nodeA, "PUT /api/v1/nodes/edge-b", false, false},
		{nodeA, "POST /api/v1/namespaces/default/configmaps", false, false},
		{nodeA, "POST /api/v1/namespaces/default/services", true, true},
	} {
		next.asked = nil
		d, err := z.Authorize(context.Background(), tc.user, req(tc.req))
		if err != nil || d.Allowed != tc.allowed || d.NoOpinion || (len(next.asked) == 1) != tc.asked {
			t.Errorf("Authorize(%s, %s) = %+v, %v, next asked %v; want allowed %v, next asked: %v", tc.user.Name, tc.req, d, err, next.asked, tc.allowed, tc.asked)
		}
	}
	boom := errors.New("cache not synced")
	if _, err := NewAuthorizer(&fakePods{}, &fakeNext{err: boom}).Authorize(context.Background(), saWeb, req("GET /api/v1/pods")); !errors.Is(err, boom) {
		t.Errorf("Authorize with a failing Next = %v, want %v", err, boom)
	}
	if d, err := NewAuthorizer(&fakePods{}, nil).Authorize(context.Background(), saWeb, req("GET /api/v1/pods")); err != nil || d.Allowed || d.Reason != noNext {
		t.Errorf("Authorize without Next = %+v, %v; want denied with %q", d, err, noNext)
	}
}
