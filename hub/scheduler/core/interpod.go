package core

import (
	"fmt"
	"math"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// hardPodAffinityWeight is upstream's default weight, in scoring, of an
// existing pod's required affinity term that the incoming pod matches.
const hardPodAffinityWeight = 1

type topologyPair struct{ key, value string }

// topologyCounts counts matching pods per topology domain.
type topologyCounts map[topologyPair]int64

func (m topologyCounts) update(node *corev1.Node, key string, v int64) {
	if tv, ok := node.Labels[key]; ok {
		p := topologyPair{key, tv}
		m[p] += v
		if m[p] == 0 {
			delete(m, p)
		}
	}
}

// interPodState is InterPodAffinity's PreFilter result for one pod.
type interPodState struct {
	affinity     []affinityTerm // the incoming pod's required terms, namespaces merged
	antiAffinity []affinityTerm
	// existingAnti counts the domains holding pods whose required
	// anti-affinity the incoming pod matches.
	existingAnti topologyCounts
	// affinityCounts counts the domains holding pods that match all of
	// the incoming pod's required affinity terms; antiCounts, those
	// matching any of its required anti-affinity terms.
	affinityCounts topologyCounts
	antiCounts     topologyCounts
	selfMatch      bool // the pod matches all its own affinity terms
}

// mergeNamespaces turns a term's namespace selector into namespace names,
// as upstream does for the incoming pod's terms, so that matching pods
// needs no namespace lookups.
func mergeNamespaces(t affinityTerm, snap *Snapshot) affinityTerm {
	if t.nsSelector.Empty() {
		return t
	}
	ns := make(map[string]struct{}, len(t.namespaces))
	for n := range t.namespaces {
		ns[n] = struct{}{}
	}
	if snap.namespaces != nil {
		for _, n := range snap.namespaces.Select(t.nsSelector) {
			ns[n] = struct{}{}
		}
	}
	t.namespaces = ns
	t.nsSelector = labels.Nothing()
	return t
}

func mergeAll(terms []affinityTerm, snap *Snapshot) []affinityTerm {
	if len(terms) == 0 {
		return nil
	}
	out := make([]affinityTerm, len(terms))
	for i, t := range terms {
		out[i] = mergeNamespaces(t, snap)
	}
	return out
}

// matchesAll reports whether pod matches every term; false for none.
func matchesAll(terms []affinityTerm, pod *corev1.Pod) bool {
	if len(terms) == 0 {
		return false
	}
	for i := range terms {
		if !terms[i].matches(pod, nil) {
			return false
		}
	}
	return true
}

// preFilterInterPod computes InterPodAffinity's state, or nil when the
// filter has nothing to check (upstream's Skip).
func preFilterInterPod(c *cycle) (*interPodState, error) {
	pi := c.pi
	if pi.parseErr != nil {
		return nil, fmt.Errorf("parsing pod: %w", pi.parseErr)
	}
	s := &interPodState{
		affinity:     mergeAll(pi.requiredAffinity, c.snap),
		antiAffinity: mergeAll(pi.requiredAntiAffinity, c.snap),
		existingAnti: topologyCounts{},
	}
	nsLabels := c.nsLabels
	for _, n := range c.snap.nodes {
		if n.podsWithRequiredAntiAff == 0 {
			continue
		}
		for _, p := range n.pods {
			for i := range p.requiredAntiAffinity {
				t := &p.requiredAntiAffinity[i]
				if t.matches(c.pod, nsLabels) {
					s.existingAnti.update(n.node, t.topologyKey, 1)
				}
			}
		}
	}
	if len(s.affinity) > 0 || len(s.antiAffinity) > 0 {
		s.affinityCounts, s.antiCounts = topologyCounts{}, topologyCounts{}
		for _, n := range c.snap.nodes {
			for _, p := range n.pods {
				if matchesAll(s.affinity, p.Pod) {
					for i := range s.affinity {
						s.affinityCounts.update(n.node, s.affinity[i].topologyKey, 1)
					}
				}
				for i := range s.antiAffinity {
					if s.antiAffinity[i].matches(p.Pod, nil) {
						s.antiCounts.update(n.node, s.antiAffinity[i].topologyKey, 1)
					}
				}
			}
		}
		s.selfMatch = matchesAll(s.affinity, c.pod)
	}
	if len(s.existingAnti) == 0 && len(s.affinity) == 0 && len(s.antiAffinity) == 0 {
		return nil, nil
	}
	return s, nil
}

// filterInterPod is InterPodAffinity's filter: the node's domains must
// hold pods matching the pod's affinity, none matching its anti-affinity,
// and no pod whose anti-affinity the pod matches.
func filterInterPod(c *cycle, n *NodeInfo) string {
	s := c.interPod
	if s == nil {
		return ""
	}
	nodeLabels := n.node.Labels
	// Affinity: every term's topology must be on the node, holding a
	// matching pod; or, for the first of a group of pods with affinity
	// to each other, no pod matches anywhere and the pod matches itself.
	podsExist := true
	for i := range s.affinity {
		v, ok := nodeLabels[s.affinity[i].topologyKey]
		if !ok {
			return ReasonPodAffinity
		}
		if s.affinityCounts[topologyPair{s.affinity[i].topologyKey, v}] <= 0 {
			podsExist = false
		}
	}
	if !podsExist && !(len(s.affinityCounts) == 0 && s.selfMatch) {
		return ReasonPodAffinity
	}
	if len(s.antiCounts) > 0 {
		for i := range s.antiAffinity {
			if v, ok := nodeLabels[s.antiAffinity[i].topologyKey]; ok {
				if s.antiCounts[topologyPair{s.antiAffinity[i].topologyKey, v}] > 0 {
					return ReasonPodAntiAffinity
				}
			}
		}
	}
	if len(s.existingAnti) > 0 {
		for k, v := range nodeLabels {
			if s.existingAnti[topologyPair{k, v}] > 0 {
				return ReasonExistingAntiAffinity
			}
		}
	}
	return ""
}

// interPodScoreState is InterPodAffinity's PreScore result: the score
// each topology domain earns.
type interPodScoreState struct {
	topology map[string]map[string]int64 // key -> value -> score
}

func (s *interPodScoreState) add(t *affinityTerm, weight int64, pod *corev1.Pod, nsLabels labels.Set, node *corev1.Node) {
	if !t.matches(pod, nsLabels) {
		return
	}
	v, ok := node.Labels[t.topologyKey]
	if !ok {
		return
	}
	m := s.topology[t.topologyKey]
	if m == nil {
		m = map[string]int64{}
		s.topology[t.topologyKey] = m
	}
	m[v] += weight
}

// preScoreInterPod adds up the preferred terms both ways: the incoming
// pod's preferred (anti-)affinity towards existing pods, and existing
// pods' required affinity (at hardPodAffinityWeight) and preferred
// (anti-)affinity towards it. It returns nil when nothing scores
// (upstream's Skip).
func preScoreInterPod(c *cycle) (*interPodScoreState, error) {
	pi := c.pi
	if pi.parseErr != nil {
		return nil, fmt.Errorf("parsing pod: %w", pi.parseErr)
	}
	preferred := make([]weightedTerm, len(pi.preferredAffinity))
	for i, t := range pi.preferredAffinity {
		preferred[i] = weightedTerm{mergeNamespaces(t.affinityTerm, c.snap), t.weight}
	}
	preferredAnti := make([]weightedTerm, len(pi.preferredAntiAffinity))
	for i, t := range pi.preferredAntiAffinity {
		preferredAnti[i] = weightedTerm{mergeNamespaces(t.affinityTerm, c.snap), t.weight}
	}
	hasConstraints := len(preferred) > 0 || len(preferredAnti) > 0
	s := &interPodScoreState{topology: map[string]map[string]int64{}}
	for _, n := range c.snap.nodes {
		if !hasConstraints && n.podsWithAffinity == 0 {
			continue
		}
		if len(n.node.Labels) == 0 {
			continue
		}
		for _, p := range n.pods {
			if !hasConstraints && !p.hasAffinity() {
				continue
			}
			for i := range preferred {
				s.add(&preferred[i].affinityTerm, int64(preferred[i].weight), p.Pod, nil, n.node)
			}
			for i := range preferredAnti {
				s.add(&preferredAnti[i].affinityTerm, -int64(preferredAnti[i].weight), p.Pod, nil, n.node)
			}
			for i := range p.requiredAffinity {
				s.add(&p.requiredAffinity[i], hardPodAffinityWeight, c.pod, c.nsLabels, n.node)
			}
			for i := range p.preferredAffinity {
				s.add(&p.preferredAffinity[i].affinityTerm, int64(p.preferredAffinity[i].weight), c.pod, c.nsLabels, n.node)
			}
			for i := range p.preferredAntiAffinity {
				s.add(&p.preferredAntiAffinity[i].affinityTerm, -int64(p.preferredAntiAffinity[i].weight), c.pod, c.nsLabels, n.node)
			}
		}
	}
	if len(s.topology) == 0 {
		return nil, nil
	}
	return s, nil
}

// scoreInterPod is the node's raw InterPodAffinity score: the sum of
// its domains' scores.
func scoreInterPod(c *cycle, n *NodeInfo) int64 {
	var score int64
	for key, values := range c.interPodScore.topology {
		if v, ok := n.node.Labels[key]; ok {
			score += values[v]
		}
	}
	return score
}

// normalizeInterPod maps raw scores linearly from [min, max] onto
// [0, MaxNodeScore], all 0 when they are equal.
func normalizeInterPod(scores []int64) {
	minS, maxS := int64(math.MaxInt64), int64(math.MinInt64)
	for _, s := range scores {
		minS = min(minS, s)
		maxS = max(maxS, s)
	}
	diff := maxS - minS
	for i, s := range scores {
		f := 0.0
		if diff > 0 {
			f = float64(MaxNodeScore) * (float64(s-minS) / float64(diff))
		}
		scores[i] = int64(f)
	}
}
