package agent

import (
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/outpost-mesh/outpost/edge/events"
	"github.com/outpost-mesh/outpost/edge/pods"
	"github.com/outpost-mesh/outpost/edge/runtime"
)

// The agent reports what it does to pods as Events, with kubelet's reasons
// and messages, so that `kubectl describe pod` tells the same story it
// would on a kubelet's node. They go up through the outbox like statuses,
// but are not coalesced: the outbox keeps the latest Config.MaxOutboxEvents
// of them while the hub is away. A repeat is sent as its first event with
// a higher count, which the hub applies to the event it has.

// actionEvent reports how an action of a pod's worker went. pod is nil for
// a pod the view no longer holds.
func (a *Agent) actionEvent(act pods.Action, pod *corev1.Pod, err error) {
	switch act.Type {
	case pods.StartContainer:
		switch {
		case err == nil:
			a.events.Pod(act.Pod, pod, act.Container, corev1.EventTypeNormal, events.Started, fmt.Sprintf("Started container %s", act.Container))
		case errors.Is(err, runtime.ErrImagePull):
			// The runtime's error names the image itself, as in
			// `pull image "x": image pull failed: manifest unknown`.
			why := strings.TrimPrefix(err.Error(), fmt.Sprintf("pull image %q: ", act.Spec.Image))
			a.events.Pod(act.Pod, pod, act.Container, corev1.EventTypeWarning, events.Failed, fmt.Sprintf("Failed to pull image %q: %s", act.Spec.Image, why))
		default:
			a.events.Pod(act.Pod, pod, act.Container, corev1.EventTypeWarning, events.Failed, fmt.Sprintf("Error: %v", err))
		}
	case pods.StopContainer:
		if err == nil {
			a.events.Pod(act.Pod, pod, act.Container, corev1.EventTypeNormal, events.Killing, fmt.Sprintf("Stopping container %s", act.Container))
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
				a.events.Pod(ref, pod, cs.Name, corev1.EventTypeWarning, events.BackOff,
					fmt.Sprintf("Back-off restarting failed container %s in pod %s_%s(%s)", cs.Name, pod.Name, pod.Namespace, pod.UID))
			} else {
				a.events.Pod(ref, pod, cs.Name, corev1.EventTypeNormal, events.BackOff, fmt.Sprintf("Back-off pulling image %q", cs.Image))
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
