package auth

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"slices"
	"testing"

	"github.com/outpost-mesh/outpost/hub/pki"
)

func TestUserFromCertificate(t *testing.T) {
	c := &x509.Certificate{Subject: pkix.Name{CommonName: "system:node:edge-a", Organization: []string{"system:nodes", "site:berlin"}}}
	u := UserFromCertificate(c)
	if u.Name != "system:node:edge-a" || !slices.Equal(u.Groups, []string{"system:nodes", "site:berlin", AuthenticatedGroup}) {
		t.Errorf("UserFromCertificate = %+v", u)
	}
	u.Groups[0] = "system:masters"
	if c.Subject.Organization[0] != "system:nodes" {
		t.Error("UserFromCertificate shares the certificate's organizations")
	}
}

func TestNodeName(t *testing.T) {
	for _, tc := range []struct {
		user User
		name string
		ok   bool
	}{
		{User{Name: "system:node:edge-a", Groups: []string{"system:nodes"}}, "edge-a", true},
		{User{Name: "system:node:edge-a", Groups: []string{"x", "system:nodes"}}, "edge-a", true},
		{User{Name: "system:node:edge-a"}, "", false},
		{User{Name: "edge-a", Groups: []string{"system:nodes"}}, "", false},
		{User{Name: "system:node:", Groups: []string{"system:nodes"}}, "", false},
		{User{Name: "System:Node:edge-a", Groups: []string{"system:nodes"}}, "", false},
	} {
		if name, ok := tc.user.NodeName(); name != tc.name || ok != tc.ok {
			t.Errorf("%+v.NodeName() = %q, %v; want %q, %v", tc.user, name, ok, tc.name, tc.ok)
		}
	}
}

// TestIdentitiesMatchPKI checks that the users the PKI issues
// certificates for are those the authorizer knows.
func TestIdentitiesMatchPKI(t *testing.T) {
	if pki.AdminGroup != MastersGroup {
		t.Errorf("pki.AdminGroup = %q, want %q", pki.AdminGroup, MastersGroup)
	}
	if pki.NodesGroup != NodesGroup || pki.NodeUserPrefix != NodeUserPrefix {
		t.Errorf("pki node identity %q/%q, want %q/%q", pki.NodeUserPrefix, pki.NodesGroup, NodeUserPrefix, NodesGroup)
	}
}

func TestUserContext(t *testing.T) {
	if u, ok := UserFrom(context.Background()); ok {
		t.Errorf("UserFrom(Background) = %+v, true; want none", u)
	}
	node := User{Name: "system:node:edge-a", Groups: []string{NodesGroup}}
	ctx := WithUser(context.Background(), node)
	if u, ok := UserFrom(ctx); !ok || u.Name != node.Name || !slices.Equal(u.Groups, node.Groups) {
		t.Errorf("UserFrom(WithUser(%+v)) = %+v, %v; want it back", node, u, ok)
	}
	admin := User{Name: "admin", Groups: []string{MastersGroup}}
	if u, _ := UserFrom(WithUser(ctx, admin)); u.Name != "admin" {
		t.Errorf("UserFrom after a second WithUser = %+v, want %+v", u, admin)
	}
}
