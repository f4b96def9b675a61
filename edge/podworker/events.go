package podworker

import (
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/outpost-mesh/outpost/edge/events"
	"github.com/outpost-mesh/outpost/edge/pods"
	"github.com/outpost-mesh/outpost/edge/runtime"
)

// The workers report what they do to pods as Events, with kubelet's
// reasons and messages, so that `kubectl describe pod` tells the same
// story it would on a kubelet's node.

// actionEvent reports how an action of a pod's worker went. pod is nil for
// a pod the view no longer holds.
func (w *Workers) actionEvent(act pods.Action, pod *corev1.Pod, err error) {
	switch act.Type {
	case pods.StartContainer:
		switch {
		case err == nil:
			w.cfg.Events.Pod(act.Pod, pod, act.Container, corev1.EventTypeNormal, events.Started, fmt.Sprintf("Started container %s", act.Container))
		case errors.Is(err, runtime.ErrImagePull):
			// The runtime's error names the image itself, as in
			// `pull image "x": image pull failed: manifest unknown`.
			why := strings.TrimPrefix(err.Error(), fmt.Sprintf("pull image %q: ", act.Spec.Image))
			w.cfg.Events.Pod(act.Pod, pod, act.Container, corev1.EventTypeWarning, events.Failed, fmt.Sprintf("Failed to pull image %q: %s", act.Spec.Image, why))
		default:
			w.cfg.Events.Pod(act.Pod, pod, act.Container, corev1.EventTypeWarning, events.Failed, fmt.Sprintf("Error: %v", err))
		}
	case pods.StopContainer:
		if err == nil {
			msg := fmt.Sprintf("Stopping container %s", act.Container)
			if act.Why != "" {
				msg = act.Why
			}
			w.cfg.Events.Pod(act.Pod, pod, act.Container, corev1.EventTypeNormal, events.Killing, msg)
		}
	}
}
