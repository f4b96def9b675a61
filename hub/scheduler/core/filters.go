package core

import (
	"fmt"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
)

// The reasons the filters give, word for word as upstream's, since users
// and tools read them in FailedScheduling events.
const (
	ReasonUnschedulable          = "node(s) were unschedulable"
	ReasonNodeName               = "node(s) didn't match the requested node name"
	ReasonNodeAffinity           = "node(s) didn't match Pod's node affinity/selector"
	ReasonNodePorts              = "node(s) didn't have free ports for the requested pod ports"
	ReasonTooManyPods            = "Too many pods"
	ReasonSpreadNotMatch         = "node(s) didn't match pod topology spread constraints"
	ReasonSpreadMissingLabel     = ReasonSpreadNotMatch + " (missing required label)"
	ReasonPodAffinity            = "node(s) didn't match pod affinity rules"
	ReasonPodAntiAffinity        = "node(s) didn't match pod anti-affinity rules"
	ReasonExistingAntiAffinity   = "node(s) didn't satisfy existing pods anti-affinity rules"
	reasonNodeAffinityConflict   = "pod affinity terms conflict"
	reasonInsufficientPrefix     = "Insufficient "
	reasonUntoleratedTaintFormat = "node(s) had untolerated taint {%s: %s}"
)

// Taint tolerations with the Gt and Lt operators are honoured.
const tolerationComparisonOperators = true

var discard = logr.Discard()

// untoleratedTaintReason is TaintToleration's reason for taint.
func untoleratedTaintReason(t *corev1.Taint) string {
	return fmt.Sprintf(reasonUntoleratedTaintFormat, t.Key, t.Value)
}

// filterUnschedulable is NodeUnschedulable: a cordoned node takes only
// pods that tolerate the node.kubernetes.io/unschedulable:NoSchedule taint.
func filterUnschedulable(c *cycle, n *NodeInfo) string {
	if !n.node.Spec.Unschedulable {
		return ""
	}
	t := corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}
	if corev1helpers.TolerationsTolerateTaint(discard, c.pod.Spec.Tolerations, &t, tolerationComparisonOperators) {
		return ""
	}
	return ReasonUnschedulable
}

// filterNodeName is NodeName: a pod naming a node fits only there.
func filterNodeName(c *cycle, n *NodeInfo) string {
	if c.pod.Spec.NodeName != "" && c.pod.Spec.NodeName != n.node.Name {
		return ReasonNodeName
	}
	return ""
}

// filterTaints is TaintToleration: the first NoSchedule or NoExecute
// taint the pod does not tolerate rejects the node.
func filterTaints(c *cycle, n *NodeInfo) string {
	for i := range n.node.Spec.Taints {
		t := &n.node.Spec.Taints[i]
		if t.Effect != corev1.TaintEffectNoSchedule && t.Effect != corev1.TaintEffectNoExecute {
			continue
		}
		if !corev1helpers.TolerationsTolerateTaint(discard, c.pod.Spec.Tolerations, t, tolerationComparisonOperators) {
			return untoleratedTaintReason(t)
		}
	}
	return ""
}

// hasRequiredNodeAffinity reports whether NodeAffinity filters pod at all.
func hasRequiredNodeAffinity(pod *corev1.Pod) bool {
	a := pod.Spec.Affinity
	return pod.Spec.NodeSelector != nil ||
		a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil
}

// nodeNamesOfAffinity is NodeAffinity's PreFilter: when every term of the
// required node affinity names nodes by metadata.name In, only those
// nodes are evaluated (as for a DaemonSet's pods). It returns nil for
// "all nodes", and conflict when the terms can match no node.
func nodeNamesOfAffinity(pod *corev1.Pod) (names map[string]struct{}, conflict bool) {
	a := pod.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return nil, false
	}
	var all map[string]struct{}
	for _, t := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		var term map[string]struct{}
		for _, r := range t.MatchFields {
			if r.Key != metav1.ObjectNameField || r.Operator != corev1.NodeSelectorOpIn {
				continue
			}
			s := make(map[string]struct{}, len(r.Values))
			for _, v := range r.Values {
				if term == nil {
					s[v] = struct{}{}
				} else if _, ok := term[v]; ok {
					s[v] = struct{}{}
				}
			}
			term = s
		}
		if term == nil {
			return nil, false
		}
		if all == nil {
			all = map[string]struct{}{}
		}
		for v := range term {
			all[v] = struct{}{}
		}
	}
	if all != nil && len(all) == 0 {
		return nil, true
	}
	return all, false
}

// filterNodeAffinity is NodeAffinity: nodeSelector and the required node
// affinity must both match. Terms that fail to parse match nothing.
func filterNodeAffinity(c *cycle, n *NodeInfo) string {
	if !c.checkNodeAffinity {
		return ""
	}
	if ok, _ := c.nodeAffinity.Match(n.node); !ok {
		return ReasonNodeAffinity
	}
	return ""
}

// filterPorts is NodePorts: no host port the pod wants may be in use.
func filterPorts(c *cycle, n *NodeInfo) string {
	for _, p := range c.ports {
		if n.usedPorts.conflicts(p) {
			return ReasonNodePorts
		}
	}
	return ""
}

// filterFit is NodeResourcesFit: room for one more pod, and for each
// resource the pod requests. It appends every shortage to reasons.
func filterFit(c *cycle, n *NodeInfo, reasons []string) []string {
	if len(n.pods)+1 > n.allocatable.AllowedPodNumber {
		reasons = append(reasons, ReasonTooManyPods)
	}
	r := &c.req
	if r.MilliCPU == 0 && r.Memory == 0 && r.EphemeralStorage == 0 && len(r.Scalar) == 0 {
		return reasons
	}
	if r.MilliCPU > 0 && r.MilliCPU > n.allocatable.MilliCPU-n.requested.MilliCPU {
		reasons = append(reasons, reasonInsufficientPrefix+string(corev1.ResourceCPU))
	}
	if r.Memory > 0 && r.Memory > n.allocatable.Memory-n.requested.Memory {
		reasons = append(reasons, reasonInsufficientPrefix+string(corev1.ResourceMemory))
	}
	if r.EphemeralStorage > 0 && r.EphemeralStorage > n.allocatable.EphemeralStorage-n.requested.EphemeralStorage {
		reasons = append(reasons, reasonInsufficientPrefix+string(corev1.ResourceEphemeralStorage))
	}
	for name, q := range r.Scalar {
		if q == 0 {
			continue
		}
		if q > n.allocatable.Scalar[name]-n.requested.Scalar[name] {
			reasons = append(reasons, reasonInsufficientPrefix+string(name))
		}
	}
	return reasons
}

// requiredNodeAffinity returns the pod's nodeSelector and required node
// affinity as one matcher.
func requiredNodeAffinity(pod *corev1.Pod) nodeaffinity.RequiredNodeAffinity {
	return nodeaffinity.GetRequiredNodeAffinity(pod)
}
