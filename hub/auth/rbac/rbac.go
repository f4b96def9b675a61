// Package rbac is upstream Kubernetes' RBAC authorization as pure code: which
// rules of Roles and ClusterRoles apply to a user through RoleBindings and
// ClusterRoleBindings, whether they allow a request, the escalation check
// on granting rules, ClusterRole aggregation, and the bootstrap policy with
// its reconciliation. It does no I/O but through the Policy its caller hands
// it; the hub's composition root adapts the store to it. It imports
// hub/auth for the User and Attributes of a request; hub/auth must not
// import it.
//
// A denied request is answered with auth.ForbiddenMessage, which gives
// upstream's wording, such as
//
//	User "x" cannot list resource "pods" in API group "" in the namespace "y"
package rbac

import (
	"context"
	"errors"
	"fmt"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"

	"github.com/outpost-mesh/outpost/hub/auth"
)

// Policy reads the RBAC objects rules are resolved from. Its methods must be
// safe for concurrent use; the package never modifies the objects returned.
type Policy interface {
	// GetRole returns the Role namespace/name, or nil and no error when
	// there is none.
	GetRole(ctx context.Context, namespace, name string) (*rbacv1.Role, error)
	// GetClusterRole returns the ClusterRole name, or nil and no error
	// when there is none.
	GetClusterRole(ctx context.Context, name string) (*rbacv1.ClusterRole, error)
	// ListRoleBindings returns the RoleBindings of namespace (non-empty).
	ListRoleBindings(ctx context.Context, namespace string) ([]*rbacv1.RoleBinding, error)
	// ListClusterRoleBindings returns every ClusterRoleBinding.
	ListClusterRoleBindings(ctx context.Context) ([]*rbacv1.ClusterRoleBinding, error)
}

// ErrRoleNotFound is wrapped by the errors RulesFor returns for a binding
// whose roleRef names a Role or ClusterRole that does not exist, or is of
// an unsupported kind: a normal state (the role was deleted, or is yet to
// be created) that upstream reports but does not fail on.
var ErrRoleNotFound = errors.New("role not found")

// Authorizer decides requests by RBAC, as upstream's RBAC authorizer does:
// a request is allowed when a rule of a role bound to the user (by name,
// by group, or as a service account) allows it; there are no deny rules.
// ClusterRoleBindings grant everywhere; RoleBindings grant in their own
// namespace only, also when they refer to a ClusterRole.
//
// Its methods are safe for concurrent use when its Policy is.
type Authorizer struct {
	policy Policy
}

// New returns an authorizer resolving rules from policy (non-nil).
func New(policy Policy) *Authorizer {
	return &Authorizer{policy: policy}
}

// Authorize decides on u's request a. When a rule allows it, the decision
// is allowed, with upstream's reason naming the binding, role and subject
// that allowed it, even if some lookups failed. Otherwise an error means a
// lookup of p failed and nothing was decided; without one the request is
// denied, with the reason upstream gives (bindings to roles that do not
// exist, or "").
func (z *Authorizer) Authorize(ctx context.Context, u auth.User, a auth.Attributes) (auth.Decision, error) {
	var (
		allowedBy string
		missing   []error
		failed    []error
	)
	z.visit(ctx, u, a.Namespace, func(source fmt.Stringer, rule *rbacv1.PolicyRule, err error) bool {
		switch {
		case rule != nil && RuleAllows(a, rule):
			allowedBy = source.String()
			return false
		case errors.Is(err, ErrRoleNotFound):
			missing = append(missing, err)
		case err != nil:
			failed = append(failed, err)
		}
		return true
	})
	if allowedBy != "" {
		return auth.Decision{Allowed: true, Reason: "RBAC: allowed by " + allowedBy}, nil
	}
	if len(failed) > 0 {
		return auth.Decision{}, fmt.Errorf("rbac: %w", errors.Join(failed...))
	}
	if len(missing) > 0 {
		return auth.Decision{Reason: fmt.Sprintf("RBAC: %v", utilerrors.NewAggregate(missing))}, nil
	}
	return auth.Decision{}, nil
}

// RulesFor returns the rules that apply to u in namespace: those of the
// roles of every ClusterRoleBinding naming u and, unless namespace is "",
// of every RoleBinding in namespace naming u, in that order, duplicates
// kept. This is what SelfSubjectRulesReview and `kubectl auth can-i
// --list` report. The rules returned are valid even when err is not nil:
// err then says what could not be resolved (a lookup that failed, or a
// binding to a role that does not exist, wrapping ErrRoleNotFound), and
// the list may be incomplete. The caller owns the returned slice.
func (z *Authorizer) RulesFor(ctx context.Context, u auth.User, namespace string) ([]rbacv1.PolicyRule, error) {
	var (
		rules []rbacv1.PolicyRule
		errs  []error
	)
	z.visit(ctx, u, namespace, func(_ fmt.Stringer, rule *rbacv1.PolicyRule, err error) bool {
		if rule != nil {
			rules = append(rules, *rule.DeepCopy())
		}
		if err != nil {
			errs = append(errs, err)
		}
		return true
	})
	return rules, utilerrors.NewAggregate(errs)
}

// visit calls fn with each rule that applies to u in namespace, and each
// error met resolving them (rule nil), until fn returns false.
func (z *Authorizer) visit(ctx context.Context, u auth.User, namespace string, fn func(source fmt.Stringer, rule *rbacv1.PolicyRule, err error) bool) {
	crbs, err := z.policy.ListClusterRoleBindings(ctx)
	if err != nil {
		if !fn(nil, nil, fmt.Errorf("list clusterrolebindings: %w", err)) {
			return
		}
	}
	for _, b := range crbs {
		i, ok := appliesTo(u, b.Subjects, "")
		if !ok {
			continue
		}
		rules, err := z.roleRules(ctx, b.RoleRef, "")
		if err != nil {
			if !fn(nil, nil, err) {
				return
			}
			continue
		}
		src := source{kind: "ClusterRoleBinding", name: b.Name, ref: b.RoleRef, subject: &b.Subjects[i]}
		for j := range rules {
			if !fn(src, &rules[j], nil) {
				return
			}
		}
	}
	if namespace == "" {
		return
	}
	rbs, err := z.policy.ListRoleBindings(ctx, namespace)
	if err != nil {
		fn(nil, nil, fmt.Errorf("list rolebindings in %s: %w", namespace, err))
		return
	}
	for _, b := range rbs {
		i, ok := appliesTo(u, b.Subjects, namespace)
		if !ok {
			continue
		}
		rules, err := z.roleRules(ctx, b.RoleRef, namespace)
		if err != nil {
			if !fn(nil, nil, err) {
				return
			}
			continue
		}
		src := source{kind: "RoleBinding", name: b.Name + "/" + b.Namespace, ref: b.RoleRef, subject: &b.Subjects[i], namespace: b.Namespace}
		for j := range rules {
			if !fn(src, &rules[j], nil) {
				return
			}
		}
	}
}

// roleRules returns the rules of the role ref names, for a binding in
// namespace ("" for a ClusterRoleBinding). The caller does not modify them.
func (z *Authorizer) roleRules(ctx context.Context, ref rbacv1.RoleRef, namespace string) ([]rbacv1.PolicyRule, error) {
	switch ref.Kind {
	case "Role":
		if namespace == "" {
			// Only a RoleBinding may refer to a Role; validation refuses
			// the rest, but a Role has no rules outside a namespace.
			return nil, fmt.Errorf("role %q referenced outside a namespace: %w", ref.Name, ErrRoleNotFound)
		}
		r, err := z.policy.GetRole(ctx, namespace, ref.Name)
		if err != nil {
			return nil, fmt.Errorf("get role %s/%s: %w", namespace, ref.Name, err)
		}
		if r == nil {
			return nil, notFound{fmt.Sprintf("role.rbac.authorization.k8s.io %q not found", ref.Name)}
		}
		return r.Rules, nil
	case "ClusterRole":
		r, err := z.policy.GetClusterRole(ctx, ref.Name)
		if err != nil {
			return nil, fmt.Errorf("get clusterrole %s: %w", ref.Name, err)
		}
		if r == nil {
			return nil, notFound{fmt.Sprintf("clusterrole.rbac.authorization.k8s.io %q not found", ref.Name)}
		}
		return r.Rules, nil
	}
	return nil, notFound{fmt.Sprintf("unsupported role reference kind: %q", ref.Kind)}
}

// notFound is an error with upstream's text that is ErrRoleNotFound.
type notFound struct{ msg string }

func (e notFound) Error() string        { return e.msg }
func (e notFound) Is(target error) bool { return target == ErrRoleNotFound }

// source names what granted a rule, in upstream's words.
type source struct {
	kind, name string // ClusterRoleBinding "name" or RoleBinding "name/namespace"
	ref        rbacv1.RoleRef
	subject    *rbacv1.Subject
	namespace  string // the RoleBinding's
}

func (s source) String() string {
	return fmt.Sprintf("%s %q of %s %q to %s", s.kind, s.name, s.ref.Kind, s.ref.Name, describeSubject(s.subject, s.namespace))
}

func describeSubject(s *rbacv1.Subject, namespace string) string {
	if s.Kind == rbacv1.ServiceAccountKind {
		if s.Namespace != "" {
			namespace = s.Namespace
		}
		return fmt.Sprintf("%s %q", s.Kind, s.Name+"/"+namespace)
	}
	return fmt.Sprintf("%s %q", s.Kind, s.Name)
}

// appliesTo returns the index of the first of subjects that u is, and
// whether there is one. namespace is the binding's ("" for a
// ClusterRoleBinding): a ServiceAccount subject without a namespace is of
// the binding's namespace.
func appliesTo(u auth.User, subjects []rbacv1.Subject, namespace string) (int, bool) {
	for i := range subjects {
		if subjectIs(u, &subjects[i], namespace) {
			return i, true
		}
	}
	return 0, false
}

func subjectIs(u auth.User, s *rbacv1.Subject, namespace string) bool {
	switch s.Kind {
	case rbacv1.UserKind:
		return u.Name == s.Name
	case rbacv1.GroupKind:
		return u.InGroup(s.Name)
	case rbacv1.ServiceAccountKind:
		ns := s.Namespace
		if ns == "" {
			ns = namespace
		}
		if ns == "" {
			return false
		}
		// By name alone, as upstream's serviceaccount.MatchesUsername.
		rest, ok := strings.CutPrefix(u.Name, auth.ServiceAccountUserPrefix)
		return ok && rest == ns+":"+s.Name
	}
	return false
}
