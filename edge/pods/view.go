package pods

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/outpost-mesh/outpost/edge/runtime"
)

// view is one desired pod with what the runtime holds of it and its
// record: the facts Plan and Status both decide from.
type view struct {
	pod         *corev1.Pod
	act         *runtime.PodStatus // nil if the runtime holds nothing of the pod
	rec         Record
	probed      *Probed // nil: no prober
	ctrs        []ctr
	policy      corev1.RestartPolicy
	deleting    bool
	unsupported string // why the pod cannot be started, or ""
}

func newView(pod *corev1.Pod, act *runtime.PodStatus, rec Record, probed *Probed) *view {
	return &view{
		pod:         pod,
		act:         act,
		rec:         rec,
		probed:      probed,
		ctrs:        containersOf(pod),
		policy:      restartPolicy(pod),
		deleting:    pod.DeletionTimestamp != nil,
		unsupported: unsupported(pod),
	}
}

// status returns the runtime's newest instance of the named container, or
// nil.
func (v *view) status(name string) *runtime.ContainerStatus {
	if v.act == nil {
		return nil
	}
	return v.act.Container(name)
}

// maybeRunning reports whether s may be running: running, or in a state
// the runtime cannot tell.
func maybeRunning(s *runtime.ContainerStatus) bool {
	return s != nil && (s.State == runtime.StateRunning || s.State == runtime.StateUnknown)
}

// anyRunning reports whether any container of the pod may be running.
func (v *view) anyRunning() bool {
	if v.act == nil {
		return false
	}
	for i := range v.act.Containers {
		if maybeRunning(&v.act.Containers[i]) {
			return true
		}
	}
	return false
}

// initialized reports whether the pod's app containers were ever created,
// which means its init containers completed (kubelet's
// HasAnyRegularContainerCreated, with the record for containers the
// runtime lost).
func (v *view) initialized() bool {
	for _, c := range v.ctrs {
		if c.kind == kindApp && (v.status(c.spec.Name) != nil || v.rec.Containers[c.spec.Name].Created) {
			return true
		}
	}
	return false
}

// lost reports whether the named container existed once and the runtime
// no longer has it.
func (v *view) lost(name string) bool {
	return v.status(name) == nil && v.rec.Containers[name].Created
}

// restarts reports whether container c, whose newest instance exited with
// code (or was lost), is to be started again: the pod is not ending, and
// the restart policy or a replacement says so.
func (v *view) restarts(c ctr, code int32) bool {
	if v.deleting || v.rec.Terminal || terminalPhase(v.pod.Status.Phase) {
		return false
	}
	return v.rec.Containers[c.spec.Name].Replace || shouldRestart(c.kind, v.policy, code)
}

// done reports whether the pod has finished while not being deleted: a
// regular init container failed and will not be restarted, or every app
// container exited (or was lost) and none will be restarted. What still
// runs of a finished pod (sidecars) is stopped.
func (v *view) done() bool {
	for _, c := range v.ctrs {
		if c.kind != kindInit {
			continue
		}
		if s := v.status(c.spec.Name); s != nil && s.State == runtime.StateExited && s.ExitCode != 0 && !v.restarts(c, s.ExitCode) {
			return true
		}
	}
	if !v.initialized() {
		return false
	}
	apps := 0
	for _, c := range v.ctrs {
		if c.kind != kindApp {
			continue
		}
		apps++
		s := v.status(c.spec.Name)
		switch {
		case s == nil && v.lost(c.spec.Name):
			if v.restarts(c, exitLost) {
				return false
			}
		case s == nil:
			return false
		case s.State == runtime.StateExited:
			if v.restarts(c, s.ExitCode) {
				return false
			}
		default:
			return false
		}
	}
	return apps > 0
}

// exitLost is the exit code assumed for a container the runtime lost
// (kubelet's ContainerStatusUnknown).
const exitLost = 137

// terminalPhase reports whether p is Succeeded or Failed.
func terminalPhase(p corev1.PodPhase) bool {
	return p == corev1.PodSucceeded || p == corev1.PodFailed
}
