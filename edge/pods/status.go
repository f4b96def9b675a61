package pods

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/edge/runtime"
)

// Reasons a container waits for, in kubelet's words.
const (
	ReasonContainerCreating          = "ContainerCreating"
	ReasonPodInitializing            = "PodInitializing"
	ReasonCrashLoopBackOff           = "CrashLoopBackOff"
	ReasonErrImagePull               = "ErrImagePull"
	ReasonImagePullBackOff           = "ImagePullBackOff"
	ReasonCreateContainerConfigError = "CreateContainerConfigError"
	ReasonCreateContainerError       = "CreateContainerError"
	ReasonRunContainerError          = "RunContainerError"
)

// ReasonUnsupportedPodSpec is the reason of the Ready and ContainersReady
// conditions of a pod the agent cannot run (a volume type it lacks), whose
// containers wait with CreateContainerConfigError. Kubelet has no word for
// this; the pod stays Pending, so that an agent update that supports it
// starts it.
const ReasonUnsupportedPodSpec = "UnsupportedPodSpec"

// Reasons of pod conditions, in kubelet's words.
const (
	reasonContainersNotReady       = "ContainersNotReady"
	reasonContainersNotInitialized = "ContainersNotInitialized"
	reasonPodCompleted             = "PodCompleted"
	reasonPodFailed                = "PodFailed"
	reasonReadinessGatesNotReady   = "ReadinessGatesNotReady"
	reasonStatusUnknown            = "ContainerStatusUnknown"
)

// Status returns the status of pod as kubelet would report it, from what
// the runtime holds of it (actual, nil if nothing) and its record. It does
// no I/O; the result shares no memory with the arguments.
//
// pod.Status is the previous status: the one the caller last computed for
// the pod (its outbox holds it), else the one the hub sent. Status keeps
// from it what the agent does not own (qosClass, hostIP, nominatedNodeName,
// conditions set by others), the start time, the transition times of
// conditions that did not change, and a terminal phase. The caller should
// compute Status from a fresh List, after the actions of a Decision ran,
// and fill hostIP; podIP comes from the runtime.
func Status(pod *corev1.Pod, actual *runtime.PodStatus, rec Record, probed *Probed, now time.Time) corev1.PodStatus {
	now = now.UTC().Round(0)
	if rec.Rejected != nil && !rec.Rejected.Evicted {
		return rejectedStatus(pod, rec.Rejected)
	}
	v := newView(pod, actual, rec, probed)
	prev := &pod.Status
	// Start from the previous status, without the parts rebuilt below,
	// which are most of it: copying them only to drop them took 40% of
	// this function's CPU in the fleet benchmark.
	keep := *prev
	keep.Conditions, keep.ContainerStatuses, keep.InitContainerStatuses = nil, nil, nil
	s := keep.DeepCopy()
	s.ObservedGeneration = pod.Generation
	if actual != nil && actual.IP != "" {
		s.PodIP = actual.IP
		s.PodIPs = []corev1.PodIP{{IP: actual.IP}}
	}
	if s.StartTime == nil {
		t := rec.FirstSeen
		if t.IsZero() {
			t = now
		}
		s.StartTime = &metav1.Time{Time: t}
	}

	done := v.done()
	terminal := rec.Terminal || (v.deleting || done) && !v.anyRunning()
	s.InitContainerStatuses = make([]corev1.ContainerStatus, 0, len(pod.Spec.InitContainers))
	s.ContainerStatuses = make([]corev1.ContainerStatus, 0, len(pod.Spec.Containers))
	for _, c := range v.ctrs {
		if c.kind == kindApp {
			s.ContainerStatuses = append(s.ContainerStatuses, v.containerStatus(c, done))
		} else {
			s.InitContainerStatuses = append(s.InitContainerStatuses, v.containerStatus(c, done))
		}
	}
	if len(s.InitContainerStatuses) == 0 {
		s.InitContainerStatuses = nil
	}
	if len(s.ContainerStatuses) == 0 {
		s.ContainerStatuses = nil
	}
	// App containers sorted by name, as kubelet does.
	slices.SortFunc(s.ContainerStatuses, func(a, b corev1.ContainerStatus) int { return strings.Compare(a.Name, b.Name) })

	s.Phase = v.phase(s, terminal)
	if !terminalPhase(s.Phase) && terminalPhase(prev.Phase) {
		s.Phase = prev.Phase // a pod never leaves a terminal phase
	}
	if s.Phase != prev.Phase {
		s.Reason, s.Message = "", ""
	}
	if r := rec.Rejected; r != nil {
		s.Phase, s.Reason, s.Message = corev1.PodFailed, r.Reason, r.Message
	}
	s.Conditions = v.conditions(s, now)
	if r := rec.Rejected; r != nil && !slices.ContainsFunc(s.Conditions, func(c corev1.PodCondition) bool { return c.Type == corev1.DisruptionTarget }) {
		s.Conditions = append(s.Conditions, corev1.PodCondition{
			Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, ObservedGeneration: pod.Generation,
			Reason: corev1.PodReasonTerminationByKubelet, Message: r.Message, LastTransitionTime: metav1.Time{Time: now},
		})
	}
	return *s
}

// rejectedStatus is the status of a pod the node refused, as kubelet's
// rejectPod sets it: Failed, with the admission's reason and message, and
// what others own of the status (the hub's PodScheduled) kept.
func rejectedStatus(pod *corev1.Pod, r *Rejection) corev1.PodStatus {
	s := corev1.PodStatus{
		Phase:    corev1.PodFailed,
		Reason:   r.Reason,
		Message:  "Pod was rejected: " + r.Message,
		QOSClass: pod.Status.QOSClass,
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			s.Conditions = append(s.Conditions, c)
		}
	}
	return s
}

// containerStatus returns the status of container c; ending says the pod
// has finished and nothing of it restarts.
func (v *view) containerStatus(c ctr, ending bool) corev1.ContainerStatus {
	name := c.spec.Name
	cr := v.rec.Containers[name]
	s := v.status(name)
	prev := previousStatus(&v.pod.Status, c.kind == kindApp, name)
	restarts := func(code int32) bool { return !ending && v.restarts(c, code) }

	waiting := ReasonContainerCreating
	if len(v.pod.Spec.InitContainers) > 0 {
		waiting = ReasonPodInitializing
	}
	st := corev1.ContainerStatus{
		Name:  name,
		Image: c.spec.Image,
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: waiting}},
	}
	if prev != nil {
		if prev.State.Terminated != nil {
			st = *prev.DeepCopy()
		} else {
			st.RestartCount = prev.RestartCount
			st.LastTerminationState = *prev.LastTerminationState.DeepCopy()
		}
	}
	started, ready := false, false

	if s != nil {
		st.ContainerID, st.ImageID, st.RestartCount = s.ID, s.ImageID, int32(s.Attempt)
		if s.Image != "" {
			st.Image = s.Image
		}
		switch {
		case cr.LastTermination != nil && cr.LastTermination.ContainerID != s.ID:
			st.LastTerminationState = corev1.ContainerState{Terminated: cr.LastTermination.api()}
		case prev == nil || prev.ContainerID != s.ID:
			st.LastTerminationState = corev1.ContainerState{}
		}
		switch s.State {
		case runtime.StateRunning:
			st.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Time{Time: s.StartedAt}}}
			started, ready = probedState(v.probed, c.spec, s.ID)
			ready = ready && c.kind != kindInit
		case runtime.StateExited:
			term := termination(s).api()
			if restarts(s.ExitCode) && cr.Reason != "" {
				st.LastTerminationState = corev1.ContainerState{Terminated: term}
				st.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: cr.Reason, Message: cr.Message}}
			} else {
				st.State = corev1.ContainerState{Terminated: term}
				ready = c.kind == kindInit && s.ExitCode == 0
			}
		default: // created, or unknown: waiting to run
			st.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{}}
		}
		st.Ready, st.Started = ready, &started
		return st
	}

	// The runtime holds no instance: never started, or lost.
	lost := v.lost(name)
	if cr.Created || cr.Attempt > 0 {
		st.RestartCount = max(st.RestartCount, int32(cr.Attempt))
	}
	if cr.LastTermination != nil {
		st.LastTerminationState = corev1.ContainerState{Terminated: cr.LastTermination.api()}
	}
	toStart := !ending && !v.deleting && !v.rec.Terminal && (!lost || restarts(exitLost))
	switch {
	case toStart && cr.Reason != "":
		st.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: cr.Reason, Message: cr.Message}}
	case toStart && v.unsupported != "":
		st.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: ReasonCreateContainerConfigError, Message: v.unsupported}}
	case st.State.Terminated != nil:
		// kept from the previous status
	case c.kind == kindInit && v.initialized():
		st.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			Reason:  "Completed",
			Message: "Unable to get init container status from container runtime and pod has been initialized, treat it as exited normally",
		}}
		ready = true
	case prev != nil && prev.State.Running != nil && st.LastTerminationState.Terminated == nil:
		// It ran and is gone: show it ended, so that the pod does not look
		// as if it never started.
		st.LastTerminationState = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			Reason:   reasonStatusUnknown,
			Message:  "The container could not be located when the pod was deleted.  The container used to be Running",
			ExitCode: exitLost,
		}}
		if !v.deleting {
			st.RestartCount++
		}
	}
	st.Ready, st.Started = ready, &started
	return st
}

// previousStatus returns the named container's status in prev, or nil.
func previousStatus(prev *corev1.PodStatus, app bool, name string) *corev1.ContainerStatus {
	list := prev.InitContainerStatuses
	if app {
		list = prev.ContainerStatuses
	}
	for i := range list {
		if list[i].Name == name {
			return &list[i]
		}
	}
	return nil
}

// api returns t as the API shows it.
func (t *Termination) api() *corev1.ContainerStateTerminated {
	return &corev1.ContainerStateTerminated{
		ExitCode:    t.ExitCode,
		Reason:      t.Reason,
		Message:     t.Message,
		StartedAt:   metav1.Time{Time: t.StartedAt},
		FinishedAt:  metav1.Time{Time: t.FinishedAt},
		ContainerID: t.ContainerID,
	}
}

// phase returns the pod's phase from its container statuses, as kubelet's
// getPhase; terminal says nothing of the pod will run again.
func (v *view) phase(s *corev1.PodStatus, terminal bool) corev1.PodPhase {
	inits := byName(s.InitContainerStatuses)
	apps := byName(s.ContainerStatuses)
	var pendingInit, pendingSidecars, failedInit int
	var unknown, running, waiting, stopped, succeeded int
	for _, c := range v.ctrs {
		switch c.kind {
		case kindInit:
			st := inits[c.spec.Name]
			switch {
			case st == nil || st.State.Running != nil:
				pendingInit++
			case st.State.Terminated != nil:
				if st.State.Terminated.ExitCode != 0 {
					failedInit++
				}
			case st.State.Waiting != nil && st.LastTerminationState.Terminated != nil:
				if st.LastTerminationState.Terminated.ExitCode != 0 {
					failedInit++
				}
			default:
				pendingInit++
			}
		case kindSidecar:
			st := inits[c.spec.Name]
			switch {
			case st == nil:
				unknown++
			case st.State.Running != nil:
				if st.Started == nil || !*st.Started {
					pendingSidecars++
				}
				running++
			case st.State.Terminated != nil:
			case st.State.Waiting != nil:
				if st.LastTerminationState.Terminated == nil {
					pendingSidecars++
					waiting++
				}
			default:
				pendingSidecars++
				unknown++
			}
		case kindApp:
			st := apps[c.spec.Name]
			switch {
			case v.rec.Containers[c.spec.Name].Replace && !v.deleting:
				// Stopped to be started again with a new spec: the pod is
				// not done, whatever its restart policy says (kubelet
				// does both in one sync, so never shows this).
				running++
			case st == nil:
				unknown++
			case st.State.Running != nil:
				running++
			case st.State.Terminated != nil:
				stopped++
				if st.State.Terminated.ExitCode == 0 {
					succeeded++
				}
			case st.State.Waiting != nil:
				if st.LastTerminationState.Terminated != nil {
					stopped++
				} else {
					waiting++
				}
			default:
				unknown++
			}
		}
	}
	if failedInit > 0 && v.policy == corev1.RestartPolicyNever {
		return corev1.PodFailed
	}
	switch {
	case pendingInit > 0, pendingSidecars > 0 && !v.initialized(), waiting > 0:
		return corev1.PodPending
	case running > 0 && unknown == 0:
		return corev1.PodRunning
	case running == 0 && stopped > 0 && unknown == 0:
		if terminal {
			if stopped == succeeded {
				return corev1.PodSucceeded
			}
			return corev1.PodFailed
		}
		if v.policy == corev1.RestartPolicyAlways {
			return corev1.PodRunning
		}
		if stopped == succeeded {
			return corev1.PodSucceeded
		}
		if v.policy == corev1.RestartPolicyNever {
			return corev1.PodFailed
		}
		return corev1.PodRunning
	}
	return corev1.PodPending
}

func byName(l []corev1.ContainerStatus) map[string]*corev1.ContainerStatus {
	m := make(map[string]*corev1.ContainerStatus, len(l))
	for i := range l {
		m[l[i].Name] = &l[i]
	}
	return m
}

// kubeletConditions are the condition types Status owns; others are kept
// as they are.
var kubeletConditions = map[corev1.PodConditionType]bool{
	corev1.PodScheduled:              true,
	corev1.PodReady:                  true,
	corev1.PodInitialized:            true,
	corev1.ContainersReady:           true,
	corev1.PodReadyToStartContainers: true,
}

// conditions returns the pod's conditions: those others own, kept, then
// kubelet's, in kubelet's order, each with the transition time of the
// previous condition of its type if its status did not change.
func (v *view) conditions(s *corev1.PodStatus, now time.Time) []corev1.PodCondition {
	prev := v.pod.Status.Conditions
	out := make([]corev1.PodCondition, 0, len(prev)+5)
	for i := range prev {
		if !kubeletConditions[prev[i].Type] {
			out = append(out, *prev[i].DeepCopy())
		}
	}
	kept := out
	add := func(c corev1.PodCondition) {
		c.ObservedGeneration = v.pod.Generation
		c.LastTransitionTime = metav1.Time{Time: now}
		for i := range prev {
			if prev[i].Type == c.Type && prev[i].Status == c.Status {
				c.LastTransitionTime = prev[i].LastTransitionTime
			}
		}
		out = append(out, c)
	}

	sandbox := corev1.ConditionFalse
	if v.act != nil {
		sandbox = corev1.ConditionTrue
	}
	add(corev1.PodCondition{Type: corev1.PodReadyToStartContainers, Status: sandbox})
	add(v.initializedCondition(s))
	ready := v.containersReadyCondition(s)
	if v.unsupported != "" && !terminalPhase(s.Phase) && (ready.Status != corev1.ConditionTrue || len(s.ContainerStatuses) == 0) {
		ready = corev1.PodCondition{Type: corev1.ContainersReady, Status: corev1.ConditionFalse, Reason: ReasonUnsupportedPodSpec, Message: v.unsupported}
	}
	podReady := corev1.PodCondition{Type: corev1.PodReady, Status: ready.Status, Reason: ready.Reason, Message: ready.Message}
	if ready.Status == corev1.ConditionTrue {
		var msgs []string
		for _, g := range v.pod.Spec.ReadinessGates {
			c := findCondition(kept, g.ConditionType)
			switch {
			case c == nil:
				msgs = append(msgs, fmt.Sprintf("corresponding condition of pod readiness gate %q does not exist.", string(g.ConditionType)))
			case c.Status != corev1.ConditionTrue:
				msgs = append(msgs, fmt.Sprintf("the status of pod readiness gate %q is not \"True\", but %v", string(g.ConditionType), c.Status))
			}
		}
		if len(msgs) > 0 {
			podReady = corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: reasonReadinessGatesNotReady, Message: strings.Join(msgs, ", ")}
		}
	}
	add(podReady)
	add(ready)
	add(corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue})
	return out
}

func (v *view) initializedCondition(s *corev1.PodStatus) corev1.PodCondition {
	c := corev1.PodCondition{Type: corev1.PodInitialized, Status: corev1.ConditionTrue}
	if s.Phase == corev1.PodSucceeded {
		c.Reason = reasonPodCompleted
		return c
	}
	for i := range s.ContainerStatuses {
		if st := s.ContainerStatuses[i].State; st.Running != nil || st.Terminated != nil {
			return c // an app container started: the pod was initialized
		}
	}
	inits := byName(s.InitContainerStatuses)
	var incomplete []string
	for _, ic := range v.ctrs {
		if ic.kind == kindApp {
			continue
		}
		st := inits[ic.spec.Name]
		if ic.kind == kindSidecar && (st.Started == nil || !*st.Started) || ic.kind == kindInit && !st.Ready {
			incomplete = append(incomplete, ic.spec.Name)
		}
	}
	if len(incomplete) > 0 {
		c.Status, c.Reason = corev1.ConditionFalse, reasonContainersNotInitialized
		c.Message = fmt.Sprintf("containers with incomplete status: %s", incomplete)
	}
	return c
}

func (v *view) containersReadyCondition(s *corev1.PodStatus) corev1.PodCondition {
	c := corev1.PodCondition{Type: corev1.ContainersReady, Status: corev1.ConditionTrue}
	switch s.Phase {
	case corev1.PodSucceeded:
		c.Status, c.Reason = corev1.ConditionFalse, reasonPodCompleted
		return c
	case corev1.PodFailed:
		c.Status, c.Reason = corev1.ConditionFalse, reasonPodFailed
		return c
	}
	inits, apps := byName(s.InitContainerStatuses), byName(s.ContainerStatuses)
	var unready []string
	for _, x := range v.ctrs {
		switch {
		case x.kind == kindSidecar && !inits[x.spec.Name].Ready, x.kind == kindApp && !apps[x.spec.Name].Ready:
			unready = append(unready, x.spec.Name)
		}
	}
	if len(unready) > 0 {
		c.Status, c.Reason = corev1.ConditionFalse, reasonContainersNotReady
		c.Message = fmt.Sprintf("containers with unready status: %s", unready)
	}
	return c
}

func findCondition(l []corev1.PodCondition, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range l {
		if l[i].Type == t {
			return &l[i]
		}
	}
	return nil
}
