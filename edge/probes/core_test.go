package probes

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func execProbeSpec(mod func(*corev1.Probe)) *corev1.Probe {
	p := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}
	if mod != nil {
		mod(p)
	}
	return p
}

// outcomes scripts what each probe finds: the outcome of a run of kind k at
// offset at from the container's start.
type outcomes func(k Kind, at time.Duration) Outcome

// change is a Result as it became at an offset from the container's start.
type change struct {
	at time.Duration
	r  string // resultString
}

func resultString(r Result) string {
	s := fmt.Sprintf("started=%v ready=%v", r.Started, r.Ready)
	if r.LivenessFailed {
		s += " restart"
	}
	if r.KillGraceSet {
		s += fmt.Sprintf(" grace=%v", r.KillGrace)
	}
	if r.Message != "" {
		s += " msg=" + r.Message
	}
	return s
}

// simulate runs c's probes as the Manager's workers would, without jitter,
// from the container's start until until, and returns when each kind ran and
// how the Result changed (the first entry is the Result at the start).
func simulate(c *Container, start time.Time, out outcomes, until time.Duration) (runs map[Kind][]time.Duration, changes []change) {
	runs = make(map[Kind][]time.Duration)
	changes = []change{{0, resultString(c.Result())}}
	now := start
	for now.Sub(start) <= until {
		var wake time.Time
		for k := range numKinds {
			for {
				run, next := c.Due(k, now)
				if !run {
					if !next.IsZero() && (wake.IsZero() || next.Before(wake)) {
						wake = next
					}
					break
				}
				at := now.Sub(start)
				runs[k] = append(runs[k], at)
				o := out(k, at)
				if c.Observe(k, now, Observation{o, fmt.Sprintf("%v@%v", o, at)}) {
					changes = append(changes, change{at, resultString(c.Result())})
				}
			}
		}
		if wake.IsZero() {
			break
		}
		now = wake
	}
	return runs, changes
}

func s(d ...int) []time.Duration {
	r := make([]time.Duration, len(d))
	for i, v := range d {
		r[i] = time.Duration(v) * time.Second
	}
	return r
}

func always(o Outcome) outcomes { return func(Kind, time.Duration) Outcome { return o } }

// from returns outcomes giving a before offset at and b from it on, for
// kind k; other kinds always succeed.
func from(k Kind, at int, a, b Outcome) outcomes {
	return func(kk Kind, d time.Duration) Outcome {
		if kk != k {
			return Success
		}
		if d < time.Duration(at)*time.Second {
			return a
		}
		return b
	}
}

func TestContainerTiming(t *testing.T) {
	sec := func(n int) time.Duration { return time.Duration(n) * time.Second }
	for _, tc := range []struct {
		name        string
		c           corev1.Container
		out         outcomes
		until       int
		wantRuns    map[Kind][]time.Duration
		wantChanges []change
	}{
		{
			name:        "no probes: started and ready at once",
			until:       100,
			wantRuns:    map[Kind][]time.Duration{},
			wantChanges: []change{{0, "started=true ready=true"}},
		},
		{
			name:        "readiness with defaults: unready until the first success, every 10s",
			c:           corev1.Container{ReadinessProbe: execProbeSpec(nil)},
			out:         always(Success),
			until:       30,
			wantRuns:    map[Kind][]time.Duration{Readiness: s(0, 10, 20, 30)},
			wantChanges: []change{{0, "started=true ready=false"}, {0, "started=true ready=true"}},
		},
		{
			name: "initial delay counts from the start; the period from each run",
			c: corev1.Container{ReadinessProbe: execProbeSpec(func(p *corev1.Probe) {
				p.InitialDelaySeconds, p.PeriodSeconds = 5, 7
			})},
			out:         always(Success),
			until:       30,
			wantRuns:    map[Kind][]time.Duration{Readiness: s(5, 12, 19, 26)},
			wantChanges: []change{{0, "started=true ready=false"}, {sec(5), "started=true ready=true"}},
		},
		{
			name: "readiness success threshold: ready after that many successes in a row",
			c: corev1.Container{ReadinessProbe: execProbeSpec(func(p *corev1.Probe) {
				p.SuccessThreshold = 3
			})},
			out:      always(Success),
			until:    30,
			wantRuns: map[Kind][]time.Duration{Readiness: s(0, 10, 20, 30)},
			wantChanges: []change{
				{0, "started=true ready=false"},
				{sec(20), "started=true ready=true"},
			},
		},
		{
			name: "readiness failure threshold: unready after that many failures in a row, ready again after one success",
			c:    corev1.Container{ReadinessProbe: execProbeSpec(nil)},
			out: func(_ Kind, d time.Duration) Outcome {
				if d >= sec(10) && d < sec(50) {
					return Failure
				}
				return Success
			},
			until:    60,
			wantRuns: map[Kind][]time.Duration{Readiness: s(0, 10, 20, 30, 40, 50, 60)},
			wantChanges: []change{
				{0, "started=true ready=false"},
				{0, "started=true ready=true"},
				{sec(10), "started=true ready=true msg=Readiness probe failed: Failure@10s"},
				{sec(20), "started=true ready=true msg=Readiness probe failed: Failure@20s"},
				{sec(30), "started=true ready=false msg=Readiness probe failed: Failure@30s"},
				{sec(40), "started=true ready=false msg=Readiness probe failed: Failure@40s"},
				{sec(50), "started=true ready=true"},
			},
		},
		{
			name: "runs are counted in a row: alternating outcomes never cross a threshold of 2",
			c: corev1.Container{ReadinessProbe: execProbeSpec(func(p *corev1.Probe) {
				p.SuccessThreshold, p.FailureThreshold, p.PeriodSeconds = 2, 2, 1
			})},
			out: func(_ Kind, d time.Duration) Outcome {
				if d < sec(6) && (d/time.Second)%2 == 1 {
					return Failure
				}
				return Success
			},
			until:    7,
			wantRuns: map[Kind][]time.Duration{Readiness: s(0, 1, 2, 3, 4, 5, 6, 7)},
			wantChanges: []change{
				{0, "started=true ready=false"},
				{sec(1), "started=true ready=false msg=Readiness probe failed: Failure@1s"},
				{sec(2), "started=true ready=false"},
				{sec(3), "started=true ready=false msg=Readiness probe failed: Failure@3s"},
				{sec(4), "started=true ready=false"},
				{sec(5), "started=true ready=false msg=Readiness probe failed: Failure@5s"},
				{sec(6), "started=true ready=false"},
				{sec(7), "started=true ready=true"},
			},
		},
		{
			name: "liveness failure threshold: restart, then nothing more probed by liveness; readiness goes on",
			c: corev1.Container{
				LivenessProbe: execProbeSpec(func(p *corev1.Probe) {
					p.InitialDelaySeconds = 3
					p.TerminationGracePeriodSeconds = new(int64(7))
				}),
				ReadinessProbe: execProbeSpec(nil),
			},
			out:   from(Liveness, 13, Success, Failure),
			until: 60,
			wantRuns: map[Kind][]time.Duration{
				Liveness:  s(3, 13, 23, 33),
				Readiness: s(0, 10, 20, 30, 40, 50, 60),
			},
			wantChanges: []change{
				{0, "started=true ready=false"},
				{0, "started=true ready=true"},
				{sec(13), "started=true ready=true msg=Liveness probe failed: Failure@13s"},
				{sec(23), "started=true ready=true msg=Liveness probe failed: Failure@23s"},
				{sec(33), "started=true ready=true restart grace=7s msg=Liveness probe failed: Failure@33s"},
			},
		},
		{
			name: "liveness: a success between failures restarts the count",
			c: corev1.Container{LivenessProbe: execProbeSpec(func(p *corev1.Probe) {
				p.FailureThreshold = 2
			})},
			out: func(_ Kind, d time.Duration) Outcome {
				if d == sec(10) || d >= sec(30) {
					return Failure
				}
				return Success
			},
			until:    60,
			wantRuns: map[Kind][]time.Duration{Liveness: s(0, 10, 20, 30, 40)},
			wantChanges: []change{
				{0, "started=true ready=true"},
				{sec(10), "started=true ready=true msg=Liveness probe failed: Failure@10s"},
				{sec(20), "started=true ready=true"},
				{sec(30), "started=true ready=true msg=Liveness probe failed: Failure@30s"},
				{sec(40), "started=true ready=true restart msg=Liveness probe failed: Failure@40s"},
			},
		},
		{
			name: "startup gates liveness and readiness until it succeeds, then stops; they run at once",
			c: corev1.Container{
				StartupProbe: execProbeSpec(func(p *corev1.Probe) {
					p.PeriodSeconds, p.FailureThreshold = 2, 30
				}),
				LivenessProbe:  execProbeSpec(func(p *corev1.Probe) { p.PeriodSeconds = 5 }),
				ReadinessProbe: execProbeSpec(func(p *corev1.Probe) { p.InitialDelaySeconds = 1 }),
			},
			out:   from(Startup, 5, Failure, Success),
			until: 20,
			wantRuns: map[Kind][]time.Duration{
				Startup:   s(0, 2, 4, 6),
				Liveness:  s(6, 11, 16),
				Readiness: s(6, 16),
			},
			wantChanges: []change{
				{0, "started=false ready=false"},
				{0, "started=false ready=false msg=Startup probe failed: Failure@0s"},
				{sec(2), "started=false ready=false msg=Startup probe failed: Failure@2s"},
				{sec(4), "started=false ready=false msg=Startup probe failed: Failure@4s"},
				{sec(6), "started=true ready=false"},
				{sec(6), "started=true ready=true"},
			},
		},
		{
			name: "startup without readiness: ready once started",
			c: corev1.Container{StartupProbe: execProbeSpec(func(p *corev1.Probe) {
				p.InitialDelaySeconds, p.PeriodSeconds = 4, 1
			})},
			out:         always(Success),
			until:       20,
			wantRuns:    map[Kind][]time.Duration{Startup: s(4)},
			wantChanges: []change{{0, "started=false ready=false"}, {sec(4), "started=true ready=true"}},
		},
		{
			name: "startup failure threshold: restart, never started, nothing else probed",
			c: corev1.Container{
				StartupProbe:   execProbeSpec(func(p *corev1.Probe) { p.PeriodSeconds, p.FailureThreshold = 1, 2 }),
				LivenessProbe:  execProbeSpec(nil),
				ReadinessProbe: execProbeSpec(nil),
			},
			out:      always(Failure),
			until:    30,
			wantRuns: map[Kind][]time.Duration{Startup: s(0, 1)},
			wantChanges: []change{
				{0, "started=false ready=false"},
				{0, "started=false ready=false msg=Startup probe failed: Failure@0s"},
				{sec(1), "started=false ready=false restart msg=Startup probe failed: Failure@1s"},
			},
		},
		{
			name: "an errored run counts neither way but says why",
			c:    corev1.Container{ReadinessProbe: execProbeSpec(func(p *corev1.Probe) { p.FailureThreshold = 1 })},
			out: func(_ Kind, d time.Duration) Outcome {
				switch d {
				case sec(10), sec(20):
					return Errored
				case sec(30):
					return Failure
				}
				return Success
			},
			until:    40,
			wantRuns: map[Kind][]time.Duration{Readiness: s(0, 10, 20, 30, 40)},
			wantChanges: []change{
				{0, "started=true ready=false"},
				{0, "started=true ready=true"},
				{sec(10), "started=true ready=true msg=Readiness probe errored: Errored@10s"},
				{sec(20), "started=true ready=true msg=Readiness probe errored: Errored@20s"},
				{sec(30), "started=true ready=false msg=Readiness probe failed: Failure@30s"},
				{sec(40), "started=true ready=true"},
			},
		},
		{
			name: "errored runs never make a container ready, nor restart it",
			c: corev1.Container{
				LivenessProbe:  execProbeSpec(func(p *corev1.Probe) { p.FailureThreshold = 1 }),
				ReadinessProbe: execProbeSpec(nil),
			},
			out:      always(Errored),
			until:    20,
			wantRuns: map[Kind][]time.Duration{Liveness: s(0, 10, 20), Readiness: s(0, 10, 20)},
			wantChanges: []change{
				{0, "started=true ready=false"},
				{0, "started=true ready=false msg=Liveness probe errored: Errored@0s"},
				{sec(10), "started=true ready=false msg=Liveness probe errored: Errored@10s"},
				{sec(20), "started=true ready=false msg=Liveness probe errored: Errored@20s"},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewContainer("cid", &tc.c, t0)
			out := tc.out
			if out == nil {
				out = always(Success)
			}
			runs, changes := simulate(c, t0, out, time.Duration(tc.until)*time.Second)
			for k := range numKinds {
				if g, w := fmt.Sprint(runs[k]), fmt.Sprint(tc.wantRuns[k]); g != w {
					t.Errorf("%v probe ran at %s, want %s", k, g, w)
				}
			}
			if g, w := fmt.Sprint(changes), fmt.Sprint(tc.wantChanges); g != w {
				t.Errorf("results:\n%s\nwant:\n%s", strings.ReplaceAll(g, "} {", "}\n{"), strings.ReplaceAll(w, "} {", "}\n{"))
			}
		})
	}
}

func TestContainerDue(t *testing.T) {
	c := NewContainer("cid", &corev1.Container{ReadinessProbe: execProbeSpec(func(p *corev1.Probe) {
		p.InitialDelaySeconds, p.PeriodSeconds = 30, 10
	})}, t0)
	for _, tc := range []struct {
		at       time.Duration
		wantRun  bool
		wantNext time.Duration
	}{
		{0, false, 30 * time.Second},
		{29*time.Second + 999*time.Millisecond, false, 30 * time.Second},
		{30 * time.Second, true, 0},
	} {
		run, next := c.Due(Readiness, t0.Add(tc.at))
		var n time.Duration
		if !next.IsZero() {
			n = next.Sub(t0)
		}
		if run != tc.wantRun || n != tc.wantNext {
			t.Errorf("Due(Readiness, +%v) = %v, +%v; want %v, +%v", tc.at, run, n, tc.wantRun, tc.wantNext)
		}
	}
	if run, next := c.Due(Liveness, t0.Add(time.Hour)); run || !next.IsZero() {
		t.Errorf("Due(Liveness) without a liveness probe = %v, %v; want false, zero", run, next)
	}
	// Run late (the worker was busy): the period counts from that run.
	c.Observe(Readiness, t0.Add(35*time.Second), Observation{Outcome: Success})
	if run, next := c.Due(Readiness, t0.Add(44*time.Second)); run || !next.Equal(t0.Add(45*time.Second)) {
		t.Errorf("Due after a run at +35s = %v, %v; want false, +45s", run, next.Sub(t0))
	}
}

func TestContainerTerminating(t *testing.T) {
	c := NewContainer("cid", &corev1.Container{
		StartupProbe:   execProbeSpec(func(p *corev1.Probe) { p.FailureThreshold = 1 }),
		LivenessProbe:  execProbeSpec(func(p *corev1.Probe) { p.FailureThreshold = 1 }),
		ReadinessProbe: execProbeSpec(nil),
	}, t0)
	c.Observe(Startup, t0, Observation{Outcome: Success})
	c.SetTerminating()
	if run, _ := c.Due(Liveness, t0); run {
		t.Errorf("Due(Liveness) while terminating = true, want false")
	}
	if run, _ := c.Due(Readiness, t0); !run {
		t.Errorf("Due(Readiness) while terminating = false, want true")
	}
	// A liveness probe that was under way when the pod began terminating
	// restarts nothing.
	if c.Observe(Liveness, t0, Observation{Failure, "down"}) || c.Result().LivenessFailed {
		t.Errorf("a liveness failure while terminating changed the result to %+v", c.Result())
	}
	c.Observe(Readiness, t0, Observation{Outcome: Success})
	if r := c.Result(); !r.Ready {
		t.Errorf("readiness success while terminating: %+v, want ready", r)
	}

	s := NewContainer("cid2", &corev1.Container{StartupProbe: execProbeSpec(nil)}, t0)
	s.SetTerminating()
	if run, _ := s.Due(Startup, t0); run {
		t.Errorf("Due(Startup) while terminating = true, want false")
	}
}

// TestContainerNewInstance: a new instance starts from nothing whatever
// the last one came to.
func TestContainerNewInstance(t *testing.T) {
	spec := &corev1.Container{LivenessProbe: execProbeSpec(func(p *corev1.Probe) { p.FailureThreshold = 1 }), ReadinessProbe: execProbeSpec(nil)}
	a := NewContainer("a", spec, t0)
	a.Observe(Readiness, t0, Observation{Outcome: Success})
	a.Observe(Liveness, t0, Observation{Failure, "down"})
	if r := a.Result(); !r.LivenessFailed || !r.Ready || r.ContainerID != "a" {
		t.Fatalf("a.Result() = %+v", r)
	}
	if run, _ := a.Due(Liveness, t0.Add(time.Hour)); run {
		t.Errorf("a failed liveness probe is due again in the same instance")
	}
	b := NewContainer("b", spec, t0.Add(time.Minute))
	if r := b.Result(); r != (Result{ContainerID: "b", Started: true}) {
		t.Errorf("b.Result() = %+v, want started, unready, not failed", r)
	}
	if run, _ := b.Due(Liveness, t0.Add(time.Minute)); !run {
		t.Errorf("the new instance's liveness probe is not due")
	}
}

func TestContainerMessagePriority(t *testing.T) {
	c := NewContainer("cid", &corev1.Container{
		LivenessProbe:  execProbeSpec(nil),
		ReadinessProbe: execProbeSpec(nil),
	}, t0)
	c.Observe(Readiness, t0, Observation{Failure, "not yet"})
	if m := c.Result().Message; m != "Readiness probe failed: not yet" {
		t.Errorf("Message = %q", m)
	}
	c.Observe(Liveness, t0, Observation{Failure, "stuck"})
	if m := c.Result().Message; m != "Liveness probe failed: stuck" {
		t.Errorf("Message = %q, want the liveness probe's first", m)
	}
}

func TestInvalidProbes(t *testing.T) {
	port := func(p intstr.IntOrString) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: p}}}
	}
	for _, tc := range []struct {
		name  string
		kind  Kind
		probe *corev1.Probe
		want  string
	}{
		{"no handler", Readiness, &corev1.Probe{}, "invalid readiness probe: no handler, it needs one of exec, httpGet, tcpSocket or grpc"},
		{"two handlers", Liveness, execProbeSpec(func(p *corev1.Probe) { p.HTTPGet = &corev1.HTTPGetAction{Port: intstr.FromInt(80)} }),
			"invalid liveness probe: 2 handlers (exec, httpGet), it needs exactly one"},
		{"missing named port", Readiness, port(intstr.FromString("web")), `invalid readiness probe: port "web" is not the name of one of the container's ports`},
		{"empty port name", Readiness, port(intstr.FromString("")), "invalid readiness probe: port is empty"},
		{"port 0", Readiness, port(intstr.FromInt(0)), "invalid readiness probe: port 0 is not from 1 to 65535"},
		{"port too big", Readiness, port(intstr.FromInt(70000)), "invalid readiness probe: port 70000 is not from 1 to 65535"},
		{"negative port as string", Readiness, port(intstr.FromString("-1")), "invalid readiness probe: port -1 is not from 1 to 65535"},
		{"bad port type", Readiness, port(intstr.IntOrString{Type: 7}), "invalid readiness probe: port {7 0 } is neither a number nor a name"},
		{"negative delay", Startup, execProbeSpec(func(p *corev1.Probe) { p.InitialDelaySeconds = -1 }), "invalid startup probe: initialDelaySeconds is -1, must not be negative"},
		{"negative period", Readiness, execProbeSpec(func(p *corev1.Probe) { p.PeriodSeconds = -10 }), "invalid readiness probe: periodSeconds is -10, must not be negative"},
		{"negative timeout", Readiness, execProbeSpec(func(p *corev1.Probe) { p.TimeoutSeconds = -1 }), "invalid readiness probe: timeoutSeconds is -1, must not be negative"},
		{"negative failure threshold", Readiness, execProbeSpec(func(p *corev1.Probe) { p.FailureThreshold = -3 }), "invalid readiness probe: failureThreshold is -3, must not be negative"},
		{"negative success threshold", Readiness, execProbeSpec(func(p *corev1.Probe) { p.SuccessThreshold = -3 }), "invalid readiness probe: successThreshold is -3, must not be negative"},
		{"liveness success threshold", Liveness, execProbeSpec(func(p *corev1.Probe) { p.SuccessThreshold = 2 }), "invalid liveness probe: successThreshold is 2, must be 1 for a liveness probe"},
		{"startup success threshold", Startup, execProbeSpec(func(p *corev1.Probe) { p.SuccessThreshold = 3 }), "invalid startup probe: successThreshold is 3, must be 1 for a startup probe"},
		{"zero grace", Liveness, execProbeSpec(func(p *corev1.Probe) { p.TerminationGracePeriodSeconds = new(int64(0)) }), "invalid liveness probe: terminationGracePeriodSeconds is 0, must be positive"},
		{"empty command", Readiness, &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{}}}, "invalid readiness probe: exec has no command"},
		{"bad scheme", Readiness, &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt(80), Scheme: "FTP"}}},
			`invalid readiness probe: scheme "FTP" is neither HTTP nor HTTPS`},
		{"bad header name", Readiness, &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt(80),
			HTTPHeaders: []corev1.HTTPHeader{{Name: "X Bad", Value: "v"}}}}}, `invalid readiness probe: HTTP header name "X Bad" is not a valid header name`},
		{"bad header value", Readiness, &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt(80),
			HTTPHeaders: []corev1.HTTPHeader{{Name: "X-Ok", Value: "a\r\nb"}}}}}, `invalid readiness probe: HTTP header X-Ok has a value with control characters`},
		{"grpc port", Readiness, &corev1.Probe{ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: -5}}}, "invalid readiness probe: grpc port -5 is not from 1 to 65535"},
		{"nil probe", Readiness, nil, "invalid readiness probe: none given"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := &corev1.Container{Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}}
			if _, err := ParseProbe(tc.kind, tc.probe, spec); err == nil || err.Error() != tc.want {
				t.Errorf("ParseProbe = %v, want %q", err, tc.want)
			}
			if tc.probe == nil {
				return
			}
			switch tc.kind {
			case Startup:
				spec.StartupProbe = tc.probe
			case Liveness:
				spec.LivenessProbe = tc.probe
			case Readiness:
				spec.ReadinessProbe = tc.probe
			}
			c := NewContainer("cid", spec, t0)
			if run, next := c.Due(tc.kind, t0.Add(time.Hour)); run || !next.IsZero() {
				t.Errorf("Due = %v, %v; an invalid probe must never run", run, next)
			}
			r := c.Result()
			if r.Message != tc.want {
				t.Errorf("Result().Message = %q, want %q", r.Message, tc.want)
			}
			// Invalid startup: never started; invalid readiness: never
			// ready; invalid liveness: never restarted.
			want := Result{ContainerID: "cid", Started: tc.kind != Startup, Ready: tc.kind == Liveness, Message: tc.want}
			if r != want {
				t.Errorf("Result() = %+v, want %+v", r, want)
			}
		})
	}
}

func TestParseProbe(t *testing.T) {
	spec := &corev1.Container{Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}}
	for _, tc := range []struct {
		name  string
		kind  Kind
		probe *corev1.Probe
		want  Timing
	}{
		{"defaults", Readiness, execProbeSpec(nil), Timing{Period: 10 * time.Second, Timeout: time.Second, SuccessThreshold: 1, FailureThreshold: 3}},
		{"all set", Readiness, execProbeSpec(func(p *corev1.Probe) {
			p.InitialDelaySeconds, p.PeriodSeconds, p.TimeoutSeconds, p.SuccessThreshold, p.FailureThreshold = 1, 2, 3, 4, 5
		}), Timing{InitialDelay: time.Second, Period: 2 * time.Second, Timeout: 3 * time.Second, SuccessThreshold: 4, FailureThreshold: 5}},
		{"readiness ignores grace", Readiness, execProbeSpec(func(p *corev1.Probe) { p.TerminationGracePeriodSeconds = new(int64(0)) }),
			Timing{Period: 10 * time.Second, Timeout: time.Second, SuccessThreshold: 1, FailureThreshold: 3}},
		{"liveness grace", Liveness, execProbeSpec(func(p *corev1.Probe) { p.TerminationGracePeriodSeconds = new(int64(5)) }),
			Timing{Period: 10 * time.Second, Timeout: time.Second, SuccessThreshold: 1, FailureThreshold: 3, KillGrace: 5 * time.Second, KillGraceSet: true}},
		{"named port", Readiness, &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromString("http")}}},
			Timing{Period: 10 * time.Second, Timeout: time.Second, SuccessThreshold: 1, FailureThreshold: 3}},
		{"port number as string", Readiness, &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("9000")}}},
			Timing{Period: 10 * time.Second, Timeout: time.Second, SuccessThreshold: 1, FailureThreshold: 3}},
		{"biggest numbers", Liveness, execProbeSpec(func(p *corev1.Probe) {
			p.InitialDelaySeconds, p.PeriodSeconds, p.TimeoutSeconds, p.FailureThreshold = 1<<31-1, 1<<31-1, 1<<31-1, 1<<31-1
			p.TerminationGracePeriodSeconds = new(int64(1<<63 - 1))
		}), Timing{InitialDelay: (1<<31 - 1) * time.Second, Period: (1<<31 - 1) * time.Second, Timeout: (1<<31 - 1) * time.Second,
			SuccessThreshold: 1, FailureThreshold: 1<<31 - 1, KillGrace: 100 * 365 * 24 * time.Hour, KillGraceSet: true}},
	} {
		got, err := ParseProbe(tc.kind, tc.probe, spec)
		if err != nil || got != tc.want {
			t.Errorf("%s: ParseProbe = %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
}

// FuzzProbeSpec: no probe spec makes the core panic, and one that parses
// has timing the workers can use.
func FuzzProbeSpec(f *testing.F) {
	f.Add(int32(0), int32(0), int32(0), int32(0), int32(0), uint8(1), int32(80), "", int64(0))
	f.Add(int32(5), int32(-1), int32(3), int32(2), int32(9), uint8(6), int32(0), "http", int64(-3))
	f.Fuzz(func(t *testing.T, delay, period, timeout, success, failure int32, handlers uint8, port int32, portName string, grace int64) {
		var p corev1.Probe
		p.InitialDelaySeconds, p.PeriodSeconds, p.TimeoutSeconds, p.SuccessThreshold, p.FailureThreshold = delay, period, timeout, success, failure
		if grace != 0 {
			p.TerminationGracePeriodSeconds = &grace
		}
		pt := intstr.FromInt32(port)
		if portName != "" {
			pt = intstr.FromString(portName)
		}
		if handlers&1 != 0 {
			p.Exec = &corev1.ExecAction{Command: []string{"x"}}
		}
		if handlers&2 != 0 {
			p.HTTPGet = &corev1.HTTPGetAction{Port: pt, Path: portName}
		}
		if handlers&4 != 0 {
			p.TCPSocket = &corev1.TCPSocketAction{Port: pt}
		}
		if handlers&8 != 0 {
			p.GRPC = &corev1.GRPCAction{Port: port}
		}
		spec := &corev1.Container{StartupProbe: &p, LivenessProbe: &p, ReadinessProbe: &p,
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: port}}}
		for k := range numKinds {
			tm, err := ParseProbe(k, &p, spec)
			if err == nil && (tm.Period <= 0 || tm.Timeout <= 0 || tm.SuccessThreshold < 1 || tm.FailureThreshold < 1 || tm.InitialDelay < 0) {
				t.Fatalf("ParseProbe(%v) = %+v, nil", k, tm)
			}
		}
		c := NewContainer("cid", spec, t0)
		simulate(c, t0, func(k Kind, d time.Duration) Outcome { return Outcome(1 + (int(d/time.Second)+int(k))%3) }, 10*time.Minute)
		_ = c.Result()
	})
}
