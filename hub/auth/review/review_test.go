package review

import (
	"context"
	"errors"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/auth"
)

// fakeAuth allows alice to get pods in ns a, and says alice's rules are
// those; its tokens are "good" for alice.
type fakeAuth struct{}

func (fakeAuth) Authorize(_ context.Context, u auth.User, a auth.Attributes) (auth.Decision, error) {
	if u.Name == "alice" && a.Verb == "get" && a.Resource == "pods" && a.Namespace == "a" {
		return auth.Decision{Allowed: true, Reason: "alice reads pods"}, nil
	}
	return auth.Decision{}, nil
}

func (fakeAuth) RulesFor(context.Context, auth.User, string) ([]rbacv1.PolicyRule, error) {
	return []rbacv1.PolicyRule{{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"pods"}}, {Verbs: []string{"get"}, NonResourceURLs: []string{"/healthz"}}}, nil
}

func (fakeAuth) Authenticate(_ context.Context, token string) (auth.User, error) {
	if token == "good" {
		return auth.User{Name: "alice", Groups: []string{auth.AuthenticatedGroup}}, nil
	}
	return auth.User{}, auth.ErrInvalidToken
}

func creatorOf(t *testing.T, kind string) apiserver.Creator {
	t.Helper()
	for _, r := range Resources(fakeAuth{}, fakeAuth{}, fakeAuth{}) {
		if r.Kind == kind && r.GroupVersion.Version == "v1" {
			return r.Creator
		}
	}
	t.Fatalf("no resource of kind %s", kind)
	return nil
}

func TestReviews(t *testing.T) {
	alice := auth.WithUser(context.Background(), auth.User{Name: "alice"})
	pods := func(ns string) *authorizationv1.ResourceAttributes {
		return &authorizationv1.ResourceAttributes{Verb: "get", Resource: "pods", Namespace: ns}
	}
	for _, tc := range []struct {
		name    string
		kind    string
		ctx     context.Context
		obj     runtime.Object
		allowed bool
		invalid bool
	}{
		{"self, allowed", "SelfSubjectAccessReview", alice, &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: pods("a")}}, true, false},
		{"self, denied", "SelfSubjectAccessReview", alice, &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: pods("b")}}, false, false},
		{"self, no attributes", "SelfSubjectAccessReview", alice, &authorizationv1.SelfSubjectAccessReview{}, false, true},
		{"self, both attributes", "SelfSubjectAccessReview", alice, &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: pods("a"), NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: "/x", Verb: "get"}}}, false, true},
		{"subject", "SubjectAccessReview", context.Background(), &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: "alice", ResourceAttributes: pods("a")}}, true, false},
		{"subject, nobody", "SubjectAccessReview", context.Background(), &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{ResourceAttributes: pods("a")}}, false, true},
		{"local", "LocalSubjectAccessReview", context.Background(), &authorizationv1.LocalSubjectAccessReview{ObjectMeta: metav1.ObjectMeta{Namespace: "a"},
			Spec: authorizationv1.SubjectAccessReviewSpec{User: "alice", ResourceAttributes: pods("a")}}, true, false},
		{"local, other namespace", "LocalSubjectAccessReview", context.Background(), &authorizationv1.LocalSubjectAccessReview{ObjectMeta: metav1.ObjectMeta{Namespace: "b"},
			Spec: authorizationv1.SubjectAccessReviewSpec{User: "alice", ResourceAttributes: pods("a")}}, false, true},
	} {
		got, err := creatorOf(t, tc.kind).Create(tc.ctx, tc.obj)
		if tc.invalid {
			if !apierrors.IsInvalid(err) {
				t.Errorf("%s: Create = %v, want 422", tc.name, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: Create: %v", tc.name, err)
			continue
		}
		var st authorizationv1.SubjectAccessReviewStatus
		switch o := got.(type) {
		case *authorizationv1.SelfSubjectAccessReview:
			st = o.Status
		case *authorizationv1.SubjectAccessReview:
			st = o.Status
		case *authorizationv1.LocalSubjectAccessReview:
			st = o.Status
		}
		if st.Allowed != tc.allowed {
			t.Errorf("%s: status %+v, want allowed %v", tc.name, st, tc.allowed)
		}
	}

	rules, err := creatorOf(t, "SelfSubjectRulesReview").Create(alice, &authorizationv1.SelfSubjectRulesReview{Spec: authorizationv1.SelfSubjectRulesReviewSpec{Namespace: "a"}})
	if st := rules.(*authorizationv1.SelfSubjectRulesReview).Status; err != nil || len(st.ResourceRules) != 1 || len(st.NonResourceRules) != 1 || st.Incomplete {
		t.Errorf("SelfSubjectRulesReview = %+v, %v; want one resource and one non-resource rule", st, err)
	}

	tr := creatorOf(t, "TokenReview")
	for token, want := range map[string]bool{"good": true, "bad": false} {
		got, err := tr.Create(context.Background(), &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}})
		if st := got.(*authenticationv1.TokenReview).Status; err != nil || st.Authenticated != want || want && st.User.Username != "alice" || !want && st.Error == "" {
			t.Errorf("TokenReview(%s) = %+v, %v; want authenticated %v", token, st, err, want)
		}
	}
	if _, err := tr.Create(context.Background(), &authenticationv1.TokenReview{}); !apierrors.IsInvalid(err) {
		t.Errorf("TokenReview without a token = %v, want 422", err)
	}

	who, err := creatorOf(t, "SelfSubjectReview").Create(alice, &authenticationv1.SelfSubjectReview{})
	if err != nil || who.(*authenticationv1.SelfSubjectReview).Status.UserInfo.Username != "alice" {
		t.Errorf("SelfSubjectReview = %+v, %v", who, err)
	}
	if _, err := creatorOf(t, "SelfSubjectReview").Create(context.Background(), &authenticationv1.SelfSubjectReview{}); err == nil {
		t.Error("SelfSubjectReview without a user succeeded")
	}
	if _, err := creatorOf(t, "TokenReview").Create(context.Background(), &authorizationv1.SubjectAccessReview{}); err == nil || errors.Is(err, nil) {
		t.Error("TokenReview of another type succeeded")
	}
}
