package core

import (
	"math"
	"strings"

	corev1 "k8s.io/api/core/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
)

// scoreLeastAllocated is NodeResourcesFit's LeastAllocated score over cpu
// and memory, weight 1 each: the share left free once the pod is placed,
// counting unset requests at the defaults.
func scoreLeastAllocated(c *cycle, n *NodeInfo) int64 {
	alloc := [2]int64{n.allocatable.MilliCPU, n.allocatable.Memory}
	req := [2]int64{n.nonZeroCPU + c.nonZeroReq[0], n.nonZeroMem + c.nonZeroReq[1]}
	var score, weights int64
	for i := range alloc {
		if alloc[i] == 0 {
			continue
		}
		s := int64(0)
		if req[i] <= alloc[i] {
			s = (alloc[i] - req[i]) * MaxNodeScore / alloc[i]
		}
		score += s
		weights++
	}
	if weights == 0 {
		return 0
	}
	return score / weights
}

// scoreBalanced is NodeResourcesBalancedAllocation: the closer the node's
// cpu and memory shares (with the pod, counting requests as set) are to
// each other, the higher. Best-effort pods skip it (c.skipBalanced).
func scoreBalanced(c *cycle, n *NodeInfo) int64 {
	alloc := [2]int64{n.allocatable.MilliCPU, n.allocatable.Memory}
	req := [2]int64{n.requested.MilliCPU + c.plainReq[0], n.requested.Memory + c.plainReq[1]}
	var fractions [2]float64
	k := 0
	for i := range alloc {
		if alloc[i] == 0 {
			continue
		}
		f := float64(req[i]) / float64(alloc[i])
		if f > 1 {
			f = 1
		}
		fractions[k] = f
		k++
	}
	std := 0.0
	if k == 2 {
		std = math.Abs((fractions[0] - fractions[1]) / 2)
	}
	return int64((1 - std) * float64(MaxNodeScore))
}

// preferNoScheduleTolerations returns the tolerations that can tolerate
// a PreferNoSchedule taint: those of that effect or of none.
func preferNoScheduleTolerations(tols []corev1.Toleration) []corev1.Toleration {
	var out []corev1.Toleration
	for _, t := range tols {
		if t.Effect == "" || t.Effect == corev1.TaintEffectPreferNoSchedule {
			out = append(out, t)
		}
	}
	return out
}

// scoreTaints is TaintToleration's raw score: how many PreferNoSchedule
// taints of the node the pod does not tolerate. normalizeDefault reverses
// it, so that fewer is better.
func scoreTaints(c *cycle, n *NodeInfo) int64 {
	var count int64
	for i := range n.node.Spec.Taints {
		t := &n.node.Spec.Taints[i]
		if t.Effect != corev1.TaintEffectPreferNoSchedule {
			continue
		}
		if !corev1helpers.TolerationsTolerateTaint(discard, c.preferTolerations, t, tolerationComparisonOperators) {
			count++
		}
	}
	return count
}

// preferredNodeAffinity parses the pod's preferred node affinity; nil
// when it has none.
func preferredNodeAffinity(pod *corev1.Pod) (*nodeaffinity.PreferredSchedulingTerms, error) {
	a := pod.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || len(a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution) == 0 {
		return nil, nil
	}
	return nodeaffinity.NewPreferredSchedulingTerms(a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution)
}

// scoreNodeAffinity is NodeAffinity's raw score: the sum of the weights
// of the preferred terms the node matches.
func scoreNodeAffinity(c *cycle, n *NodeInfo) int64 {
	return c.preferredNodeAffinity.Score(n.node)
}

// ImageLocality's bounds: below 23 MiB an image is not worth preferring a
// node for; one container's worth is capped at 1000 MiB.
const (
	mb                    int64 = 1024 * 1024
	imageMinThreshold           = 23 * mb
	imageMaxContainerSize       = 1000 * mb
)

// normalizedImageName adds the ":latest" tag an untagged image means.
func normalizedImageName(name string) string {
	if strings.LastIndex(name, ":") <= strings.LastIndex(name, "/") {
		name += ":latest"
	}
	return name
}

// scoreImageLocality is ImageLocality: the sizes of the pod's images the
// node already holds, each scaled by the share of nodes that hold it (so
// that an image everywhere does not pull pods together), mapped onto
// 0-100 between the thresholds.
func scoreImageLocality(c *cycle, n *NodeInfo) int64 {
	if len(n.imageSizes) == 0 {
		return 0
	}
	var sum int64
	for _, img := range c.images {
		if size, ok := n.imageSizes[img]; ok {
			spread := float64(c.snap.images[img]) / float64(c.numAllNodes)
			sum += int64(float64(size) * spread)
		}
	}
	maxThreshold := imageMaxContainerSize * int64(c.numContainers)
	if sum < imageMinThreshold {
		sum = imageMinThreshold
	} else if sum > maxThreshold {
		sum = maxThreshold
	}
	return MaxNodeScore * (sum - imageMinThreshold) / (maxThreshold - imageMinThreshold)
}

// normalizeDefault scales scores onto 0-MaxNodeScore by the highest, and
// reverses them if asked, as upstream's DefaultNormalizeScore.
func normalizeDefault(scores []int64, reverse bool) {
	var maxCount int64
	for _, s := range scores {
		if s > maxCount {
			maxCount = s
		}
	}
	if maxCount == 0 {
		if reverse {
			for i := range scores {
				scores[i] = MaxNodeScore
			}
		}
		return
	}
	for i, s := range scores {
		s = MaxNodeScore * s / maxCount
		if reverse {
			s = MaxNodeScore - s
		}
		scores[i] = s
	}
}
