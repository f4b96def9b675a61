package replicaset

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
)

// DeletionCostAnnotation is the pod annotation (an int32) that ranks pods
// for deletion among otherwise equal ones: lower cost goes first.
const DeletionCostAnnotation = "controller.kubernetes.io/pod-deletion-cost"

// IsActive reports whether p counts towards its controller's replicas: it
// has not terminated and is not being deleted.
func IsActive(p *corev1.Pod) bool {
	return p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed && p.DeletionTimestamp == nil
}

// IsTerminating reports whether p is being deleted but may still run.
func IsTerminating(p *corev1.Pod) bool {
	return p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed && p.DeletionTimestamp != nil
}

// readyCondition returns p's Ready condition, or nil.
func readyCondition(p *corev1.Pod) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == corev1.PodReady {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// IsReady reports whether p's Ready condition is True.
func IsReady(p *corev1.Pod) bool {
	c := readyCondition(p)
	return c != nil && c.Status == corev1.ConditionTrue
}

// IsAvailable reports whether p has been ready for at least minReady
// seconds at now, as upstream's podutil.IsPodAvailable.
func IsAvailable(p *corev1.Pod, minReady int32, now time.Time) bool {
	c := readyCondition(p)
	if c == nil || c.Status != corev1.ConditionTrue {
		return false
	}
	if minReady == 0 {
		return true
	}
	d := time.Duration(minReady) * time.Second
	return !c.LastTransitionTime.IsZero() && c.LastTransitionTime.Add(d).Before(now)
}

// untilAvailable returns how long after now the ready but not yet
// available pod p becomes available, false if it is not such a pod.
func untilAvailable(p *corev1.Pod, minReady int32, now time.Time) (time.Duration, bool) {
	if minReady == 0 || !IsReady(p) || IsAvailable(p, minReady, now) {
		return 0, false
	}
	c := readyCondition(p)
	if c.LastTransitionTime.IsZero() {
		return 0, false // never available: only a new transition can change that
	}
	return c.LastTransitionTime.Add(time.Duration(minReady) * time.Second).Sub(now), true
}

// PodPrefix is the generateName of a controller's pods: "NAME-", or NAME
// alone when that would not make a valid pod name.
func PodPrefix(controllerName string) string {
	prefix := controllerName + "-"
	if len(validation.IsDNS1123Subdomain(prefix+"x")) != 0 {
		return controllerName
	}
	return prefix
}

// PodFromTemplate returns the pod that ReplicaSet rs creates from its
// template: its labels, annotations and finalizers, generateName "RS-",
// and rs, of kind (ReplicaSet, or the ReplicationController rs is the
// view of), as controller (blockOwnerDeletion set). The caller owns the pod,
// which shares nothing with rs.
func PodFromTemplate(rs *appsv1.ReplicaSet, kind schema.GroupVersionKind) (*corev1.Pod, error) {
	t := rs.Spec.Template.DeepCopy()
	if len(t.Labels) == 0 {
		return nil, fmt.Errorf("unable to create pods, no labels")
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName:    PodPrefix(rs.Name),
			Namespace:       rs.Namespace,
			Labels:          t.Labels,
			Annotations:     t.Annotations,
			Finalizers:      t.Finalizers,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(rs, kind)},
		},
		Spec: t.Spec,
	}, nil
}

// phaseOrder ranks phases for deletion: pending pods go before unknown
// ones, which go before running ones.
var phaseOrder = map[corev1.PodPhase]int{corev1.PodPending: 0, corev1.PodUnknown: 1, corev1.PodRunning: 2}

// rankedPods sorts pods so that those to delete first come first, as
// upstream's controller.ActivePodsWithRanks (with pod deletion cost and
// logarithmic scale-down, both on by default upstream).
type rankedPods struct {
	pods []*corev1.Pod
	rank []int // per pod: active related pods on its node; more goes first
	now  time.Time
}

func (s rankedPods) Len() int { return len(s.pods) }

func (s rankedPods) Swap(i, j int) {
	s.pods[i], s.pods[j] = s.pods[j], s.pods[i]
	s.rank[i], s.rank[j] = s.rank[j], s.rank[i]
}

func (s rankedPods) Less(i, j int) bool {
	a, b := s.pods[i], s.pods[j]
	// 1. Unscheduled before scheduled.
	if a.Spec.NodeName != b.Spec.NodeName && (a.Spec.NodeName == "" || b.Spec.NodeName == "") {
		return a.Spec.NodeName == ""
	}
	// 2. Pending before unknown before running.
	if pa, pb := phaseOrder[a.Status.Phase], phaseOrder[b.Status.Phase]; pa != pb {
		return pa < pb
	}
	// 3. Not ready before ready.
	if ra, rb := IsReady(a), IsReady(b); ra != rb {
		return !ra
	}
	// 4. Lower deletion cost before higher.
	if ca, cb := deletionCost(a), deletionCost(b); ca != cb {
		return ca < cb
	}
	// 5. Doubled up on a node before alone.
	if s.rank[i] != s.rank[j] {
		return s.rank[i] > s.rank[j]
	}
	// 6. Ready for less time before more, in logarithmic buckets.
	if IsReady(a) && IsReady(b) {
		ta, tb := readyTime(a), readyTime(b)
		if !ta.Equal(tb) {
			if d, ok := s.newer(ta, tb, a, b); ok {
				return d
			}
		}
	}
	// 7. More container restarts before fewer.
	if ra, rb := maxRestarts(a, false), maxRestarts(b, false); ra != rb {
		return ra > rb
	}
	if ra, rb := maxRestarts(a, true), maxRestarts(b, true); ra != rb {
		return ra > rb
	}
	// 8. Newer before older, in logarithmic buckets.
	ta, tb := a.CreationTimestamp.Time, b.CreationTimestamp.Time
	if !ta.Equal(tb) {
		if d, ok := s.newer(ta, tb, a, b); ok {
			return d
		}
	}
	return false
}

// newer reports whether time ta of pod a is to go before tb of pod b:
// a zero time first, then the later, compared by the base-2 logarithm of
// their age at s.now, so that pods of about the same age are taken in a
// random but stable order (by uid) rather than strictly newest first.
func (s rankedPods) newer(ta, tb time.Time, a, b *corev1.Pod) (less, decided bool) {
	if s.now.IsZero() || ta.IsZero() || tb.IsZero() {
		return afterOrZero(ta, tb), true
	}
	switch d := logRank(ta, s.now) - logRank(tb, s.now); {
	case d < 0:
		return true, true
	case d > 0:
		return false, true
	default:
		return a.UID < b.UID, true
	}
}

// logRank is the base-2 logarithm of the age of t at now, -1 for no age.
func logRank(t, now time.Time) int64 {
	if d := now.Sub(t); d > 0 {
		return int64(math.Log2(float64(d)))
	}
	return -1
}

// afterOrZero reports whether a is zero (and b not) or after b.
func afterOrZero(a, b time.Time) bool {
	if a.IsZero() || b.IsZero() {
		return a.IsZero()
	}
	return a.After(b)
}

func readyTime(p *corev1.Pod) time.Time {
	if c := readyCondition(p); c != nil && c.Status == corev1.ConditionTrue {
		return c.LastTransitionTime.Time
	}
	return time.Time{}
}

func deletionCost(p *corev1.Pod) int32 {
	v, ok := p.Annotations[DeletionCostAnnotation]
	if !ok {
		return 0
	}
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil {
		return 0 // validation refuses it; treat as the default
	}
	return int32(n)
}

// maxRestarts returns the most restarts of p's regular containers, or,
// with sidecars, of its restartable init containers.
func maxRestarts(p *corev1.Pod, sidecars bool) int32 {
	var n int32
	if !sidecars {
		for _, c := range p.Status.ContainerStatuses {
			n = max(n, c.RestartCount)
		}
		return n
	}
	always := map[string]bool{}
	for _, c := range p.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			always[c.Name] = true
		}
	}
	for _, c := range p.Status.InitContainerStatuses {
		if always[c.Name] {
			n = max(n, c.RestartCount)
		}
	}
	return n
}

// PodsToDelete returns the n of pods to delete first, in that order: the
// unscheduled, then pending, then not ready, then those of lower deletion
// cost, then those sharing a node with more of related (the active pods
// of all replica sets of the same controller, such as a Deployment's),
// then those ready for less time, restarted more, and newer. No I/O; pods
// is reordered.
func PodsToDelete(pods, related []*corev1.Pod, n int, now time.Time) []*corev1.Pod {
	if n >= len(pods) {
		return pods
	}
	onNode := map[string]int{}
	for _, p := range related {
		if IsActive(p) {
			onNode[p.Spec.NodeName]++
		}
	}
	r := rankedPods{pods: pods, rank: make([]int, len(pods)), now: now}
	for i, p := range pods {
		r.rank[i] = onNode[p.Spec.NodeName]
	}
	sort.Sort(r)
	return pods[:n]
}

// Selects reports whether selector s selects obj's labels.
func Selects(s labels.Selector, obj metav1.Object) bool {
	return s.Matches(labels.Set(obj.GetLabels()))
}
