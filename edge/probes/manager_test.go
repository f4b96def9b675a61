package probes

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/outpost-mesh/outpost/edge/runtime"
)

// fakeExec answers exec probes from a script: the command ["c"] in
// container ctr exits with codes["ctr/c"] (0 if unset), or hangs until its
// context ends if hang["ctr/c"].
type fakeExec struct {
	mu    sync.Mutex
	codes map[string]int
	hang  map[string]bool
	calls map[string]int
}

func newFakeExec() *fakeExec {
	return &fakeExec{codes: map[string]int{}, hang: map[string]bool{}, calls: map[string]int{}}
}

func (f *fakeExec) Exec(ctx context.Context, pod runtime.PodRef, container string, opts runtime.ExecOptions) (int, error) {
	key := container + "/" + opts.Command[0]
	f.mu.Lock()
	f.calls[key]++
	code, hang := f.codes[key], f.hang[key]
	f.mu.Unlock()
	if hang {
		<-ctx.Done()
		return -1, ctx.Err()
	}
	return code, nil
}

func (f *fakeExec) set(key string, code int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.codes[key] = code
}

func (f *fakeExec) count(key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[key]
}

// changeLog records OnChange's calls.
type changeLog struct {
	mu   sync.Mutex
	uids []string
}

func (c *changeLog) add(uid string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.uids = append(c.uids, uid)
}

func (c *changeLog) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	u := c.uids
	c.uids = nil
	return u
}

func probeCmd(cmd string, mod func(*corev1.Probe)) *corev1.Probe {
	p := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{cmd}}}}
	if mod != nil {
		mod(p)
	}
	return p
}

func podOf(uid string, cs ...corev1.Container) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{UID: types.UID("uid-" + uid), Namespace: "ns", Name: "pod-" + uid},
		Spec:       corev1.PodSpec{Containers: cs},
	}
}

func running(ids ...string) Target {
	t := Target{IP: "10.0.0.9", Containers: map[string]ContainerTarget{}}
	for i := 0; i+1 < len(ids); i += 2 {
		t.Containers[ids[i]] = ContainerTarget{ID: ids[i+1], Running: true, StartedAt: time.Now()}
	}
	return t
}

// harness runs a Manager in the current synctest bubble.
type harness struct {
	t       *testing.T
	m       *Manager
	ex      *fakeExec
	changes *changeLog
	cancel  context.CancelFunc
	done    chan error
}

func startHarness(t *testing.T, mod func(*Config)) *harness {
	t.Helper()
	h := &harness{t: t, ex: newFakeExec(), changes: &changeLog{}, done: make(chan error, 1)}
	cfg := DefaultConfig()
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.Exec = h.ex
	cfg.OnChange = h.changes.add
	cfg.Jitter = func(time.Duration) time.Duration { return 0 }
	if mod != nil {
		mod(&cfg)
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.m = m
	var ctx context.Context
	ctx, h.cancel = context.WithCancel(context.Background())
	go func() { h.done <- m.Run(ctx) }()
	synctest.Wait()
	return h
}

// stop ends Run and checks that it returned with no worker left.
func (h *harness) stop() {
	h.t.Helper()
	h.cancel()
	if err := <-h.done; err != nil {
		h.t.Errorf("Run = %v", err)
	}
	if n := h.workers(); n != 0 {
		h.t.Errorf("%d workers left after Run returned", n)
	}
}

func (h *harness) workers() int {
	h.m.mu.Lock()
	defer h.m.mu.Unlock()
	return h.m.workers
}

// at sleeps in the bubble until d after start, then until everything
// settled.
func at(start time.Time, d time.Duration) {
	time.Sleep(time.Until(start.Add(d)))
	synctest.Wait()
}

func (h *harness) result(uid, container string) Result {
	h.t.Helper()
	r, ok := h.m.Results(uid)[container]
	if !ok {
		h.t.Fatalf("Results(%s) has no %s: %v", uid, container, h.m.Results(uid))
	}
	return r
}

func TestManagerReadiness(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := startHarness(t, nil)
		defer h.stop()
		start := time.Now()
		pod := podOf("a", corev1.Container{Name: "app", ReadinessProbe: probeCmd("ready", func(p *corev1.Probe) {
			p.InitialDelaySeconds, p.PeriodSeconds, p.SuccessThreshold, p.FailureThreshold = 5, 10, 2, 2
		})})
		h.m.Sync(pod, running("app", "c1"))
		synctest.Wait()
		if r := h.result("uid-a", "app"); r != (Result{ContainerID: "c1", Started: true}) {
			t.Fatalf("before the first probe: %+v, want started and unready", r)
		}
		if n := h.ex.count("app/ready"); n != 0 {
			t.Fatalf("probed %d times within the initial delay", n)
		}
		h.changes.take()

		at(start, 5*time.Second+time.Millisecond)
		if n := h.ex.count("app/ready"); n != 1 {
			t.Fatalf("probed %d times at 5s, want 1", n)
		}
		if r := h.result("uid-a", "app"); r.Ready {
			t.Fatalf("ready after 1 success of 2")
		}
		at(start, 15*time.Second+time.Millisecond)
		if r := h.result("uid-a", "app"); !r.Ready {
			t.Fatalf("not ready after 2 successes: %+v", r)
		}
		if c := h.changes.take(); !slices.Equal(c, []string{"uid-a"}) {
			t.Errorf("OnChange calls %v, want [uid-a]", c)
		}

		h.ex.set("app/ready", 1)
		at(start, 25*time.Second+time.Millisecond)
		if r := h.result("uid-a", "app"); !r.Ready || r.Message != `Readiness probe failed: command ["ready"] exited with code 1` {
			t.Fatalf("after 1 failure of 2: %+v, want ready with the failure's message", r)
		}
		at(start, 35*time.Second+time.Millisecond)
		if r := h.result("uid-a", "app"); r.Ready {
			t.Fatalf("ready after 2 failures: %+v", r)
		}
		if n := h.ex.count("app/ready"); n != 4 {
			t.Errorf("probed %d times by 35s, want 4 (5s, 15s, 25s, 35s)", n)
		}
		if c := h.changes.take(); !slices.Equal(c, []string{"uid-a", "uid-a"}) {
			t.Errorf("OnChange calls %v, want two for uid-a (message, then unready)", c)
		}
	})
}

func TestManagerLiveness(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := startHarness(t, nil)
		defer h.stop()
		start := time.Now()
		pod := podOf("a", corev1.Container{Name: "app", LivenessProbe: probeCmd("live", func(p *corev1.Probe) {
			p.PeriodSeconds, p.FailureThreshold = 1, 3
			p.TerminationGracePeriodSeconds = new(int64(4))
		})})
		h.ex.set("app/live", 7)
		h.m.Sync(pod, running("app", "c1"))
		at(start, 1500*time.Millisecond)
		if r := h.result("uid-a", "app"); r.LivenessFailed {
			t.Fatalf("liveness failed after 2 failures: %+v", r)
		}
		at(start, 2500*time.Millisecond)
		r := h.result("uid-a", "app")
		want := Result{ContainerID: "c1", Started: true, Ready: true, LivenessFailed: true, KillGrace: 4 * time.Second, KillGraceSet: true,
			Message: `Liveness probe failed: command ["live"] exited with code 7`}
		if r != want {
			t.Fatalf("after 3 failures: %+v, want %+v", r, want)
		}
		at(start, time.Minute)
		if n := h.ex.count("app/live"); n != 3 {
			t.Errorf("probed %d times, want 3: nothing after the failure until another instance", n)
		}

		// The agent restarts the container: another instance, probed
		// afresh.
		h.ex.set("app/live", 0)
		h.m.Sync(pod, running("app", "c2"))
		synctest.Wait()
		if r := h.result("uid-a", "app"); r != (Result{ContainerID: "c2", Started: true, Ready: true}) {
			t.Fatalf("new instance: %+v, want started, ready, not failed", r)
		}
		at(start, time.Minute+10500*time.Millisecond)
		if n := h.ex.count("app/live"); n != 3+11 {
			t.Errorf("probed %d times, want 14: the new instance every second", n)
		}
	})
}

func TestManagerStartupGates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := startHarness(t, nil)
		defer h.stop()
		start := time.Now()
		pod := podOf("a", corev1.Container{
			Name:           "app",
			StartupProbe:   probeCmd("start", func(p *corev1.Probe) { p.PeriodSeconds, p.FailureThreshold = 1, 100 }),
			LivenessProbe:  probeCmd("live", nil),
			ReadinessProbe: probeCmd("ready", nil),
		})
		h.ex.set("app/start", 1)
		h.m.Sync(pod, running("app", "c1"))
		at(start, 30*time.Second+time.Millisecond)
		if n, l, rd := h.ex.count("app/start"), h.ex.count("app/live"), h.ex.count("app/ready"); n != 31 || l != 0 || rd != 0 {
			t.Fatalf("before startup succeeded: startup %d, liveness %d, readiness %d runs; want 31, 0, 0", n, l, rd)
		}
		if r := h.result("uid-a", "app"); r.Started || r.Ready {
			t.Fatalf("before startup succeeded: %+v", r)
		}
		h.ex.set("app/start", 0)
		at(start, 31*time.Second+time.Millisecond)
		// The other probes ran at once when startup succeeded, not a
		// period later.
		if l, rd := h.ex.count("app/live"), h.ex.count("app/ready"); l != 1 || rd != 1 {
			t.Errorf("at startup's success: liveness %d, readiness %d runs; want 1, 1", l, rd)
		}
		if r := h.result("uid-a", "app"); !r.Started || !r.Ready {
			t.Errorf("after startup succeeded: %+v, want started and ready", r)
		}
		at(start, 2*time.Minute)
		if n := h.ex.count("app/start"); n != 32 {
			t.Errorf("startup ran %d times, want 32: none after it succeeded", n)
		}
	})
}

func TestManagerRemove(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := startHarness(t, nil)
		defer h.stop()
		pod := podOf("a",
			corev1.Container{Name: "app", LivenessProbe: probeCmd("live", nil), ReadinessProbe: probeCmd("ready", nil)},
			corev1.Container{Name: "side", ReadinessProbe: probeCmd("stuck", nil)},
		)
		h.ex.hang["side/stuck"] = true
		h.m.Sync(pod, running("app", "c1", "side", "c2"))
		synctest.Wait()
		if n := h.workers(); n != 3 {
			t.Fatalf("%d workers, want 3", n)
		}
		h.changes.take()
		// One probe is under way (it hangs): Remove cancels it.
		h.m.Remove("uid-a")
		synctest.Wait()
		if n := h.workers(); n != 0 {
			t.Errorf("%d workers left after Remove", n)
		}
		if r := h.m.Results("uid-a"); r != nil {
			t.Errorf("Results after Remove = %v, want nil", r)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		if c := h.changes.take(); len(c) != 0 {
			t.Errorf("OnChange after Remove: %v", c)
		}
		if n := h.ex.count("app/live"); n != 1 {
			t.Errorf("liveness ran %d times, want 1: none after Remove", n)
		}
	})
}

// TestManagerRunEnds: Run returns when its context ends, its workers (a
// probe under way among them) gone.
func TestManagerRunEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := startHarness(t, nil)
		h.ex.hang["app/stuck"] = true
		h.m.Sync(podOf("a", corev1.Container{Name: "app", ReadinessProbe: probeCmd("stuck", func(p *corev1.Probe) { p.TimeoutSeconds = 100 })}),
			running("app", "c1"))
		h.m.Sync(podOf("b", corev1.Container{Name: "app", LivenessProbe: probeCmd("live", nil)}), running("app", "c2"))
		synctest.Wait()
		if n := h.workers(); n != 2 {
			t.Fatalf("%d workers, want 2", n)
		}
		h.stop()
		// Results outlive Run.
		if r := h.m.Results("uid-b"); !r["app"].Ready {
			t.Errorf("Results after Run = %v", r)
		}
	})
}

func TestManagerContainerStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := startHarness(t, nil)
		defer h.stop()
		start := time.Now()
		pod := podOf("a", corev1.Container{Name: "app", ReadinessProbe: probeCmd("ready", nil)})
		h.m.Sync(pod, running("app", "c1"))
		synctest.Wait()
		if r := h.result("uid-a", "app"); !r.Ready {
			t.Fatalf("%+v, want ready", r)
		}
		h.changes.take()
		h.m.Sync(pod, Target{IP: "10.0.0.9", Containers: map[string]ContainerTarget{"app": {ID: "c1"}}})
		synctest.Wait()
		if r := h.result("uid-a", "app"); r != (Result{ContainerID: "c1"}) {
			t.Errorf("exited: %+v, want unstarted, unready", r)
		}
		if c := h.changes.take(); !slices.Equal(c, []string{"uid-a"}) {
			t.Errorf("OnChange calls %v, want [uid-a]", c)
		}
		if n := h.workers(); n != 0 {
			t.Errorf("%d workers for an exited container", n)
		}
		at(start, time.Minute)
		if n := h.ex.count("app/ready"); n != 1 {
			t.Errorf("probed %d times, want 1: none once exited", n)
		}
		// Gone from the target: not created (yet).
		h.m.Sync(pod, Target{})
		if r := h.result("uid-a", "app"); r != (Result{}) {
			t.Errorf("not created: %+v", r)
		}
	})
}

func TestManagerTerminating(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := startHarness(t, nil)
		defer h.stop()
		start := time.Now()
		pod := podOf("a", corev1.Container{Name: "app",
			LivenessProbe:  probeCmd("live", func(p *corev1.Probe) { p.FailureThreshold = 1 }),
			ReadinessProbe: probeCmd("ready", nil)})
		tg := running("app", "c1")
		h.m.Sync(pod, tg)
		synctest.Wait()
		deleting := pod.DeepCopy()
		deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
		h.m.Sync(deleting, tg)
		h.ex.set("app/live", 1)
		at(start, 65*time.Second)
		if n, rd := h.ex.count("app/live"), h.ex.count("app/ready"); n != 1 || rd != 7 {
			t.Errorf("while terminating: liveness %d, readiness %d runs; want 1 (before), 7", n, rd)
		}
		if r := h.result("uid-a", "app"); r.LivenessFailed {
			t.Errorf("liveness failed while terminating: %+v", r)
		}
	})
}

func TestManagerJitter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := startHarness(t, func(c *Config) {
			c.Jitter = func(p time.Duration) time.Duration { return p / 2 }
		})
		defer h.stop()
		start := time.Now()
		// Synced right after Run started: the first probe waits half
		// its period.
		h.m.Sync(podOf("a", corev1.Container{Name: "app", ReadinessProbe: probeCmd("ready", nil)}), running("app", "c1"))
		at(start, 4*time.Second)
		if n := h.ex.count("app/ready"); n != 0 {
			t.Fatalf("probed %d times within the jitter", n)
		}
		at(start, 5*time.Second+time.Millisecond)
		if n := h.ex.count("app/ready"); n != 1 {
			t.Fatalf("probed %d times after the jitter, want 1", n)
		}
		// Synced more than a period after Run started: no jitter.
		at(start, 11*time.Second)
		h.m.Sync(podOf("b", corev1.Container{Name: "app2", ReadinessProbe: probeCmd("ready", nil)}), running("app2", "c2"))
		synctest.Wait()
		if n := h.ex.count("app2/ready"); n != 1 {
			t.Errorf("a pod synced long after Run was probed %d times at once, want 1", n)
		}
	})
}

func TestManagerNoExec(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := startHarness(t, func(c *Config) { c.Exec = nil })
		defer h.stop()
		h.m.Sync(podOf("a", corev1.Container{Name: "app", ReadinessProbe: probeCmd("ready", nil),
			LivenessProbe: probeCmd("live", func(p *corev1.Probe) { p.FailureThreshold = 1 })}), running("app", "c1"))
		synctest.Wait()
		r := h.result("uid-a", "app")
		if r.Ready || r.LivenessFailed || !strings.Contains(r.Message, ErrExecNotSupported.Error()) {
			t.Errorf("without exec: %+v, want unready, not failed, saying why", r)
		}
	})
}

// TestManagerBeforeRun: Sync before Run gives results at once; probes run
// once Run starts.
func TestManagerBeforeRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ex := newFakeExec()
		cfg := DefaultConfig()
		cfg.Exec = ex
		cfg.Jitter = func(time.Duration) time.Duration { return 0 }
		m, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		pod := podOf("a", corev1.Container{Name: "app", ReadinessProbe: probeCmd("ready", nil)})
		pod.Spec.InitContainers = []corev1.Container{
			{Name: "init", ReadinessProbe: probeCmd("ready", nil)},
			{Name: "sidecar", RestartPolicy: new(corev1.ContainerRestartPolicyAlways), ReadinessProbe: probeCmd("ready", nil)},
		}
		m.Sync(pod, running("app", "c1", "sidecar", "c2", "init", "c3"))
		res := m.Results("uid-a")
		if len(res) != 2 || res["app"].Ready || !res["app"].Started || res["sidecar"].Ready {
			t.Fatalf("before Run: %v, want app and sidecar, started and unready", res)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		go func() { done <- m.Run(ctx) }()
		synctest.Wait()
		if err := m.Run(ctx); err == nil {
			t.Errorf("a second Run while one runs = nil, want an error")
		}
		res = m.Results("uid-a")
		if !res["app"].Ready || !res["sidecar"].Ready {
			t.Errorf("after Run started: %v, want both ready", res)
		}
		if n := ex.count("init/ready"); n != 0 {
			t.Errorf("an init container was probed %d times", n)
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	})
}

// TestManagerOddSpecs: no pod spec makes the Manager panic.
func TestManagerOddSpecs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := startHarness(t, nil)
		defer h.stop()
		h.m.Sync(nil, Target{})
		h.m.Sync(&corev1.Pod{}, running("app", "c1"))
		pod := podOf("a",
			corev1.Container{Name: "none", ReadinessProbe: &corev1.Probe{}},
			corev1.Container{Name: "two", LivenessProbe: probeCmd("x", func(p *corev1.Probe) { p.TCPSocket = &corev1.TCPSocketAction{} })},
			corev1.Container{Name: "port", ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{}}}},
			corev1.Container{Name: "neg", StartupProbe: probeCmd("x", func(p *corev1.Probe) { p.PeriodSeconds = -1 })},
		)
		h.m.Sync(pod, running("none", "1", "two", "2", "port", "3", "neg", "4", "ghost", "5"))
		synctest.Wait()
		res := h.m.Results("uid-a")
		for name, want := range map[string]Result{
			"none": {ContainerID: "1", Started: true, Message: "invalid readiness probe: no handler, it needs one of exec, httpGet, tcpSocket or grpc"},
			"two":  {ContainerID: "2", Started: true, Ready: true, Message: "invalid liveness probe: 2 handlers (exec, tcpSocket), it needs exactly one"},
			"port": {ContainerID: "3", Started: true, Message: "invalid readiness probe: port 0 is not from 1 to 65535"},
			"neg":  {ContainerID: "4", Message: "invalid startup probe: periodSeconds is -1, must not be negative"},
		} {
			if res[name] != want {
				t.Errorf("%s: %+v, want %+v", name, res[name], want)
			}
		}
		if len(res) != 4 {
			t.Errorf("Results = %v, want the 4 containers of the spec", res)
		}
		if n := h.workers(); n != 0 {
			t.Errorf("%d workers for invalid probes", n)
		}
	})
}

func TestConfigValidate(t *testing.T) {
	c := DefaultConfig()
	if err := c.Validate(); err != nil {
		t.Errorf("DefaultConfig().Validate() = %v", err)
	}
	c.Logger = nil
	if _, err := New(c); err == nil {
		t.Errorf("New without a Logger = nil error")
	}
}

func TestTargetOf(t *testing.T) {
	now := time.Now()
	got := TargetOf(&runtime.PodStatus{IP: "10.1.1.1", Containers: []runtime.ContainerStatus{
		{Name: "a", ID: "containerd://1", State: runtime.StateRunning, StartedAt: now},
		{Name: "b", ID: "containerd://2", State: runtime.StateExited},
		{Name: "c", ID: "containerd://3", State: runtime.StateUnknown},
	}})
	want := Target{IP: "10.1.1.1", Containers: map[string]ContainerTarget{
		"a": {ID: "containerd://1", Running: true, StartedAt: now},
		"b": {ID: "containerd://2"},
		"c": {ID: "containerd://3"},
	}}
	if got.IP != want.IP || len(got.Containers) != 3 {
		t.Fatalf("TargetOf = %+v, want %+v", got, want)
	}
	for k, v := range want.Containers {
		if g := got.Containers[k]; g.ID != v.ID || g.Running != v.Running || !g.StartedAt.Equal(v.StartedAt) {
			t.Errorf("TargetOf: %s = %+v, want %+v", k, g, v)
		}
	}
}

// TestManagerResume: an instance the pod's status already shows started
// and ready, as after an agent restart, stays ready until its readiness
// probe fails past its threshold, and its startup probe does not run
// again. Another instance, or the same one shown unready, starts
// unready.
func TestManagerResume(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := startHarness(t, nil)
		defer h.stop()
		start := time.Now()
		spec := corev1.Container{Name: "app",
			StartupProbe: probeCmd("started", nil),
			ReadinessProbe: probeCmd("ready", func(p *corev1.Probe) {
				p.PeriodSeconds, p.FailureThreshold = 10, 2
			})}
		reported := func(uid, id string, ready bool) *corev1.Pod {
			p := podOf(uid, spec)
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{
				Name: "app", ContainerID: id, Ready: ready, Started: new(true),
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
			}}
			return p
		}
		h.ex.set("app/ready", 1)
		h.m.Sync(reported("a", "c1", true), running("app", "c1"))
		h.m.Sync(reported("b", "old", true), running("app", "c2"))
		h.m.Sync(reported("c", "c3", false), running("app", "c3"))
		synctest.Wait()
		if r := h.result("uid-a", "app"); !r.Ready || !r.Started {
			t.Errorf("the instance reported ready, after 1 failure of 2: %+v, want started and ready", r)
		}
		for _, uid := range []string{"uid-b", "uid-c"} {
			if r := h.result(uid, "app"); r.Ready || !r.Started {
				t.Errorf("%s: %+v, want started and unready", uid, r)
			}
		}
		if n := h.ex.count("app/started"); n != 1 {
			t.Errorf("startup probe ran %d times, want once (b's; a's and c's passed before)", n)
		}
		at(start, 10*time.Second+10*time.Millisecond)
		if r := h.result("uid-a", "app"); r.Ready {
			t.Fatalf("after 2 failures: %+v, want unready", r)
		}
	})
}
