package deployment

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Condition reasons, as upstream's.
const (
	// Progressing.
	ReplicaSetUpdated      = "ReplicaSetUpdated"
	FailedRSCreate         = "ReplicaSetCreateError"
	NewReplicaSetCreated   = "NewReplicaSetCreated"
	FoundNewReplicaSet     = "FoundNewReplicaSet"
	NewReplicaSetAvailable = "NewReplicaSetAvailable"
	ProgressDeadline       = "ProgressDeadlineExceeded"
	Paused                 = "DeploymentPaused"
	Resumed                = "DeploymentResumed"
	// Available.
	MinimumReplicasAvailable   = "MinimumReplicasAvailable"
	MinimumReplicasUnavailable = "MinimumReplicasUnavailable"
)

// stamp is now as the API stores times, in whole seconds, so that a
// condition written and read back compares equal.
func stamp(now time.Time) metav1.Time { return metav1.NewTime(now.Truncate(time.Second)) }

// newCondition returns a condition that changed at now.
func newCondition(t appsv1.DeploymentConditionType, s corev1.ConditionStatus, reason, msg string, now time.Time) appsv1.DeploymentCondition {
	return appsv1.DeploymentCondition{Type: t, Status: s, Reason: reason, Message: msg,
		LastUpdateTime: stamp(now), LastTransitionTime: stamp(now)}
}

// Condition returns st's condition of type t, or nil.
func Condition(st *appsv1.DeploymentStatus, t appsv1.DeploymentConditionType) *appsv1.DeploymentCondition {
	for i := range st.Conditions {
		if st.Conditions[i].Type == t {
			return &st.Conditions[i]
		}
	}
	return nil
}

// setCondition puts c in st unless st has one of its type with the same
// status and reason; a condition of the same status keeps its transition
// time.
func setCondition(st *appsv1.DeploymentStatus, c appsv1.DeploymentCondition) {
	cur := Condition(st, c.Type)
	if cur != nil && cur.Status == c.Status && cur.Reason == c.Reason {
		return
	}
	if cur != nil && cur.Status == c.Status {
		c.LastTransitionTime = cur.LastTransitionTime
	}
	removeCondition(st, c.Type)
	st.Conditions = append(st.Conditions, c)
}

func removeCondition(st *appsv1.DeploymentStatus, t appsv1.DeploymentConditionType) {
	st.Conditions = slices.DeleteFunc(st.Conditions, func(c appsv1.DeploymentCondition) bool { return c.Type == t })
	if len(st.Conditions) == 0 {
		st.Conditions = nil
	}
}

// hasProgressDeadline reports whether d reports a stalled rollout.
func hasProgressDeadline(d *appsv1.Deployment) bool {
	return d.Spec.ProgressDeadlineSeconds != nil && *d.Spec.ProgressDeadlineSeconds != math.MaxInt32
}

// Complete reports whether st shows all of d's replicas updated and
// available and no old ones left, for d's current generation.
func Complete(d *appsv1.Deployment, st *appsv1.DeploymentStatus) bool {
	n := replicas(d.Spec.Replicas)
	return st.UpdatedReplicas == n && st.Replicas == n && st.AvailableReplicas == n && st.ObservedGeneration >= d.Generation
}

// progressing reports whether st shows progress over d's stored status:
// more updated, ready or available pods, or fewer old ones.
func progressing(d *appsv1.Deployment, st *appsv1.DeploymentStatus) bool {
	o := &d.Status
	return st.UpdatedReplicas > o.UpdatedReplicas ||
		st.Replicas-st.UpdatedReplicas < o.Replicas-o.UpdatedReplicas ||
		st.ReadyReplicas > o.ReadyReplicas ||
		st.AvailableReplicas > o.AvailableReplicas
}

// timedOut reports whether d's rollout made no progress for its
// progressDeadlineSeconds by now, going by st's Progressing condition.
func timedOut(d *appsv1.Deployment, st *appsv1.DeploymentStatus, now time.Time) bool {
	if !hasProgressDeadline(d) {
		return false
	}
	c := Condition(st, appsv1.DeploymentProgressing)
	switch {
	case c == nil, c.Reason == NewReplicaSetAvailable:
		return false
	case c.Reason == ProgressDeadline:
		return true
	}
	return c.LastUpdateTime.Add(time.Duration(*d.Spec.ProgressDeadlineSeconds) * time.Second).Before(now)
}

// CalculateStatus returns d's status from its ReplicaSets (all, which
// holds newRS unless that is nil): the counts, d's generation as
// observed, and the Available condition. No I/O.
func CalculateStatus(d *appsv1.Deployment, all []*appsv1.ReplicaSet, newRS *appsv1.ReplicaSet, now time.Time) appsv1.DeploymentStatus {
	total, ready, available := statusReplicas(all)
	updated, _, _ := statusReplicas([]*appsv1.ReplicaSet{newRS})
	st := appsv1.DeploymentStatus{
		ObservedGeneration:  d.Generation,
		Replicas:            total,
		UpdatedReplicas:     updated,
		ReadyReplicas:       ready,
		AvailableReplicas:   available,
		UnavailableReplicas: max(specReplicas(all)-available, 0),
		TerminatingReplicas: terminatingReplicas(all),
		CollisionCount:      d.Status.CollisionCount,
		Conditions:          slices.Clone(d.Status.Conditions),
	}
	if available >= replicas(d.Spec.Replicas)-MaxUnavailable(d) {
		setCondition(&st, newCondition(appsv1.DeploymentAvailable, corev1.ConditionTrue, MinimumReplicasAvailable, "Deployment has minimum availability.", now))
	} else {
		setCondition(&st, newCondition(appsv1.DeploymentAvailable, corev1.ConditionFalse, MinimumReplicasUnavailable, "Deployment does not have minimum availability.", now))
	}
	return st
}

// RolloutStatus returns d's status during a rollout: CalculateStatus's,
// with the Progressing condition (complete, progressing, or past its
// deadline) and the ReplicaSets' ReplicaFailure condition, new ones
// first. It also reports whether that differs from d's stored status,
// and, when it does not, after how long to look at d again to tell
// whether the rollout timed out (never for a negative recheck). No I/O.
func RolloutStatus(d *appsv1.Deployment, all []*appsv1.ReplicaSet, newRS *appsv1.ReplicaSet, now time.Time) (st appsv1.DeploymentStatus, changed bool, recheck time.Duration) {
	st = CalculateStatus(d, all, newRS, now)
	if !hasProgressDeadline(d) {
		removeCondition(&st, appsv1.DeploymentProgressing)
	}
	cur := Condition(&d.Status, appsv1.DeploymentProgressing)
	done := st.Replicas == st.UpdatedReplicas && cur != nil && cur.Reason == NewReplicaSetAvailable
	if hasProgressDeadline(d) && !done {
		subject := fmt.Sprintf("Deployment %q", d.Name)
		if newRS != nil {
			subject = fmt.Sprintf("ReplicaSet %q", newRS.Name)
		}
		switch {
		case Complete(d, &st):
			setCondition(&st, newCondition(appsv1.DeploymentProgressing, corev1.ConditionTrue, NewReplicaSetAvailable, subject+" has successfully progressed.", now))
		case progressing(d, &st):
			// Progress refreshes lastUpdateTime even with the same reason,
			// which setCondition would not.
			c := newCondition(appsv1.DeploymentProgressing, corev1.ConditionTrue, ReplicaSetUpdated, subject+" is progressing.", now)
			if cur != nil {
				if cur.Status == corev1.ConditionTrue {
					c.LastTransitionTime = cur.LastTransitionTime
				}
				removeCondition(&st, appsv1.DeploymentProgressing)
			}
			setCondition(&st, c)
		case timedOut(d, &st, now):
			setCondition(&st, newCondition(appsv1.DeploymentProgressing, corev1.ConditionFalse, ProgressDeadline, subject+" has timed out progressing.", now))
		}
	}
	if f := replicaFailure(all, newRS); f != nil {
		setCondition(&st, *f)
	} else {
		removeCondition(&st, appsv1.DeploymentReplicaFailure)
	}
	if !reflect.DeepEqual(d.Status, st) {
		return st, true, -1
	}
	return st, false, recheckAfter(d, &st, now)
}

// recheckAfter is when to look at d again for its progress deadline.
func recheckAfter(d *appsv1.Deployment, st *appsv1.DeploymentStatus, now time.Time) time.Duration {
	cur := Condition(&d.Status, appsv1.DeploymentProgressing)
	if !hasProgressDeadline(d) || cur == nil || Complete(d, st) || cur.Reason == ProgressDeadline {
		return -1
	}
	after := cur.LastUpdateTime.Add(time.Duration(*d.Spec.ProgressDeadlineSeconds) * time.Second).Sub(now)
	// A second more, past the deadline's whole second; and at least that,
	// so that a deadline about to pass is not polled in a tight loop.
	return max(after, 0) + time.Second
}

// replicaFailure returns the ReplicaFailure condition of newRS, or else
// of any of all, as a Deployment condition; nil if none has one.
func replicaFailure(all []*appsv1.ReplicaSet, newRS *appsv1.ReplicaSet) *appsv1.DeploymentCondition {
	for _, rss := range [][]*appsv1.ReplicaSet{{newRS}, all} {
		for _, rs := range rss {
			if rs == nil {
				continue
			}
			for _, c := range rs.Status.Conditions {
				if c.Type == appsv1.ReplicaSetReplicaFailure {
					return &appsv1.DeploymentCondition{Type: appsv1.DeploymentReplicaFailure, Status: c.Status,
						Reason: c.Reason, Message: c.Message, LastUpdateTime: c.LastTransitionTime, LastTransitionTime: c.LastTransitionTime}
				}
			}
		}
	}
	return nil
}

// PausedConditions returns d's status with the Progressing condition
// saying it is paused (Unknown, DeploymentPaused) or resumed, and
// whether that changed: while paused, no progress is expected, and a
// resumed rollout starts its deadline afresh. A timed out rollout keeps
// saying so. No I/O.
func PausedConditions(d *appsv1.Deployment, now time.Time) (appsv1.DeploymentStatus, bool) {
	st := *d.Status.DeepCopy()
	if !hasProgressDeadline(d) {
		return st, false
	}
	cur := Condition(&st, appsv1.DeploymentProgressing)
	if cur != nil && cur.Reason == ProgressDeadline {
		return st, false
	}
	isPaused := cur != nil && cur.Reason == Paused
	switch {
	case d.Spec.Paused && !isPaused:
		setCondition(&st, newCondition(appsv1.DeploymentProgressing, corev1.ConditionUnknown, Paused, "Deployment is paused", now))
	case !d.Spec.Paused && isPaused:
		setCondition(&st, newCondition(appsv1.DeploymentProgressing, corev1.ConditionUnknown, Resumed, "Deployment is resumed", now))
	default:
		return st, false
	}
	return st, true
}

// FoundCondition returns d's status with the Progressing condition of
// having found its new ReplicaSet rs, for a Deployment that has no
// Progressing condition yet (one made before it had a deadline), and
// whether that changed it.
func FoundCondition(d *appsv1.Deployment, rs *appsv1.ReplicaSet, now time.Time) (appsv1.DeploymentStatus, bool) {
	st := *d.Status.DeepCopy()
	if !hasProgressDeadline(d) || Condition(&st, appsv1.DeploymentProgressing) != nil {
		return st, false
	}
	setCondition(&st, newCondition(appsv1.DeploymentProgressing, corev1.ConditionTrue, FoundNewReplicaSet, fmt.Sprintf("Found new replica set %q", rs.Name), now))
	return st, true
}

// CreatedCondition returns d's status with the Progressing condition of
// having created rs (or failed to, with err).
func CreatedCondition(d *appsv1.Deployment, rs *appsv1.ReplicaSet, err error, now time.Time) (appsv1.DeploymentStatus, bool) {
	st := *d.Status.DeepCopy()
	if !hasProgressDeadline(d) {
		return st, false
	}
	if err != nil {
		setCondition(&st, newCondition(appsv1.DeploymentProgressing, corev1.ConditionFalse, FailedRSCreate, FailedCreateMessage(rs, err), now))
	} else {
		setCondition(&st, newCondition(appsv1.DeploymentProgressing, corev1.ConditionTrue, NewReplicaSetCreated, fmt.Sprintf("Created new replica set %q", rs.Name), now))
	}
	return st, true
}

// FailedCreateMessage says that creating rs failed with err.
func FailedCreateMessage(rs *appsv1.ReplicaSet, err error) string {
	return fmt.Sprintf("Failed to create new replica set %q: %v", rs.Name, err)
}
