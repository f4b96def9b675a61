package daemonset

import (
	"slices"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	corehelpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"

	"github.com/outpost-mesh/outpost/hub/controllers/history"
)

// This file is the controller's decision core: which nodes should run or
// keep a daemon pod, which pods to create or delete, what to report. It
// does no I/O; time is passed in.

// controllerKind is the kind of the owner references the controller sets.
var controllerKind = appsv1.SchemeGroupVersion.WithKind("DaemonSet")

// templateGenerationLabel is the label upstream puts on daemon pods with
// the template generation they were made from (the registry keeps the
// generation in the deprecated.daemonset.template.generation annotation).
const templateGenerationLabel = "pod-template-generation"

// Fit is what a node is to a daemonset.
type Fit struct {
	// Run: the node should run a pod of the daemonset: it matches the
	// node name, selector and required affinity, and the pod tolerates its
	// taints. An offline node's unreachable NoSchedule taint does not take
	// this away, since the node has not changed, only gone quiet.
	Run bool
	// Place: a pod may be created for the node now. False on an offline
	// node, which keeps what it has, and with an untolerated NoSchedule
	// taint.
	Place bool
	// Keep: a pod already there may go on running: no untolerated
	// NoExecute taint.
	Keep bool
	// Offline: the node's Ready condition is Unknown or it bears the
	// unreachable taint; its pods run on by themselves (edge autonomy).
	Offline bool
}

// Offline reports whether node is out of touch: Ready Unknown, as the
// node lifecycle marks it once its lease lapses, or tainted unreachable.
func Offline(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionUnknown {
			return true
		}
	}
	for _, t := range node.Spec.Taints {
		if t.Key == corev1.TaintNodeUnreachable {
			return true
		}
	}
	return false
}

// NodeFit says what node is to ds, as upstream's nodeShouldRunDaemonPod
// decides it (with the daemon pods' default tolerations), but for the
// edge rule on offline nodes (see Fit).
func NodeFit(ds *appsv1.DaemonSet, node *corev1.Node) Fit {
	fit := Fit{Offline: Offline(node)}
	spec := ds.Spec.Template.Spec
	if spec.NodeName != "" && spec.NodeName != node.Name {
		return fit
	}
	if ok, _ := nodeaffinity.NewRequiredNodeAffinity(spec.NodeSelector, spec.Affinity).Match(node); !ok {
		return fit
	}
	tolerations := daemonTolerations(&spec)
	taints := node.Spec.Taints
	if fit.Offline {
		taints = slices.DeleteFunc(slices.Clone(taints), func(t corev1.Taint) bool {
			return t.Key == corev1.TaintNodeUnreachable && t.Effect == corev1.TaintEffectNoSchedule
		})
	}
	log := klog.Background()
	_, untolerated := corehelpers.FindMatchingUntoleratedTaint(log, taints, tolerations, func(t *corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
	}, false)
	if !untolerated {
		fit.Run, fit.Keep = true, true
		fit.Place = !fit.Offline
		return fit
	}
	_, untolerated = corehelpers.FindMatchingUntoleratedTaint(log, taints, tolerations, func(t *corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoExecute
	}, false)
	fit.Keep = !untolerated
	return fit
}

// defaultTolerations are those upstream adds to every daemon pod, so that
// node conditions neither evict it nor keep it off a node.
var defaultTolerations = []corev1.Toleration{
	{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
	{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
	{Key: corev1.TaintNodeDiskPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
	{Key: corev1.TaintNodeMemoryPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
	{Key: corev1.TaintNodePIDPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
	{Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
}

// hostNetworkToleration is added to daemon pods on the host network,
// which need no pod network to run.
var hostNetworkToleration = corev1.Toleration{Key: corev1.TaintNodeNetworkUnavailable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}

// daemonTolerations returns spec's tolerations with the default daemon
// ones added, a toleration equal to one already there replacing it, as
// upstream's AddOrUpdateTolerationInPodSpec does. spec is not modified.
func daemonTolerations(spec *corev1.PodSpec) []corev1.Toleration {
	out := slices.Clone(spec.Tolerations)
	add := func(t corev1.Toleration) {
		if i := slices.IndexFunc(out, func(o corev1.Toleration) bool { return o.MatchToleration(&t) }); i >= 0 {
			out[i] = t
			return
		}
		out = append(out, t)
	}
	for _, t := range defaultTolerations {
		add(t)
	}
	if spec.HostNetwork {
		add(hostNetworkToleration)
	}
	return out
}

// NewPod returns the pod ds runs on the node named node, for the
// revision whose hash is hash: the template with the revision's labels,
// the default daemon tolerations, a controller reference to ds, and a
// required node affinity on that node's name (metadata.name, in
// matchFields), which replaces the template's required terms as upstream
// does, so that the scheduler binds it there.
func NewPod(ds *appsv1.DaemonSet, node, hash string) *corev1.Pod {
	t := ds.Spec.Template.DeepCopy()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName:    ds.Name + "-",
			Namespace:       ds.Namespace,
			Labels:          t.Labels,
			Annotations:     t.Annotations,
			Finalizers:      t.Finalizers,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(ds, controllerKind)},
		},
		Spec: t.Spec,
	}
	if pod.Labels == nil {
		pod.Labels = make(map[string]string)
	}
	pod.Labels[history.HashLabel] = hash
	if g, ok := templateGeneration(ds); ok {
		pod.Labels[templateGenerationLabel] = strconv.FormatInt(g, 10)
	}
	pod.Spec.Tolerations = daemonTolerations(&pod.Spec)
	pod.Spec.Affinity = onNode(pod.Spec.Affinity, node)
	return pod
}

// onNode returns affinity (which it may modify) with its required node
// terms replaced by one on the node's name.
func onNode(affinity *corev1.Affinity, node string) *corev1.Affinity {
	sel := &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchFields: []corev1.NodeSelectorRequirement{{Key: metav1.ObjectNameField, Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
	}}}
	if affinity == nil {
		affinity = &corev1.Affinity{}
	}
	if affinity.NodeAffinity == nil {
		affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = sel
	return affinity
}

// TargetNode returns the node pod runs on or is meant for: its nodeName,
// else the node its required affinity names (as NewPod makes it), else "".
func TargetNode(pod *corev1.Pod) string {
	if pod.Spec.NodeName != "" {
		return pod.Spec.NodeName
	}
	a := pod.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return ""
	}
	for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, r := range term.MatchFields {
			if r.Key == metav1.ObjectNameField && r.Operator == corev1.NodeSelectorOpIn && len(r.Values) == 1 {
				return r.Values[0]
			}
		}
	}
	return ""
}

// templateGeneration returns the template generation the registry keeps
// on ds, if it has a valid one.
func templateGeneration(ds *appsv1.DaemonSet) (int64, bool) {
	s, ok := ds.Annotations[appsv1.DeprecatedTemplateGeneration]
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// Updated reports whether pod is of ds's current revision (hash), by its
// hash label or, as upstream also accepts, its template generation.
func Updated(ds *appsv1.DaemonSet, pod *corev1.Pod, hash string) bool {
	if hash != "" && pod.Labels[history.HashLabel] == hash {
		return true
	}
	g, ok := templateGeneration(ds)
	return ok && pod.Labels[templateGenerationLabel] == strconv.FormatInt(g, 10)
}

// Ready reports whether pod's Ready condition is True.
func Ready(pod *corev1.Pod) bool {
	return readySince(pod) != nil
}

func readySince(pod *corev1.Pod) *metav1.Time {
	for i := range pod.Status.Conditions {
		if c := &pod.Status.Conditions[i]; c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return &c.LastTransitionTime
		}
	}
	return nil
}

// Available reports whether pod has been Ready for minReady seconds at now.
func Available(pod *corev1.Pod, minReady int32, now time.Time) bool {
	since := readySince(pod)
	if since == nil {
		return false
	}
	if minReady == 0 {
		return true
	}
	return !since.IsZero() && !since.Add(time.Duration(minReady)*time.Second).After(now)
}

// Input is what the core decides from. The core does not modify it.
type Input struct {
	DS    *appsv1.DaemonSet
	Nodes []*corev1.Node
	// Pods are the daemonset's pods by the node they target (TargetNode),
	// terminating ones included.
	Pods map[string][]*corev1.Pod
	// Hash is the current revision's hash label.
	Hash string
	Now  time.Time
}

// Plan is what the controller does next. The pods in it are Input's.
type Plan struct {
	// Create lists the nodes to create a pod for, in order.
	Create []string
	// Delete lists the pods to delete.
	Delete []*corev1.Pod
	// Failed lists failed pods to delete and recreate; the shell deletes
	// each unless its node is in back-off, so that a kubelet that keeps
	// refusing the pod does not make a hot loop.
	Failed []*corev1.Pod
}

// Empty reports whether p has nothing to do.
func (p Plan) Empty() bool { return len(p.Create)+len(p.Delete)+len(p.Failed) == 0 }

func live(pods []*corev1.Pod) []*corev1.Pod {
	var out []*corev1.Pod
	for _, p := range pods {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

// byAge orders daemon pods as upstream picks the one to keep: scheduled
// first, then the oldest, then by name.
func byAge(a, b *corev1.Pod) int {
	if (a.Spec.NodeName != "") != (b.Spec.NodeName != "") {
		if a.Spec.NodeName != "" {
			return -1
		}
		return 1
	}
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		if a.CreationTimestamp.Before(&b.CreationTimestamp) {
			return -1
		}
		return 1
	}
	return cmpString(a.Name, b.Name)
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// surgeCount and unavailableCount are the rolling update's limits scaled
// to desired nodes, rounding up as upstream does; zero for OnDelete.
func surgeCount(ds *appsv1.DaemonSet, desired int) int {
	u := ds.Spec.UpdateStrategy.RollingUpdate
	if ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType || u == nil || u.MaxSurge == nil {
		return 0
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(u.MaxSurge, desired, true)
	if err != nil {
		return 0
	}
	return max(n, 0)
}

func unavailableCount(ds *appsv1.DaemonSet, desired int) int {
	u := ds.Spec.UpdateStrategy.RollingUpdate
	if ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType || u == nil || u.MaxUnavailable == nil {
		return 0
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(u.MaxUnavailable, desired, true)
	if err != nil {
		return 0
	}
	return max(n, 0)
}

// allowsSurge reports whether ds's rolling update may run two pods on a
// node at once.
func allowsSurge(ds *appsv1.DaemonSet) bool { return surgeCount(ds, 1) > 0 }

// Manage returns the creations and deletions that give every node the
// pods it should have: one where it should run and has none (not on an
// offline node, which keeps what it has), none where it may not keep
// one, failed and finished pods replaced, and extra pods on a node
// pruned (with surge, an old ready pod may stay beside a new one not yet
// available). Unscheduled pods for nodes that are gone are deleted.
func Manage(in Input) Plan {
	var p Plan
	surge := allowsSurge(in.DS)
	known := make(map[string]bool, len(in.Nodes))
	for _, node := range sortedNodes(in.Nodes) {
		known[node.Name] = true
		fit := NodeFit(in.DS, node)
		pods := in.Pods[node.Name]
		switch {
		case fit.Place && len(pods) == 0:
			p.Create = append(p.Create, node.Name)
		case fit.Keep:
			var running []*corev1.Pod
			for _, pod := range live(pods) {
				switch pod.Status.Phase {
				case corev1.PodFailed:
					p.Failed = append(p.Failed, pod)
				case corev1.PodSucceeded:
					p.Delete = append(p.Delete, pod)
				default:
					running = append(running, pod)
				}
			}
			p.Delete = append(p.Delete, prune(in, running, surge)...)
		default:
			p.Delete = append(p.Delete, live(pods)...)
		}
	}
	for _, node := range sortedKeys(in.Pods) {
		if known[node] {
			continue
		}
		for _, pod := range live(in.Pods[node]) {
			if pod.Spec.NodeName == "" {
				p.Delete = append(p.Delete, pod)
			}
		}
	}
	return p
}

// prune returns the pods of running (all on one node) beyond those the
// node may have.
func prune(in Input, running []*corev1.Pod, surge bool) []*corev1.Pod {
	if len(running) <= 1 {
		return nil
	}
	running = slices.Clone(running)
	slices.SortFunc(running, byAge)
	if !surge {
		return running[1:]
	}
	// With surge, a node may hold its oldest new pod and its oldest old
	// one while the new one is not yet available and the old one ready.
	var out []*corev1.Pod
	var newest, oldest *corev1.Pod
	for _, pod := range running {
		switch {
		case Updated(in.DS, pod, in.Hash) && newest == nil:
			newest = pod
		case !Updated(in.DS, pod, in.Hash) && oldest == nil:
			oldest = pod
		default:
			out = append(out, pod)
		}
	}
	if newest != nil && oldest != nil && (!Ready(oldest) || Available(newest, in.DS.Spec.MinReadySeconds, in.Now)) {
		out = append(out, oldest)
	}
	return out
}

// split returns the one new and one old live pod among pods, or ok false
// when there are more of either (for Manage to prune first).
func split(in Input, pods []*corev1.Pod) (newPod, oldPod *corev1.Pod, ok bool) {
	for _, pod := range live(pods) {
		if Updated(in.DS, pod, in.Hash) {
			if newPod != nil {
				return nil, nil, false
			}
			newPod = pod
		} else {
			if oldPod != nil {
				return nil, nil, false
			}
			oldPod = pod
		}
	}
	return newPod, oldPod, true
}

// rolloutNodes returns the nodes a rollout looks at, sorted: those with
// pods and those that should have one, with what each is to ds (the zero
// Fit for a node that is gone).
func rolloutNodes(in Input) (names []string, fits map[string]Fit, desired int) {
	fits = make(map[string]Fit, len(in.Nodes))
	seen := make(map[string]bool, len(in.Nodes)+len(in.Pods))
	for _, node := range in.Nodes {
		fit := NodeFit(in.DS, node)
		fits[node.Name] = fit
		if desiredOn(fit, in.Pods[node.Name]) {
			desired++
			seen[node.Name] = true
			names = append(names, node.Name)
		}
	}
	for node, pods := range in.Pods {
		if !seen[node] && len(pods) > 0 {
			seen[node] = true
			names = append(names, node)
		}
	}
	slices.Sort(names)
	return names, fits, desired
}

// desiredOn reports whether a node with fit and pods counts among those
// the daemonset should run on: it should run there, and it can get a pod
// or has one (an offline node without one is left until it returns).
func desiredOn(fit Fit, pods []*corev1.Pod) bool {
	return fit.Run && (fit.Place || len(pods) > 0)
}

// Rollout returns the steps of a RollingUpdate that replace old pods by
// the current revision's within maxUnavailable or maxSurge, as upstream's
// rollingUpdate, with the edge rule: an offline node's old pod is neither
// deleted nor surged next to (it is updated once the node is back), and
// the rollout does not wait on it. Offline nodes whose pods were last
// seen unavailable count against maxUnavailable once each, but never take
// its last unit, so that offline gateways cannot stall the rollout of the
// others. It returns nothing for OnDelete.
func Rollout(in Input) Plan {
	if in.DS.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType {
		return Plan{}
	}
	names, fits, desired := rolloutNodes(in)
	maxSurge, maxUnavailable := surgeCount(in.DS, desired), unavailableCount(in.DS, desired)
	if desired > 0 && maxSurge == 0 && maxUnavailable == 0 {
		maxUnavailable = 1 // as upstream, for a strategy that allows neither
	}
	minReady := in.DS.Spec.MinReadySeconds
	available := func(pod *corev1.Pod) bool { return Available(pod, minReady, in.Now) }
	if maxSurge == 0 {
		return rolloutUnavailable(in, names, fits, maxUnavailable, available)
	}
	return rolloutSurge(in, names, fits, desired, maxSurge, available)
}

func rolloutUnavailable(in Input, names []string, fits map[string]Fit, maxUnavailable int, available func(*corev1.Pod) bool) Plan {
	var p Plan
	var unavailable, offline int
	var candidates []*corev1.Pod
	for _, node := range names {
		newPod, oldPod, ok := split(in, in.Pods[node])
		off := fits[node].Offline
		count := func() {
			if off {
				offline++
			} else {
				unavailable++
			}
		}
		switch {
		case !ok:
			unavailable++ // Manage prunes it first
		case (oldPod == nil) == (newPod == nil):
			count() // Manage creates or deletes
		case newPod != nil:
			if !available(newPod) {
				count()
			}
		case off:
			// The edge rule: keep it, do not wait on it.
			if !available(oldPod) {
				offline++
			}
		case !available(oldPod):
			// An old pod that serves nothing is replaced at once.
			p.Delete = append(p.Delete, oldPod)
			unavailable++
		default:
			candidates = append(candidates, oldPod)
		}
	}
	unavailable += min(offline, max(maxUnavailable-1, 0))
	n := min(max(maxUnavailable-unavailable, 0), len(candidates))
	p.Delete = append(p.Delete, candidates[:n]...)
	return p
}

func rolloutSurge(in Input, names []string, fits map[string]Fit, desired, maxSurge int, available func(*corev1.Pod) bool) Plan {
	var p Plan
	var surged, availableNodes int
	var allowed, candidates []string
	var misplaced []*corev1.Pod // old pods on nodes that should no longer run one
	for _, node := range names {
		newPod, oldPod, ok := split(in, in.Pods[node])
		if !ok {
			surged++ // Manage prunes it first
			continue
		}
		fit := fits[node]
		if (oldPod != nil && available(oldPod)) || (oldPod == nil && newPod != nil && available(newPod)) {
			availableNodes++
		}
		switch {
		case oldPod == nil:
			// Manage creates what is missing.
		case fit.Offline && fit.Keep:
			// The edge rule: keep it, do not wait on it.
		case newPod == nil && !available(oldPod):
			if !fit.Run {
				p.Delete = append(p.Delete, oldPod)
				continue
			}
			allowed = append(allowed, node)
		case newPod == nil:
			if !fit.Run {
				misplaced = append(misplaced, oldPod)
				continue
			}
			candidates = append(candidates, node)
		case !available(newPod):
			surged++
		default:
			p.Delete = append(p.Delete, oldPod)
		}
	}
	// Surge promises full availability: a pod on a node that should no
	// longer run one goes only once others are available in its place.
	if n := min(availableNodes-desired, len(misplaced)); n > 0 {
		p.Delete = append(p.Delete, misplaced[:n]...)
	}
	n := min(max(maxSurge-surged, 0), len(candidates))
	p.Create = append(allowed, candidates[:n]...)
	return p
}

// Status returns ds's status counters as upstream reports them, from
// in (observedGeneration, collisionCount and conditions are the shell's):
// a node counts in desiredNumberScheduled when it should run a pod and
// has or can get one, so an offline node keeps counting with its pod.
func Status(in Input) appsv1.DaemonSetStatus {
	var s appsv1.DaemonSetStatus
	for _, node := range in.Nodes {
		fit := NodeFit(in.DS, node)
		pods := in.Pods[node.Name]
		if !desiredOn(fit, pods) {
			if len(pods) > 0 {
				s.NumberMisscheduled++
			}
			continue
		}
		s.DesiredNumberScheduled++
		if len(pods) == 0 {
			continue
		}
		s.CurrentNumberScheduled++
		pod := slices.MinFunc(pods, byAge)
		if Ready(pod) {
			s.NumberReady++
			if Available(pod, in.DS.Spec.MinReadySeconds, in.Now) {
				s.NumberAvailable++
			}
		}
		if Updated(in.DS, pod, in.Hash) {
			s.UpdatedNumberScheduled++
		}
	}
	s.NumberUnavailable = s.DesiredNumberScheduled - s.NumberAvailable
	return s
}

func sortedNodes(nodes []*corev1.Node) []*corev1.Node {
	out := slices.Clone(nodes)
	slices.SortFunc(out, func(a, b *corev1.Node) int { return cmpString(a.Name, b.Name) })
	return out
}

func sortedKeys(m map[string][]*corev1.Pod) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
