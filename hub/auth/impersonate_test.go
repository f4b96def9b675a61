package auth

import (
	"errors"
	"net/http"
	"reflect"
	"testing"
)

func TestImpersonationOf(t *testing.T) {
	hdr := func(kv ...string) http.Header {
		h := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			h.Add(kv[i], kv[i+1])
		}
		return h
	}
	imp := func(resource, group, sub, ns, name string) Attributes {
		return Attributes{ResourceRequest: true, Verb: "impersonate", APIGroup: group, Resource: resource, Subresource: sub, Namespace: ns, Name: name}
	}
	for _, tc := range []struct {
		name   string
		h      http.Header
		ok     bool
		bad    bool
		user   User
		checks []Attributes
	}{
		{name: "none", h: hdr("Accept", "application/json")},
		{name: "user", h: hdr("Impersonate-User", "bob"), ok: true,
			user: User{Name: "bob", Groups: []string{AuthenticatedGroup}}, checks: []Attributes{imp("users", "", "", "", "bob")}},
		{name: "user and groups", h: hdr("Impersonate-User", "bob", "Impersonate-Group", "devs", "Impersonate-Group", "ops"), ok: true,
			user:   User{Name: "bob", Groups: []string{"devs", "ops", AuthenticatedGroup}},
			checks: []Attributes{imp("users", "", "", "", "bob"), imp("groups", "", "", "", "devs"), imp("groups", "", "", "", "ops")}},
		{name: "service account", h: hdr("Impersonate-User", "system:serviceaccount:shop:web"), ok: true,
			user:   User{Name: "system:serviceaccount:shop:web", Groups: []string{ServiceAccountsGroup, "system:serviceaccounts:shop", AuthenticatedGroup}},
			checks: []Attributes{imp("serviceaccounts", "", "", "shop", "web")}},
		{name: "uid and extra", h: hdr("Impersonate-User", "bob", "Impersonate-Uid", "1234", "Impersonate-Extra-Scopes", "a", "Impersonate-Extra-Scopes", "b"), ok: true,
			user: User{Name: "bob", UID: "1234", Groups: []string{AuthenticatedGroup}, Extra: map[string][]string{"scopes": {"a", "b"}}},
			checks: []Attributes{imp("users", "", "", "", "bob"), imp("userextras", "authentication.k8s.io", "scopes", "", "a"),
				imp("userextras", "authentication.k8s.io", "scopes", "", "b"), imp("uids", "authentication.k8s.io", "", "", "1234")}},
		{name: "anonymous", h: hdr("Impersonate-User", AnonymousUser), ok: true,
			user: User{Name: AnonymousUser, Groups: []string{UnauthenticatedGroup}}, checks: []Attributes{imp("users", "", "", "", AnonymousUser)}},
		{name: "group without user", h: hdr("Impersonate-Group", "devs"), bad: true},
		{name: "extra without user", h: hdr("Impersonate-Extra-X", "1"), bad: true},
	} {
		got, ok, err := ImpersonationOf(tc.h)
		switch {
		case tc.bad:
			if !errors.Is(err, ErrImpersonation) {
				t.Errorf("%s: ImpersonationOf = %v, want %v", tc.name, err, ErrImpersonation)
			}
		case err != nil || ok != tc.ok:
			t.Errorf("%s: ImpersonationOf = %v, %v, want ok %v", tc.name, ok, err, tc.ok)
		case ok && (!reflect.DeepEqual(got.User, tc.user) || !reflect.DeepEqual(got.Checks, tc.checks)):
			t.Errorf("%s: ImpersonationOf = %+v, want user %+v and checks %+v", tc.name, got, tc.user, tc.checks)
		}
	}
	h := hdr("Impersonate-User", "bob", "Impersonate-Group", "x", "Impersonate-Extra-Y", "z", "Accept", "a")
	RemoveImpersonation(h)
	if len(h) != 1 || h.Get("Accept") != "a" {
		t.Errorf("RemoveImpersonation left %v", h)
	}
}
