package admission

import (
	"context"
	"fmt"
	"sync/atomic"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/auth"
	"github.com/outpost-mesh/outpost/hub/auth/rbac"
)

// Authorizer decides whether a user may make a request: the hub's whole
// authorization chain.
type Authorizer interface {
	Authorize(ctx context.Context, u auth.User, a auth.Attributes) (auth.Decision, error)
}

// RBACEscalation keeps users from granting, through a Role, ClusterRole
// or binding they write, permissions they do not hold themselves, as
// upstream's RBAC storage does:
//
//   - a Role or ClusterRole is written only by a user who holds every
//     one of its rules where it applies (an aggregated ClusterRole, whose
//     rules a controller fills in, only by one who holds every
//     permission), or who may "escalate" it;
//   - a binding is written only by a user who holds every rule of the
//     role it refers to, in the binding's namespace, or who may "bind"
//     that role; a binding to a missing role is then NotFound.
//
// Members of system:masters, and writes without a user (the hub's own),
// are not checked. Refusals are 403 Forbidden with upstream's message.
// Until Set, every checked write is refused with 500; the hub sets it
// before it serves anyone but system:masters. Safe for concurrent use.
type RBACEscalation struct {
	deps atomic.Pointer[escalationDeps]
}

type escalationDeps struct {
	authz  Authorizer
	rules  *rbac.Authorizer
	policy rbac.Policy
}

var _ apiserver.Admission = (*RBACEscalation)(nil)

// Set gives p what it decides with: authz for the escalate and bind verbs,
// rules for what a user holds, and policy for the roles bindings refer to.
func (p *RBACEscalation) Set(authz Authorizer, rules *rbac.Authorizer, policy rbac.Policy) {
	p.deps.Store(&escalationDeps{authz: authz, rules: rules, policy: policy})
}

// fullAuthority is what writing an aggregated ClusterRole takes: it may
// come to hold any rule.
var fullAuthority = []rbacv1.PolicyRule{
	{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}},
	{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}},
}

// Handles reports whether r is one of the four RBAC resources.
func (*RBACEscalation) Handles(r schema.GroupResource) bool {
	if r.Group != rbacv1.GroupName {
		return false
	}
	switch r.Resource {
	case "roles", "clusterroles", "rolebindings", "clusterrolebindings":
		return true
	}
	return false
}

func (p *RBACEscalation) Admit(ctx context.Context, a apiserver.AdmissionAttributes) error {
	u, ok := auth.UserFrom(ctx)
	if !ok || u.InGroup(auth.MastersGroup) || a.Subresource != "" {
		return nil
	}
	d := p.deps.Load()
	if d == nil {
		return apierrors.NewInternalError(fmt.Errorf("RBAC is not ready"))
	}
	var (
		verb, resource, ns, name string
		rules                    []rbacv1.PolicyRule
		err                      error
	)
	switch o := a.Object.(type) {
	case *rbacv1.Role:
		verb, resource, ns, name, rules = "escalate", "roles", o.Namespace, o.Name, o.Rules
	case *rbacv1.ClusterRole:
		verb, resource, name, rules = "escalate", "clusterroles", o.Name, o.Rules
		if o.AggregationRule != nil {
			rules = fullAuthority
		}
	case *rbacv1.RoleBinding:
		verb, ns, name = "bind", o.Namespace, o.RoleRef.Name
		resource, rules, err = p.roleRules(ctx, d, o.RoleRef, o.Namespace)
	case *rbacv1.ClusterRoleBinding:
		verb, name = "bind", o.RoleRef.Name
		resource, rules, err = p.roleRules(ctx, d, o.RoleRef, "")
	default:
		return apierrors.NewForbidden(a.Resource, a.Name, fmt.Errorf("unexpected type %T", a.Object))
	}
	// The escalate or bind verb exempts the user from the check.
	exempt, aerr := d.authz.Authorize(ctx, u, auth.Attributes{
		ResourceRequest: true, Verb: verb, APIGroup: rbacv1.GroupName, APIVersion: "v1",
		Resource: resource, Namespace: ns, Name: name,
	})
	switch {
	case aerr != nil:
		return apierrors.NewInternalError(fmt.Errorf("authorize %s: %w", verb, aerr))
	case exempt.Allowed:
		return nil
	case err != nil:
		return err
	}
	if err := d.rules.ConfirmNoEscalation(ctx, u, ns, rules); err != nil {
		return apierrors.NewForbidden(a.Resource, a.Name, err)
	}
	return nil
}

// roleRules returns the resource and rules of the role ref names, as a
// binding in namespace ("" for a ClusterRoleBinding) refers to it; a
// missing role is NotFound, as upstream answers.
func (p *RBACEscalation) roleRules(ctx context.Context, d *escalationDeps, ref rbacv1.RoleRef, namespace string) (string, []rbacv1.PolicyRule, error) {
	switch ref.Kind {
	case "Role":
		r, err := d.policy.GetRole(ctx, namespace, ref.Name)
		switch {
		case err != nil:
			return "roles", nil, apierrors.NewInternalError(err)
		case r == nil:
			return "roles", nil, apierrors.NewNotFound(schema.GroupResource{Group: rbacv1.GroupName, Resource: "roles"}, ref.Name)
		}
		return "roles", r.Rules, nil
	case "ClusterRole":
		r, err := d.policy.GetClusterRole(ctx, ref.Name)
		switch {
		case err != nil:
			return "clusterroles", nil, apierrors.NewInternalError(err)
		case r == nil:
			return "clusterroles", nil, apierrors.NewNotFound(schema.GroupResource{Group: rbacv1.GroupName, Resource: "clusterroles"}, ref.Name)
		}
		return "clusterroles", r.Rules, nil
	}
	return "", nil, apierrors.NewBadRequest(fmt.Sprintf("unknown roleRef kind %q", ref.Kind))
}
