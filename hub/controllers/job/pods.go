package job

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

func hasTrackingFinalizer(p *corev1.Pod) bool {
	return slices.Contains(p.Finalizers, batchv1.JobTrackingFinalizer)
}

func isTerminal(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// isActive reports whether p runs or may still run: neither terminal nor
// being deleted.
func isActive(p *corev1.Pod) bool { return !isTerminal(p) && p.DeletionTimestamp == nil }

// isTerminating reports whether p is being deleted but has not finished.
func isTerminating(p *corev1.Pod) bool { return p.DeletionTimestamp != nil && !isTerminal(p) }

func isReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// onlyReplaceFailedPods reports whether a pod is replaced only once it is
// Failed, not already while it terminates: podReplacementPolicy Failed,
// which a pod failure policy implies.
func onlyReplaceFailedPods(j *batchv1.Job) bool {
	if p := j.Spec.PodReplacementPolicy; p != nil && *p == batchv1.Failed {
		return true
	}
	return j.Spec.PodFailurePolicy != nil
}

// isFailed reports whether p counts as a failed pod of j: Failed, or
// deleted before it finished unless only failed pods are replaced (then it
// counts once it reaches Failed).
func isFailed(p *corev1.Pod, j *batchv1.Job) bool {
	if p.Status.Phase == corev1.PodFailed {
		return true
	}
	if onlyReplaceFailedPods(j) {
		return false
	}
	return p.DeletionTimestamp != nil && p.Status.Phase != corev1.PodSucceeded
}

// phaseRank orders phases as upstream's deletion preference does:
// the earlier, the sooner deleted.
func phaseRank(p corev1.PodPhase) int {
	switch p {
	case corev1.PodPending:
		return 0
	case corev1.PodUnknown:
		return 1
	case corev1.PodRunning:
		return 2
	}
	return 3
}

func readySince(p *corev1.Pod) time.Time {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}

func restarts(p *corev1.Pod) int32 {
	var n int32
	for _, c := range p.Status.ContainerStatuses {
		n = max(n, c.RestartCount)
	}
	return n
}

// sortForRemoval sorts active pods so that those to delete first come
// first, as upstream's controller.ActivePods: unscheduled before
// scheduled, pending before running, not ready before ready, ready for
// less time before longer, more restarts before fewer, newer before older.
func sortForRemoval(pods []*corev1.Pod) {
	sort.SliceStable(pods, func(i, j int) bool {
		a, b := pods[i], pods[j]
		if (a.Spec.NodeName == "") != (b.Spec.NodeName == "") {
			return a.Spec.NodeName == ""
		}
		if ra, rb := phaseRank(a.Status.Phase), phaseRank(b.Status.Phase); ra != rb {
			return ra < rb
		}
		if isReady(a) != isReady(b) {
			return !isReady(a)
		}
		if isReady(a) {
			if ta, tb := readySince(a), readySince(b); !ta.Equal(tb) {
				return ta.After(tb)
			}
		}
		if ra, rb := restarts(a), restarts(b); ra != rb {
			return ra > rb
		}
		if ta, tb := a.CreationTimestamp, b.CreationTimestamp; !ta.Equal(&tb) {
			return ta.After(tb.Time)
		}
		return a.Name < b.Name
	})
}

// podsForRemoval returns at least rmAtLeast of the active pods to delete,
// plus, for an indexed job, those whose index is missing, out of range or
// duplicated. active is not modified.
func podsForRemoval(j *batchv1.Job, active []*corev1.Pod, rmAtLeast int) []*corev1.Pod {
	var rm, left []*corev1.Pod
	if isIndexed(j) {
		rm, left = duplicateIndexPods(active, *j.Spec.Completions)
	} else {
		left = slices.Clone(active)
	}
	if len(rm) < rmAtLeast {
		sortForRemoval(left)
		rm = append(rm, left[:min(rmAtLeast-len(rm), len(left))]...)
	}
	return rm
}

// finishedAt is when p finished, as upstream's back-off reckons it: the
// last container termination, else when it stopped being ready, else its
// deletion less its grace period, else its creation.
func finishedAt(p *corev1.Pod) time.Time {
	var last time.Time
	for _, cs := range [][]corev1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses} {
		for _, c := range cs {
			if t := c.State.Terminated; t != nil && t.FinishedAt.After(last) {
				last = t.FinishedAt.Time
			}
		}
	}
	if !last.IsZero() {
		return last
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionFalse && !c.LastTransitionTime.IsZero() {
			return c.LastTransitionTime.Time
		}
	}
	if d := p.DeletionTimestamp; d != nil {
		grace := time.Duration(0)
		if p.DeletionGracePeriodSeconds != nil {
			grace = time.Duration(*p.DeletionGracePeriodSeconds) * time.Second
		}
		return d.Add(-grace)
	}
	return p.CreationTimestamp.Time
}

func sortByFinished(pods []*corev1.Pod) {
	sort.SliceStable(pods, func(i, j int) bool { return finishedAt(pods[i]).Before(finishedAt(pods[j])) })
}

// Labels and annotations the controller puts on the pods of indexed jobs
// (all upstream's).
const (
	indexAnnotation = batchv1.JobCompletionIndexAnnotation
	indexLabel      = batchv1.JobCompletionIndexAnnotation // label and annotation share the key
)

// newPod returns the pod to create for j, the index-th of an indexed job
// or any of a non-indexed one (index noIndex), with the tracking
// finalizer and j as its controller. failures and ignored are, for jobs
// with a back-off limit per index, the index's counts so far.
func newPod(j *batchv1.Job, index int, failures, ignored int32) *corev1.Pod {
	t := &j.Spec.Template
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:       j.Namespace,
			GenerateName:    j.Name + "-",
			Labels:          maps.Clone(t.Labels),
			Annotations:     maps.Clone(t.Annotations),
			Finalizers:      slices.Clone(t.Finalizers),
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(j, batchv1.SchemeGroupVersion.WithKind("Job"))},
		},
		Spec: *t.Spec.DeepCopy(),
	}
	if !slices.Contains(p.Finalizers, batchv1.JobTrackingFinalizer) {
		p.Finalizers = append(p.Finalizers, batchv1.JobTrackingFinalizer)
	}
	if index != noIndex {
		ix := fmt.Sprint(index)
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		if p.Labels == nil {
			p.Labels = map[string]string{}
		}
		p.Annotations[indexAnnotation] = ix
		p.Labels[indexLabel] = ix
		p.Spec.Hostname = j.Name + "-" + ix
		p.GenerateName = generateNameWithIndex(j.Name, index)
		if j.Spec.BackoffLimitPerIndex != nil {
			p.Annotations[batchv1.JobIndexFailureCountAnnotation] = fmt.Sprint(failures)
			if ignored > 0 {
				p.Annotations[batchv1.JobIndexIgnoredFailureCountAnnotation] = fmt.Sprint(ignored)
			}
		}
	}
	return p
}

// generateNameWithIndex is "<job>-<index>-", the job's name cut so that
// the pod's name, with the five characters the API adds, is a DNS label.
func generateNameWithIndex(job string, index int) string {
	suffix := fmt.Sprintf("-%d-", index)
	if over := len(job) + len(suffix) + 5 - validation.DNS1123LabelMaxLength; over > 0 {
		job = job[:max(len(job)-over, 0)]
	}
	return job + suffix
}
