package pods

import (
	"fmt"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/outpost-mesh/outpost/edge/runtime"
)

// ActionType says what an Action does.
type ActionType int

// Action types.
const (
	// StartContainer starts Action.Container with Spec and Attempt
	// (Runtime.StartContainer).
	StartContainer ActionType = iota + 1
	// StopContainer stops Action.Container with Grace
	// (Runtime.StopContainer).
	StopContainer
	// RemovePod removes the pod from the runtime (Runtime.RemovePod);
	// nothing of it runs any more.
	RemovePod
	// ConfirmTerminated says a pod deleted on the hub has stopped: the
	// caller pushes the pod's final Status, then tells the hub it may
	// remove the object. Handed out once per pod.
	ConfirmTerminated
)

// String returns the type's name.
func (t ActionType) String() string {
	switch t {
	case StartContainer:
		return "StartContainer"
	case StopContainer:
		return "StopContainer"
	case RemovePod:
		return "RemovePod"
	case ConfirmTerminated:
		return "ConfirmTerminated"
	}
	return fmt.Sprintf("ActionType(%d)", int(t))
}

// Action is one step toward the desired state.
type Action struct {
	Type ActionType
	Pod  runtime.PodRef
	// Container names the container of StartContainer and StopContainer.
	Container string
	// Spec is the container to start, as far as the pod alone says: the
	// caller adds env values from valueFrom and envFrom, Mounts and NetNS.
	Spec runtime.ContainerSpec
	// Attempt is the attempt of StartContainer: 0 for the first run, one
	// more for each restart.
	Attempt int
	// Grace is the grace period of StopContainer; 0 kills at once.
	Grace time.Duration
	// Why is, for a StopContainer that is to restart a container its
	// liveness probe failed, kubelet's message for the Killing event;
	// "" for other stops.
	Why string
}

// String returns a short description, e.g. "StartContainer default/web main attempt=1".
func (a Action) String() string {
	s := fmt.Sprintf("%s %s/%s", a.Type, a.Pod.Namespace, a.Pod.Name)
	switch a.Type {
	case StartContainer:
		s += fmt.Sprintf(" %s attempt=%d", a.Container, a.Attempt)
	case StopContainer:
		s += fmt.Sprintf(" %s grace=%v", a.Container, a.Grace)
		if a.Why != "" {
			s += fmt.Sprintf(" why=%q", a.Why)
		}
	}
	return s
}

// Decision is what Plan decided, pod by pod.
type Decision struct {
	// Pods lists the pods with something to do or a record to write:
	// desired pods in the order given, then pods only the runtime holds,
	// then records of pods gone from both. A pod not listed has nothing to
	// do and its record is unchanged.
	Pods []PodDecision
	// NextWake is when Plan must run again even if nothing changes (a
	// back-off runs out, a stop's grace ends); zero if never.
	NextWake time.Time
}

// PodDecision is what Plan decided for one pod. Its actions and its record
// go together: a caller that does not run the actions (the pod's worker is
// still busy with earlier ones) keeps the previous record too.
type PodDecision struct {
	Pod runtime.PodRef
	// Actions are to be run in order.
	Actions []Action
	// Record is the pod's record after the decision, to be persisted, and
	// then updated with Observe as the actions complete.
	Record Record
	// Forget says the pod is gone: delete its record.
	Forget bool
}

// Actions returns the actions of all pods, in order.
func (d Decision) Actions() []Action {
	var out []Action
	for _, p := range d.Pods {
		out = append(out, p.Actions...)
	}
	return out
}

// Plan returns the actions that move what the runtime runs (actual)
// toward what is desired, as kubelet would, and the records to keep.
// It does no I/O and keeps nothing: time is now, memory is records.
//
// desired is every pod bound to this node that the hub (or a static
// manifest) still has, including those being deleted; pods are identified
// by UID, and a pod without one, or repeating one, is ignored. The caller
// removes a pod from desired only when the hub deleted it (or its static
// manifest was removed): losing the hub, or a checkpoint that could not be
// read, is not a deletion, and desired must not be empty for those
// reasons, because Plan stops and removes every pod that is not desired.
//
// actual is what Runtime.List returned; records are the pods' records by
// UID, as the previous decisions and Observe left them. Plan does not
// modify its arguments, and its Decision shares no memory with them.
//
// The caller persists each pod's record and runs its actions in order,
// then calls Plan again when something changed (desired, an action
// completed, a container exited) or at NextWake. Actions of different
// pods are independent and may run concurrently. Plan cannot tell a start
// in progress (a slow pull) from one not made, so a pod whose actions are
// still running has its PodDecision skipped; a stop is the exception, as
// Plan does not ask it again until its grace and some slack have passed.
//
// probed holds, by pod UID, what the pods' probes found; nil if no prober
// runs on the node (see Probed).
func Plan(desired []*corev1.Pod, actual []runtime.PodStatus, records map[string]Record, probed map[string]*Probed, now time.Time) Decision {
	now = now.UTC().Round(0)
	acts := make(map[string]*runtime.PodStatus, len(actual))
	for i := range actual {
		if uid := actual[i].Pod.UID; acts[uid] == nil {
			acts[uid] = &actual[i]
		}
	}
	var d Decision
	seen := make(map[string]bool, len(desired)+len(actual))
	add := func(p *planner, old Record, had bool) {
		if !p.wake.IsZero() && (d.NextWake.IsZero() || p.wake.Before(d.NextWake)) {
			d.NextWake = p.wake
		}
		if len(p.actions) > 0 || p.forget || !had || !p.v.rec.Equal(old) {
			d.Pods = append(d.Pods, PodDecision{Pod: p.ref, Actions: p.actions, Record: p.v.rec, Forget: p.forget})
		}
	}
	for _, pod := range desired {
		if pod == nil || pod.UID == "" || seen[string(pod.UID)] {
			continue
		}
		uid := string(pod.UID)
		seen[uid] = true
		old, had := records[uid]
		ref := runtime.PodRef{UID: uid, Namespace: pod.Namespace, Name: pod.Name}
		var pr *Probed
		if probed != nil {
			if pr = probed[uid]; pr == nil {
				pr = &Probed{}
			}
		}
		p := &planner{ref: ref, now: now, v: newView(pod, acts[uid], old.Clone(), pr)}
		p.desired()
		add(p, old, had)
	}
	for i := range actual {
		act := &actual[i]
		uid := act.Pod.UID
		if seen[uid] {
			continue
		}
		seen[uid] = true
		old, had := records[uid]
		p := &planner{ref: act.Pod, now: now, v: &view{act: act, rec: old.Clone()}}
		p.orphan()
		add(p, old, had)
	}
	for _, uid := range slices.Sorted(maps.Keys(records)) {
		if !seen[uid] {
			d.Pods = append(d.Pods, PodDecision{Pod: runtime.PodRef{UID: uid}, Forget: true})
		}
	}
	return d
}

// planner decides for one pod.
type planner struct {
	ref     runtime.PodRef
	now     time.Time
	v       *view // v.rec is the planner's to change
	actions []Action
	wake    time.Time
	forget  bool
}

func (p *planner) wakeAt(t time.Time) {
	if p.wake.IsZero() || t.Before(p.wake) {
		p.wake = t
	}
}

// container returns the record of the named container, for changing and
// storing back with put.
func (p *planner) container(name string) ContainerRecord { return p.v.rec.Containers[name] }

// put stores the record of the named container; a container without a
// name (a pod spec the API would refuse, see unsupported) keeps none.
func (p *planner) put(name string, cr ContainerRecord) {
	if name == "" {
		return
	}
	if p.v.rec.Containers == nil {
		p.v.rec.Containers = make(map[string]ContainerRecord)
	}
	p.v.rec.Containers[name] = cr
}

// observe brings the record up to date with what the runtime shows.
func (p *planner) observe() {
	v := p.v
	if v.act != nil {
		for i := range v.act.Containers {
			s := &v.act.Containers[i]
			cr := p.container(s.Name)
			cr.Attempt = max(cr.Attempt, s.Attempt)
			cr.Created = true
			if s.State == runtime.StateRunning {
				cr.Reason, cr.Message = "", "" // it started
			}
			if !maybeRunning(s) {
				cr.StopAt, cr.StopGrace = time.Time{}, 0
			}
			p.put(s.Name, cr)
		}
	}
	for name, cr := range v.rec.Containers {
		if !cr.StopAt.IsZero() && v.status(name) == nil {
			cr.StopAt, cr.StopGrace = time.Time{}, 0
			p.put(name, cr)
		}
	}
	for _, c := range v.ctrs {
		cr := p.container(c.spec.Name)
		if cr.Image == c.spec.Image {
			continue
		}
		if cr.Image != "" { // a new image: back-offs and reasons start over
			cr.CrashBackOff, cr.StartBackOff = BackOff{}, BackOff{}
			cr.Reason, cr.Message = "", ""
		}
		cr.Image = c.spec.Image
		p.put(c.spec.Name, cr)
	}
}

// desired plans a pod that is desired.
func (p *planner) desired() {
	v := p.v
	p.observe()
	if v.rec.FirstSeen.IsZero() {
		v.rec.FirstSeen = p.now
		if v.act != nil && !v.act.CreatedAt.IsZero() && v.act.CreatedAt.Before(p.now) {
			v.rec.FirstSeen = v.act.CreatedAt.UTC().Round(0) // adopted
		}
	}
	v.rec.Grace = podGrace(v.pod)
	switch {
	case v.deleting:
		p.terminate(deletionGrace(v.pod))
		if !v.anyRunning() && !v.rec.Confirmed {
			v.rec.Confirmed = true
			p.actions = append(p.actions, Action{Type: ConfirmTerminated, Pod: p.ref})
		}
	case v.rec.Rejected != nil:
		// Refused by the node's admission: nothing ever started, and
		// what an agent of another mind might have left runs no more.
		// An evicted pod is killed at once.
		grace := v.rec.Grace
		if v.rec.Rejected.Evicted {
			grace = 0
		}
		p.terminate(grace)
		if !v.anyRunning() {
			v.rec.Terminal = true
		}
	case v.rec.Terminal || terminalPhase(v.pod.Status.Phase) || v.done():
		p.terminate(v.rec.Grace)
		if !v.anyRunning() {
			v.rec.Terminal = true
		}
	default:
		p.reconcile()
	}
}

// orphan plans a pod only the runtime holds: it is stopped and removed.
func (p *planner) orphan() {
	p.observe()
	grace := p.v.rec.Grace
	if grace == 0 {
		grace = minGrace // nothing known of it: kubelet's override for orphans, at least minGrace
	}
	p.terminate(grace)
	if !p.v.anyRunning() {
		p.actions = append(p.actions, Action{Type: RemovePod, Pod: p.ref})
		p.forget = true
	}
}

// terminate stops what may run of the pod, app containers (and anything
// else) first, sidecars once nothing else runs, with what is left of grace.
func (p *planner) terminate(grace time.Duration) {
	v := p.v
	if !v.anyRunning() {
		return
	}
	if v.rec.TerminatingSince.IsZero() {
		v.rec.TerminatingSince = p.now
	}
	sidecar := make(map[string]bool)
	for _, c := range v.ctrs {
		if c.kind == kindSidecar {
			sidecar[c.spec.Name] = true
		}
	}
	others := false
	for i := range v.act.Containers {
		if s := &v.act.Containers[i]; maybeRunning(s) && !sidecar[s.Name] {
			others = true
			p.stop(s.Name, grace)
		}
	}
	if others {
		return
	}
	left := max(grace-p.now.Sub(v.rec.TerminatingSince), minGrace)
	for i := range v.act.Containers {
		if s := &v.act.Containers[i]; maybeRunning(s) {
			p.stop(s.Name, left)
		}
	}
}

// stop stops the named container, unless a stop is in progress; a stop
// that ran out of time is asked again with no grace.
func (p *planner) stop(name string, grace time.Duration) {
	cr := p.container(name)
	if !cr.StopAt.IsZero() {
		deadline := cr.StopAt.Add(cr.StopGrace + stopSlack)
		if p.now.Before(deadline) {
			p.wakeAt(deadline)
			return
		}
		grace = 0
	}
	cr.StopAt, cr.StopGrace = p.now, grace
	p.put(name, cr)
	p.actions = append(p.actions, Action{Type: StopContainer, Pod: p.ref, Container: name, Grace: grace})
	p.wakeAt(p.now.Add(grace + stopSlack))
}

// reconcile runs a pod that is neither ending nor finished: init
// containers one at a time, then sidecars and app containers.
func (p *planner) reconcile() {
	v := p.v
	if !v.initialized() {
		for _, c := range v.ctrs {
			if c.kind == kindApp {
				break
			}
			s := v.status(c.spec.Name)
			if c.kind == kindSidecar && s != nil && s.State == runtime.StateRunning ||
				c.kind == kindInit && s != nil && s.State == runtime.StateExited && s.ExitCode == 0 {
				continue
			}
			p.keep(c)
			return
		}
	}
	for _, c := range v.ctrs {
		if c.kind != kindInit {
			p.keep(c)
		}
	}
}

// keep moves container c toward running (or done): it starts it if it
// never ran, restarts it as its restart policy says, and replaces it if
// its image changed.
func (p *planner) keep(c ctr) {
	v := p.v
	name := c.spec.Name
	s := v.status(name)
	switch {
	case s == nil && v.lost(name):
		if v.restarts(c, exitLost) {
			p.start(c, p.container(name).Attempt+1, nil)
		}
	case s == nil:
		p.start(c, p.container(name).Attempt, nil)
	case s.State == runtime.StateRunning:
		if s.Image != c.spec.Image {
			p.replace(c)
			break
		}
		if r, ok := v.probed.result(name, s.ID); ok && r.Unhealthy {
			p.restartUnhealthy(c, s, r)
		}
	case s.State == runtime.StateUnknown:
		p.replace(c) // kubelet kills a container in an unknown state and starts it again
	case s.State == runtime.StateCreated:
		p.start(c, s.Attempt+1, nil)
	case s.State == runtime.StateExited:
		if v.restarts(c, s.ExitCode) {
			p.start(c, s.Attempt+1, s)
		}
	}
}

// restartUnhealthy kills container c, running as s, which its liveness
// (or startup) probe found unhealthy as r, with the pod's grace (or the
// probe's terminationGracePeriodSeconds), as kubelet does: once it has
// exited, it is restarted as its restart policy says, with the crash
// back-off of a container that failed.
func (p *planner) restartUnhealthy(c ctr, s *runtime.ContainerStatus, r ProbeResult) {
	grace := p.v.rec.Grace
	for _, pr := range []*corev1.Probe{c.spec.LivenessProbe, c.spec.StartupProbe} {
		if pr != nil && pr.TerminationGracePeriodSeconds != nil && *pr.TerminationGracePeriodSeconds >= 0 {
			grace = time.Duration(*pr.TerminationGracePeriodSeconds) * time.Second
			break
		}
	}
	probe := "liveness"
	if c.spec.StartupProbe != nil {
		if started, _ := probedState(p.v.probed, c.spec, s.ID); !started {
			probe = "startup"
		}
	}
	before := len(p.actions)
	p.stop(c.spec.Name, grace)
	if len(p.actions) > before {
		why := fmt.Sprintf("Container %s failed %s probe, will be restarted", c.spec.Name, probe)
		if r.Message != "" {
			why = fmt.Sprintf("Container %s failed %s probe, will be restarted: %s", c.spec.Name, probe, r.Message)
		}
		p.actions[len(p.actions)-1].Why = why
	}
}

// replace stops container c to start it again.
func (p *planner) replace(c ctr) {
	cr := p.container(c.spec.Name)
	cr.Replace = true
	p.put(c.spec.Name, cr)
	p.stop(c.spec.Name, p.v.rec.Grace)
}

// start starts container c as attempt, unless a back-off holds it; exited
// is its newest instance if that exited.
func (p *planner) start(c ctr, attempt int, exited *runtime.ContainerStatus) {
	v := p.v
	name := c.spec.Name
	cr := p.container(name)
	defer func() { p.put(name, cr) }()
	if v.unsupported != "" {
		cr.Reason, cr.Message = ReasonCreateContainerConfigError, v.unsupported
		return
	}
	crashed := exited != nil && !cr.Replace
	if crashed && cr.CrashBackOff.holdsSince(exited.FinishedAt, p.now) {
		cr.Reason = ReasonCrashLoopBackOff
		cr.Message = fmt.Sprintf("back-off %v restarting failed container=%s pod=%s_%s(%s)",
			cr.CrashBackOff.Delay, name, v.pod.Name, v.pod.Namespace, v.pod.UID)
		p.wakeAt(exited.FinishedAt.Add(cr.CrashBackOff.Delay))
		return
	}
	if cr.StartBackOff.holds(p.now) {
		// A failed pull shows as ErrImagePull, then, from half-way
		// through its back-off, as ImagePullBackOff with the pull's
		// error (kubelet 1.32's words): kubelet shows the one until the
		// pod's next sync, the other until the next pull.
		if cr.Reason == ReasonErrImagePull {
			if half := cr.StartBackOff.Since.Add(cr.StartBackOff.Delay / 2); p.now.Before(half) {
				p.wakeAt(half)
			} else {
				cr.Reason = ReasonImagePullBackOff
				cr.Message = truncate(fmt.Sprintf("Back-off pulling image %q: %s: %s", c.spec.Image, ReasonErrImagePull, cr.Message), maxMessage)
			}
		}
		p.wakeAt(cr.StartBackOff.Since.Add(cr.StartBackOff.Delay))
		return
	}
	// The crash back-off moves on only when a start is handed out, so
	// that how often Plan runs changes nothing.
	if crashed {
		cr.CrashBackOff = cr.CrashBackOff.next(exited.FinishedAt, p.now)
	}
	if exited != nil {
		cr.LastTermination = termination(exited)
	}
	cr.Replace = false
	p.actions = append(p.actions, Action{
		Type:      StartContainer,
		Pod:       p.ref,
		Container: name,
		Spec:      containerSpec(v.pod, c.spec),
		Attempt:   attempt,
	})
}

// termination returns how the exited container s ended.
func termination(s *runtime.ContainerStatus) *Termination {
	return &Termination{
		ExitCode:    s.ExitCode,
		Reason:      s.Reason,
		Message:     truncate(s.Message, maxMessage),
		StartedAt:   s.StartedAt.UTC().Round(0),
		FinishedAt:  s.FinishedAt.UTC().Round(0),
		ContainerID: s.ID,
	}
}
