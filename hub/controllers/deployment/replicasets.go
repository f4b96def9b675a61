package deployment

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/dump"
	"k8s.io/utils/ptr"
)

// What a Deployment records on its ReplicaSets, as upstream's annotations.
const (
	// RevisionAnnotation is a ReplicaSet's place in its Deployment's
	// rollouts (and the Deployment's current one); kubectl rollout
	// history and undo read it.
	RevisionAnnotation = "deployment.kubernetes.io/revision"
	// RevisionHistoryAnnotation lists the earlier revisions a ReplicaSet
	// served, when a rollback made it new again.
	RevisionHistoryAnnotation = "deployment.kubernetes.io/revision-history"
	// DesiredReplicasAnnotation is the Deployment's spec.replicas as the
	// ReplicaSet last saw it: it tells scaling from rolling out.
	DesiredReplicasAnnotation = "deployment.kubernetes.io/desired-replicas"
	// MaxReplicasAnnotation is spec.replicas + maxSurge as the ReplicaSet
	// last saw it, which proportional scaling divides by.
	MaxReplicasAnnotation = "deployment.kubernetes.io/max-replicas"
	// maxRevisionHistoryChars bounds RevisionHistoryAnnotation.
	maxRevisionHistoryChars = 2000
)

// notCopied are the Deployment annotations not copied to its ReplicaSets.
var notCopied = map[string]bool{
	corev1.LastAppliedConfigAnnotation: true,
	RevisionAnnotation:                 true,
	RevisionHistoryAnnotation:          true,
	DesiredReplicasAnnotation:          true,
	MaxReplicasAnnotation:              true,
	appsv1.DeprecatedRollbackTo:        true,
}

// ComputeHash returns the pod-template-hash of template, as upstream's
// controller.ComputeHash: FNV-32a over the template's dump, then the
// collision count when set, in the safe alphabet.
func ComputeHash(template *corev1.PodTemplateSpec, collisionCount *int32) string {
	h := fnv.New32a()
	fmt.Fprintf(h, "%v", dump.ForHash(*template))
	if collisionCount != nil {
		b := make([]byte, 8)
		binary.LittleEndian.PutUint32(b, uint32(*collisionCount))
		h.Write(b)
	}
	return rand.SafeEncodeString(fmt.Sprint(h.Sum32()))
}

// Revision returns rs's revision, 0 when it has none.
func Revision(rs *appsv1.ReplicaSet) (int64, error) {
	v, ok := rs.Annotations[RevisionAnnotation]
	if !ok {
		return 0, nil
	}
	return strconv.ParseInt(v, 10, 64)
}

// MaxRevision returns the highest revision of rss, skipping unparsable ones.
func MaxRevision(rss []*appsv1.ReplicaSet) int64 {
	var m int64
	for _, rs := range rss {
		if v, err := Revision(rs); err == nil && v > m {
			m = v
		}
	}
	return m
}

// EqualIgnoreHash reports whether two pod templates are semantically the
// same but for their pod-template-hash label (Semantic.DeepEqual: an
// empty map is a nil one).
func EqualIgnoreHash(a, b *corev1.PodTemplateSpec) bool {
	a, b = a.DeepCopy(), b.DeepCopy()
	delete(a.Labels, appsv1.DefaultDeploymentUniqueLabelKey)
	delete(b.Labels, appsv1.DefaultDeploymentUniqueLabelKey)
	return equality.Semantic.DeepEqual(a, b)
}

// byCreation orders ReplicaSets oldest first, then by name.
func byCreation(a, b *appsv1.ReplicaSet) int {
	if a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return strings.Compare(a.Name, b.Name)
	}
	if a.CreationTimestamp.Before(&b.CreationTimestamp) {
		return -1
	}
	return 1
}

// bySizeOlder orders larger ReplicaSets first, older first among equals.
func bySizeOlder(a, b *appsv1.ReplicaSet) int {
	if r := replicas(b.Spec.Replicas) - replicas(a.Spec.Replicas); r != 0 {
		return int(r)
	}
	return byCreation(a, b)
}

// bySizeNewer orders larger ReplicaSets first, newer first among equals.
func bySizeNewer(a, b *appsv1.ReplicaSet) int {
	if r := replicas(b.Spec.Replicas) - replicas(a.Spec.Replicas); r != 0 {
		return int(r)
	}
	if a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return strings.Compare(a.Name, b.Name)
	}
	if b.CreationTimestamp.Before(&a.CreationTimestamp) {
		return -1
	}
	return 1
}

// byRevision orders ReplicaSets by revision, by creation when revisions
// are equal or unparsable.
func byRevision(a, b *appsv1.ReplicaSet) int {
	ra, ea := Revision(a)
	rb, eb := Revision(b)
	if ea != nil || eb != nil || ra == rb {
		return byCreation(a, b)
	}
	if ra < rb {
		return -1
	}
	return 1
}

// FindNew returns d's new ReplicaSet among rss: the oldest one whose
// template is d's, or nil.
func FindNew(d *appsv1.Deployment, rss []*appsv1.ReplicaSet) *appsv1.ReplicaSet {
	sorted := slices.Clone(rss)
	slices.SortStableFunc(sorted, byCreation)
	for _, rs := range sorted {
		if EqualIgnoreHash(&rs.Spec.Template, &d.Spec.Template) {
			return rs
		}
	}
	return nil
}

// FindOld returns the ReplicaSets of rss other than d's new one.
func FindOld(d *appsv1.Deployment, rss []*appsv1.ReplicaSet) []*appsv1.ReplicaSet {
	n := FindNew(d, rss)
	var old []*appsv1.ReplicaSet
	for _, rs := range rss {
		if n == nil || rs.UID != n.UID {
			old = append(old, rs)
		}
	}
	return old
}

// active returns the ReplicaSets of rss that want pods; nil ones are
// skipped.
func active(rss []*appsv1.ReplicaSet) []*appsv1.ReplicaSet {
	var out []*appsv1.ReplicaSet
	for _, rs := range rss {
		if rs != nil && replicas(rs.Spec.Replicas) > 0 {
			out = append(out, rs)
		}
	}
	return out
}

// The sums of ReplicaSet counts, nil ones skipped.

func specReplicas(rss []*appsv1.ReplicaSet) int32 {
	var n int32
	for _, rs := range rss {
		if rs != nil {
			n += replicas(rs.Spec.Replicas)
		}
	}
	return n
}

func statusReplicas(rss []*appsv1.ReplicaSet) (total, ready, available int32) {
	for _, rs := range rss {
		if rs != nil {
			total += rs.Status.Replicas
			ready += rs.Status.ReadyReplicas
			available += rs.Status.AvailableReplicas
		}
	}
	return
}

// terminatingReplicas sums the ReplicaSets' terminating pods, nil if one
// does not report them.
func terminatingReplicas(rss []*appsv1.ReplicaSet) *int32 {
	var n int32
	for _, rs := range rss {
		switch {
		case rs == nil:
		case rs.Status.TerminatingReplicas == nil:
			return nil
		default:
			n += *rs.Status.TerminatingReplicas
		}
	}
	return &n
}

// replicas is a spec.replicas, 1 when unset as the API defaults it.
func replicas(n *int32) int32 { return ptr.Deref(n, 1) }

// intAnnotation reads an int32 annotation of rs.
func intAnnotation(rs *appsv1.ReplicaSet, key string) (int32, bool) {
	v, ok := rs.Annotations[key]
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil {
		return 0, false
	}
	return int32(n), true
}

// setReplicasAnnotations sets rs's desired and max replicas annotations
// and reports whether they changed.
func setReplicasAnnotations(rs *appsv1.ReplicaSet, desired, maxReplicas int32) bool {
	if rs.Annotations == nil {
		rs.Annotations = map[string]string{}
	}
	changed := false
	for k, v := range map[string]int32{DesiredReplicasAnnotation: desired, MaxReplicasAnnotation: maxReplicas} {
		if s := strconv.Itoa(int(v)); rs.Annotations[k] != s {
			rs.Annotations[k] = s
			changed = true
		}
	}
	return changed
}

// replicasAnnotationsNeedUpdate reports whether setReplicasAnnotations
// would change rs.
func replicasAnnotationsNeedUpdate(rs *appsv1.ReplicaSet, desired, maxReplicas int32) bool {
	return rs.Annotations[DesiredReplicasAnnotation] != strconv.Itoa(int(desired)) ||
		rs.Annotations[MaxReplicasAnnotation] != strconv.Itoa(int(maxReplicas))
}

// setNewReplicaSetAnnotations makes rs carry d's annotations (but those
// of notCopied), revision newRevision unless it has a higher one, with the
// revision it leaves appended to its revision history (a rollback), and,
// for a ReplicaSet about to be created (!exists), the replicas
// annotations. It reports whether rs changed.
func setNewReplicaSetAnnotations(d *appsv1.Deployment, rs *appsv1.ReplicaSet, newRevision string, exists bool) bool {
	changed := false
	if rs.Annotations == nil {
		rs.Annotations = map[string]string{}
	}
	for k, v := range d.Annotations {
		if notCopied[k] || rs.Annotations[k] == v {
			continue
		}
		rs.Annotations[k] = v
		changed = true
	}
	oldRevision, had := rs.Annotations[RevisionAnnotation]
	oldN, err := strconv.ParseInt(oldRevision, 10, 64)
	if err != nil {
		if oldRevision != "" {
			return false // not ours to renumber
		}
		oldN = 0
	}
	newN, err := strconv.ParseInt(newRevision, 10, 64)
	if err != nil {
		return false
	}
	if oldN < newN {
		rs.Annotations[RevisionAnnotation] = newRevision
		changed = true
		if had {
			rs.Annotations[RevisionHistoryAnnotation] = appendHistory(rs.Annotations[RevisionHistoryAnnotation], oldRevision)
		}
	}
	if !exists && setReplicasAnnotations(rs, replicas(d.Spec.Replicas), replicas(d.Spec.Replicas)+MaxSurge(d)) {
		changed = true
	}
	return changed
}

// appendHistory appends rev to the comma-separated history, dropping the
// oldest entries to stay within maxRevisionHistoryChars.
func appendHistory(history, rev string) string {
	if history == "" {
		return rev
	}
	old := strings.Split(history, ",")
	total := len(history) + len(rev) + 1
	start := 0
	for total > maxRevisionHistoryChars && start < len(old) {
		total -= len(old[start]) + 1
		start++
	}
	if total > maxRevisionHistoryChars {
		return history
	}
	return strings.Join(append(old[start:], rev), ",")
}
