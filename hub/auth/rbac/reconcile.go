package rbac

import (
	"errors"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/component-helpers/auth/rbac/reconciliation"
)

// Operation is the write that reconciling an object takes.
type Operation string

const (
	OpNone   Operation = "none"
	OpCreate Operation = "create"
	OpUpdate Operation = "update"
	// OpRecreate deletes the existing binding (by its UID) and creates
	// the expected one: a binding's roleRef cannot be changed.
	OpRecreate Operation = "recreate"
)

// ClusterRoleResult is what reconciling a bootstrap ClusterRole takes.
type ClusterRoleResult struct {
	Op Operation
	// Role is the object to create or update, nil when Op is OpNone.
	// The caller owns it.
	Role *rbacv1.ClusterRole
	// Missing are the expected rules the existing role lacks, broken
	// down as Covers returns them.
	Missing []rbacv1.PolicyRule
	// Protected is set when the existing role has the autoupdate
	// annotation "false": Op is then OpNone whatever is missing.
	Protected bool
}

// ReconcileClusterRole returns what makes existing (nil when there is
// none) hold what expected, a bootstrap role, holds, as upstream's API
// server does at start and `kubectl auth reconcile` does: missing labels,
// annotations and rules are added, extra ones kept. A role with an
// aggregationRule keeps the rules the aggregation controller gave it; only
// missing selectors are added. It is upstream's
// k8s.io/component-helpers/auth/rbac/reconciliation, computed without
// writing; the caller writes.
func ReconcileClusterRole(expected, existing *rbacv1.ClusterRole) (ClusterRoleResult, error) {
	opts := reconciliation.ReconcileRoleOptions{
		Role:   reconciliation.ClusterRoleRuleOwner{ClusterRole: expected.DeepCopy()},
		Client: storedClusterRole{existing},
	}
	r, err := opts.Run()
	if err != nil {
		return ClusterRoleResult{}, err
	}
	res := ClusterRoleResult{Op: Operation(r.Operation), Missing: r.MissingRules, Protected: r.Protected}
	if res.Protected {
		res.Op = OpNone
	}
	if res.Op != OpNone {
		res.Role = r.Role.GetObject().(*rbacv1.ClusterRole)
	}
	return res, nil
}

// ClusterRoleBindingResult is what reconciling a bootstrap
// ClusterRoleBinding takes.
type ClusterRoleBindingResult struct {
	Op Operation
	// Binding is the object to create or update (for OpRecreate, to
	// create once the existing one is deleted), nil when Op is OpNone.
	// The caller owns it.
	Binding *rbacv1.ClusterRoleBinding
	// Missing are the expected subjects the existing binding lacks.
	Missing []rbacv1.Subject
	// Protected is set when the existing binding has the autoupdate
	// annotation "false": Op is then OpNone whatever is missing.
	Protected bool
}

// ReconcileClusterRoleBinding returns what makes existing (nil when there
// is none) hold what expected, a bootstrap binding, holds: missing labels,
// annotations and subjects are added, extra ones kept, and a binding to
// another role is recreated. It is upstream's reconciliation, computed
// without writing, as ReconcileClusterRole.
func ReconcileClusterRoleBinding(expected, existing *rbacv1.ClusterRoleBinding) (ClusterRoleBindingResult, error) {
	opts := reconciliation.ReconcileRoleBindingOptions{
		RoleBinding: reconciliation.ClusterRoleBindingAdapter{ClusterRoleBinding: expected.DeepCopy()},
		Client:      storedClusterRoleBinding{existing},
	}
	r, err := opts.Run()
	if err != nil {
		return ClusterRoleBindingResult{}, err
	}
	res := ClusterRoleBindingResult{Op: Operation(r.Operation), Missing: r.MissingSubjects, Protected: r.Protected}
	if res.Protected {
		res.Op = OpNone
	}
	if res.Op != OpNone {
		res.Binding = r.RoleBinding.GetObject().(*rbacv1.ClusterRoleBinding)
	}
	return res, nil
}

// errNoWrites is what the stored objects answer a write with; the
// reconciliation runs as a dry run and never writes.
var errNoWrites = errors.New("rbac: reconciliation does not write")

// storedClusterRole answers the reconciliation's reads with one role, or
// none.
type storedClusterRole struct{ role *rbacv1.ClusterRole }

func (s storedClusterRole) Get(_, name string) (reconciliation.RuleOwner, error) {
	if s.role == nil {
		return nil, apierrors.NewNotFound(rbacv1.Resource("clusterroles"), name)
	}
	return reconciliation.ClusterRoleRuleOwner{ClusterRole: s.role.DeepCopy()}, nil
}

func (storedClusterRole) Create(reconciliation.RuleOwner) (reconciliation.RuleOwner, error) {
	return nil, errNoWrites
}

func (storedClusterRole) Update(reconciliation.RuleOwner) (reconciliation.RuleOwner, error) {
	return nil, errNoWrites
}

// storedClusterRoleBinding is storedClusterRole for a binding.
type storedClusterRoleBinding struct{ binding *rbacv1.ClusterRoleBinding }

func (s storedClusterRoleBinding) Get(_, name string) (reconciliation.RoleBinding, error) {
	if s.binding == nil {
		return nil, apierrors.NewNotFound(rbacv1.Resource("clusterrolebindings"), name)
	}
	return reconciliation.ClusterRoleBindingAdapter{ClusterRoleBinding: s.binding.DeepCopy()}, nil
}

func (storedClusterRoleBinding) Delete(string, string, types.UID) error { return errNoWrites }

func (storedClusterRoleBinding) Create(reconciliation.RoleBinding) (reconciliation.RoleBinding, error) {
	return nil, errNoWrites
}

func (storedClusterRoleBinding) Update(reconciliation.RoleBinding) (reconciliation.RoleBinding, error) {
	return nil, errNoWrites
}
