package clusterroleaggregation

import (
	"reflect"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func labeled(name string, labels map[string]string, rules ...rbacv1.PolicyRule) rbacv1.ClusterRole {
	return rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Rules: rules}
}

func aggregating(name string, labels map[string]string, selectors ...metav1.LabelSelector) rbacv1.ClusterRole {
	return rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, AggregationRule: &rbacv1.AggregationRule{ClusterRoleSelectors: selectors}}
}

func matchLabel(k string) metav1.LabelSelector {
	return metav1.LabelSelector{MatchLabels: map[string]string{k: "true"}}
}

func rule(verb, resource string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{Verbs: []string{verb}, APIGroups: []string{""}, Resources: []string{resource}}
}

func TestAggregatedRules(t *testing.T) {
	getPods, listPods, getNodes := rule("get", "pods"), rule("list", "pods"), rule("get", "nodes")
	all := []rbacv1.ClusterRole{
		labeled("z", map[string]string{"a": "true"}, getPods, listPods),
		labeled("b", map[string]string{"a": "true"}, listPods), // sorts before z
		labeled("c", map[string]string{"c": "true"}, getNodes, getPods),
		labeled("off", map[string]string{"a": "false"}, rbacv1.PolicyRule{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}}),
		// It matches its own selector; its own rules are never taken.
		aggregating("self", map[string]string{"a": "true"}, matchLabel("a")),
	}
	rules := func(r ...rbacv1.PolicyRule) []rbacv1.PolicyRule { return append([]rbacv1.PolicyRule{}, r...) }
	tests := []struct {
		name string
		role rbacv1.ClusterRole
		want []rbacv1.PolicyRule
	}{
		{"one selector, by name, once each", aggregating("agg", nil, matchLabel("a")), rules(listPods, getPods)},
		{"selectors in order", aggregating("agg", nil, matchLabel("c"), matchLabel("a")), rules(getNodes, getPods, listPods)},
		{"matches nothing", aggregating("agg", nil, matchLabel("none")), rules()},
		{"no aggregation rule keeps its rules", labeled("plain", nil, getNodes), rules(getNodes)},
		{"excludes itself", all[4], rules(listPods, getPods)},
		{"expression selector", aggregating("agg", nil, metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "c", Operator: metav1.LabelSelectorOpExists},
		}}), rules(getNodes, getPods)},
	}
	for _, tt := range tests {
		got, err := AggregatedRules(&tt.role, all)
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: AggregatedRules(%s) = %v, %v, want %v", tt.name, tt.role.Name, got, err, tt.want)
		}
	}
	bad := aggregating("bad", nil, metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "k", Operator: "Bogus"}}})
	if got, err := AggregatedRules(&bad, all); err == nil {
		t.Errorf("AggregatedRules(%s) = %v, nil, want an error", bad.Name, got)
	}
}
