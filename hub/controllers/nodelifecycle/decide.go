package nodelifecycle

import (
	"fmt"
	"math"
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The reasons and messages of the conditions the controller sets, as
// upstream's.
const (
	ReasonNodeStatusUnknown      = "NodeStatusUnknown"
	ReasonNodeStatusNeverUpdated = "NodeStatusNeverUpdated"
	ReasonKubeletReady           = "KubeletReady"

	messageStopped = "Kubelet stopped posting node status."
	messageNever   = "Kubelet never posted node status."
	messageBack    = "Kubelet renews its Lease again."
)

// The Events the controller records, as upstream's.
const (
	// EventNodeNotReady and EventNodeReady are recorded on a Node whose
	// Ready condition the controller changed.
	EventNodeNotReady = "NodeNotReady"
	EventNodeReady    = "NodeReady"
	// EventTaintManagerEviction is recorded on a pod the controller
	// evicts.
	EventTaintManagerEviction = "TaintManagerEviction"
	// EventInvalidOfflineTolerance is the Warning on a Node whose
	// AnnotationOfflineTolerance is not a duration.
	EventInvalidOfflineTolerance = "InvalidOfflineTolerance"
	// EventEvictionHeld is recorded on a Node whose pods would be
	// evicted, as it has been unreachable for its offline tolerance, but
	// are not, as its site peers hold it alive (SiteReachable True).
	EventEvictionHeld = "EvictionHeld"
)

// conditionTypes are the node conditions that kubelet posts, which the
// controller sets Unknown when the node is unreachable (upstream's Ready
// and remainingNodeConditionTypes).
var conditionTypes = []corev1.NodeConditionType{
	corev1.NodeReady, corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure,
}

// Input is what Decide decides on: one node as the caches hold it.
type Input struct {
	// Node is the node; non-nil.
	Node *corev1.Node
	// Lease is the node's Lease in kube-node-lease, nil if it has none.
	Lease *coordinationv1.Lease
	// Pods are the pods bound to Node.
	Pods []*corev1.Pod
	// Now is the time to decide at.
	Now time.Time
	// Since is when the controller began to watch. A node is taken as
	// unreachable only once the controller has watched it for a grace
	// period, as upstream counts a node's grace from when it first saw
	// it, so that a hub that was down for a while does not find every
	// node unreachable (and evict their pods) the moment it is back;
	// until then the node is left as it is.
	Since time.Time
	// UntimedSince is when the controller first saw the node's NoExecute
	// taints that carry no timeAdded (set by hand), which is then their
	// start; zero: Now.
	UntimedSince time.Time
	// Site are the other Nodes of Node's site (wire.SiteLabel) with their
	// Leases, which the SiteReachable condition is decided from; nil if
	// it is in none. Nodes of another site, and Node itself, are skipped.
	Site []SitePeer
}

// Decision is what to do about one node. Its fields are independent of
// each other but applied in order: conditions, taints, pods.
type Decision struct {
	// Conditions are the node's new status.conditions; nil: unchanged.
	Conditions []corev1.NodeCondition
	// StatusEvent is the Event to record on the node once Conditions are
	// written (EventNodeNotReady, EventNodeReady), or "".
	StatusEvent string
	// TaintsChanged says Taints are the node's new spec.taints.
	TaintsChanged bool
	Taints        []corev1.Taint
	// NotReady are copies of the node's pods whose Ready condition goes
	// False, with their new status.
	NotReady []*corev1.Pod
	// Evict are the node's pods to delete now.
	Evict []*corev1.Pod
	// BadTolerance is why the node's AnnotationOfflineTolerance is not
	// used, nil if it is fine or absent.
	BadTolerance error
	// EvictionHeld says the node has been unreachable for its offline
	// tolerance, so that its pods would be evicted, but they are not as
	// its site peers hold it alive: its pods are running.
	EvictionHeld bool
	// After is when to decide again if nothing changes meanwhile, 0 for
	// not before something does.
	After time.Duration
}

// Decide returns what to do about in.Node at in.Now. It does no I/O and
// keeps nothing of in.
//
// A node whose Lease has not been renewed for cfg.GracePeriod is
// unreachable: the conditions that kubelet posts go Unknown, its Ready
// pods go Ready=False (so that they leave the EndpointSlices; unless
// cfg.MarkPodsNotReady is off), and it is tainted
// node.kubernetes.io/unreachable:NoSchedule. Its pods stay bound and are
// not deleted, unless the node has AnnotationOfflineTolerance:
// once it has been unreachable for that long it is also tainted
// unreachable:NoExecute. When the Lease is renewed again the unreachable
// taints go and Ready goes back to True if the controller had set it
// Unknown; nothing of the pods changes.
//
// As upstream's controller, Decide also keeps the node's NoSchedule
// taints in step with its conditions (not-ready, unreachable,
// memory-pressure, disk-pressure, pid-pressure, network-unavailable) and
// with spec.unschedulable, and evicts as upstream's taint manager does
// the pods that do not tolerate the node's NoExecute taints, at once or
// after their tolerationSeconds; pods that tolerate them forever stay.
//
// A node in a site whose nodes run the mesh has the SiteReachable
// condition (ConditionSiteReachable), from the reports in in.Site of the
// peers that are connected now (their Lease renewed within
// cfg.GracePeriod). While it is True the node is not tainted
// unreachable:NoExecute for its offline tolerance (the taint goes if it
// has it), nor are its pods marked not ready: they are running, the hub
// merely cannot reach them, and the site's other nodes, which route to
// them from the EndpointSlices, hear of their readiness from the mesh.
func Decide(in Input, cfg Config) Decision {
	var d Decision
	node, now := in.Node, in.Now
	soon := func(at time.Time) {
		if w := at.Sub(now); w > 0 && (d.After == 0 || w < d.After) {
			d.After = w
		}
	}
	// A node last heard of so long ago that its grace is over is not
	// yet unreachable if the controller has not watched it for that
	// long: it is left as it is until then.
	heard, grace := lastHeard(in, cfg)
	reachable := now.Before(heard.Add(grace))
	unreachableAt := heard.Add(grace)
	if in.Since.After(heard) {
		unreachableAt = in.Since.Add(grace)
	}
	unreachable := !now.Before(unreachableAt)

	conds := node.Status.Conditions
	switch {
	case reachable:
		soon(heard.Add(grace))
		if i := conditionIndex(conds, corev1.NodeReady); i >= 0 && conds[i].Status == corev1.ConditionUnknown && conds[i].Reason == ReasonNodeStatusUnknown {
			conds = slices.Clone(conds)
			c := &conds[i]
			c.Status, c.Reason, c.Message, c.LastTransitionTime = corev1.ConditionTrue, ReasonKubeletReady, messageBack, metav1.NewTime(now)
			d.Conditions, d.StatusEvent = conds, EventNodeReady
		}
	case unreachable:
		wasReady := readyStatus(conds) == corev1.ConditionTrue
		if c, changed := unknownConditions(node, now); changed {
			conds, d.Conditions = c, c
			if wasReady {
				d.StatusEvent = EventNodeNotReady
			}
		}
	default:
		soon(unreachableAt)
	}

	// What the site's mesh says of it, decided again when a reporter's
	// Lease lapses.
	site := siteReports(in, cfg)
	siteCond := siteCondition(site, reachable)
	if c, changed := setSiteCondition(conds, siteCond, now); changed {
		conds, d.Conditions = c, c
	}
	if site.reporters > 0 {
		soon(site.lapse)
	}
	siteAlive := siteCond != nil && siteCond.Status == corev1.ConditionTrue

	// The unreachable NoExecute taint, with the node's consent, unless
	// its site holds it alive.
	tol, tolSet, tolErr := offlineTolerance(node)
	d.BadTolerance = tolErr
	hasNoExecute := slices.ContainsFunc(node.Spec.Taints, isUnreachableNoExecute)
	noExecute := hasNoExecute // whether the node is to have it
	switch {
	case reachable || !tolSet || tolErr != nil:
		noExecute = false
	case unreachable && siteAlive:
		noExecute = false
		if due := unreachableAt.Add(tol); now.Before(due) {
			soon(due)
		} else {
			d.EvictionHeld = true
		}
	case !unreachable || hasNoExecute:
	case !now.Before(unreachableAt.Add(tol)):
		noExecute = true
	default:
		soon(unreachableAt.Add(tol))
	}
	taints := noScheduleTaints(node.Spec.Taints, conds, node.Spec.Unschedulable)
	switch {
	case noExecute && !hasNoExecute:
		added := metav1.NewTime(now)
		taints = append(taints, corev1.Taint{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute, TimeAdded: &added})
	case !noExecute && hasNoExecute:
		taints = slices.DeleteFunc(taints, isUnreachableNoExecute)
	}
	if !slices.EqualFunc(taints, node.Spec.Taints, func(a, b corev1.Taint) bool { return a.MatchTaint(&b) && a.Value == b.Value }) {
		d.TaintsChanged, d.Taints = true, taints
	}

	// The pods: evicted by the NoExecute taints, else marked not ready
	// while the node is unreachable.
	start := noExecuteStart(taints, in.UntimedSince, now)
	for _, pod := range in.Pods {
		if pod.Spec.NodeName != node.Name || pod.DeletionTimestamp != nil {
			continue
		}
		if at, ok := evictAt(pod, taints, start); ok {
			if !now.Before(at) {
				d.Evict = append(d.Evict, pod)
				continue
			}
			soon(at)
		}
		if unreachable && cfg.MarkPodsNotReady && !siteAlive {
			if p, ok := notReady(pod, now); ok {
				d.NotReady = append(d.NotReady, p)
			}
		}
	}
	return d
}

// lastHeard returns when the node was last heard of (its Lease renewed,
// or it was created), and the grace it has from then.
func lastHeard(in Input, cfg Config) (time.Time, time.Duration) {
	if in.Lease != nil {
		return leaseRenewed(in.Lease), cfg.GracePeriod
	}
	return in.Node.CreationTimestamp.Time, cfg.StartupGracePeriod
}

func conditionIndex(conds []corev1.NodeCondition, t corev1.NodeConditionType) int {
	return slices.IndexFunc(conds, func(c corev1.NodeCondition) bool { return c.Type == t })
}

// readyStatus returns the status of the Ready condition, "" if there is
// none.
func readyStatus(conds []corev1.NodeCondition) corev1.ConditionStatus {
	if i := conditionIndex(conds, corev1.NodeReady); i >= 0 {
		return conds[i].Status
	}
	return ""
}

// unknownConditions returns node's conditions with those kubelet posts
// set Unknown, as upstream sets them once a node's grace is over, and
// whether that changed any.
func unknownConditions(node *corev1.Node, now time.Time) ([]corev1.NodeCondition, bool) {
	conds := slices.Clone(node.Status.Conditions)
	changed := false
	for _, t := range conditionTypes {
		i := conditionIndex(conds, t)
		switch {
		case i < 0:
			conds = append(conds, corev1.NodeCondition{
				Type: t, Status: corev1.ConditionUnknown,
				Reason: ReasonNodeStatusNeverUpdated, Message: messageNever,
				LastHeartbeatTime: node.CreationTimestamp, LastTransitionTime: metav1.NewTime(now),
			})
		case conds[i].Status != corev1.ConditionUnknown:
			c := &conds[i]
			c.Status, c.Reason, c.Message, c.LastTransitionTime = corev1.ConditionUnknown, ReasonNodeStatusUnknown, messageStopped, metav1.NewTime(now)
		default:
			continue
		}
		changed = true
	}
	return conds, changed
}

// offlineTolerance returns the node's AnnotationOfflineTolerance, whether
// it has one, and why it cannot be used if it cannot.
func offlineTolerance(node *corev1.Node) (time.Duration, bool, error) {
	v, ok := node.Annotations[AnnotationOfflineTolerance]
	if !ok {
		return 0, false, nil
	}
	d, err := time.ParseDuration(v)
	if err == nil && d < 0 {
		err = fmt.Errorf("negative")
	}
	if err != nil {
		return 0, true, fmt.Errorf("annotation %s=%q is not a duration such as 10m (%v): the node's pods are not evicted while it is unreachable", AnnotationOfflineTolerance, v, err)
	}
	return d, true, nil
}

func isUnreachableNoExecute(t corev1.Taint) bool {
	return t.Key == corev1.TaintNodeUnreachable && t.Effect == corev1.TaintEffectNoExecute
}

// noScheduleTaints returns taints with the NoSchedule taints that follow
// the node's conditions and spec.unschedulable as upstream's
// TaintNodesByCondition wants them: those due are added (at the end), the
// others removed; the rest of taints is kept in order.
func noScheduleTaints(taints []corev1.Taint, conds []corev1.NodeCondition, unschedulable bool) []corev1.Taint {
	want := map[string]bool{corev1.TaintNodeUnschedulable: unschedulable}
	for _, c := range conds {
		switch {
		case c.Type == corev1.NodeReady:
			want[corev1.TaintNodeNotReady] = c.Status == corev1.ConditionFalse
			want[corev1.TaintNodeUnreachable] = c.Status == corev1.ConditionUnknown
		case c.Status != corev1.ConditionTrue:
		case c.Type == corev1.NodeMemoryPressure:
			want[corev1.TaintNodeMemoryPressure] = true
		case c.Type == corev1.NodeDiskPressure:
			want[corev1.TaintNodeDiskPressure] = true
		case c.Type == corev1.NodePIDPressure:
			want[corev1.TaintNodePIDPressure] = true
		case c.Type == corev1.NodeNetworkUnavailable:
			want[corev1.TaintNodeNetworkUnavailable] = true
		}
	}
	out := make([]corev1.Taint, 0, len(taints)+1)
	has := map[string]bool{}
	for _, t := range taints {
		if t.Effect == corev1.TaintEffectNoSchedule && managedNoSchedule[t.Key] {
			if !want[t.Key] || has[t.Key] {
				continue
			}
			has[t.Key] = true
		}
		out = append(out, t)
	}
	for _, k := range managedOrder {
		if want[k] && !has[k] {
			out = append(out, corev1.Taint{Key: k, Effect: corev1.TaintEffectNoSchedule})
		}
	}
	return out
}

// managedOrder are the keys of the NoSchedule taints that follow the
// node's conditions, in the order they are added.
var managedOrder = []string{
	corev1.TaintNodeNotReady, corev1.TaintNodeUnreachable, corev1.TaintNodeUnschedulable,
	corev1.TaintNodeMemoryPressure, corev1.TaintNodeDiskPressure, corev1.TaintNodePIDPressure,
	corev1.TaintNodeNetworkUnavailable,
}

var managedNoSchedule = func() map[string]bool {
	m := map[string]bool{}
	for _, k := range managedOrder {
		m[k] = true
	}
	return m
}()

// noExecuteStart returns when the pods of a node with taints became
// subject to its NoExecute taints: the earliest timeAdded, with untimed
// (or now) for a taint that has none.
func noExecuteStart(taints []corev1.Taint, untimed, now time.Time) time.Time {
	if untimed.IsZero() {
		untimed = now
	}
	start := now
	for _, t := range taints {
		if t.Effect != corev1.TaintEffectNoExecute {
			continue
		}
		at := untimed
		if t.TimeAdded != nil {
			at = t.TimeAdded.Time
		}
		if at.Before(start) {
			start = at
		}
	}
	return start
}

// evictAt returns when pod is to be evicted from a node with taints whose
// NoExecute taints apply since start, false if never: as upstream's taint
// manager, at once if a NoExecute taint is not tolerated, else after the
// least tolerationSeconds of the tolerations that tolerate them, never if
// none of those has tolerationSeconds.
func evictAt(pod *corev1.Pod, taints []corev1.Taint, start time.Time) (time.Time, bool) {
	least := int64(math.MaxInt64)
	tainted := false
	for i := range taints {
		t := &taints[i]
		if t.Effect != corev1.TaintEffectNoExecute {
			continue
		}
		tainted = true
		j := slices.IndexFunc(pod.Spec.Tolerations, func(tol corev1.Toleration) bool { return tolerates(tol, t) })
		if j < 0 {
			return time.Time{}, true // at once
		}
		if s := pod.Spec.Tolerations[j].TolerationSeconds; s != nil {
			least = min(least, max(*s, 0))
		}
	}
	if !tainted || least > math.MaxInt64/int64(time.Second) {
		return time.Time{}, false // forever, or as good as
	}
	return start.Add(time.Duration(least) * time.Second), true
}

// tolerates reports whether tol tolerates t, as corev1.Toleration's
// ToleratesTaint with the comparison operators (Lt, Gt) off, as the API's
// validation refuses them.
func tolerates(tol corev1.Toleration, t *corev1.Taint) bool {
	switch {
	case tol.Effect != "" && tol.Effect != t.Effect, tol.Key != "" && tol.Key != t.Key:
		return false
	case tol.Operator == corev1.TolerationOpExists:
		return true
	case tol.Operator == "" || tol.Operator == corev1.TolerationOpEqual:
		return tol.Value == t.Value
	}
	return false
}

// notReady returns a copy of pod with its Ready condition False, if it
// was True, as upstream's MarkPodsNotReady sets it (reason and message
// kept).
func notReady(pod *corev1.Pod, now time.Time) (*corev1.Pod, bool) {
	i := slices.IndexFunc(pod.Status.Conditions, func(c corev1.PodCondition) bool { return c.Type == corev1.PodReady })
	if i < 0 || pod.Status.Conditions[i].Status != corev1.ConditionTrue {
		return nil, false
	}
	p := pod.DeepCopy()
	c := &p.Status.Conditions[i]
	c.Status, c.LastTransitionTime = corev1.ConditionFalse, metav1.NewTime(now)
	return p, true
}

// disruptionTarget is the condition an evicted pod gets before it is
// deleted, as upstream's taint manager sets it.
func disruptionTarget(now time.Time) corev1.PodCondition {
	return corev1.PodCondition{
		Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
		Reason: "DeletionByTaintManager", Message: "Taint manager: deleting due to NoExecute taint",
		LastTransitionTime: metav1.NewTime(now),
	}
}
