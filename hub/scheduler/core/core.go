// Package core is the scheduler's decision, as kube-scheduler's default
// profile makes it: given a pod and a snapshot of the nodes with the pods
// on them, it runs the filters, scores the feasible nodes and picks one,
// or says why none fits in upstream's words. It does no I/O; the Cache it
// keeps the snapshot in is plain data. Only hub/scheduler imports it.
package core

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
)

// ErrNoNodesAvailable is returned by Schedule when the cluster has no
// nodes; the pod is unschedulable, and this is upstream's message.
var ErrNoNodesAvailable = errors.New("no nodes available to schedule pods")

// Sampling bounds of upstream's adaptive percentageOfNodesToScore.
const (
	minFeasibleNodesToFind           = 100
	minFeasibleNodesPercentageToFind = 5
)

// Options configure a Scheduler.
type Options struct {
	// PercentageOfNodesToScore is the share of nodes to find feasible
	// before scoring stops the search; 0 for upstream's adaptive default,
	// max(5, 50 - nodes/125)%, never fewer than 100 nodes.
	PercentageOfNodesToScore int32
	// Rand breaks ties between the best nodes; nil for a random source.
	Rand *rand.Rand
}

// Scheduler picks nodes for pods. It keeps where the last search ended,
// so that successive pods start their search at a rotating offset, and
// buffers reused between pods. It is not safe for concurrent use.
type Scheduler struct {
	percentage int32
	rand       *rand.Rand
	next       int // where the next search starts

	feasible []*NodeInfo
	total    []int64
	scores   []int64
	reasons  []string
}

// New returns a Scheduler.
func New(o Options) *Scheduler {
	r := o.Rand
	if r == nil {
		r = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	return &Scheduler{percentage: o.PercentageOfNodesToScore, rand: r}
}

// Result is where a pod goes.
type Result struct {
	Node string
	// Info is the pod as the cycle derived it, for the cache to assume.
	Info *PodInfo
	// Evaluated is how many nodes the filters saw, Feasible how many
	// passed.
	Evaluated, Feasible int
}

// cycle is what one scheduling attempt derives from the pod once.
type cycle struct {
	pod         *corev1.Pod
	pi          *PodInfo
	snap        *Snapshot
	numAllNodes int
	nsLabels    labels.Set // of the pod's namespace

	req               Resource
	checkNodeAffinity bool
	nodeAffinity      nodeaffinity.RequiredNodeAffinity
	ports             []hostPort
	spread            *spreadState
	interPod          *interPodState

	nonZeroReq, plainReq  [2]int64
	skipBalanced          bool
	preferTolerations     []corev1.Toleration
	preferredNodeAffinity *nodeaffinity.PreferredSchedulingTerms
	images                []string
	numContainers         int
	spreadScore           *spreadScoreState
	interPodScore         *interPodScoreState
}

// Schedule picks the node for pod from snap. It returns a *FitError when
// no node fits, ErrNoNodesAvailable when there are none, and any other
// error when the pod cannot be evaluated at all (such as a selector that
// does not parse). The result is only valid for snap as it was.
func (s *Scheduler) Schedule(pod *corev1.Pod, snap *Snapshot) (Result, error) {
	all := snap.nodes
	if len(all) == 0 {
		return Result{}, ErrNoNodesAvailable
	}
	c, nodes, fe, err := preFilter(pod, snap)
	if err != nil {
		return Result{}, err
	}

	// Filter, from a rotating offset, until enough nodes fit.
	feasible := s.findFeasible(c, nodes, fe)
	res := Result{Info: c.pi, Evaluated: len(feasible) + fe.numRejected, Feasible: len(feasible)}
	s.next = (s.next + res.Evaluated) % len(all)
	if len(feasible) == 0 {
		return res, fe
	}
	if len(feasible) == 1 {
		res.Node = feasible[0].node.Name
		return res, nil
	}

	// Score and pick.
	if err := s.score(c, feasible); err != nil {
		return res, err
	}
	res.Node = s.pick(feasible)
	return res, nil
}

// preFilter derives the cycle of pod, as the PreFilter plugins do, and
// the nodes to filter: all of them unless NodeAffinity names some. The
// FitError collects the rejections to come; an error (a *FitError when
// the pod is rejected before any node is looked at) ends the attempt.
func preFilter(pod *corev1.Pod, snap *Snapshot) (*cycle, []*NodeInfo, *FitError, error) {
	all := snap.nodes
	c := &cycle{
		pod:         pod,
		pi:          NewPodInfo(pod),
		snap:        snap,
		numAllNodes: len(all),
		nsLabels:    snap.namespaceLabels(pod.Namespace),
		req:         podRequests(pod),
	}
	fe := &FitError{Pod: pod, NumAllNodes: len(all)}

	// PreFilter.
	nodes := all
	if hasRequiredNodeAffinity(pod) {
		c.checkNodeAffinity = true
		c.nodeAffinity = requiredNodeAffinity(pod)
		names, conflict := nodeNamesOfAffinity(pod)
		if conflict {
			fe.PreFilterMsg = reasonNodeAffinityConflict
			fe.Plugins = Plugins(NodeAffinity)
			return nil, nil, nil, fe
		}
		if names != nil {
			nodes = make([]*NodeInfo, 0, len(names))
			for name := range names {
				if n := snap.Get(name); n != nil {
					nodes = append(nodes, n)
				}
			}
			// Map order is random; visit the named nodes in a fixed one.
			sort.Slice(nodes, func(i, j int) bool { return nodes[i].pos < nodes[j].pos })
			fe.absent = len(all) - len(nodes)
			fe.absentReason = fmt.Sprintf("node(s) didn't satisfy plugin(s) %v", Plugins(NodeAffinity))
			fe.Plugins |= Plugins(NodeAffinity)
		}
	} else {
		c.nodeAffinity = requiredNodeAffinity(pod)
	}
	c.ports = hostPortsOf(pod)
	var err error
	if c.spread, err = preFilterSpread(c); err != nil {
		return nil, nil, nil, fmt.Errorf("PodTopologySpread: calculating preFilterState: %w", err)
	}
	if c.interPod, err = preFilterInterPod(c); err != nil {
		fe.PreFilterMsg = err.Error()
		fe.Plugins = Plugins(InterPodAffinity)
		fe.absent = 0
		return nil, nil, nil, fe
	}

	return c, nodes, fe, nil
}

// numFeasibleNodesToFind is how many feasible nodes end the search among
// numAll, as upstream computes it.
func (s *Scheduler) numFeasibleNodesToFind(numAll int) int {
	if numAll < minFeasibleNodesToFind {
		return numAll
	}
	pct := s.percentage
	if pct == 0 {
		pct = int32(50 - numAll/125)
		if pct < minFeasibleNodesPercentageToFind {
			pct = minFeasibleNodesPercentageToFind
		}
	}
	if pct >= 100 {
		return numAll
	}
	n := numAll * int(pct) / 100
	if n < minFeasibleNodesToFind {
		return minFeasibleNodesToFind
	}
	return n
}

// filterFunc appends the reasons a filter rejects a node for; none when
// it passes.
type filterFunc func(c *cycle, n *NodeInfo, reasons []string) []string

// single adapts a filter with at most one reason.
func single(f func(*cycle, *NodeInfo) string) filterFunc {
	return func(c *cycle, n *NodeInfo, reasons []string) []string {
		if r := f(c, n); r != "" {
			return append(reasons, r)
		}
		return reasons
	}
}

// filters in the order of the default profile.
var filters = []struct {
	plugin Plugin
	run    filterFunc
}{
	{NodeUnschedulable, single(filterUnschedulable)},
	{NodeName, single(filterNodeName)},
	{TaintToleration, single(filterTaints)},
	{NodeAffinity, single(filterNodeAffinity)},
	{NodePorts, single(filterPorts)},
	{NodeResourcesFit, filterFit},
	{PodTopologySpread, single(filterSpread)},
	{InterPodAffinity, single(filterInterPod)},
}

// runFilters returns the first plugin that rejects n and its reasons, or
// 0. The reasons slice is s's buffer, valid until the next call.
func (s *Scheduler) runFilters(c *cycle, n *NodeInfo) (Plugin, []string) {
	for _, f := range filters {
		if s.reasons = f.run(c, n, s.reasons[:0]); len(s.reasons) > 0 {
			return f.plugin, s.reasons
		}
	}
	return 0, nil
}

func (s *Scheduler) findFeasible(c *cycle, nodes []*NodeInfo, fe *FitError) []*NodeInfo {
	want := s.numFeasibleNodesToFind(len(nodes))
	feasible := s.feasible[:0]
	start := s.next
	for i := 0; i < len(nodes) && len(feasible) < want; i++ {
		n := nodes[(start+i)%len(nodes)]
		p, reasons := s.runFilters(c, n)
		if p == 0 {
			feasible = append(feasible, n)
			continue
		}
		fe.reject(p, reasons)
	}
	s.feasible = feasible
	return feasible
}

// scorer is one score plugin: its raw score of a node, how it
// normalizes, and its weight.
type scorer struct {
	name      string
	weight    int64
	score     func(*cycle, *NodeInfo) int64
	normalize func(c *cycle, feasible []*NodeInfo, scores []int64) // nil: none
}

// preScore prepares the score plugins for the feasible nodes, as their
// PreScore does.
func preScore(c *cycle, feasible []*NodeInfo) error {
	pod := c.pod
	c.nonZeroReq, c.plainReq = scoreRequests(pod)
	c.skipBalanced = c.plainReq == [2]int64{}
	c.preferTolerations = preferNoScheduleTolerations(pod.Spec.Tolerations)
	var err error
	if c.preferredNodeAffinity, err = preferredNodeAffinity(pod); err != nil {
		return fmt.Errorf("NodeAffinity: parsing pod's preferred node affinity: %w", err)
	}
	if c.spreadScore, err = preScoreSpread(c, feasible); err != nil {
		return fmt.Errorf("PodTopologySpread: calculating preScoreState: %w", err)
	}
	if c.interPodScore, err = preScoreInterPod(c); err != nil {
		return fmt.Errorf("InterPodAffinity: %w", err)
	}
	c.numContainers = len(pod.Spec.InitContainers) + len(pod.Spec.Containers)
	c.images = c.images[:0]
	for i := range pod.Spec.InitContainers {
		c.images = append(c.images, normalizedImageName(pod.Spec.InitContainers[i].Image))
	}
	for i := range pod.Spec.Containers {
		c.images = append(c.images, normalizedImageName(pod.Spec.Containers[i].Image))
	}
	return nil
}

// scorersFor returns the score plugins that score the pod of c: those
// whose PreScore did not skip it.
func scorersFor(c *cycle) []scorer {
	out := make([]scorer, 0, 7)
	out = append(out, scorer{"TaintToleration", weightTaintToleration, scoreTaints,
		func(_ *cycle, _ []*NodeInfo, sc []int64) { normalizeDefault(sc, true) }})
	if c.preferredNodeAffinity != nil {
		out = append(out, scorer{"NodeAffinity", weightNodeAffinity, scoreNodeAffinity,
			func(_ *cycle, _ []*NodeInfo, sc []int64) { normalizeDefault(sc, false) }})
	}
	if c.spreadScore != nil {
		out = append(out, scorer{"PodTopologySpread", weightPodTopologySpread, scoreSpread, normalizeSpread})
	}
	if c.interPodScore != nil {
		out = append(out, scorer{"InterPodAffinity", weightInterPodAffinity, scoreInterPod,
			func(_ *cycle, _ []*NodeInfo, sc []int64) { normalizeInterPod(sc) }})
	}
	out = append(out, scorer{"NodeResourcesFit", weightFit, scoreLeastAllocated, nil})
	if !c.skipBalanced {
		out = append(out, scorer{"NodeResourcesBalancedAllocation", weightBalanced, scoreBalanced, nil})
	}
	out = append(out, scorer{"ImageLocality", weightImageLocality, scoreImageLocality, nil})
	return out
}

// score sums, per feasible node, the weighted normalized scores into
// s.total.
func (s *Scheduler) score(c *cycle, feasible []*NodeInfo) error {
	if err := preScore(c, feasible); err != nil {
		return err
	}
	s.total = resize(s.total, len(feasible))
	clear(s.total)
	s.scores = resize(s.scores, len(feasible))
	for _, sc := range scorersFor(c) {
		for i, n := range feasible {
			s.scores[i] = sc.score(c, n)
		}
		if sc.normalize != nil {
			sc.normalize(c, feasible, s.scores)
		}
		for i := range feasible {
			s.total[i] += s.scores[i] * sc.weight
		}
	}
	return nil
}

func resize(b []int64, n int) []int64 {
	if cap(b) < n {
		return make([]int64, n)
	}
	return b[:n]
}

// pick returns the node with the highest total, drawing at random, with
// equal chances, among those that tie.
func (s *Scheduler) pick(feasible []*NodeInfo) string {
	best, ties := 0, 1
	for i := 1; i < len(feasible); i++ {
		switch {
		case s.total[i] > s.total[best]:
			best, ties = i, 1
		case s.total[i] == s.total[best]:
			ties++
			if s.rand.IntN(ties) == 0 {
				best = i
			}
		}
	}
	return feasible[best].node.Name
}

// FitError says why no node fits a pod, node by node counted per reason.
type FitError struct {
	Pod         *corev1.Pod
	NumAllNodes int
	// PreFilterMsg is set when the pod was rejected before any node was
	// looked at; the per-node reasons are then empty.
	PreFilterMsg string
	// Reasons counts the nodes per reason a filter gave.
	Reasons map[string]int
	// Plugins are the plugins that rejected the pod somewhere, which
	// decide what change in the cluster may make it schedulable.
	Plugins Plugins

	numRejected  int
	absent       int    // nodes a PreFilter left out
	absentReason string // what they count as
}

func (fe *FitError) reject(p Plugin, reasons []string) {
	if fe.Reasons == nil {
		fe.Reasons = map[string]int{}
	}
	for _, r := range reasons {
		fe.Reasons[r]++
	}
	fe.Plugins |= Plugins(p)
	fe.numRejected++
}

// Error returns upstream's message, such as
//
//	0/5 nodes are available: 2 Insufficient cpu, 3 node(s) had untolerated taint {node.kubernetes.io/unreachable: }.
//
// with "COUNT REASON" entries sorted as strings, as upstream sorts them.
func (fe *FitError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "0/%d nodes are available:", fe.NumAllNodes)
	if fe.PreFilterMsg != "" {
		fmt.Fprintf(&b, " %s.", fe.PreFilterMsg)
		return b.String()
	}
	counts := fe.Reasons
	if fe.absent > 0 {
		counts = make(map[string]int, len(fe.Reasons)+1)
		for r, n := range fe.Reasons {
			counts[r] = n
		}
		counts[fe.absentReason] += fe.absent
	}
	entries := make([]string, 0, len(counts))
	for r, n := range counts {
		entries = append(entries, fmt.Sprintf("%d %s", n, r))
	}
	sort.Strings(entries)
	if len(entries) > 0 {
		fmt.Fprintf(&b, " %s.", strings.Join(entries, ", "))
	}
	return b.String()
}
