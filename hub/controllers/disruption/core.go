// Package disruption keeps the status of PodDisruptionBudgets, as
// upstream's disruption controller does: how many of the pods a budget
// selects are expected and healthy, how many must stay healthy, and so
// how many may be disrupted now (disruptionsAllowed, which the eviction
// subresource spends), with the DisruptionAllowed condition. It also
// expires the evictions the API server records in status.disruptedPods
// and clears the DisruptionTarget condition of pods an eviction marked
// but never deleted. The arithmetic is pure (Compute); the rest is a
// client-go shell.
package disruption

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// DeletionTimeout is how long an eviction recorded in a budget's
// status.disruptedPods keeps its pod out of the healthy count while the
// pod is not yet seen being deleted; after it, the eviction is taken to
// have failed and the entry is dropped. Upstream's value.
const DeletionTimeout = 2 * time.Minute

// StaleDisruptionTimeout is how long a pod may carry a True
// DisruptionTarget condition without being deleted before the condition
// is set back to False. Upstream's value.
const StaleDisruptionTimeout = 2 * time.Minute

// Owner is the workload whose scale sets how many pods one controller
// reference stands for: the ReplicaSet, StatefulSet or other scalable
// controller named, or the Deployment that controls a ReplicaSet named.
type Owner struct {
	UID      types.UID
	Replicas int32
}

// Input is what one budget's status is computed from.
type Input struct {
	// Budget is the budget as stored; Compute does not modify it.
	Budget *policyv1.PodDisruptionBudget
	// Pods are the pods of Budget's namespace that its selector matches.
	Pods []*corev1.Pod
	// Owners maps the UID of a pod's controller reference to the
	// workload it leads to. Only read when NeedsScale(Budget); a pod
	// whose controller is missing from it fails the computation, as
	// upstream's "found no controllers" does.
	Owners map[types.UID]Owner
	// Now is the time disruptedPods entries are judged at.
	Now time.Time
}

// Result is the outcome of Compute.
type Result struct {
	// Status is the budget's new status: computed, or, when Err is set,
	// the fail-safe status (see FailSafe).
	Status policyv1.PodDisruptionBudgetStatus
	// Changed reports whether Status differs from the stored status in
	// what upstream compares, so that it is to be written. A fail-safe
	// status is always to be written.
	Changed bool
	// Err says why the status could not be computed.
	Err error
	// Unmanaged names the pods without a controller reference, which a
	// scale-based budget cannot count (upstream warns with an event).
	Unmanaged []string
	// NotDeleted names the pods whose eviction was recorded more than
	// DeletionTimeout ago but that are not being deleted.
	NotDeleted []string
	// Recheck, when positive, is how long after Now the budget is to be
	// computed again, when the next recorded eviction expires.
	Recheck time.Duration
}

// NeedsScale reports whether pdb's expected pod count is the sum of the
// scales of its pods' controllers (maxUnavailable, or minAvailable as a
// percentage) rather than the number of pods it selects.
func NeedsScale(pdb *policyv1.PodDisruptionBudget) bool {
	s := pdb.Spec
	return s.MaxUnavailable != nil || s.MinAvailable != nil && s.MinAvailable.Type == intstr.String
}

// Compute returns pdb's status for in, as upstream's disruption
// controller computes it. No I/O.
func Compute(in Input) Result {
	pdb := in.Budget
	var r Result
	expected, desired, unmanaged, err := expectedCounts(pdb, in.Pods, in.Owners)
	r.Unmanaged = unmanaged
	if err != nil {
		r.Err = err
		r.Status, r.Changed = FailSafe(pdb, err, in.Now), true
		return r
	}
	disrupted, notDeleted, recheck := disruptedPods(pdb.Status.DisruptedPods, in.Pods, in.Now)
	r.NotDeleted = notDeleted
	if !recheck.IsZero() {
		r.Recheck = recheck.Sub(in.Now)
	}
	healthy := countHealthy(in.Pods, disrupted, in.Now)
	// A budget whose pods are not expected yet allows nothing, so that it
	// is safe when they appear before it is computed again.
	allowed := healthy - desired
	if expected <= 0 || allowed < 0 {
		allowed = 0
	}
	old := pdb.Status
	if old.CurrentHealthy == healthy && old.DesiredHealthy == desired && old.ExpectedPods == expected &&
		old.DisruptionsAllowed == allowed && equality.Semantic.DeepEqual(old.DisruptedPods, disrupted) &&
		old.ObservedGeneration == pdb.Generation && conditionUpToDate(pdb) {
		r.Status = *old.DeepCopy()
		return r
	}
	r.Status = policyv1.PodDisruptionBudgetStatus{
		ObservedGeneration: pdb.Generation,
		DisruptedPods:      disrupted,
		DisruptionsAllowed: allowed,
		CurrentHealthy:     healthy,
		DesiredHealthy:     desired,
		ExpectedPods:       expected,
		Conditions:         cloneConditions(old.Conditions),
	}
	SetAllowedCondition(&r.Status, in.Now)
	r.Changed = true
	return r
}

// expectedCounts returns how many pods pdb expects and how many of them
// must stay healthy, with the names of pods it could not count.
func expectedCounts(pdb *policyv1.PodDisruptionBudget, pods []*corev1.Pod, owners map[types.UID]Owner) (expected, desired int32, unmanaged []string, err error) {
	spec := pdb.Spec
	switch {
	case spec.MaxUnavailable != nil:
		expected, unmanaged, err = expectedScale(pods, owners)
		if err != nil {
			return 0, 0, unmanaged, err
		}
		maxUnavailable, err := intstr.GetScaledValueFromIntOrPercent(spec.MaxUnavailable, int(expected), true)
		if err != nil {
			return 0, 0, unmanaged, err
		}
		desired = max(expected-int32(maxUnavailable), 0)
	case spec.MinAvailable != nil && spec.MinAvailable.Type == intstr.Int:
		desired, expected = spec.MinAvailable.IntVal, int32(len(pods))
	case spec.MinAvailable != nil:
		expected, unmanaged, err = expectedScale(pods, owners)
		if err != nil {
			return 0, 0, unmanaged, err
		}
		minAvailable, err := intstr.GetScaledValueFromIntOrPercent(spec.MinAvailable, int(expected), true)
		if err != nil {
			return 0, 0, unmanaged, err
		}
		desired = int32(minAvailable)
	}
	// Neither set: nothing is expected and nothing need stay healthy, as
	// upstream (validation lets such a budget through).
	return expected, desired, unmanaged, nil
}

// expectedScale sums the scales of the distinct workloads that control
// pods. Pods without a controller are not counted and are returned.
func expectedScale(pods []*corev1.Pod, owners map[types.UID]Owner) (int32, []string, error) {
	scales := map[types.UID]int32{}
	var unmanaged []string
	for _, p := range pods {
		ref := metav1.GetControllerOfNoCopy(p)
		if ref == nil {
			unmanaged = append(unmanaged, p.Name)
			continue
		}
		o, ok := owners[ref.UID]
		if !ok {
			return 0, unmanaged, fmt.Errorf("found no controllers for pod %q", p.Name)
		}
		scales[o.UID] = o.Replicas
	}
	var sum int32
	for _, n := range scales {
		sum += n
	}
	return sum, unmanaged, nil
}

// disruptedPods returns the entries of recorded that still hold: those of
// pods selected, not yet being deleted, recorded less than
// DeletionTimeout before now. It also returns the pods whose entries
// expired and the earliest time a kept entry expires (zero if none).
func disruptedPods(recorded map[string]metav1.Time, pods []*corev1.Pod, now time.Time) (map[string]metav1.Time, []string, time.Time) {
	kept := map[string]metav1.Time{}
	var expired []string
	var recheck time.Time
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			continue
		}
		at, ok := recorded[p.Name]
		if !ok {
			continue
		}
		due := at.Add(DeletionTimeout)
		if due.Before(now) {
			expired = append(expired, p.Name)
			continue
		}
		if recheck.IsZero() || due.Before(recheck) {
			recheck = due
		}
		kept[p.Name] = at
	}
	return kept, expired, recheck
}

// countHealthy counts the Ready pods that are neither being deleted nor
// about to be, by a recorded eviction.
func countHealthy(pods []*corev1.Pod, disrupted map[string]metav1.Time, now time.Time) int32 {
	var n int32
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			continue
		}
		if at, ok := disrupted[p.Name]; ok && at.Add(DeletionTimeout).After(now) {
			continue
		}
		if Ready(p) {
			n++
		}
	}
	return n
}

// Ready reports whether p's Ready condition is True: what upstream counts
// as a healthy pod.
func Ready(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// FailSafe returns the status to write for pdb when its status cannot be
// computed: the stored one with no disruption allowed and the
// DisruptionAllowed condition False for SyncFailed with err's message, so
// that no eviction goes through on numbers that may be wrong.
func FailSafe(pdb *policyv1.PodDisruptionBudget, err error, now time.Time) policyv1.PodDisruptionBudgetStatus {
	st := *pdb.Status.DeepCopy()
	st.DisruptionsAllowed = 0
	setCondition(&st.Conditions, metav1.Condition{
		Type:               policyv1.DisruptionAllowedCondition,
		Status:             metav1.ConditionFalse,
		Reason:             policyv1.SyncFailedReason,
		Message:            err.Error(),
		ObservedGeneration: st.ObservedGeneration,
	}, now)
	return st
}

// SetAllowedCondition sets st's DisruptionAllowed condition from its
// DisruptionsAllowed: True for SufficientPods, else False for
// InsufficientPods; the transition time is now when the status changes.
func SetAllowedCondition(st *policyv1.PodDisruptionBudgetStatus, now time.Time) {
	c := metav1.Condition{
		Type:               policyv1.DisruptionAllowedCondition,
		Status:             metav1.ConditionFalse,
		Reason:             policyv1.InsufficientPodsReason,
		ObservedGeneration: st.ObservedGeneration,
	}
	if st.DisruptionsAllowed > 0 {
		c.Status, c.Reason = metav1.ConditionTrue, policyv1.SufficientPodsReason
	}
	if st.Conditions == nil {
		st.Conditions = []metav1.Condition{}
	}
	setCondition(&st.Conditions, c, now)
}

// conditionUpToDate reports whether pdb's DisruptionAllowed condition
// says what its status does, for its current generation.
func conditionUpToDate(pdb *policyv1.PodDisruptionBudget) bool {
	if pdb.Status.ObservedGeneration != pdb.Generation {
		return false
	}
	for _, c := range pdb.Status.Conditions {
		if c.Type != policyv1.DisruptionAllowedCondition {
			continue
		}
		if pdb.Status.DisruptionsAllowed > 0 {
			return c.Status == metav1.ConditionTrue && c.Reason == policyv1.SufficientPodsReason
		}
		return c.Status == metav1.ConditionFalse && c.Reason == policyv1.InsufficientPodsReason
	}
	return false
}

// setCondition sets c in conds as apimachinery's SetStatusCondition does,
// with the transition time now rather than the wall clock's.
func setCondition(conds *[]metav1.Condition, c metav1.Condition, now time.Time) {
	for i := range *conds {
		cur := &(*conds)[i]
		if cur.Type != c.Type {
			continue
		}
		if cur.Status != c.Status {
			cur.Status = c.Status
			cur.LastTransitionTime = metav1.NewTime(now)
		}
		cur.Reason, cur.Message, cur.ObservedGeneration = c.Reason, c.Message, c.ObservedGeneration
		return
	}
	c.LastTransitionTime = metav1.NewTime(now)
	*conds = append(*conds, c)
}

func cloneConditions(c []metav1.Condition) []metav1.Condition {
	if c == nil {
		return nil
	}
	return append([]metav1.Condition{}, c...)
}

// StaleDisruption reports whether p carries a DisruptionTarget condition
// that an eviction set but that no deletion followed: True, not set by
// the kubelet, on a pod neither terminal nor being deleted. after is how
// long from now until it has been so for StaleDisruptionTimeout (0 once
// it has), when it is to be set back to False.
func StaleDisruption(p *corev1.Pod, now time.Time) (stale bool, after time.Duration) {
	if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return false, 0
	}
	for _, c := range p.Status.Conditions {
		if c.Type != corev1.DisruptionTarget {
			continue
		}
		if c.Status != corev1.ConditionTrue || c.Reason == corev1.PodReasonTerminationByKubelet {
			return false, 0
		}
		return true, max(StaleDisruptionTimeout-now.Sub(c.LastTransitionTime.Time), 0)
	}
	return false, 0
}

// ClearDisruption returns a copy of p with its DisruptionTarget condition
// False, as of now, or nil if p has no such condition that is True.
func ClearDisruption(p *corev1.Pod, now time.Time) *corev1.Pod {
	for i, c := range p.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			out := p.DeepCopy()
			// As upstream's UpdatePodCondition: the condition is replaced,
			// its reason and message with it.
			out.Status.Conditions[i] = corev1.PodCondition{Type: corev1.DisruptionTarget,
				Status: corev1.ConditionFalse, LastTransitionTime: metav1.NewTime(now)}
			return out
		}
	}
	return nil
}
