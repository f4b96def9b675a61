package core

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
)

// PodInfo is a pod with what the scheduler derives from it once: its
// requests and its parsed inter-pod affinity terms. It is read-only once
// made and may be shared by the cache and a scheduling cycle.
type PodInfo struct {
	Pod *corev1.Pod

	requests   Resource // as NodeResourcesFit counts them on a node
	nonZeroCPU int64    // millicores, with the defaults for unset requests
	nonZeroMem int64

	requiredAffinity      []affinityTerm
	requiredAntiAffinity  []affinityTerm
	preferredAffinity     []weightedTerm
	preferredAntiAffinity []weightedTerm
	// parseErr is the first error met parsing the terms; terms of a kind
	// that failed are left out, as upstream leaves them.
	parseErr error
}

// NewPodInfo derives a PodInfo from pod, which the PodInfo keeps and
// never modifies.
func NewPodInfo(pod *corev1.Pod) *PodInfo {
	pi := &PodInfo{Pod: pod}
	pi.requests, pi.nonZeroCPU, pi.nonZeroMem = assignedPodRequests(pod)
	if a := pod.Spec.Affinity; a != nil {
		if pa := a.PodAffinity; pa != nil {
			pi.requiredAffinity = pi.terms(pa.RequiredDuringSchedulingIgnoredDuringExecution)
			pi.preferredAffinity = pi.weightedTerms(pa.PreferredDuringSchedulingIgnoredDuringExecution)
		}
		if pa := a.PodAntiAffinity; pa != nil {
			pi.requiredAntiAffinity = pi.terms(pa.RequiredDuringSchedulingIgnoredDuringExecution)
			pi.preferredAntiAffinity = pi.weightedTerms(pa.PreferredDuringSchedulingIgnoredDuringExecution)
		}
	}
	return pi
}

func (pi *PodInfo) hasAffinity() bool {
	return len(pi.requiredAffinity)+len(pi.requiredAntiAffinity)+len(pi.preferredAffinity)+len(pi.preferredAntiAffinity) > 0
}

func (pi *PodInfo) terms(in []corev1.PodAffinityTerm) []affinityTerm {
	if len(in) == 0 {
		return nil
	}
	out := make([]affinityTerm, 0, len(in))
	for i := range in {
		t, err := newAffinityTerm(pi.Pod, &in[i])
		if err != nil {
			if pi.parseErr == nil {
				pi.parseErr = err
			}
			return nil
		}
		out = append(out, t)
	}
	return out
}

func (pi *PodInfo) weightedTerms(in []corev1.WeightedPodAffinityTerm) []weightedTerm {
	if len(in) == 0 {
		return nil
	}
	out := make([]weightedTerm, 0, len(in))
	for i := range in {
		t, err := newAffinityTerm(pi.Pod, &in[i].PodAffinityTerm)
		if err != nil {
			if pi.parseErr == nil {
				pi.parseErr = err
			}
			return nil
		}
		out = append(out, weightedTerm{affinityTerm: t, weight: in[i].Weight})
	}
	return out
}

// affinityTerm is a parsed PodAffinityTerm: the pods it selects in which
// namespaces, and its topology key.
type affinityTerm struct {
	namespaces  map[string]struct{}
	nsSelector  labels.Selector // labels.Nothing() when unset
	selector    labels.Selector
	topologyKey string
}

type weightedTerm struct {
	affinityTerm
	weight int32
}

// newAffinityTerm parses term of pod. Its namespaces default to the pod's
// own when neither namespaces nor a namespace selector is given; the
// matchLabelKeys and mismatchLabelKeys are merged into the selector with
// the pod's own label values, as the apiserver does at admission.
func newAffinityTerm(pod *corev1.Pod, term *corev1.PodAffinityTerm) (affinityTerm, error) {
	sel, err := metav1.LabelSelectorAsSelector(term.LabelSelector)
	if err != nil {
		return affinityTerm{}, err
	}
	if term.LabelSelector != nil {
		for _, k := range term.MatchLabelKeys {
			if v, ok := pod.Labels[k]; ok {
				if r, err := labels.NewRequirement(k, selection.In, []string{v}); err == nil {
					sel = sel.Add(*r)
				}
			}
		}
		for _, k := range term.MismatchLabelKeys {
			if v, ok := pod.Labels[k]; ok {
				if r, err := labels.NewRequirement(k, selection.NotIn, []string{v}); err == nil {
					sel = sel.Add(*r)
				}
			}
		}
	}
	nsSel, err := metav1.LabelSelectorAsSelector(term.NamespaceSelector)
	if err != nil {
		return affinityTerm{}, err
	}
	ns := map[string]struct{}{}
	if len(term.Namespaces) == 0 && term.NamespaceSelector == nil {
		ns[pod.Namespace] = struct{}{}
	} else {
		for _, n := range term.Namespaces {
			ns[n] = struct{}{}
		}
	}
	return affinityTerm{namespaces: ns, nsSelector: nsSel, selector: sel, topologyKey: term.TopologyKey}, nil
}

// matches reports whether pod, in a namespace labelled nsLabels, is one
// the term selects.
func (t *affinityTerm) matches(pod *corev1.Pod, nsLabels labels.Set) bool {
	if _, ok := t.namespaces[pod.Namespace]; ok || t.nsSelector.Matches(nsLabels) {
		return t.selector.Matches(labels.Set(pod.Labels))
	}
	return false
}

// NodeInfo is a node with the pods assigned to it (bound or assumed) and
// their sums. Only the Cache changes it.
type NodeInfo struct {
	node *corev1.Node // nil while pods point at a node not (or no longer) known
	pos  int          // index in Cache.order, -1 when not listed

	pods                    []*PodInfo
	podsWithAffinity        int // pods with any inter-pod (anti-)affinity term
	podsWithRequiredAntiAff int // pods with required anti-affinity terms
	requested               Resource
	nonZeroCPU, nonZeroMem  int64
	allocatable             Resource
	usedPorts               hostPorts
	imageSizes              map[string]int64 // image name (as the node reports it) -> size
}

// Node returns the node; nil for a placeholder.
func (n *NodeInfo) Node() *corev1.Node { return n.node }

// Pods returns the pods on the node. The caller must not modify it.
func (n *NodeInfo) Pods() []*PodInfo { return n.pods }

// Requested returns the sum of the requests of the pods on the node.
func (n *NodeInfo) Requested() Resource { return n.requested }

func (n *NodeInfo) setNode(node *corev1.Node) {
	n.node = node
	n.allocatable = resourceOf(node.Status.Allocatable)
	n.imageSizes = nil
	for _, img := range node.Status.Images {
		for _, name := range img.Names {
			if n.imageSizes == nil {
				n.imageSizes = make(map[string]int64, len(node.Status.Images))
			}
			n.imageSizes[name] = img.SizeBytes
		}
	}
}

func (n *NodeInfo) addPod(pi *PodInfo) {
	n.pods = append(n.pods, pi)
	n.accountPod(pi, 1)
}

// removePod takes the pod with pi's UID off the node and reports whether
// it was there.
func (n *NodeInfo) removePod(uid string) (*PodInfo, bool) {
	for i, p := range n.pods {
		if string(p.Pod.UID) == uid {
			last := len(n.pods) - 1
			n.pods[i] = n.pods[last]
			n.pods[last] = nil
			n.pods = n.pods[:last]
			n.accountPod(p, -1)
			return p, true
		}
	}
	return nil, false
}

func (n *NodeInfo) accountPod(pi *PodInfo, sign int) {
	s := int64(sign)
	n.requested.addResource(&pi.requests, s)
	n.nonZeroCPU += s * pi.nonZeroCPU
	n.nonZeroMem += s * pi.nonZeroMem
	if pi.hasAffinity() {
		n.podsWithAffinity += sign
	}
	if len(pi.requiredAntiAffinity) > 0 {
		n.podsWithRequiredAntiAff += sign
	}
	for _, p := range hostPortsOf(pi.Pod) {
		if sign > 0 {
			n.usedPorts.add(p)
		} else {
			n.usedPorts.remove(p)
		}
	}
}
