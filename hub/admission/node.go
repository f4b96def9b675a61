package admission

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"

	"github.com/outpost-mesh/outpost/hub/registry/core"
)

// hubLabelDomain is the namespace of the hub's own labels: outpost.dev and
// its subdomains, such as the site label (auth.SiteLabel) the hub sets on
// a Node when its node joins.
const hubLabelDomain = "outpost.dev"

// kubeletLabels are the labels of the kubernetes.io and k8s.io namespaces
// that a node may set on its own Node, as upstream's kubelet may
// (k8s.io/kubelet/pkg/apis.IsKubeletLabel); it may also set any label of
// kubeletLabelDomains.
var kubeletLabels = map[string]bool{
	corev1.LabelHostname:                true,
	corev1.LabelTopologyZone:            true,
	corev1.LabelTopologyRegion:          true,
	corev1.LabelFailureDomainBetaZone:   true,
	corev1.LabelFailureDomainBetaRegion: true,
	corev1.LabelInstanceType:            true,
	corev1.LabelInstanceTypeStable:      true,
	corev1.LabelOSStable:                true,
	corev1.LabelArchStable:              true,
	"beta.kubernetes.io/os":             true,
	"beta.kubernetes.io/arch":           true,
}

var kubeletLabelDomains = []string{corev1.LabelNamespaceSuffixKubelet, corev1.LabelNamespaceSuffixNode}

// NodeMaySetLabel reports whether a node may add, change or remove the
// label key on its own Node, as upstream's NodeRestriction has it: any
// label but those of the node-restriction.kubernetes.io namespace (which
// exist so that only administrators set them), and of the kubernetes.io
// and k8s.io namespaces only those kubelet sets (hostname, os, arch,
// zone, region, instance type, and the kubelet.kubernetes.io and
// node.kubernetes.io namespaces). Nor may it touch the hub's own labels
// (outpost.dev and its subdomains, such as the site label), which the
// hub sets at join. Namespaces include their subdomains.
//
// This is the one list of what a node may label itself with: the
// admission rule and the hub's sync endpoint, which applies the labels a
// node reports, both go by it.
func NodeMaySetLabel(key string) bool {
	ns, _, ok := strings.Cut(key, "/")
	if !ok {
		return true // no namespace: the user's
	}
	switch {
	case inDomain(ns, corev1.LabelNamespaceNodeRestriction), inDomain(ns, hubLabelDomain):
		return false
	case inDomain(ns, "kubernetes.io"), inDomain(ns, "k8s.io"):
		return kubeletLabels[key] || slices.ContainsFunc(kubeletLabelDomains, func(d string) bool { return inDomain(ns, d) })
	}
	return true
}

// inDomain reports whether the label namespace ns is domain or one of its
// subdomains.
func inDomain(ns, domain string) bool {
	return ns == domain || strings.HasSuffix(ns, "."+domain)
}

// A DeniedError is a node's write of a Node that CheckNode refuses. Its
// message is upstream NodeRestriction's for the same refusal.
type DeniedError struct {
	// Node is the node that asked.
	Node string
	// Create is set when the write creates the Node.
	Create bool
	// Field is what the node may not set or change: "node" (a Node not
	// its own), "labels", "configSource", "taints", "ownerReferences",
	// "podCIDR" or "providerID".
	Field string
	// Labels are, for Field "labels", the label keys refused, sorted.
	Labels []string
	// Other is, for Field "node", the name of the Node written.
	Other string
}

func (e *DeniedError) Error() string {
	switch {
	case e.Field == "node":
		return fmt.Sprintf("node %q is not allowed to modify node %q", e.Node, e.Other)
	case e.Field == "labels" && e.Create:
		return fmt.Sprintf("node %q is not allowed to set the following labels: %s", e.Node, strings.Join(e.Labels, ", "))
	case e.Field == "labels":
		return fmt.Sprintf("node %q is not allowed to modify labels: %s", e.Node, strings.Join(e.Labels, ", "))
	case e.Field == "configSource" && e.Create:
		return fmt.Sprintf("node %q is not allowed to create a Node with a non-nil configSource", e.Node)
	case e.Field == "configSource":
		return fmt.Sprintf("node %q is not allowed to update configSource to a new non-nil configSource", e.Node)
	}
	return fmt.Sprintf("node %q is not allowed to modify %s", e.Node, e.Field)
}

// CheckNode applies upstream's NodeRestriction rules, with the hub's own,
// to node's write of a Node: n is what would be stored, old what is, nil
// when the write creates it. It returns a *DeniedError for the first rule
// n breaks, nil when it breaks none. No I/O; it modifies neither Node.
//
// A node writes no Node but its own. Creating it, the node may not give it
// a configSource (upstream's node authorizer lets a node read the config
// map that names), nor a label NodeMaySetLabel refuses; it may register with
// taints, owners, a podCIDR and a providerID, as kubelet does. Updating
// it, the main resource or its status, the node may not
//   - set configSource to a new non-nil one (clearing it is allowed: old
//     kubelets drop the field);
//   - change its taints, which steer pods to or away from it;
//   - change its ownerReferences (an owner that goes away would have the
//     garbage collector delete the Node, which the node could then
//     recreate with what updates may not set: CVE-2025-5187);
//   - change podCIDR or podCIDRs, which the hub assigns, nor providerID
//     (upstream leaves these to validation, which lets them go from empty
//     to set once, for anyone; the hub keeps that first setting from
//     nodes);
//   - add, change or remove a label NodeMaySetLabel refuses.
func CheckNode(old, n *corev1.Node, node string) error {
	if n.Name != node {
		return &DeniedError{Node: node, Field: "node", Other: n.Name}
	}
	if old == nil {
		if n.Spec.ConfigSource != nil {
			return &DeniedError{Node: node, Create: true, Field: "configSource"}
		}
		if bad := refusedLabels(n.Labels, nil); len(bad) > 0 {
			return &DeniedError{Node: node, Create: true, Field: "labels", Labels: bad}
		}
		return nil
	}
	switch {
	case n.Spec.ConfigSource != nil && !apiequality.Semantic.DeepEqual(n.Spec.ConfigSource, old.Spec.ConfigSource):
		return &DeniedError{Node: node, Field: "configSource"}
	case !apiequality.Semantic.DeepEqual(n.Spec.Taints, old.Spec.Taints):
		return &DeniedError{Node: node, Field: "taints"}
	case !apiequality.Semantic.DeepEqual(n.OwnerReferences, old.OwnerReferences):
		return &DeniedError{Node: node, Field: "ownerReferences"}
	case !slices.Equal(core.PodCIDRs(&n.Spec), core.PodCIDRs(&old.Spec)):
		return &DeniedError{Node: node, Field: "podCIDR"}
	case n.Spec.ProviderID != old.Spec.ProviderID:
		return &DeniedError{Node: node, Field: "providerID"}
	}
	if bad := refusedLabels(n.Labels, old.Labels); len(bad) > 0 {
		return &DeniedError{Node: node, Field: "labels", Labels: bad}
	}
	return nil
}

// refusedLabels returns, sorted, the keys of the labels that differ
// between a and b (added, removed or changed) and that NodeMaySetLabel
// refuses.
func refusedLabels(a, b map[string]string) []string {
	var bad []string
	for k, v := range a {
		if w, ok := b[k]; (!ok || v != w) && !NodeMaySetLabel(k) {
			bad = append(bad, k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok && !NodeMaySetLabel(k) {
			bad = append(bad, k)
		}
	}
	sort.Strings(bad)
	return bad
}
