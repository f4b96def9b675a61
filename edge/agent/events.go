package agent

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/outpost-mesh/outpost/edge/objects"
	"github.com/outpost-mesh/outpost/edge/pods"
	"github.com/outpost-mesh/outpost/edge/runtime"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// The agent reports what it does to pods as Events, with kubelet's reasons
// and messages, so that `kubectl describe pod` tells the same story it
// would on a kubelet's node. They go up through the outbox like statuses,
// but are not coalesced: the outbox keeps the latest Config.MaxOutboxEvents
// of them while the hub is away. A repeat is sent as its first event with
// a higher count, which the hub applies to the event it has.
const (
	eventStarted = "Started"
	eventFailed  = "Failed"
	eventKilling = "Killing"
	eventBackOff = "BackOff"
)

// actionEvent reports how an action of a pod's worker went. pod is nil for
// a pod the view no longer holds.
func (a *Agent) actionEvent(act pods.Action, pod *corev1.Pod, err error) {
	switch act.Type {
	case pods.StartContainer:
		switch {
		case err == nil:
			a.event(act.Pod, pod, act.Container, corev1.EventTypeNormal, eventStarted, fmt.Sprintf("Started container %s", act.Container))
		case errors.Is(err, runtime.ErrImagePull):
			// The runtime's error names the image itself, as in
			// `pull image "x": image pull failed: manifest unknown`.
			why := strings.TrimPrefix(err.Error(), fmt.Sprintf("pull image %q: ", act.Spec.Image))
			a.event(act.Pod, pod, act.Container, corev1.EventTypeWarning, eventFailed, fmt.Sprintf("Failed to pull image %q: %s", act.Spec.Image, why))
		default:
			a.event(act.Pod, pod, act.Container, corev1.EventTypeWarning, eventFailed, fmt.Sprintf("Error: %v", err))
		}
	case pods.StopContainer:
		if err == nil {
			a.event(act.Pod, pod, act.Container, corev1.EventTypeNormal, eventKilling, fmt.Sprintf("Stopping container %s", act.Container))
		}
	}
}

// backOffEvents reports the containers of pod that status cur puts in a
// back-off that prev (nil: none) did not: a crash loop, each time after
// the container ran again, or an image that will not pull.
func (a *Agent) backOffEvents(pod *corev1.Pod, prev, cur *corev1.PodStatus) {
	ref := runtime.PodRef{UID: string(pod.UID), Namespace: pod.Namespace, Name: pod.Name}
	for _, list := range [][]corev1.ContainerStatus{cur.InitContainerStatuses, cur.ContainerStatuses} {
		for _, cs := range list {
			w := cs.State.Waiting
			if w == nil || w.Reason != pods.ReasonCrashLoopBackOff && w.Reason != pods.ReasonImagePullBackOff {
				continue
			}
			if prev != nil && waitingReason(prev, cs.Name) == w.Reason && restarts(prev, cs.Name) == cs.RestartCount {
				continue // in the same back-off already
			}
			if w.Reason == pods.ReasonCrashLoopBackOff {
				a.event(ref, pod, cs.Name, corev1.EventTypeWarning, eventBackOff,
					fmt.Sprintf("Back-off restarting failed container %s in pod %s_%s(%s)", cs.Name, pod.Name, pod.Namespace, pod.UID))
			} else {
				a.event(ref, pod, cs.Name, corev1.EventTypeNormal, eventBackOff, fmt.Sprintf("Back-off pulling image %q", cs.Image))
			}
		}
	}
}

// restarts returns the restart count of container name of st.
func restarts(st *corev1.PodStatus, name string) int32 {
	for _, list := range [][]corev1.ContainerStatus{st.InitContainerStatuses, st.ContainerStatuses} {
		for _, cs := range list {
			if cs.Name == name {
				return cs.RestartCount
			}
		}
	}
	return 0
}

// waitingReason returns why container name of st waits, "" if it does not.
func waitingReason(st *corev1.PodStatus, name string) string {
	for _, list := range [][]corev1.ContainerStatus{st.InitContainerStatuses, st.ContainerStatuses} {
		for _, cs := range list {
			if cs.Name == name && cs.State.Waiting != nil {
				return cs.State.Waiting.Reason
			}
		}
	}
	return ""
}

// An event that repeats one of the last eventWindow (same object, type,
// reason and message) is counted on it rather than made anew, as kubelet's
// event correlator does: a crash loop is one BackOff event seen many
// times. The agent remembers up to maxEventSeries of them.
const (
	eventWindow    = 10 * time.Minute
	maxEventSeries = 1024
)

// eventKey identifies the events that repeat one another.
type eventKey struct {
	obj              corev1.ObjectReference
	typ, reason, msg string
}

// eventSeries is the event a repeat is counted on.
type eventSeries struct {
	name  string
	first metav1.Time
	last  time.Time
	count int32
}

// series returns the series the event of key at now belongs to, started
// anew if there is none within eventWindow, counting this one.
func (e *eventLog) series(key eventKey, now metav1.Time, name string) eventSeries {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.byKey == nil {
		e.byKey = map[eventKey]*eventSeries{}
	}
	s := e.byKey[key]
	if s == nil || now.Sub(s.last) > eventWindow {
		if len(e.byKey) >= maxEventSeries {
			maps.DeleteFunc(e.byKey, func(_ eventKey, s *eventSeries) bool { return now.Sub(s.last) > eventWindow })
			if len(e.byKey) >= maxEventSeries {
				clear(e.byKey)
			}
		}
		s = &eventSeries{name: name, first: now}
		e.byKey[key] = s
	}
	s.count++
	s.last = now.Time
	return *s
}

// eventLog holds the agent's recent event series. Its methods are safe for
// concurrent use.
type eventLog struct {
	mu    sync.Mutex
	byKey map[eventKey]*eventSeries
}

// event queues an Event about container (or the whole pod, if "") of the
// pod of ref, whose spec pod is if the view still holds it.
func (a *Agent) event(ref runtime.PodRef, pod *corev1.Pod, container, typ, reason, msg string) {
	now := metav1.NewTime(a.now())
	obj := corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: ref.Namespace, Name: ref.Name, UID: k8stypes.UID(ref.UID)}
	if container != "" {
		obj.FieldPath = fmt.Sprintf("spec.containers{%s}", container)
		if pod != nil && slices.ContainsFunc(pod.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == container }) {
			obj.FieldPath = fmt.Sprintf("spec.initContainers{%s}", container)
		}
	}
	// Named as kubelet names them: unique by the time of the first.
	s := a.events.series(eventKey{obj, typ, reason, msg}, now, fmt.Sprintf("%s.%x", ref.Name, now.UnixNano()))
	ev := &corev1.Event{
		TypeMeta:            metav1.TypeMeta{APIVersion: "v1", Kind: "Event"},
		ObjectMeta:          metav1.ObjectMeta{Name: s.name, Namespace: ref.Namespace},
		InvolvedObject:      obj,
		Reason:              reason,
		Message:             msg,
		Type:                typ,
		Source:              corev1.EventSource{Component: "kubelet", Host: a.cfg.NodeName},
		FirstTimestamp:      s.first,
		LastTimestamp:       now,
		Count:               s.count,
		ReportingController: "kubelet",
		ReportingInstance:   a.cfg.NodeName,
	}
	raw, err := objects.Encode(ev)
	if err == nil {
		_, err = a.cp.Enqueue(wire.KindEvent, wire.Key{Resource: wire.ResourceEvents, Namespace: ev.Namespace, Name: ev.Name}, raw)
	}
	if err != nil {
		a.log.Warn("queue event", "pod", ref.Namespace+"/"+ref.Name, "reason", reason, "err", err)
	}
}
