package status

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/outpost-mesh/outpost/edge/events"
	"github.com/outpost-mesh/outpost/edge/pods"
	"github.com/outpost-mesh/outpost/edge/runtime"
)

// backOffEvents reports the containers of pod that status cur puts in a
// back-off that prev (nil: none) did not: a crash loop, each time after
// the container ran again, or an image that will not pull.
func (r *Reporter) backOffEvents(pod *corev1.Pod, prev, cur *corev1.PodStatus) {
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
				r.cfg.Events.Pod(ref, pod, cs.Name, corev1.EventTypeWarning, events.BackOff,
					fmt.Sprintf("Back-off restarting failed container %s in pod %s_%s(%s)", cs.Name, pod.Name, pod.Namespace, pod.UID))
			} else {
				r.cfg.Events.Pod(ref, pod, cs.Name, corev1.EventTypeNormal, events.BackOff, fmt.Sprintf("Back-off pulling image %q", cs.Image))
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
