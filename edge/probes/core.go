package probes

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Kind is the kind of a probe.
type Kind uint8

// The kinds of probes, in the order Result words their messages.
const (
	Startup Kind = iota
	Liveness
	Readiness
	numKinds
)

// String returns "Startup", "Liveness" or "Readiness", as kubelet's events
// word them.
func (k Kind) String() string {
	switch k {
	case Startup:
		return "Startup"
	case Liveness:
		return "Liveness"
	case Readiness:
		return "Readiness"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

func (k Kind) lower() string {
	switch k {
	case Startup:
		return "startup"
	case Liveness:
		return "liveness"
	case Readiness:
		return "readiness"
	}
	return k.String()
}

// Outcome is the outcome of one run of a probe.
type Outcome uint8

// Outcomes.
const (
	// Success: the check passed (an HTTP status from 200 to 399, a TCP
	// connection, a SERVING gRPC health status, an exit code of 0).
	Success Outcome = iota + 1
	// Failure: the check ran and did not pass, or did not finish within
	// the probe's timeout. Failures count toward the failure threshold.
	Failure
	// Errored: the check could not be run (the container is gone, the
	// runtime cannot exec). As kubelet does, it counts neither way: the
	// probe keeps its result, and the message says why.
	Errored
)

// String returns "Success", "Failure" or "Errored".
func (o Outcome) String() string {
	switch o {
	case Success:
		return "Success"
	case Failure:
		return "Failure"
	case Errored:
		return "Errored"
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// Observation is what one run of a probe found. Message says why for a
// Failure or Errored (an HTTP status, a command's output, a dial error).
type Observation struct {
	Outcome Outcome
	Message string
}

// Result is what the probes of one container instance say.
type Result struct {
	// ContainerID is the instance the result is for; a result never
	// carries over to another instance.
	ContainerID string
	// Started: the container runs and its startup probe, if it has one,
	// has succeeded. Liveness and readiness probes run only once it has.
	Started bool
	// Ready: started, and its readiness probe, if it has one, has
	// succeeded (successThreshold times in a row) and not failed since
	// (failureThreshold times in a row).
	Ready bool
	// LivenessFailed: its liveness or startup probe failed
	// failureThreshold times in a row. The container is to be killed and
	// restarted by the pod's restart policy; nothing more is probed in
	// this instance. It stays set until the instance is replaced.
	LivenessFailed bool
	// KillGrace, when KillGraceSet, replaces the pod's grace period for
	// that kill: the failed probe's terminationGracePeriodSeconds.
	KillGrace    time.Duration
	KillGraceSet bool
	// Message says why the container is not started, not ready or to be
	// restarted, as kubelet's Unhealthy events do ("Readiness probe
	// failed: HTTP probe failed with statuscode: 503"), or that a probe
	// could not run; "" when every probe last succeeded.
	Message string
}

// Container is the probe state of one container instance: the pure core of
// kubelet's probe workers, with time passed in. A new instance of the
// container (another ID) gets a new Container. It is not safe for
// concurrent use.
type Container struct {
	id          string
	startedAt   time.Time
	terminating bool
	probes      [numKinds]probeState
}

// probeState is one probe of a container instance.
type probeState struct {
	present bool
	timing  Timing
	invalid string // why the probe cannot run; it never runs

	ran     bool      // it has run at least once
	lastRun time.Time // start of its latest run
	last    Outcome   // outcome of the latest counted run
	run     int       // runs in a row with outcome last
	// ok is the probe's result: its value before its first run is
	// kubelet's (readiness and startup failed, liveness passed).
	ok     bool
	failed bool // liveness or startup reached its failure threshold: on hold
	msg    string
}

// NewContainer returns the probe state of instance id of container c,
// started at startedAt. An invalid probe of c never runs and says why in
// the Result's Message: an invalid startup probe keeps the container from
// starting, an invalid readiness probe keeps it unready, an invalid
// liveness probe restarts nothing.
func NewContainer(id string, c *corev1.Container, startedAt time.Time) *Container {
	ct := &Container{id: id, startedAt: startedAt}
	if c == nil {
		return ct
	}
	for k, p := range [numKinds]*corev1.Probe{c.StartupProbe, c.LivenessProbe, c.ReadinessProbe} {
		if p == nil {
			continue
		}
		ps := &ct.probes[k]
		ps.present = true
		ps.ok = Kind(k) == Liveness
		t, err := ParseProbe(Kind(k), p, c)
		if err != nil {
			ps.invalid = err.Error()
			ps.msg = err.Error()
			continue
		}
		ps.timing = t
	}
	return ct
}

// ID returns the container instance's ID.
func (c *Container) ID() string { return c.id }

// Resume carries over what the node last reported of the instance, for an
// agent that restarted while it ran: started (its startup probe passed)
// and ready stay so until its probes say otherwise, instead of starting
// over unstarted and unready as a new instance's do. Otherwise every
// probed pod of the node would leave its Services until its readiness
// probe ran again after the restart, refusing connections that the pod
// would have served.
func (c *Container) Resume(started, ready bool) {
	if s := &c.probes[Startup]; started && s.present && s.invalid == "" {
		s.ok = true
	}
	if r := &c.probes[Readiness]; ready && c.started() && r.present && r.invalid == "" {
		r.ok = true
	}
}

// Timing returns the timing of c's probe of kind k, and false if c has no
// such probe or it is invalid.
func (c *Container) Timing(k Kind) (Timing, bool) {
	ps := &c.probes[k]
	return ps.timing, ps.present && ps.invalid == ""
}

// SetTerminating records that the pod is being deleted. As kubelet does,
// liveness and startup probes then stop, so that a container shutting down
// is not restarted; readiness probes go on.
func (c *Container) SetTerminating() { c.terminating = true }

// Due says whether c's probe of kind k is to run at now. If not, next is
// when it may be due, or zero if it waits for something other than time:
// a startup probe to succeed, a new instance, the pod's end.
func (c *Container) Due(k Kind, now time.Time) (run bool, next time.Time) {
	ps := &c.probes[k]
	if !ps.present || ps.invalid != "" || ps.failed {
		return false, time.Time{}
	}
	switch k {
	case Startup:
		if ps.ok || c.terminating {
			return false, time.Time{}
		}
	case Liveness:
		if c.terminating || !c.started() {
			return false, time.Time{}
		}
	case Readiness:
		if !c.started() {
			return false, time.Time{}
		}
	}
	if at := c.startedAt.Add(ps.timing.InitialDelay); now.Before(at) {
		return false, at
	}
	if ps.ran {
		if at := ps.lastRun.Add(ps.timing.Period); now.Before(at) {
			return false, at
		}
	}
	return true, time.Time{}
}

// Observe records o, the outcome of a run of c's probe of kind k that
// started at start. It reports whether c's Result changed.
func (c *Container) Observe(k Kind, start time.Time, o Observation) bool {
	before := c.Result()
	ps := &c.probes[k]
	if !ps.present || ps.invalid != "" || ps.failed || (c.terminating && k != Readiness) {
		return false
	}
	ps.ran = true
	ps.lastRun = start
	switch o.Outcome {
	case Success, Failure:
	default:
		ps.msg = k.String() + " probe errored: " + o.Message
		return c.Result() != before
	}
	if o.Outcome == ps.last {
		ps.run++
	} else {
		ps.last, ps.run = o.Outcome, 1
	}
	if o.Outcome == Success {
		ps.msg = ""
		if ps.run >= ps.timing.SuccessThreshold {
			ps.ok = true
		}
	} else {
		ps.msg = k.String() + " probe failed: " + o.Message
		if ps.run >= ps.timing.FailureThreshold {
			ps.ok = false
			if k != Readiness {
				ps.failed = true
			}
		}
	}
	return c.Result() != before
}

func (c *Container) started() bool {
	s := &c.probes[Startup]
	return !s.present || s.ok
}

// Result returns what c's probes say.
func (c *Container) Result() Result {
	r := Result{ContainerID: c.id, Started: c.started()}
	rd := &c.probes[Readiness]
	r.Ready = r.Started && (!rd.present || rd.ok)
	for _, k := range []Kind{Startup, Liveness} {
		ps := &c.probes[k]
		if ps.failed && !r.LivenessFailed {
			r.LivenessFailed = true
			r.KillGrace, r.KillGraceSet = ps.timing.KillGrace, ps.timing.KillGraceSet
			r.Message = ps.msg
		}
	}
	if r.Message == "" {
		for k := range numKinds {
			if m := c.probes[k].msg; m != "" {
				r.Message = m
				break
			}
		}
	}
	return r
}
