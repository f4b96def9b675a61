// Package replicaset is the ReplicaSet controller, as upstream's in
// kube-controller-manager: it creates and deletes pods so that each
// ReplicaSet has spec.replicas of them, adopts and releases pods by
// selector and ownerReferences, and reports status. The decisions (how
// many to create, which to delete, what to claim, the status) are pure
// functions of this package; Controller is the client-go shell that
// carries them out. The same shell keeps ReplicationControllers' pods
// (package replication) through Owners, as upstream runs one controller
// for both kinds.
package replicaset

import (
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
)

// Kind is the group, version and kind pods' controller references name.
var Kind = appsv1.SchemeGroupVersion.WithKind("ReplicaSet")

const (
	// BurstReplicas bounds the pods one sync creates or deletes, as
	// upstream's --concurrent-... burst of 500.
	BurstReplicas = 500
	// SlowStartInitialBatch is the first batch of creations; each next
	// batch doubles while the previous one all succeeded.
	SlowStartInitialBatch = 1
)

// Event reasons, as upstream's.
const (
	SuccessfulCreate = "SuccessfulCreate"
	FailedCreate     = "FailedCreate"
	SuccessfulDelete = "SuccessfulDelete"
	FailedDelete     = "FailedDelete"
)

// Plan is what one sync does to bring a ReplicaSet's pods to its
// spec.replicas: create Create pods, or delete Delete, never both.
type Plan struct {
	Create int
	Delete []*corev1.Pod
}

// Manage returns the plan for rs given its active pods (claimed, not
// terminating) and related, the active pods of every replica set with the
// same controller, which rank pods for deletion. At most BurstReplicas
// pods are created or deleted at once. No I/O; active may be reordered.
func Manage(rs *appsv1.ReplicaSet, active, related []*corev1.Pod, now time.Time) Plan {
	diff := len(active) - int(replicas(rs))
	switch {
	case diff < 0:
		return Plan{Create: min(-diff, BurstReplicas)}
	case diff > 0:
		return Plan{Delete: PodsToDelete(active, related, min(diff, BurstReplicas), now)}
	}
	return Plan{}
}

// Batches splits n creations into upstream's slow-start batches: 1, 2, 4,
// ... until n. The caller runs each batch in parallel and stops after a
// batch with a failure, so that a ReplicaSet whose pods are all refused
// (quota, an invalid template) sends one request, not n.
func Batches(n int) []int {
	var b []int
	for size := min(n, SlowStartInitialBatch); size > 0; size = min(2*size, n) {
		b = append(b, size)
		n -= size
	}
	return b
}

// replicas is rs's spec.replicas, 1 when unset as the API defaults it.
func replicas(rs *appsv1.ReplicaSet) int32 {
	return ptr.Deref(rs.Spec.Replicas, 1)
}

// Owned returns the pods of pods that rs controls and selects.
func Owned(rs *appsv1.ReplicaSet, selector labels.Selector, pods []*corev1.Pod) []*corev1.Pod {
	var out []*corev1.Pod
	for _, p := range pods {
		if ref := metav1.GetControllerOfNoCopy(p); ref != nil && ref.UID == rs.UID && Selects(selector, p) {
			out = append(out, p)
		}
	}
	return out
}

// Status returns rs's status given its active pods, the terminating pods
// it owns, and the error of the sync's creations or deletions, if any:
// the counts, and the ReplicaFailure condition while creations or
// deletions fail. It also returns after how long rs must be looked at
// again for a ready pod to count as available (minReadySeconds), or 0 for
// never. ObservedGeneration is rs's generation. No I/O.
func Status(rs *appsv1.ReplicaSet, active, terminating []*corev1.Pod, manageErr error, now time.Time) (appsv1.ReplicaSetStatus, time.Duration) {
	st := *rs.Status.DeepCopy()
	template := labels.SelectorFromSet(rs.Spec.Template.Labels)
	var labeled, ready, available int32
	var next time.Duration
	for _, p := range active {
		if template.Matches(labels.Set(p.Labels)) {
			labeled++
		}
		if !IsReady(p) {
			continue
		}
		ready++
		if IsAvailable(p, rs.Spec.MinReadySeconds, now) {
			available++
		} else if d, ok := untilAvailable(p, rs.Spec.MinReadySeconds, now); ok && (next == 0 || d < next) {
			next = d
		}
	}
	if next != 0 {
		// A second more, so that the ready time (whole seconds) has passed.
		next += time.Second
	}

	failure := condition(st.Conditions, appsv1.ReplicaSetReplicaFailure)
	switch {
	case manageErr != nil && failure == nil:
		reason := ""
		switch diff := len(active) - int(replicas(rs)); {
		case diff < 0:
			reason = FailedCreate
		case diff > 0:
			reason = FailedDelete
		}
		st.Conditions = append(st.Conditions, appsv1.ReplicaSetCondition{
			Type:               appsv1.ReplicaSetReplicaFailure,
			Status:             corev1.ConditionTrue,
			LastTransitionTime: metav1.NewTime(now.Truncate(time.Second)),
			Reason:             reason,
			Message:            manageErr.Error(),
		})
	case manageErr == nil && failure != nil:
		st.Conditions = slices.DeleteFunc(st.Conditions, func(c appsv1.ReplicaSetCondition) bool {
			return c.Type == appsv1.ReplicaSetReplicaFailure
		})
		if len(st.Conditions) == 0 {
			st.Conditions = nil
		}
	}
	st.Replicas = int32(len(active))
	st.FullyLabeledReplicas = labeled
	st.ReadyReplicas = ready
	st.AvailableReplicas = available
	st.TerminatingReplicas = ptr.To(int32(len(terminating)))
	st.ObservedGeneration = rs.Generation
	return st, next
}

// StatusChanged reports whether st differs from rs's stored status, in
// what Status computes, so that an unchanged status is not written.
func StatusChanged(rs *appsv1.ReplicaSet, st appsv1.ReplicaSetStatus) bool {
	o := &rs.Status
	return o.Replicas != st.Replicas ||
		o.FullyLabeledReplicas != st.FullyLabeledReplicas ||
		o.ReadyReplicas != st.ReadyReplicas ||
		o.AvailableReplicas != st.AvailableReplicas ||
		!ptr.Equal(o.TerminatingReplicas, st.TerminatingReplicas) ||
		rs.Generation != o.ObservedGeneration ||
		!conditionsEqual(o.Conditions, st.Conditions)
}

func conditionsEqual(a, b []appsv1.ReplicaSetCondition) bool {
	return slices.EqualFunc(a, b, func(x, y appsv1.ReplicaSetCondition) bool {
		return x.Type == y.Type && x.Status == y.Status && x.Reason == y.Reason &&
			x.Message == y.Message && x.LastTransitionTime.Equal(&y.LastTransitionTime)
	})
}

func condition(cs []appsv1.ReplicaSetCondition, t appsv1.ReplicaSetConditionType) *appsv1.ReplicaSetCondition {
	for i := range cs {
		if cs[i].Type == t {
			return &cs[i]
		}
	}
	return nil
}
