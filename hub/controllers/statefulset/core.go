package statefulset

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// This file is the controller's decision core: which pod of a set to
// create, delete or fix next, and what status to report. It does no I/O;
// time is passed in.

// controllerKind is the kind of the owner references the controller sets.
var controllerKind = appsv1.SchemeGroupVersion.WithKind("StatefulSet")

// Ordinal returns the ordinal in pod's name if pod is a pod of the set
// named set ("db-2" of "db" is 2), else -1.
func Ordinal(set string, pod *corev1.Pod) int {
	rest, ok := strings.CutPrefix(pod.Name, set+"-")
	if !ok || rest == "" || (len(rest) > 1 && rest[0] == '0') {
		return -1
	}
	n, err := strconv.Atoi(rest)
	if err != nil || n < 0 || strconv.Itoa(n) != rest {
		return -1
	}
	return n
}

// PodName returns the name of the pod of set at ordinal.
func PodName(set *appsv1.StatefulSet, ordinal int) string {
	return fmt.Sprintf("%s-%d", set.Name, ordinal)
}

func startOrdinal(set *appsv1.StatefulSet) int {
	if set.Spec.Ordinals != nil {
		return int(set.Spec.Ordinals.Start)
	}
	return 0
}

func replicas(set *appsv1.StatefulSet) int {
	if set.Spec.Replicas == nil {
		return 1
	}
	return int(*set.Spec.Replicas)
}

// Revision is one revision of a set: its ControllerRevision's name, and
// the set with that revision's template.
type Revision struct {
	Name string
	Set  *appsv1.StatefulSet
}

// ApplyRevision returns a copy of set with the template that data (a
// revision's, as history.TemplatePatch makes it) holds.
func ApplyRevision(set *appsv1.StatefulSet, data []byte) (*appsv1.StatefulSet, error) {
	var patch struct {
		Spec struct {
			Template *corev1.PodTemplateSpec `json:"template"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(data, &patch); err != nil {
		return nil, fmt.Errorf("decode revision: %w", err)
	}
	if patch.Spec.Template == nil {
		return nil, fmt.Errorf("decode revision: no spec.template")
	}
	out := set.DeepCopy()
	out.Spec.Template = *patch.Spec.Template
	return out, nil
}

// NewPod returns the pod of rev at ordinal: the revision's template, the
// stable name and its labels, hostname and subdomain, the revision label
// and a controller reference to the set.
func NewPod(rev Revision, ordinal int) *corev1.Pod {
	set := rev.Set
	t := set.Spec.Template.DeepCopy()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:            PodName(set, ordinal),
			Namespace:       set.Namespace,
			Labels:          t.Labels,
			Annotations:     t.Annotations,
			Finalizers:      t.Finalizers,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(set, controllerKind)},
		},
		Spec: t.Spec,
	}
	fixIdentity(set, pod, ordinal)
	pod.Spec.Hostname = pod.Name
	pod.Spec.Subdomain = set.Spec.ServiceName
	pod.Labels[appsv1.StatefulSetRevisionLabel] = rev.Name
	return pod
}

// fixIdentity gives pod the identity labels of ordinal in set.
func fixIdentity(set *appsv1.StatefulSet, pod *corev1.Pod, ordinal int) {
	pod.Name = PodName(set, ordinal)
	pod.Namespace = set.Namespace
	if pod.Labels == nil {
		pod.Labels = make(map[string]string)
	}
	pod.Labels[appsv1.StatefulSetPodNameLabel] = pod.Name
	pod.Labels[appsv1.PodIndexLabel] = strconv.Itoa(ordinal)
}

// identityMatches reports whether pod has the identity of its ordinal.
func identityMatches(set *appsv1.StatefulSet, pod *corev1.Pod) bool {
	ord := Ordinal(set.Name, pod)
	return ord >= 0 && pod.Namespace == set.Namespace &&
		pod.Labels[appsv1.StatefulSetPodNameLabel] == pod.Name &&
		pod.Labels[appsv1.PodIndexLabel] == strconv.Itoa(ord)
}

// WithIdentity returns a copy of pod with the identity of its ordinal.
func WithIdentity(set *appsv1.StatefulSet, pod *corev1.Pod) *corev1.Pod {
	out := pod.DeepCopy()
	fixIdentity(set, out, Ordinal(set.Name, pod))
	return out
}

func revisionOf(pod *corev1.Pod) string { return pod.Labels[appsv1.StatefulSetRevisionLabel] }

func terminating(pod *corev1.Pod) bool { return pod.DeletionTimestamp != nil }

func finished(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded
}

func readySince(pod *corev1.Pod) *metav1.Time {
	for i := range pod.Status.Conditions {
		if c := &pod.Status.Conditions[i]; c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return &c.LastTransitionTime
		}
	}
	return nil
}

// RunningAndReady reports whether pod is Running with its Ready
// condition True.
func RunningAndReady(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodRunning && readySince(pod) != nil
}

// RunningAndAvailable reports whether pod is Running and has been Ready
// for minReady seconds at now.
func RunningAndAvailable(pod *corev1.Pod, minReady int32, now time.Time) bool {
	if !RunningAndReady(pod) {
		return false
	}
	if minReady == 0 {
		return true
	}
	since := readySince(pod)
	return !since.IsZero() && !since.Add(time.Duration(minReady)*time.Second).After(now)
}

func healthy(pod *corev1.Pod, minReady int32, now time.Time) bool {
	return RunningAndAvailable(pod, minReady, now) && !terminating(pod)
}

// Verb is what an Action does.
type Verb string

// The verbs of actions.
const (
	Create Verb = "Create" // create Pod (made by NewPod)
	Delete Verb = "Delete" // delete Pod
	Fix    Verb = "Update" // update Pod to the identity of its ordinal
)

// Action is one step of a plan. Pod is the Input's, except for Create.
type Action struct {
	Verb Verb
	Pod  *corev1.Pod
}

func (a Action) String() string { return string(a.Verb) + " " + a.Pod.Name }

// Input is what the core decides from. The core does not modify it.
type Input struct {
	Set              *appsv1.StatefulSet
	Current, Updated Revision
	// Pods are the set's pods (of its name and ordinals), terminating
	// ones included.
	Pods []*corev1.Pod
	Now  time.Time
}

// Plan returns the next steps for the set and its status counters and
// revisions, as upstream's StatefulSet control decides them. Steps are
// to be taken in order, stopping at the first that fails. OrderedReady
// takes one step at a time: pods are created from the lowest ordinal up,
// each once the one before is Running and Ready (and available for
// minReadySeconds); removed from the highest down, each once the others
// are; Parallel creates and removes all at once. RollingUpdate then
// deletes the highest ordinal at or above the partition that is not of
// the update revision, once all above it are healthy, and the next sync
// recreates it; OnDelete waits for the user to delete pods.
func Plan(in Input) ([]Action, appsv1.StatefulSetStatus) {
	set := in.Set
	minReady := set.Spec.MinReadySeconds
	status := countStatus(in)

	start, n := startOrdinal(set), replicas(set)
	slots := make([]*corev1.Pod, n)
	var condemned []*corev1.Pod
	for _, pod := range in.Pods {
		ord := Ordinal(set.Name, pod)
		switch {
		case ord < 0:
		case ord >= start && ord < start+n:
			slots[ord-start] = pod // names are unique: one pod per ordinal
		default:
			condemned = append(condemned, pod)
		}
	}
	slices.SortFunc(condemned, func(a, b *corev1.Pod) int { return Ordinal(set.Name, b) - Ordinal(set.Name, a) })

	if set.DeletionTimestamp != nil {
		return nil, status
	}
	monotonic := set.Spec.PodManagementPolicy != appsv1.ParallelPodManagement

	// The first unhealthy pod: of the replicas from the lowest ordinal, or
	// else of the condemned from the lowest; it alone may be removed
	// while unhealthy.
	var firstUnhealthy *corev1.Pod
	for _, pod := range slots {
		if pod != nil && !healthy(pod, minReady, in.Now) {
			firstUnhealthy = pod
			break
		}
	}
	if firstUnhealthy == nil {
		for i := len(condemned) - 1; i >= 0; i-- {
			if !healthy(condemned[i], minReady, in.Now) {
				firstUnhealthy = condemned[i]
				break
			}
		}
	}

	var acts []Action
	for i, pod := range slots {
		ord := start + i
		if pod == nil {
			acts = append(acts, Action{Create, newVersioned(in, ord)})
			if monotonic {
				return acts, status
			}
			continue
		}
		if finished(pod) {
			// Replaced: deleted now, recreated once it is gone.
			if !terminating(pod) {
				acts = append(acts, Action{Delete, pod})
			}
			if monotonic {
				return acts, status
			}
			continue
		}
		if monotonic && (terminating(pod) || !RunningAndAvailable(pod, minReady, in.Now)) {
			return acts, status
		}
		if !identityMatches(set, pod) {
			acts = append(acts, Action{Fix, pod})
		}
	}

	for _, pod := range condemned {
		if terminating(pod) {
			if monotonic {
				return acts, status
			}
			continue
		}
		if monotonic && pod != firstUnhealthy && !RunningAndAvailable(pod, minReady, in.Now) {
			return acts, status
		}
		acts = append(acts, Action{Delete, pod})
		if monotonic {
			return acts, status
		}
	}
	if set.Spec.UpdateStrategy.Type == appsv1.OnDeleteStatefulSetStrategyType {
		return acts, status
	}
	partition := 0
	if u := set.Spec.UpdateStrategy.RollingUpdate; u != nil && u.Partition != nil {
		partition = int(*u.Partition)
	}
	for i := len(slots) - 1; i >= partition; i-- {
		pod := slots[i]
		if pod == nil {
			return acts, status
		}
		if revisionOf(pod) != in.Updated.Name && !terminating(pod) {
			acts = append(acts, Action{Delete, pod})
			return acts, status
		}
		if !healthy(pod, minReady, in.Now) {
			return acts, status
		}
	}
	return acts, status
}

// newVersioned returns the pod for ordinal: of the current revision
// below the partition of a RollingUpdate, else of the update revision.
func newVersioned(in Input, ordinal int) *corev1.Pod {
	set := in.Set
	if u := set.Spec.UpdateStrategy; u.Type == appsv1.RollingUpdateStatefulSetStrategyType {
		partition := 0
		if u.RollingUpdate != nil && u.RollingUpdate.Partition != nil {
			partition = int(*u.RollingUpdate.Partition)
		}
		if ordinal < startOrdinal(set)+partition {
			return NewPod(in.Current, ordinal)
		}
	}
	return NewPod(in.Updated, ordinal)
}

// countStatus returns the set's status counters and revisions from its
// pods, as upstream counts them, with the rolling update completed (the
// current revision becomes the update revision) once every pod is
// updated and ready.
func countStatus(in Input) appsv1.StatefulSetStatus {
	s := appsv1.StatefulSetStatus{
		ObservedGeneration: in.Set.Generation,
		CurrentRevision:    in.Current.Name,
		UpdateRevision:     in.Updated.Name,
	}
	for _, pod := range in.Pods {
		if Ordinal(in.Set.Name, pod) < 0 {
			continue
		}
		s.Replicas++
		if RunningAndReady(pod) {
			s.ReadyReplicas++
			if RunningAndAvailable(pod, in.Set.Spec.MinReadySeconds, in.Now) {
				s.AvailableReplicas++
			}
		}
		if !terminating(pod) {
			if revisionOf(pod) == s.CurrentRevision {
				s.CurrentReplicas++
			}
			if revisionOf(pod) == s.UpdateRevision {
				s.UpdatedReplicas++
			}
		}
	}
	if in.Set.Spec.UpdateStrategy.Type == appsv1.RollingUpdateStatefulSetStrategyType &&
		s.UpdatedReplicas == s.Replicas && s.ReadyReplicas == s.Replicas {
		s.CurrentReplicas = s.UpdatedReplicas
		s.CurrentRevision = s.UpdateRevision
	}
	return s
}
