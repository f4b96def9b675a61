package rbac

import (
	"slices"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/outpost-mesh/outpost/hub/auth"
)

// RulesAllow reports whether any of rules allows request a.
func RulesAllow(a auth.Attributes, rules ...rbacv1.PolicyRule) bool {
	for i := range rules {
		if RuleAllows(a, &rules[i]) {
			return true
		}
	}
	return false
}

// RuleAllows reports whether rule allows request a, as upstream matches
// them:
//   - verbs: the request's verb, or "*";
//   - a resource request: apiGroups has its group or "*"; resources has
//     "*", the resource ("pods"), or with a subresource the two joined
//     ("pods/log") or "*/<subresource>"; resourceNames is empty or has the
//     request's name, so a rule with resourceNames never allows a request
//     without a name (a create, a list or watch without a metadata.name
//     field selector, a deletecollection);
//   - a non-resource request: nonResourceURLs has the path, "*", or a
//     prefix of it followed by "*" ("/healthz/*" allows "/healthz/etcd").
//
// A create of a resource itself (no subresource) is matched without a
// name whatever a.Name says: upstream's request has none, the name being
// in the body, and a caller that filled it in for another authorizer
// (auth.NeedsCreateName) must not widen what resourceNames allow.
func RuleAllows(a auth.Attributes, rule *rbacv1.PolicyRule) bool {
	if !has(rule.Verbs, a.Verb, rbacv1.VerbAll) {
		return false
	}
	if !a.ResourceRequest {
		return nonResourceURLMatches(rule.NonResourceURLs, a.Path)
	}
	name := a.Name
	if a.Verb == "create" && a.Subresource == "" {
		name = ""
	}
	return has(rule.APIGroups, a.APIGroup, rbacv1.APIGroupAll) &&
		resourceMatches(rule.Resources, a.Resource, a.Subresource) &&
		(len(rule.ResourceNames) == 0 || slices.Contains(rule.ResourceNames, name))
}

// has reports whether set holds s or all.
func has(set []string, s, all string) bool {
	for _, v := range set {
		if v == s || v == all {
			return true
		}
	}
	return false
}

func resourceMatches(set []string, resource, subresource string) bool {
	combined := resource
	if subresource != "" {
		combined += "/" + subresource
	}
	for _, r := range set {
		switch {
		case r == rbacv1.ResourceAll, r == combined:
			return true
		case subresource != "" && r == "*/"+subresource:
			return true
		}
	}
	return false
}

func nonResourceURLMatches(set []string, path string) bool {
	for _, u := range set {
		switch {
		case u == rbacv1.NonResourceAll, u == path:
			return true
		case strings.HasSuffix(u, "*") && strings.HasPrefix(path, strings.TrimRight(u, "*")):
			return true
		}
	}
	return false
}
