package deployment

import (
	"fmt"
	"math"
	"slices"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/integer"
	"k8s.io/utils/ptr"
)

// Scale is one step of a rollout or of scaling: set RS's spec.replicas to
// Replicas, with the Deployment's desired and max replicas annotations.
type Scale struct {
	RS       *appsv1.ReplicaSet
	Replicas int32
}

func (s Scale) String() string {
	return fmt.Sprintf("%s %d->%d", s.RS.Name, replicas(s.RS.Spec.Replicas), s.Replicas)
}

func isRolling(d *appsv1.Deployment) bool {
	return d.Spec.Strategy.Type == appsv1.RollingUpdateDeploymentStrategyType
}

// fenceposts resolves maxSurge (rounded up) and maxUnavailable (rounded
// down) against desired replicas; when both come to zero, maxUnavailable
// is 1, since validation only refuses both being zero as given.
func fenceposts(maxSurge, maxUnavailable *intstr.IntOrString, desired int32) (surge, unavailable int32) {
	zero := intstr.FromInt32(0)
	s, err := intstr.GetScaledValueFromIntOrPercent(intstr.ValueOrDefault(maxSurge, zero), int(desired), true)
	if err != nil {
		s = 0 // refused by validation
	}
	u, err := intstr.GetScaledValueFromIntOrPercent(intstr.ValueOrDefault(maxUnavailable, zero), int(desired), false)
	if err != nil {
		u = 0
	}
	if s == 0 && u == 0 {
		u = 1
	}
	return int32(s), int32(u)
}

// MaxSurge is how many pods a rolling Deployment may run above its
// replicas; 0 for Recreate.
func MaxSurge(d *appsv1.Deployment) int32 {
	if !isRolling(d) || d.Spec.Strategy.RollingUpdate == nil {
		return 0
	}
	s, _ := fenceposts(d.Spec.Strategy.RollingUpdate.MaxSurge, d.Spec.Strategy.RollingUpdate.MaxUnavailable, replicas(d.Spec.Replicas))
	return s
}

// MaxUnavailable is how many of its replicas a rolling Deployment may
// miss, at most all of them; 0 for Recreate or no replicas.
func MaxUnavailable(d *appsv1.Deployment) int32 {
	n := replicas(d.Spec.Replicas)
	if !isRolling(d) || d.Spec.Strategy.RollingUpdate == nil || n == 0 {
		return 0
	}
	_, u := fenceposts(d.Spec.Strategy.RollingUpdate.MaxSurge, d.Spec.Strategy.RollingUpdate.MaxUnavailable, n)
	return min(u, n)
}

// NewReplicas returns the spec.replicas d's new ReplicaSet newRS should
// have now among all (which holds newRS): a Recreate Deployment's full
// count; a rolling one's as much more as maxSurge allows, up to the
// Deployment's replicas.
func NewReplicas(d *appsv1.Deployment, all []*appsv1.ReplicaSet, newRS *appsv1.ReplicaSet) int32 {
	want := replicas(d.Spec.Replicas)
	if !isRolling(d) {
		return want
	}
	cur := replicas(newRS.Spec.Replicas)
	maxTotal := want + MaxSurge(d)
	total := specReplicas(all)
	if total >= maxTotal {
		return cur
	}
	return cur + min(maxTotal-total, want-cur)
}

// IsSaturated reports whether rs holds all of d's replicas, available,
// and knows it is to.
func IsSaturated(d *appsv1.Deployment, rs *appsv1.ReplicaSet) bool {
	if rs == nil {
		return false
	}
	desired, err := strconv.Atoi(rs.Annotations[DesiredReplicasAnnotation])
	want := replicas(d.Spec.Replicas)
	return err == nil && replicas(rs.Spec.Replicas) == want && int32(desired) == want && rs.Status.AvailableReplicas == want
}

// IsScalingEvent reports whether d's replicas changed since its active
// ReplicaSets last saw them, so that it is scaled, not rolled out.
func IsScalingEvent(d *appsv1.Deployment, newRS *appsv1.ReplicaSet, old []*appsv1.ReplicaSet) bool {
	for _, rs := range active(append(slices.Clone(old), newRS)) {
		if desired, ok := intAnnotation(rs, DesiredReplicasAnnotation); ok && desired != replicas(d.Spec.Replicas) {
			return true
		}
	}
	return false
}

// activeOrLatest returns the one active ReplicaSet of newRS and old, or,
// when none is active, newRS or else the newest old one; nil when more
// than one is active.
func activeOrLatest(newRS *appsv1.ReplicaSet, old []*appsv1.ReplicaSet) *appsv1.ReplicaSet {
	if newRS == nil && len(old) == 0 {
		return nil
	}
	sorted := slices.Clone(old)
	slices.SortStableFunc(sorted, func(a, b *appsv1.ReplicaSet) int { return byCreation(b, a) })
	switch act := active(append(sorted, newRS)); len(act) {
	case 0:
		if newRS != nil {
			return newRS
		}
		return sorted[0]
	case 1:
		return act[0]
	}
	return nil
}

// proportion returns how many replicas rs gets of toAdd (negative to
// remove) given added so far: its share by the max-replicas annotation,
// bounded by what is left.
func proportion(rs *appsv1.ReplicaSet, d *appsv1.Deployment, toAdd, added int32) int32 {
	if rs == nil || replicas(rs.Spec.Replicas) == 0 || toAdd == 0 || toAdd == added {
		return 0
	}
	frac := fraction(rs, d)
	allowed := toAdd - added
	if toAdd > 0 {
		return min(frac, allowed)
	}
	return max(frac, allowed)
}

// fraction is rs's change when its Deployment goes from the size its
// max-replicas annotation records to the current one.
func fraction(rs *appsv1.ReplicaSet, d *appsv1.Deployment) int32 {
	n := replicas(rs.Spec.Replicas)
	if replicas(d.Spec.Replicas) == 0 {
		return -n
	}
	total := replicas(d.Spec.Replicas) + MaxSurge(d)
	annotated, ok := intAnnotation(rs, MaxReplicasAnnotation)
	if !ok || annotated == 0 {
		// Without it the current size stands in: the min/max bounds in
		// proportion keep the result within limits.
		annotated = d.Status.Replicas
	}
	if annotated == 0 {
		return 0
	}
	return integer.RoundToInt32(float64(n)*float64(total)/float64(annotated)) - n
}

// ScaleStep returns what scales d when it is paused or its replicas
// changed: the one active (or latest) ReplicaSet to the full count; when
// the new one is saturated, the old ones to zero; otherwise, while a
// rolling update is under way, every active ReplicaSet in proportion to
// its size, so that a rollout goes on at the new scale. Every active
// ReplicaSet is listed in the last case, changed or not, so that its
// replicas annotations are brought up to date. No I/O.
func ScaleStep(d *appsv1.Deployment, newRS *appsv1.ReplicaSet, old []*appsv1.ReplicaSet) []Scale {
	want := replicas(d.Spec.Replicas)
	if rs := activeOrLatest(newRS, old); rs != nil {
		if replicas(rs.Spec.Replicas) == want {
			return nil
		}
		return []Scale{{rs, want}}
	}
	if IsSaturated(d, newRS) {
		var out []Scale
		for _, rs := range active(old) {
			out = append(out, Scale{rs, 0})
		}
		return out
	}
	if !isRolling(d) {
		return nil
	}
	all := active(append(slices.Clone(old), newRS))
	var allowed int32
	if want > 0 {
		allowed = want + MaxSurge(d)
	}
	toAdd := allowed - specReplicas(all)
	switch {
	case toAdd > 0:
		slices.SortStableFunc(all, bySizeNewer)
	case toAdd < 0:
		slices.SortStableFunc(all, bySizeOlder)
	}
	sizes := make([]int32, len(all))
	var added int32
	for i, rs := range all {
		sizes[i] = replicas(rs.Spec.Replicas)
		if toAdd != 0 {
			p := proportion(rs, d, toAdd, added)
			sizes[i] += p
			added += p
		}
	}
	out := make([]Scale, len(all))
	for i, rs := range all {
		if i == 0 && toAdd != 0 {
			// The rounding's leftover goes to the largest.
			sizes[i] = max(sizes[i]+toAdd-added, 0)
		}
		out[i] = Scale{rs, sizes[i]}
	}
	return out
}

// RollingStep returns the next step of d's rolling update from old to
// newRS: scale newRS up as far as maxSurge allows (or down to d's
// replicas); if that is done, scale old ReplicaSets down as far as
// maxUnavailable allows, unhealthy replicas first. Nil when neither can
// move. No I/O.
func RollingStep(d *appsv1.Deployment, newRS *appsv1.ReplicaSet, old []*appsv1.ReplicaSet) []Scale {
	want := replicas(d.Spec.Replicas)
	all := append(slices.Clone(old), newRS)
	switch cur := replicas(newRS.Spec.Replicas); {
	case cur > want:
		return []Scale{{newRS, want}}
	case cur < want:
		if n := NewReplicas(d, all, newRS); n != cur {
			return []Scale{{newRS, n}}
		}
	}
	return scaleDownOld(d, newRS, all, active(old))
}

// scaleDownOld is the old ReplicaSets' half of RollingStep.
func scaleDownOld(d *appsv1.Deployment, newRS *appsv1.ReplicaSet, all, oldActive []*appsv1.ReplicaSet) []Scale {
	if specReplicas(oldActive) == 0 {
		return nil
	}
	minAvailable := replicas(d.Spec.Replicas) - MaxUnavailable(d)
	newUnavailable := replicas(newRS.Spec.Replicas) - newRS.Status.AvailableReplicas
	maxScaledDown := specReplicas(all) - minAvailable - newUnavailable
	if maxScaledDown <= 0 {
		return nil
	}
	olds := slices.Clone(oldActive)
	slices.SortStableFunc(olds, byCreation)
	target := make([]int32, len(olds))
	for i, rs := range olds {
		target[i] = replicas(rs.Spec.Replicas)
	}
	// First the replicas that are not available anyway: scaling them down
	// costs no availability, and they would otherwise block the rollout.
	var cleaned int32
	for i, rs := range olds {
		if cleaned >= maxScaledDown {
			break
		}
		if target[i] == 0 || target[i] == rs.Status.AvailableReplicas {
			continue
		}
		n := min(maxScaledDown-cleaned, target[i]-rs.Status.AvailableReplicas)
		if n < 0 {
			// The status counts more available than wanted: it lags
			// behind a scale-down. Wait for it, as upstream does.
			return scales(olds, target)
		}
		target[i] -= n
		cleaned += n
	}
	// Then available ones, as far as minAvailable allows.
	_, _, availableCount := statusReplicas(append(slices.Clone(olds), newRS))
	if availableCount > minAvailable {
		total := availableCount - minAvailable
		var done int32
		for i := range olds {
			if done >= total {
				break
			}
			if target[i] == 0 {
				continue
			}
			n := min(target[i], total-done)
			target[i] -= n
			done += n
		}
	}
	return scales(olds, target)
}

// scales returns the Scales that set rss to their targets, those that
// change.
func scales(rss []*appsv1.ReplicaSet, target []int32) []Scale {
	var out []Scale
	for i, rs := range rss {
		if target[i] != replicas(rs.Spec.Replicas) {
			out = append(out, Scale{rs, target[i]})
		}
	}
	return out
}

// RecreateScaleDown returns the first step of a Recreate rollout: every
// old ReplicaSet to zero.
func RecreateScaleDown(old []*appsv1.ReplicaSet) []Scale {
	var out []Scale
	for _, rs := range active(old) {
		out = append(out, Scale{rs, 0})
	}
	return out
}

// OldPodsRunning reports whether a Recreate rollout must still wait
// before it starts the new pods: an old ReplicaSet reports pods, or a pod
// of one (pods maps ReplicaSet uids to their pods) has not terminated.
func OldPodsRunning(newRS *appsv1.ReplicaSet, old []*appsv1.ReplicaSet, pods map[types.UID][]*corev1.Pod) bool {
	if n, _, _ := statusReplicas(old); n > 0 {
		return true
	}
	for uid, ps := range pods {
		if newRS != nil && newRS.UID == uid {
			continue
		}
		for _, p := range ps {
			if p.Status.Phase != corev1.PodFailed && p.Status.Phase != corev1.PodSucceeded {
				return true
			}
		}
	}
	return false
}

// NewReplicaSet returns the ReplicaSet to create for d's current template
// given its old ReplicaSets: named and labelled by the template's hash
// (with d's collision count), controlled by d, at the next revision and
// with as many replicas as the strategy allows now.
func NewReplicaSet(d *appsv1.Deployment, old []*appsv1.ReplicaSet) *appsv1.ReplicaSet {
	t := d.Spec.Template.DeepCopy()
	hash := ComputeHash(t, d.Status.CollisionCount)
	t.Labels = withLabel(d.Spec.Template.Labels, appsv1.DefaultDeploymentUniqueLabelKey, hash)
	sel := d.Spec.Selector.DeepCopy()
	if sel == nil {
		sel = &metav1.LabelSelector{}
	}
	sel.MatchLabels = withLabel(sel.MatchLabels, appsv1.DefaultDeploymentUniqueLabelKey, hash)
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{
			Name:            d.Name + "-" + hash,
			Namespace:       d.Namespace,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(d, Kind)},
			Labels:          withLabel(t.Labels, "", ""),
		},
		Spec: appsv1.ReplicaSetSpec{
			Replicas:        ptr.To(int32(0)),
			MinReadySeconds: d.Spec.MinReadySeconds,
			Selector:        sel,
			Template:        *t,
		},
	}
	rs.Spec.Replicas = ptr.To(NewReplicas(d, append(slices.Clone(old), rs), rs))
	setNewReplicaSetAnnotations(d, rs, strconv.FormatInt(MaxRevision(old)+1, 10), false)
	return rs
}

// SyncNewReplicaSet returns d's existing new ReplicaSet rs as it should
// be (d's annotations, the next revision after old's, d's
// minReadySeconds) and whether that differs from rs. The caller owns the
// returned copy.
func SyncNewReplicaSet(d *appsv1.Deployment, rs *appsv1.ReplicaSet, old []*appsv1.ReplicaSet) (*appsv1.ReplicaSet, bool) {
	c := rs.DeepCopy()
	changed := setNewReplicaSetAnnotations(d, c, strconv.FormatInt(MaxRevision(old)+1, 10), true)
	if c.Spec.MinReadySeconds != d.Spec.MinReadySeconds {
		c.Spec.MinReadySeconds = d.Spec.MinReadySeconds
		changed = true
	}
	return c, changed
}

// withLabel returns a copy of m with k set to v (no change for k "").
func withLabel(m map[string]string, k, v string) map[string]string {
	out := make(map[string]string, len(m)+1)
	for a, b := range m {
		out[a] = b
	}
	if k != "" {
		out[k] = v
	}
	return out
}

// Cleanup returns the old ReplicaSets of d to delete beyond its
// revisionHistoryLimit, oldest revision first: only those scaled to zero
// with no pods left and whose controller has seen that. No I/O.
func Cleanup(d *appsv1.Deployment, old []*appsv1.ReplicaSet) []*appsv1.ReplicaSet {
	if d.Spec.RevisionHistoryLimit == nil || *d.Spec.RevisionHistoryLimit == math.MaxInt32 {
		return nil
	}
	var alive []*appsv1.ReplicaSet
	for _, rs := range old {
		if rs != nil && rs.DeletionTimestamp == nil {
			alive = append(alive, rs)
		}
	}
	diff := len(alive) - int(*d.Spec.RevisionHistoryLimit)
	if diff <= 0 {
		return nil
	}
	slices.SortStableFunc(alive, byRevision)
	var out []*appsv1.ReplicaSet
	for _, rs := range alive[:diff] {
		if rs.Status.Replicas != 0 || replicas(rs.Spec.Replicas) != 0 || rs.Generation > rs.Status.ObservedGeneration {
			continue
		}
		out = append(out, rs)
	}
	return out
}

// selectsAll reports whether s is the empty selector, which would select
// every pod of the namespace: such a Deployment is left alone.
func selectsAll(s *metav1.LabelSelector) bool {
	return s != nil && len(s.MatchLabels) == 0 && len(s.MatchExpressions) == 0
}

// selector returns d's selector, or an error for one the API would refuse.
func selector(d *appsv1.Deployment) (labels.Selector, error) {
	return metav1.LabelSelectorAsSelector(d.Spec.Selector)
}
