package core

import (
	"math"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
)

// spreadConstraint is a parsed TopologySpreadConstraint.
type spreadConstraint struct {
	maxSkew       int32
	topologyKey   string
	selector      labels.Selector
	minDomains    int32
	honorAffinity bool // nodeAffinityPolicy Honor (the default)
	honorTaints   bool // nodeTaintsPolicy Honor (default Ignore)
}

// spreadConstraints parses the pod's constraints of the given action.
// matchLabelKeys are merged into the selector with the pod's values.
func spreadConstraints(pod *corev1.Pod, action corev1.UnsatisfiableConstraintAction) ([]spreadConstraint, error) {
	var out []spreadConstraint
	for _, c := range pod.Spec.TopologySpreadConstraints {
		if c.WhenUnsatisfiable != action {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(c.LabelSelector)
		if err != nil {
			return nil, err
		}
		for _, k := range c.MatchLabelKeys {
			if v, ok := pod.Labels[k]; ok {
				if r, err := labels.NewRequirement(k, selection.In, []string{v}); err == nil {
					sel = sel.Add(*r)
				}
			}
		}
		sc := spreadConstraint{
			maxSkew:       c.MaxSkew,
			topologyKey:   c.TopologyKey,
			selector:      sel,
			minDomains:    1,
			honorAffinity: true,
		}
		if c.MinDomains != nil {
			sc.minDomains = *c.MinDomains
		}
		if c.NodeAffinityPolicy != nil {
			sc.honorAffinity = *c.NodeAffinityPolicy == corev1.NodeInclusionPolicyHonor
		}
		if c.NodeTaintsPolicy != nil {
			sc.honorTaints = *c.NodeTaintsPolicy == corev1.NodeInclusionPolicyHonor
		}
		out = append(out, sc)
	}
	return out, nil
}

// includes reports whether node counts for the constraint under its
// node inclusion policies.
func (sc *spreadConstraint) includes(pod *corev1.Pod, node *corev1.Node, aff nodeaffinity.RequiredNodeAffinity) bool {
	if sc.honorAffinity {
		if ok, _ := aff.Match(node); !ok {
			return false
		}
	}
	if sc.honorTaints {
		if _, untolerated := corev1helpers.FindMatchingUntoleratedTaint(discard, node.Spec.Taints, pod.Spec.Tolerations, doNotSchedule, tolerationComparisonOperators); untolerated {
			return false
		}
	}
	return true
}

func doNotSchedule(t *corev1.Taint) bool {
	return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
}

func hasAllTopologyKeys(nodeLabels map[string]string, cs []spreadConstraint) bool {
	for i := range cs {
		if _, ok := nodeLabels[cs[i].topologyKey]; !ok {
			return false
		}
	}
	return true
}

// countMatching counts the pods of namespace ns that sel selects,
// leaving out terminating ones.
func countMatching(pods []*PodInfo, sel labels.Selector, ns string) int64 {
	if sel.Empty() {
		return 0
	}
	var n int64
	for _, p := range pods {
		if p.Pod.DeletionTimestamp != nil || p.Pod.Namespace != ns {
			continue
		}
		if sel.Matches(labels.Set(p.Pod.Labels)) {
			n++
		}
	}
	return n
}

// spreadState is PodTopologySpread's PreFilter result: per constraint,
// the matching pods in each domain.
type spreadState struct {
	constraints []spreadConstraint
	counts      []map[string]int64 // per constraint: domain value -> matching pods
	minMatch    []int64
}

// preFilterSpread counts, over every node that passes the constraints'
// inclusion policies and has all their keys, the pods each
// DoNotSchedule constraint selects. nil when the pod has none.
func preFilterSpread(c *cycle) (*spreadState, error) {
	cs, err := spreadConstraints(c.pod, corev1.DoNotSchedule)
	if err != nil || len(cs) == 0 {
		return nil, err
	}
	s := &spreadState{constraints: cs, counts: make([]map[string]int64, len(cs)), minMatch: make([]int64, len(cs))}
	for i := range s.counts {
		s.counts[i] = map[string]int64{}
	}
	for _, n := range c.snap.nodes {
		if !hasAllTopologyKeys(n.node.Labels, cs) {
			continue
		}
		for i := range cs {
			if !cs[i].includes(c.pod, n.node, c.nodeAffinity) {
				continue
			}
			v := n.node.Labels[cs[i].topologyKey]
			s.counts[i][v] += countMatching(n.pods, cs[i].selector, c.pod.Namespace)
		}
	}
	for i := range cs {
		m := int64(math.MaxInt32)
		for _, v := range s.counts[i] {
			m = min(m, v)
		}
		if int32(len(s.counts[i])) < cs[i].minDomains {
			// Fewer eligible domains than minDomains: the global minimum
			// is taken as 0.
			m = 0
		}
		s.minMatch[i] = m
	}
	return s, nil
}

// filterSpread is PodTopologySpread's filter: placing the pod in the
// node's domain must keep it within maxSkew of the least loaded domain.
func filterSpread(c *cycle, n *NodeInfo) string {
	s := c.spread
	if s == nil {
		return ""
	}
	podLabels := labels.Set(c.pod.Labels)
	for i := range s.constraints {
		sc := &s.constraints[i]
		v, ok := n.node.Labels[sc.topologyKey]
		if !ok {
			return ReasonSpreadMissingLabel
		}
		self := int64(0)
		if sc.selector.Matches(podLabels) {
			self = 1
		}
		if s.counts[i][v]+self-s.minMatch[i] > int64(sc.maxSkew) {
			return ReasonSpreadNotMatch
		}
	}
	return ""
}

// spreadScoreState is PodTopologySpread's PreScore result for the
// ScheduleAnyway constraints.
type spreadScoreState struct {
	constraints []spreadConstraint
	counts      []map[string]*int64 // per constraint: domain value -> matching pods (hostname: per node, in Score)
	weights     []float64
	ignored     map[string]struct{} // feasible nodes without all the keys
}

// preScoreSpread prepares scoring over the feasible nodes; nil when the
// pod has no ScheduleAnyway constraints.
func preScoreSpread(c *cycle, feasible []*NodeInfo) (*spreadScoreState, error) {
	cs, err := spreadConstraints(c.pod, corev1.ScheduleAnyway)
	if err != nil || len(cs) == 0 {
		return nil, err
	}
	s := &spreadScoreState{
		constraints: cs,
		counts:      make([]map[string]*int64, len(cs)),
		weights:     make([]float64, len(cs)),
		ignored:     map[string]struct{}{},
	}
	sizes := make([]int, len(cs))
	for i := range cs {
		s.counts[i] = map[string]*int64{}
	}
	for _, n := range feasible {
		if !hasAllTopologyKeys(n.node.Labels, cs) {
			s.ignored[n.node.Name] = struct{}{}
			continue
		}
		for i := range cs {
			if cs[i].topologyKey == corev1.LabelHostname {
				continue
			}
			v := n.node.Labels[cs[i].topologyKey]
			if s.counts[i][v] == nil {
				s.counts[i][v] = new(int64)
				sizes[i]++
			}
		}
	}
	for i := range cs {
		size := sizes[i]
		if cs[i].topologyKey == corev1.LabelHostname {
			size = len(feasible) - len(s.ignored)
		}
		s.weights[i] = math.Log(float64(size + 2))
	}
	for _, n := range c.snap.nodes {
		if !hasAllTopologyKeys(n.node.Labels, cs) {
			continue
		}
		for i := range cs {
			if !cs[i].includes(c.pod, n.node, c.nodeAffinity) {
				continue
			}
			cnt := s.counts[i][n.node.Labels[cs[i].topologyKey]]
			if cnt == nil {
				continue
			}
			*cnt += countMatching(n.pods, cs[i].selector, c.pod.Namespace)
		}
	}
	return s, nil
}

// scoreSpread is the node's raw PodTopologySpread score: the weighted
// matching pods of its domains, where fewer is better.
func scoreSpread(c *cycle, n *NodeInfo) int64 {
	s := c.spreadScore
	if _, ok := s.ignored[n.node.Name]; ok {
		return 0
	}
	var score float64
	for i := range s.constraints {
		sc := &s.constraints[i]
		v, ok := n.node.Labels[sc.topologyKey]
		if !ok {
			continue
		}
		var cnt int64
		if sc.topologyKey == corev1.LabelHostname {
			cnt = countMatching(n.pods, sc.selector, c.pod.Namespace)
		} else if p := s.counts[i][v]; p != nil {
			cnt = *p
		}
		score += float64(cnt)*s.weights[i] + float64(sc.maxSkew-1)
	}
	return int64(math.Round(score))
}

// normalizeSpread reverses the raw scores onto 0-MaxNodeScore (the least
// loaded best); ignored nodes get 0.
func normalizeSpread(c *cycle, feasible []*NodeInfo, scores []int64) {
	s := c.spreadScore
	minS, maxS := int64(math.MaxInt64), int64(0)
	for i, n := range feasible {
		if _, ok := s.ignored[n.node.Name]; ok {
			continue
		}
		minS = min(minS, scores[i])
		maxS = max(maxS, scores[i])
	}
	for i, n := range feasible {
		if _, ok := s.ignored[n.node.Name]; ok {
			scores[i] = 0
			continue
		}
		if maxS == 0 {
			scores[i] = MaxNodeScore
			continue
		}
		scores[i] = MaxNodeScore * (maxS + minS - scores[i]) / maxS
	}
}
