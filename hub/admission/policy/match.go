package policy

import (
	"errors"
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/predicates/rules"
)

// errNilSelector is upstream's complaint about a selector left nil,
// which API defaulting prevents.
const errNilSelector = "a nil %s selector was passed, please ensure selectors are initialized properly"

// errNoConstraints is upstream's complaint about a policy without
// matchConstraints, which API validation prevents.
var errNoConstraints = errors.New("policy contained no match constraints, a required field")

// matcher decides whether a policy's matchConstraints, or a binding's
// matchResources, select a write, as upstream's policy matcher does.
type matcher struct {
	// namespace returns the namespace a namespaced write is in.
	namespace func(name string) (*corev1.Namespace, error)
}

// constraintsMatch reports whether a policy's matchConstraints select
// the write a describes. An error is a configuration error of the policy.
func (m matcher) constraintsMatch(a admission.Attributes, mc *admissionregistrationv1.MatchResources) (bool, error) {
	if mc == nil {
		return false, errNoConstraints
	}
	return m.matches(a, mc)
}

// bindingMatches reports whether a binding's matchResources, if any,
// select the write a describes. An error is a configuration error of the
// binding.
func (m matcher) bindingMatches(a admission.Attributes, mr *admissionregistrationv1.MatchResources) (bool, error) {
	if mr == nil {
		return true, nil
	}
	return m.matches(a, mr)
}

// matches applies mr as upstream does: the namespace and object
// selectors, the excluded rules, then the rules (none match everything).
// Selector errors count only for writes the rules select.
func (m matcher) matches(a admission.Attributes, mr *admissionregistrationv1.MatchResources) (bool, error) {
	if mr.NamespaceSelector == nil {
		return false, fmt.Errorf(errNilSelector, "namespace")
	}
	if mr.ObjectSelector == nil {
		return false, fmt.Errorf(errNilSelector, "object")
	}
	nsOK, nsErr := m.namespaceSelected(a, mr.NamespaceSelector)
	if !nsOK && nsErr == nil {
		return false, nil
	}
	objOK, objErr := objectSelected(a, mr.ObjectSelector)
	if !objOK && objErr == nil {
		return false, nil
	}
	if ruleMatches(a, mr.ExcludeResourceRules) {
		return false, nil
	}
	if len(mr.ResourceRules) > 0 && !ruleMatches(a, mr.ResourceRules) {
		return false, nil
	}
	if nsErr != nil {
		return false, nsErr
	}
	if objErr != nil {
		return false, objErr
	}
	return true, nil
}

// ruleMatches reports whether one of rs selects the write: its
// operation, group, version, resource and scope, and its name when the
// rule names some. Only the resource the write was made to is matched:
// the hub serves each resource at one version, so upstream's
// matchPolicy Equivalent finds no other.
func ruleMatches(a admission.Attributes, rs []admissionregistrationv1.NamedRuleWithOperations) bool {
	for _, r := range rs {
		if !(&rules.Matcher{Rule: r.RuleWithOperations, Attr: a}).Matches() {
			continue
		}
		if len(r.ResourceNames) == 0 {
			return true
		}
		for _, n := range r.ResourceNames {
			if n == a.GetName() {
				return true
			}
		}
	}
	return false
}

// namespaceSelected reports whether sel selects the namespace of the
// write, as upstream's namespace matcher does: cluster-scoped objects
// other than namespaces are always selected; a namespace being written
// is judged by its new labels.
func (m matcher) namespaceSelected(a admission.Attributes, ls *metav1.LabelSelector) (bool, error) {
	if a.GetNamespace() == "" && a.GetResource().GroupResource() != namespacesResource {
		return true, nil
	}
	sel, err := metav1.LabelSelectorAsSelector(ls)
	if err != nil {
		return false, apierrors.NewInternalError(err)
	}
	if sel.Empty() {
		return true, nil
	}
	if a.GetResource().GroupResource() == namespacesResource && a.GetSubresource() == "" {
		return labelsSelected(a.GetObject(), sel), nil
	}
	ns, err := m.namespace(a.GetNamespace())
	if apierrors.IsNotFound(err) {
		return false, err
	}
	if err != nil {
		return false, apierrors.NewInternalError(err)
	}
	return sel.Matches(labels.Set(ns.Labels)), nil
}

// objectSelected reports whether sel selects the new object or the old.
func objectSelected(a admission.Attributes, ls *metav1.LabelSelector) (bool, error) {
	sel, err := metav1.LabelSelectorAsSelector(ls)
	if err != nil {
		return false, apierrors.NewInternalError(err)
	}
	if sel.Empty() {
		return true, nil
	}
	return labelsSelected(a.GetObject(), sel) || labelsSelected(a.GetOldObject(), sel), nil
}

// labelsSelected reports whether obj is there and sel selects its labels.
func labelsSelected(obj runtime.Object, sel labels.Selector) bool {
	if obj == nil {
		return false
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return false
	}
	return sel.Matches(labels.Set(m.GetLabels()))
}
