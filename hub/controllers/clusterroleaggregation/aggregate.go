package clusterroleaggregation

import (
	"fmt"
	"slices"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// AggregatedRules returns the rules the clusterrole-aggregation controller
// gives role from all the cluster roles there are (role may be among
// them): for each of its aggregationRule's selectors in order, the rules
// of the roles the selector matches other than role, taken in order of
// their names, each rule once. A role without an aggregationRule keeps
// its own rules. It fails only on a selector that does not parse. The
// caller owns the returned slice.
func AggregatedRules(role *rbacv1.ClusterRole, all []rbacv1.ClusterRole) ([]rbacv1.PolicyRule, error) {
	if role.AggregationRule == nil {
		return clonedRules(role.Rules), nil
	}
	sorted := make([]*rbacv1.ClusterRole, len(all))
	for i := range all {
		sorted[i] = &all[i]
	}
	slices.SortStableFunc(sorted, func(a, b *rbacv1.ClusterRole) int { return strings.Compare(a.Name, b.Name) })

	rules := []rbacv1.PolicyRule{}
	for i := range role.AggregationRule.ClusterRoleSelectors {
		sel, err := metav1.LabelSelectorAsSelector(&role.AggregationRule.ClusterRoleSelectors[i])
		if err != nil {
			return nil, fmt.Errorf("aggregate clusterrole %s: %w", role.Name, err)
		}
		for _, r := range sorted {
			if r.Name == role.Name || !sel.Matches(labels.Set(r.Labels)) {
				continue
			}
			for _, rule := range r.Rules {
				if !slices.ContainsFunc(rules, func(have rbacv1.PolicyRule) bool { return equality.Semantic.DeepEqual(have, rule) }) {
					rules = append(rules, *rule.DeepCopy())
				}
			}
		}
	}
	return rules, nil
}

// Aggregate returns copies of roles with the rules of every role with an
// aggregationRule set to its AggregatedRules, repeated until none changes,
// as the controller settles: admin aggregates edit, which aggregates view.
// Roles that aggregate each other in a cycle stop after len(roles)+1
// rounds. Roles are taken in order of their names; the result is in the
// order of roles.
func Aggregate(roles []rbacv1.ClusterRole) ([]rbacv1.ClusterRole, error) {
	out := make([]rbacv1.ClusterRole, len(roles))
	var order []int
	for i := range roles {
		roles[i].DeepCopyInto(&out[i])
		if roles[i].AggregationRule != nil {
			order = append(order, i)
		}
	}
	slices.SortStableFunc(order, func(a, b int) int { return strings.Compare(out[a].Name, out[b].Name) })
	for round := 0; round <= len(roles); round++ {
		changed := false
		for _, i := range order {
			rules, err := AggregatedRules(&out[i], out)
			if err != nil {
				return nil, err
			}
			if !equality.Semantic.DeepEqual(rules, out[i].Rules) {
				out[i].Rules = rules
				changed = true
			}
		}
		if !changed {
			break
		}
	}
	return out, nil
}

func clonedRules(rules []rbacv1.PolicyRule) []rbacv1.PolicyRule {
	if rules == nil {
		return nil
	}
	out := make([]rbacv1.PolicyRule, len(rules))
	for i := range rules {
		rules[i].DeepCopyInto(&out[i])
	}
	return out
}
