package pods

import (
	"bytes"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// The agent owns a pod's status but for what others write: the conditions
// of other types (DisruptionTarget from an eviction, readiness gates from
// a load balancer controller), nominatedNodeName, qosClass and the fields
// it does not set. The hub keeps the copy everyone reads, and a writer
// other than the agent may change it (the node lifecycle controller sets
// an unreachable node's pods Ready=False), so the agent, as kubelet's
// status manager, compares the hub's copy with its own and reports its
// status again when they differ in what it owns, keeping what the others
// own.

// resyncConditions are the condition types whose difference makes the
// agent report again: those kubelet owns, but PodScheduled, which the
// scheduler sets before the agent ever sees the pod.
var resyncConditions = []corev1.PodConditionType{
	corev1.PodReadyToStartContainers,
	corev1.PodInitialized,
	corev1.PodReady,
	corev1.ContainersReady,
}

// NeedsResend reports whether hub, the hub's copy of a pod's status,
// differs from ours, the status the agent computed, in what the agent
// owns: the phase, reason and message, the conditions of resyncConditions
// (status, reason, message; not their times, as kubelet compares them),
// the container statuses (the fields the agent sets), the pod and host
// IPs and the start time. Times count to the second, as the hub stores
// them.
func NeedsResend(hub, ours *corev1.PodStatus) bool {
	return !bytes.Equal(owned(hub), owned(ours))
}

// owned returns the encoding of what the agent owns of st, as NeedsResend
// compares it.
func owned(st *corev1.PodStatus) []byte {
	o := corev1.PodStatus{
		Phase:     st.Phase,
		Reason:    st.Reason,
		Message:   st.Message,
		HostIP:    st.HostIP,
		HostIPs:   st.HostIPs,
		PodIP:     st.PodIP,
		PodIPs:    st.PodIPs,
		StartTime: st.StartTime,
	}
	for _, t := range resyncConditions {
		if c := findCondition(st.Conditions, t); c != nil {
			o.Conditions = append(o.Conditions, corev1.PodCondition{Type: c.Type, Status: c.Status, Reason: c.Reason, Message: c.Message})
		}
	}
	o.InitContainerStatuses = ownedContainers(st.InitContainerStatuses)
	o.ContainerStatuses = ownedContainers(st.ContainerStatuses)
	// App containers in name order, as Status sorts them; init containers
	// run in order, which their statuses keep.
	slices.SortStableFunc(o.ContainerStatuses, func(a, b corev1.ContainerStatus) int { return strings.Compare(a.Name, b.Name) })
	b, err := o.Marshal()
	if err != nil {
		// A status the agent cannot encode it cannot report either.
		return nil
	}
	return b
}

// ownedContainers returns the fields of l that Status sets.
func ownedContainers(l []corev1.ContainerStatus) []corev1.ContainerStatus {
	if len(l) == 0 {
		return nil
	}
	out := make([]corev1.ContainerStatus, len(l))
	for i, c := range l {
		out[i] = corev1.ContainerStatus{
			Name:                 c.Name,
			Image:                c.Image,
			ImageID:              c.ImageID,
			ContainerID:          c.ContainerID,
			State:                c.State,
			LastTerminationState: c.LastTerminationState,
			Ready:                c.Ready,
			RestartCount:         c.RestartCount,
			Started:              c.Started,
		}
	}
	return out
}

// MergeHub returns ours, a status the agent computed or reported, with
// what it does not own taken from hub, the hub's copy: the conditions of
// the types kubelet does not own, nominatedNodeName, qosClass and the
// fields Status does not set; and hub's phase, reason and message if that
// phase is terminal and ours is not, since a pod never leaves a terminal
// phase. It is what Status starts from (as pod.Status) when the agent has
// reported the pod before, as kubelet's status manager merges the API's
// copy into its own. The result shares memory with ours and hub but for
// its conditions: it is for reading only, as Status reads it.
func MergeHub(ours, hub *corev1.PodStatus) corev1.PodStatus {
	m := *hub
	m.Phase, m.Reason, m.Message = ours.Phase, ours.Reason, ours.Message
	if terminalPhase(hub.Phase) && !terminalPhase(ours.Phase) {
		m.Phase, m.Reason, m.Message = hub.Phase, hub.Reason, hub.Message
	}
	m.HostIP, m.HostIPs = ours.HostIP, ours.HostIPs
	m.PodIP, m.PodIPs = ours.PodIP, ours.PodIPs
	m.StartTime = ours.StartTime
	m.ObservedGeneration = ours.ObservedGeneration
	m.InitContainerStatuses, m.ContainerStatuses = ours.InitContainerStatuses, ours.ContainerStatuses
	// A condition holds no pointers: a copy of the value is a deep one.
	m.Conditions = make([]corev1.PodCondition, 0, len(hub.Conditions)+len(ours.Conditions))
	for _, c := range hub.Conditions {
		if !kubeletConditions[c.Type] {
			m.Conditions = append(m.Conditions, c)
		}
	}
	for _, c := range ours.Conditions {
		if kubeletConditions[c.Type] {
			m.Conditions = append(m.Conditions, c)
		}
	}
	if len(m.Conditions) == 0 {
		m.Conditions = nil
	}
	return m
}

// maxUnconfirmed bounds the reports a Resync remembers the hub has not
// shown back: a copy older than those is taken for a change, and costs
// one report more.
const maxUnconfirmed = 8

// Resync decides, for one pod, when its status is to be reported again
// because the hub's copy differs from the agent's: as kubelet's status
// manager reconciles with the API's copy. It remembers the reports the hub
// has not shown back yet, so that a copy that only lags behind them (the
// hub applied one report and the next is on its way) is not taken for
// another writer's change; and when it last reported again, so that a
// writer that keeps setting the status back (a controller that believes
// the node unreachable while it is not) is answered once per interval, not
// in a loop as fast as the two can go.
//
// The zero value is ready for use. A Resync is not safe for concurrent
// use.
type Resync struct {
	unconfirmed [][]byte  // what each report owned, oldest first, from the last the hub showed back
	resent      time.Time // when Check last asked for a report again
}

// Sent records that the agent reported st when the hub's copy was hub
// (nil if unknown). The first report's hub copy counts as shown back: the
// hub showing it still is only lagging behind the report, not another
// writer's change.
func (r *Resync) Sent(st, hub *corev1.PodStatus) {
	if len(r.unconfirmed) == 0 && hub != nil {
		r.unconfirmed = append(r.unconfirmed, owned(hub))
	}
	r.unconfirmed = append(r.unconfirmed, owned(st))
	if n := len(r.unconfirmed) - maxUnconfirmed; n > 0 {
		r.unconfirmed = slices.Delete(r.unconfirmed, 0, n)
	}
}

// Check compares hub, the hub's copy of the pod's status, with last, the
// status the agent reported last, at now. It returns whether to report
// last again now, and, when a report again is due but held back because
// the last was less than interval ago, when it may be made: Check is to be
// called again then.
func (r *Resync) Check(hub, last *corev1.PodStatus, now time.Time, interval time.Duration) (resend bool, retry time.Time) {
	h := owned(hub)
	if l := owned(last); bytes.Equal(h, l) {
		r.unconfirmed = append(r.unconfirmed[:0], l)
		return false, time.Time{}
	}
	// A copy of an earlier report: the later ones are still on their way.
	// Those before it the hub has passed.
	if i := slices.IndexFunc(r.unconfirmed, func(b []byte) bool { return bytes.Equal(b, h) }); i >= 0 && i < len(r.unconfirmed)-1 {
		r.unconfirmed = slices.Delete(r.unconfirmed, 0, i)
		return false, time.Time{}
	}
	if next := r.resent.Add(interval); !r.resent.IsZero() && now.Before(next) {
		return false, next
	}
	r.resent = now
	return true, time.Time{}
}
