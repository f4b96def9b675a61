package firmwarerollout

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fwv1 "github.com/outpost-mesh/outpost/firmware/apis/v1"
	"github.com/outpost-mesh/outpost/firmware/rollout"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// ConditionReleaseReady is the condition this controller adds to the
// planner's four: true when the Rollout's Release exists and the hub
// verified its signatures. While it is false nothing is offered.
const ConditionReleaseReady = "ReleaseReady"

// Reasons of a node's status entry that the node did not report itself.
const (
	// ReasonTimeout: the node stayed Offered or Downloading with no
	// progress for StuckFactor health windows; it is not offered this
	// rollout's release again, and not charged to the failure budget.
	ReasonTimeout = "Timeout"
	// ReasonOtherRollout: another Rollout also selects the node, and wins
	// it (precedes).
	ReasonOtherRollout = "OtherRollout"
	// ReasonFailedBefore: the version failed on the node before (its
	// failed versions hold it), so it is never offered again.
	ReasonFailedBefore = "FailedBefore"
	// ReasonBusy: the node works on another version, which it finishes
	// before it is offered this one.
	ReasonBusy = "Busy"
	// ReasonOffline: the node is not Ready.
	ReasonOffline = "Offline"
)

// reasonRevertOrdered is the Reason the edge agent reports with Reverted
// when it reverted on a Revert offer (edge/agent's ReasonRevertOrdered;
// the contract would sit better in firmware/apis/v1).
const reasonRevertOrdered = "RevertOrdered"

// Event reasons the controller records on a Rollout.
const (
	EventWaveStarted     = "WaveStarted"
	EventNodeFailed      = "NodeFailed"
	EventBudgetTripped   = "BudgetTripped"
	EventComplete        = "RolloutComplete"
	EventReleaseNotReady = "ReleaseNotReady"
	EventResumed         = "Resumed"
)

// event is an Event to record on the Rollout.
type event struct {
	warning         bool
	reason, message string
}

// nodePatch is the change of one Node's controller-written annotations:
// a nil pointer leaves the annotation as it is, an empty string removes it.
type nodePatch struct {
	name   string
	offer  *string
	failed *string
}

// input is what decide reads: one Rollout, its release, the nodes it owns
// and the time. decide does not modify it.
type input struct {
	name    string // the Rollout's
	release string // the Release's name
	spec    rollout.Spec
	// nodes are the Nodes the Rollout selects and owns; olders maps the
	// names of those it selects but a Rollout that precedes it owns to
	// that Rollout's name; strays are the other Nodes that carry an offer of
	// this Rollout.
	nodes  []*corev1.Node
	olders map[string]string
	olderN []*corev1.Node
	strays []*corev1.Node
	// prev is the Rollout's status as last written.
	prev fwv1.RolloutStatus
	// progressAt is when each node was last seen to progress (its state
	// or its received bytes changed), as far as this process knows.
	progressAt map[string]time.Time
	now        time.Time
	cfg        Config
}

// output is what decide returns.
type output struct {
	res     rollout.Result
	patches []nodePatch
	// status is the Rollout's next status but for its conditions'
	// ObservedGeneration, which the shell sets.
	status fwv1.RolloutStatus
	// pause asks the shell to set spec.paused: the budget tripped with
	// the Pause action.
	pause  bool
	events []event
	// requeue is when to sync again with no event; zero for never.
	requeue time.Time
}

// view is one node as this rollout sees it.
type view struct {
	node   *corev1.Node
	pn     rollout.Node
	report *fwv1.NodeFirmware // nil when the node reported nothing readable
	offer  *fwv1.Offer        // the offer it carries, nil for none
	// state is the node's state for the rollout's version: what it
	// reports for it, Offered for an offer it has not taken up, Idle.
	state           rollout.NodeState
	since           time.Time
	reason, message string
	timedOut        bool
	busy            bool // in flight with another version
	failedAnn       []string
	// zoneProblem says why the node's maintenance windows are in UTC
	// although it reported a time zone; "" when they are not.
	zoneProblem string
}

// decide works out what the rollout does now, as the package doc says.
func decide(in input) output {
	var out output
	version := in.spec.Version
	prevNodes := make(map[string]fwv1.NodeStatus, len(in.prev.Nodes))
	for _, ns := range in.prev.Nodes {
		prevNodes[ns.Name] = ns
	}
	hw := in.spec.HealthWindow
	if hw == 0 {
		hw = rollout.DefaultHealthWindow
	}
	stuck := time.Duration(in.cfg.StuckFactor) * hw

	views := make([]*view, 0, len(in.nodes))
	pnodes := make([]rollout.Node, 0, len(in.nodes))
	for _, n := range in.nodes {
		v := see(n, in.name, version, prevNodes[n.Name], in.now)
		if v.zoneProblem != "" && len(in.spec.Windows) > 0 && v.state == rollout.Idle && v.message == "" {
			v.message = v.zoneProblem
		}
		if v.pn.Online && (v.state == rollout.Offered || v.state == rollout.Downloading) && !v.timedOut {
			last := v.since
			if at := in.progressAt[n.Name]; at.After(last) {
				last = at
			}
			if !in.now.Before(last.Add(stuck)) {
				v.timedOut = true
				v.reason = ReasonTimeout
				v.message = fmt.Sprintf("no progress in %s %v", v.state, stuck)
				v.since = in.now
			} else {
				out.requeue = earliest(out.requeue, last.Add(stuck))
			}
		}
		if v.timedOut {
			// Settled and never offered again by this rollout, but not
			// charged to its budget: the planner's rule for a node
			// failed through its failed versions.
			v.pn.FailedVersions = append(v.pn.FailedVersions, version)
		}
		views = append(views, v)
		pnodes = append(pnodes, v.pn)
	}

	prevPlan, err := in.prev.PlannerStatus()
	if err != nil {
		prevPlan = rollout.Status{} // a hand-edited status: start the plan over
	}
	resumed := prevPlan.Tripped && prevPlan.Paused && !in.spec.Paused
	if resumed {
		prevPlan = rollout.Resume(prevPlan)
		out.events = append(out.events, event{reason: EventResumed, message: "unpaused after the failure budget tripped: earlier failures are excused"})
	}
	res := rollout.Plan(in.spec, pnodes, prevPlan, in.now)
	if res.Status.Tripped && !prevPlan.Tripped && !in.spec.Paused && in.spec.OnTrip != rollout.Revert {
		out.pause = true
		res.Status.Paused = true // what spec.paused will be, so that an unpause is seen
	}
	out.res = res
	out.requeue = earliest(out.requeue, res.NextCheck)

	offer := set(res.Offer)
	revert := set(res.Revert)
	active := !in.spec.Paused && !res.Status.Tripped
	for _, v := range views {
		want, keep := desiredOffer(v, in, offer[v.node.Name], revert[v.node.Name], active)
		p := nodePatch{name: v.node.Name}
		if !keep {
			cur := v.node.Annotations[fwv1.AnnotationOffer]
			if want != cur && (want != "" || cur != "") {
				p.offer = &want
			}
		}
		if failed, ok := recordFailed(v, in.name, version, in.cfg.MaxFailedVersions); ok {
			p.failed = &failed
		}
		if p.offer != nil || p.failed != nil {
			out.patches = append(out.patches, p)
		}
	}
	for _, n := range slices.Concat(in.strays, in.olderN) {
		if p, ok := withdrawStray(n, in.name); ok {
			out.patches = append(out.patches, p)
		}
	}
	slices.SortFunc(out.patches, func(a, b nodePatch) int { return cmp.Compare(a.name, b.name) })

	out.status = nextStatus(in, views, res, offer)
	out.events = append(out.events, events(in, prevPlan, res, prevNodes, out.status.Nodes)...)
	return out
}

// see returns node n as rollout name sees it for version.
func see(n *corev1.Node, name, version string, prev fwv1.NodeStatus, now time.Time) *view {
	v := &view{node: n, state: rollout.Idle}
	v.pn = rollout.Node{Name: n.Name, Site: n.Labels[wire.SiteLabel]}
	v.pn.Location, v.zoneProblem = nodeLocation(n)
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			v.pn.Online = c.Status == corev1.ConditionTrue
			if !v.pn.Online {
				v.pn.OfflineSince = c.LastTransitionTime.Time
			}
		}
	}
	if s, ok := n.Annotations[fwv1.AnnotationState]; ok {
		if nf, err := fwv1.DecodeNodeFirmware(s); err == nil {
			v.report = nf
		} else {
			v.message = "unreadable firmware state: " + err.Error()
		}
	}
	if s, ok := n.Annotations[fwv1.AnnotationOffer]; ok {
		if o, err := fwv1.DecodeOffer(s); err == nil {
			v.offer = o
		}
	}
	v.failedAnn = splitVersions(n.Annotations[fwv1.AnnotationFailedVersions])
	if nf := v.report; nf != nil {
		v.pn.Version = nf.Version
		v.pn.FailedVersions = slices.Clone(nf.FailedVersions)
		switch {
		case nf.Target == version && nf.State != "":
			v.state = rollout.NodeState(nf.State)
			v.since = nf.Since.Time
			v.reason, v.message = nf.Reason, nf.Message
		case nf.Target != "" && inFlight(rollout.NodeState(nf.State)):
			v.busy = true
			v.reason, v.message = ReasonBusy, fmt.Sprintf("works on version %s (%s)", nf.Target, nf.State)
		}
	}
	v.pn.FailedVersions = union(v.pn.FailedVersions, v.failedAnn)
	if v.state == rollout.Idle && !v.busy && v.offer != nil && v.offer.Rollout == name &&
		v.offer.Action == fwv1.OfferInstall && v.offer.Version == version {
		// Offered, not yet taken up: in progress for the planner, and
		// timed from the first time this controller saw it so.
		v.state, v.since = rollout.Offered, now
		if prev.State == string(rollout.Offered) && !prev.Since.IsZero() {
			v.since = prev.Since.Time
		}
	}
	if v.pn.Version == version && v.state != rollout.Updated {
		// It runs the version: whatever it reports, the planner counts
		// it updated (and healthy at once unless it is Updated).
		v.reason, v.message = "", ""
	}
	if prev.Reason == ReasonTimeout && prev.State == string(rollout.Failed) && v.pn.Version != version {
		switch v.state {
		case rollout.Updated, rollout.Failed, rollout.Reverted:
		default:
			v.timedOut, v.since = true, prev.Since.Time
			v.reason, v.message = prev.Reason, prev.Message
		}
	}
	v.pn.State = v.state
	v.pn.Since = v.since
	return v
}

// desiredOffer returns the offer annotation node v should carry, or keep
// true to leave whatever it carries.
func desiredOffer(v *view, in input, offered, reverted, active bool) (want string, keep bool) {
	ours := v.offer != nil && v.offer.Rollout == in.name
	if !ours && v.node.Annotations[fwv1.AnnotationOffer] != "" && !offered && !reverted {
		return "", true // another rollout's, or not readable: not ours to touch
	}
	installed := v.state == rollout.Installing || v.state == rollout.Trial || v.state == rollout.Updated
	mid := v.state == rollout.Installing || v.state == rollout.Trial
	switch {
	case reverted && installed:
		return offerValue(in, fwv1.OfferRevert), false
	case reverted:
		return "", false // not yet installing: withdrawing the offer is the revert
	case ours && v.offer.Action == fwv1.OfferRevert && installed:
		return "", true // a revert under way stays until the node reverted
	case offered && !v.busy:
		return offerValue(in, fwv1.OfferInstall), false
	case ours && v.offer.Action == fwv1.OfferInstall && v.offer.Version == in.spec.Version && mid:
		return "", true // never pull an offer from under an install or trial
	case ours && v.offer.Action == fwv1.OfferInstall && v.offer.Version == in.spec.Version &&
		active && !v.timedOut && (v.state == rollout.Offered || v.state == rollout.Downloading):
		return "", true
	case ours:
		return "", false
	}
	return "", true
}

// offerValue returns the AnnotationOffer value of the rollout with action.
func offerValue(in input, action fwv1.OfferAction) string {
	hw := in.spec.HealthWindow
	if hw == 0 {
		hw = rollout.DefaultHealthWindow
	}
	o := fwv1.Offer{Rollout: in.name, Release: in.release, Version: in.spec.Version, Action: action,
		HealthWindow: metav1.Duration{Duration: hw}}
	return o.Encode()
}

// withdrawStray returns the patch that removes rollout name's offer from a
// node it no longer owns, unless the node is installing it or on trial.
func withdrawStray(n *corev1.Node, name string) (nodePatch, bool) {
	o, err := fwv1.DecodeOffer(n.Annotations[fwv1.AnnotationOffer])
	if err != nil || o.Rollout != name {
		return nodePatch{}, false
	}
	if nf, err := fwv1.DecodeNodeFirmware(n.Annotations[fwv1.AnnotationState]); err == nil && nf.Target == o.Version {
		switch rollout.NodeState(nf.State) {
		case rollout.Installing, rollout.Trial:
			return nodePatch{}, false
		case rollout.Updated:
			if o.Action == fwv1.OfferRevert {
				return nodePatch{}, false
			}
		}
	}
	empty := ""
	return nodePatch{name: n.Name, offer: &empty}, true
}

// recordFailed returns the node's next AnnotationFailedVersions when it
// reports that version failed on it, and the failure is its own: a node
// this rollout ordered to revert reports Reverted too, which says nothing
// against the version.
func recordFailed(v *view, name, version string, limit int) (string, bool) {
	if v.state != rollout.Failed && v.state != rollout.Reverted || slices.Contains(v.failedAnn, version) {
		return "", false
	}
	if v.offer != nil && v.offer.Rollout == name && v.offer.Action == fwv1.OfferRevert {
		return "", false
	}
	if v.state == rollout.Reverted && v.reason == reasonRevertOrdered {
		return "", false // the order was withdrawn once carried out
	}
	list := append(slices.Clone(v.failedAnn), version)
	if len(list) > limit {
		list = list[len(list)-limit:]
	}
	return strings.Join(list, ","), true
}

// nextStatus returns the Rollout's status for the plan res over views.
func nextStatus(in input, views []*view, res rollout.Result, offered map[string]bool) fwv1.RolloutStatus {
	st := fwv1.RolloutStatus{
		Updated: int32(res.Counts.Updated),
		Failed:  int32(res.Counts.Failed),
		Pending: int32(res.Counts.Pending),
	}
	st.SetPlannerStatus(res.Status)
	for _, w := range res.Waves {
		ws := fwv1.WaveStatus{Target: int32(w.Target), Nodes: int32(w.Nodes), Updated: int32(w.Updated),
			Healthy: int32(w.Healthy), Failed: int32(w.Failed), InProgress: int32(w.InProgress),
			Pending: int32(w.Pending), Offline: int32(w.Offline)}
		if !w.Started.IsZero() {
			ws.Started = new(metav1.NewTime(w.Started.Truncate(time.Second)))
		}
		st.Waves = append(st.Waves, ws)
	}
	version := in.spec.Version
	for _, v := range views {
		ns := fwv1.NodeStatus{Name: v.node.Name, State: string(v.state), Version: v.pn.Version,
			Reason: v.reason, Message: v.message, Since: metav1.NewTime(v.since.Truncate(time.Second))}
		switch {
		case v.pn.Version == version:
			ns.State = string(rollout.Updated)
		case offered[v.node.Name] && v.state == rollout.Idle && !v.busy:
			ns.State, ns.Since = string(rollout.Offered), metav1.NewTime(in.now.Truncate(time.Second))
		case v.timedOut:
			ns.State = string(rollout.Failed)
		case v.state != rollout.Failed && v.state != rollout.Reverted && slices.Contains(v.pn.FailedVersions, version):
			ns.State, ns.Reason = string(rollout.Failed), ReasonFailedBefore
			ns.Message = fmt.Sprintf("version %s failed on this node before; it is never offered again", version)
		case ns.Reason == "" && !v.pn.Online:
			ns.Reason = ReasonOffline
		}
		if w, ok := res.Status.Assigned[v.node.Name]; ok && w >= len(in.spec.Waves) && ns.Reason == "" && ns.State == string(rollout.Idle) {
			ns.Reason, ns.Message = "BeyondLastWave", "the last wave's target leaves this node out"
		}
		st.Nodes = append(st.Nodes, ns)
	}
	for _, n := range in.olderN {
		st.Nodes = append(st.Nodes, fwv1.NodeStatus{Name: n.Name, State: string(rollout.Idle), Reason: ReasonOtherRollout,
			Message: fmt.Sprintf("rollout %s also selects this node, and updates it", in.olders[n.Name])})
	}
	slices.SortFunc(st.Nodes, func(a, b fwv1.NodeStatus) int { return cmp.Compare(a.Name, b.Name) })
	return st
}

// events returns the Events of the change from prev to res.
func events(in input, prev rollout.Status, res rollout.Result, prevNodes map[string]fwv1.NodeStatus, nodes []fwv1.NodeStatus) []event {
	var evs []event
	for i := len(prev.WaveStarted); i < len(res.Status.WaveStarted) && i < len(res.Waves); i++ {
		evs = append(evs, event{reason: EventWaveStarted,
			message: fmt.Sprintf("wave %d of %d started: %d nodes in all by its end", i+1, len(res.Waves), res.Waves[i].Target)})
	}
	for _, ns := range nodes {
		if ns.State != string(rollout.Failed) && ns.State != string(rollout.Reverted) || ns.Reason == ReasonFailedBefore {
			continue
		}
		if p, ok := prevNodes[ns.Name]; ok && p.State == ns.State {
			continue
		}
		msg := fmt.Sprintf("node %s: %s", ns.Name, ns.State)
		if ns.Reason != "" {
			msg += ": " + ns.Reason
		}
		if ns.Message != "" {
			msg += ": " + ns.Message
		}
		evs = append(evs, event{warning: true, reason: EventNodeFailed, message: msg})
	}
	if res.Status.Tripped && !prev.Tripped {
		action := in.spec.OnTrip
		if action == "" {
			action = rollout.Pause
		}
		evs = append(evs, event{warning: true, reason: EventBudgetTripped,
			message: fmt.Sprintf("failure budget %s tripped with %d failed: action %s", in.spec.Budget, len(res.Status.Failed), action)})
	}
	if res.Status.Complete && !prev.Complete {
		evs = append(evs, event{reason: EventComplete,
			message: fmt.Sprintf("every wave done: %d updated, %d failed of %d nodes", res.Counts.Updated, res.Counts.Failed, res.Counts.Nodes)})
	}
	return evs
}

// setConditions sets the planner's conditions and ReleaseReady on st,
// keeping the transition times of those whose status did not change.
func setConditions(st *fwv1.RolloutStatus, prev []metav1.Condition, planned []rollout.Condition, release metav1.Condition, gen int64, now time.Time) {
	st.Conditions = slices.Clone(prev)
	at := metav1.NewTime(now.Truncate(time.Second))
	release.ObservedGeneration, release.LastTransitionTime = gen, at
	meta.SetStatusCondition(&st.Conditions, release)
	for _, c := range planned {
		s := metav1.ConditionFalse
		if c.Status {
			s = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: c.Type, Status: s, Reason: c.Reason,
			Message: c.Message, ObservedGeneration: gen, LastTransitionTime: at})
	}
}

// blockedConditions returns the planner's condition types for a rollout
// that cannot plan: why, in Progressing.
func blockedConditions(reason, message string) []rollout.Condition {
	return []rollout.Condition{
		{Type: rollout.ConditionProgressing, Reason: reason, Message: message},
		{Type: rollout.ConditionPaused, Reason: reason},
		{Type: rollout.ConditionBudgetExceeded, Reason: reason},
		{Type: rollout.ConditionComplete, Reason: reason},
	}
}

// precedes reports whether rollout a wins a node that a and b both
// select. A rollout not complete wins over a complete one, so that a new
// rollout takes the nodes of one that finished; of two not complete the
// older wins, so that a rollout under way is not cut short; of two
// complete the newer wins, the later intent, for a node that comes back
// or joins.
func precedes(a, b *fwv1.Rollout) bool {
	ca, cb := complete(a.Status.Conditions), complete(b.Status.Conditions)
	switch {
	case ca != cb:
		return !ca
	case ca:
		return older(b, a)
	default:
		return older(a, b)
	}
}

// complete reports whether the conditions hold Complete, true.
func complete(conds []metav1.Condition) bool {
	return meta.IsStatusConditionTrue(conds, rollout.ConditionComplete)
}

// older reports whether a is older than b, by creation time and then by
// name.
func older(a, b *fwv1.Rollout) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.Name < b.Name
}

// inFlight reports whether s is between an offer and a commit.
func inFlight(s rollout.NodeState) bool {
	switch s {
	case rollout.Offered, rollout.Downloading, rollout.Installing, rollout.Trial:
		return true
	}
	return false
}

// maxFailedVersionsBytes bounds how much of a Node's
// AnnotationFailedVersions splitVersions reads: the controller writes at
// most MaxFailedVersions versions, but anyone allowed to edit the Node may
// write more.
const maxFailedVersionsBytes = 8 << 10

// maxVersionLen bounds one version of the list: longer entries are no
// version a release could have (the CRD caps spec.version well below).
const maxVersionLen = 128

// splitVersions reads a comma-separated version list, dropping blanks and
// entries too long to be versions and repeats; of a longer list it reads
// the last maxFailedVersionsBytes, from the first whole entry.
func splitVersions(s string) []string {
	if len(s) > maxFailedVersionsBytes {
		// The latest versions are last: keep the tail.
		s = s[len(s)-maxFailedVersionsBytes:]
		if i := strings.IndexByte(s, ','); i >= 0 {
			s = s[i+1:]
		}
	}
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f != "" && len(f) <= maxVersionLen && !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out
}

// union returns a with the elements of b it lacks appended.
func union(a, b []string) []string {
	for _, s := range b {
		if !slices.Contains(a, s) {
			a = append(a, s)
		}
	}
	return a
}

func set(names []string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// earliest returns the earlier of a and b, ignoring zero times.
func earliest(a, b time.Time) time.Time {
	switch {
	case a.IsZero():
		return b
	case b.IsZero() || a.Before(b):
		return a
	}
	return b
}
