package rbac

import (
	"context"
	"fmt"
	"slices"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/component-helpers/auth/rbac/validation"

	"github.com/outpost-mesh/outpost/hub/auth"
)

// Covers reports whether owner's rules allow everything servant's do, and
// returns the parts of servant's that they do not, each broken down to one
// verb on one resource (and name) or one URL. It is upstream's
// k8s.io/component-helpers/auth/rbac/validation.Covers, which the
// escalation check and reconciliation use.
func Covers(owner, servant []rbacv1.PolicyRule) (bool, []rbacv1.PolicyRule) {
	return validation.Covers(owner, servant)
}

// EscalationError is the error ConfirmNoEscalation returns when a user
// tries to grant rules it does not hold. The API layer answers it as
// Forbidden.
type EscalationError struct {
	User auth.User
	// Missing are the rules not held, broken down and then compacted as
	// upstream does: one rule per group and resource, with all its
	// missing verbs.
	Missing []rbacv1.PolicyRule
	// Resolution is what could not be resolved looking up the user's own
	// rules (see RulesFor), or nil.
	Resolution error
}

// Error gives upstream's message, such as
//
//	user "alice" (groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:
//	{APIGroups:[""], Resources:["secrets"], Verbs:["get"]}
func (e *EscalationError) Error() string {
	lines := make([]string, 0, len(e.Missing))
	for _, r := range e.Missing {
		lines = append(lines, compactString(r))
	}
	slices.Sort(lines)
	lines = slices.Compact(lines)
	msg := fmt.Sprintf("user %q (groups=%q) is attempting to grant RBAC permissions not currently held:\n%s", e.User.Name, e.User.Groups, strings.Join(lines, "\n"))
	if e.Resolution != nil {
		msg += fmt.Sprintf("; resolution errors: [%v]", e.Resolution)
	}
	return msg
}

// Unwrap returns the resolution error, if any.
func (e *EscalationError) Unwrap() error { return e.Resolution }

// ConfirmNoEscalation returns nil when u holds every one of rules in
// namespace ("" for cluster-wide rules only), so that u may put them in a
// Role, ClusterRole or binding; otherwise an *EscalationError listing what
// u lacks. As upstream, rules u holds count even when some of u's rules
// could not be resolved; the resolution errors are then part of the
// denial. The "escalate" and "bind" verbs, which exempt a user from this
// check, are the caller's to authorize first.
func (z *Authorizer) ConfirmNoEscalation(ctx context.Context, u auth.User, namespace string, rules []rbacv1.PolicyRule) error {
	owned, resolution := z.RulesFor(ctx, u, namespace)
	ok, missing := Covers(owned, rules)
	if ok {
		return nil
	}
	return &EscalationError{User: u, Missing: compactRules(missing), Resolution: resolution}
}

// compactRules merges rules that name one group and one resource and
// nothing but verbs into one rule per group and resource, as upstream's
// CompactRules does with the broken-down rules Covers returns. Other
// rules are kept as they are.
func compactRules(rules []rbacv1.PolicyRule) []rbacv1.PolicyRule {
	type groupResource struct{ group, resource string }
	out := make([]rbacv1.PolicyRule, 0, len(rules))
	simple := map[groupResource]int{} // index in out
	for _, r := range rules {
		if len(r.ResourceNames) > 0 || len(r.NonResourceURLs) > 0 || len(r.APIGroups) != 1 || len(r.Resources) != 1 {
			out = append(out, *r.DeepCopy())
			continue
		}
		gr := groupResource{r.APIGroups[0], r.Resources[0]}
		if i, ok := simple[gr]; ok {
			out[i].Verbs = append(out[i].Verbs, r.Verbs...)
			continue
		}
		simple[gr] = len(out)
		out = append(out, *r.DeepCopy())
	}
	return out
}

// compactString renders r as upstream's escalation message does:
// {APIGroups:[""], Resources:["pods"], Verbs:["get"]}, naming only the
// fields that are set.
func compactString(r rbacv1.PolicyRule) string {
	var parts []string
	add := func(name string, v []string) {
		if len(v) > 0 {
			parts = append(parts, fmt.Sprintf("%s:%q", name, v))
		}
	}
	add("APIGroups", r.APIGroups)
	add("Resources", r.Resources)
	add("NonResourceURLs", r.NonResourceURLs)
	add("ResourceNames", r.ResourceNames)
	add("Verbs", r.Verbs)
	return "{" + strings.Join(parts, ", ") + "}"
}
