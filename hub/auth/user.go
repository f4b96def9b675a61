// Package auth decides who may do what on the hub: the user a verified client
// certificate or service account token names (or an impersonating request
// asks for), the attributes of a Kubernetes API request, the authorizer
// (system:masters, nodes, the controllers and scheduler, public paths;
// chained to RBAC, hub/auth/rbac, for the rest), the service account
// tokens the hub signs, and the bootstrap tokens nodes join with. It does no I/O but through the lookups
// its user hands it; the hub's composition root adapts the store to them.
package auth

import (
	"context"
	"crypto/x509"
	"slices"
	"strings"

	"github.com/outpost-mesh/outpost/sync/wire"
)

// Well-known users and groups, as upstream Kubernetes names them.
const (
	// MastersGroup may do anything (upstream's system:masters, which no
	// RBAC rule can restrict).
	MastersGroup = "system:masters"
	// NodesGroup and NodeUserPrefix form a node's identity: user
	// system:node:<name> in group system:nodes.
	NodesGroup     = wire.NodesGroup
	NodeUserPrefix = wire.NodeUserPrefix
	// AnonymousUser in UnauthenticatedGroup is who makes a request with no
	// credentials at all (upstream's --anonymous-auth).
	AnonymousUser        = "system:anonymous"
	UnauthenticatedGroup = "system:unauthenticated"
	// AuthenticatedGroup holds every user who is not anonymous.
	AuthenticatedGroup = "system:authenticated"
	// ControllerManagerUser and SchedulerUser are the identities of the
	// hub's controllers and scheduler, as upstream names those of
	// kube-controller-manager and kube-scheduler.
	ControllerManagerUser = "system:kube-controller-manager"
	SchedulerUser         = "system:kube-scheduler"
)

// Anonymous is the user of a request that presents no client certificate.
var Anonymous = User{Name: AnonymousUser, Groups: []string{UnauthenticatedGroup}}

// User is an authenticated client.
type User struct {
	Name   string
	Groups []string
	// UID and Extra are what an impersonating client asked for
	// (Impersonate-Uid, Impersonate-Extra-*); the hub's authenticators
	// set neither.
	UID   string
	Extra map[string][]string
}

// UserFromCertificate returns the user a client certificate names: its
// subject's common name, and its organizations as groups, with
// system:authenticated added, as upstream adds it to every authenticated
// user. The certificate must already have been verified.
func UserFromCertificate(c *x509.Certificate) User {
	groups := slices.Clone(c.Subject.Organization)
	if !slices.Contains(groups, AuthenticatedGroup) {
		groups = append(groups, AuthenticatedGroup)
	}
	return User{Name: c.Subject.CommonName, Groups: groups}
}

// IsAnonymous reports whether u is Anonymous: named system:anonymous in
// group system:unauthenticated.
func (u User) IsAnonymous() bool { return u.Name == AnonymousUser && u.InGroup(UnauthenticatedGroup) }

// InGroup reports whether u is a member of group.
func (u User) InGroup(group string) bool { return slices.Contains(u.Groups, group) }

// NodeName returns the name of the node u is, and whether u is a node at
// all: named system:node:<name> with a non-empty name, and a member of
// system:nodes. Either alone is not a node, as upstream's node authorizer
// has it.
func (u User) NodeName() (string, bool) {
	name, ok := strings.CutPrefix(u.Name, NodeUserPrefix)
	if !ok || name == "" || !u.InGroup(NodesGroup) {
		return "", false
	}
	return name, true
}

type userKey struct{}

// WithUser returns ctx carrying u as the authenticated user of the request
// ctx belongs to. The hub's HTTP handler sets it once it has authenticated
// a request, so that what serves the request later (admission) knows who
// asked.
func WithUser(ctx context.Context, u User) context.Context {
	return context.WithValue(ctx, userKey{}, u)
}

// UserFrom returns the user WithUser put on ctx, and whether there is one.
// A context without one is not a request of an authenticated user (the
// hub's own writes at start, for one).
func UserFrom(ctx context.Context) (User, bool) {
	u, ok := ctx.Value(userKey{}).(User)
	return u, ok
}
