package agent

import (
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/outpost-mesh/outpost/edge/pods"
	"github.com/outpost-mesh/outpost/edge/runtime"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// The agent reports what it does to pods as Events, with kubelet's reasons
// and messages, so that `kubectl describe pod` tells the same story it
// would on a kubelet's node. They go up through the outbox like statuses,
// but are not coalesced: the outbox keeps the latest Config.MaxOutboxEvents
// of them while the hub is away.
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
			a.event(act.Pod, pod, act.Container, corev1.EventTypeWarning, eventFailed, fmt.Sprintf("Failed to pull image %q: %v", act.Spec.Image, err))
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
// back-off that prev (nil: none) did not: a crash loop, or an image that
// will not pull.
func (a *Agent) backOffEvents(pod *corev1.Pod, prev, cur *corev1.PodStatus) {
	ref := runtime.PodRef{UID: string(pod.UID), Namespace: pod.Namespace, Name: pod.Name}
	for _, list := range [][]corev1.ContainerStatus{cur.InitContainerStatuses, cur.ContainerStatuses} {
		for _, cs := range list {
			w := cs.State.Waiting
			if w == nil || w.Reason != pods.ReasonCrashLoopBackOff && w.Reason != pods.ReasonImagePullBackOff {
				continue
			}
			if prev != nil && waitingReason(prev, cs.Name) == w.Reason {
				continue // in back-off already
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
	ev := &corev1.Event{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Event"},
		// Named as kubelet names them: unique by the time.
		ObjectMeta:          metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", ref.Name, now.UnixNano()), Namespace: ref.Namespace},
		InvolvedObject:      obj,
		Reason:              reason,
		Message:             msg,
		Type:                typ,
		Source:              corev1.EventSource{Component: "kubelet", Host: a.cfg.NodeName},
		FirstTimestamp:      now,
		LastTimestamp:       now,
		Count:               1,
		ReportingController: "kubelet",
		ReportingInstance:   a.cfg.NodeName,
	}
	raw, err := encodeObject(ev)
	if err == nil {
		_, err = a.cp.Enqueue(wire.KindEvent, wire.Key{Resource: wire.ResourceEvents, Namespace: ev.Namespace, Name: ev.Name}, raw)
	}
	if err != nil {
		a.log.Warn("queue event", "pod", ref.Namespace+"/"+ref.Name, "reason", reason, "err", err)
	}
}
