package fake

import (
	"context"
	"errors"
	"fmt"
	goruntime "runtime"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/outpost-mesh/outpost/edge/runtime"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

// clock is a virtual clock, safe for concurrent use.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func newTest(behavior BehaviorFunc) (*Runtime, *clock) {
	c := &clock{now: t0}
	return New(Config{Clock: c.Now, Behavior: behavior}), c
}

var (
	ctx = context.Background()
	web = runtime.PodRef{UID: "u1", Namespace: "default", Name: "web"}
)

func spec(name, image string) runtime.ContainerSpec {
	return runtime.ContainerSpec{Name: name, Image: image}
}

// state returns "name:state/attempt/exit" of every container of the pod uid.
func state(t *testing.T, r *Runtime, uid string) string {
	t.Helper()
	l, err := r.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range l {
		if p.Pod.UID != uid {
			continue
		}
		s := ""
		for _, c := range p.Containers {
			s += fmt.Sprintf("%s:%s/%d/%d ", c.Name, c.State, c.Attempt, c.ExitCode)
		}
		return s
	}
	return "none"
}

func TestLifecycle(t *testing.T) {
	r, clk := newTest(nil)
	if err := r.StartContainer(ctx, web, spec("main", "nginx:1.27"), 0); err != nil {
		t.Fatalf("StartContainer(main) = %v", err)
	}
	if err := r.StartContainer(ctx, web, spec("main", "nginx:1.27"), 1); !errors.Is(err, runtime.ErrAlreadyRunning) {
		t.Errorf("StartContainer(main, running) = %v, want ErrAlreadyRunning", err)
	}
	if err := r.StartContainer(ctx, web, spec("side", "envoy"), 0); err != nil {
		t.Fatal(err)
	}
	l, _ := r.List(ctx)
	if len(l) != 1 || l[0].IP != "10.88.0.1" || !l[0].CreatedAt.Equal(t0) || l[0].Pod != web {
		t.Fatalf("List() = %+v, want pod web with IP 10.88.0.1", l)
	}
	c := l[0].Container("main")
	if c == nil || c.ID == "" || c.Image != "nginx:1.27" || c.ImageID != imageID("nginx:1.27") || !c.StartedAt.Equal(t0) {
		t.Errorf("List()[0].Container(main) = %+v", c)
	}
	if imageID("nginx:1.27") != imageID("nginx:1.27") || imageID("nginx:1.27") == imageID("nginx:1.28") {
		t.Errorf("imageID is not stable and distinct per image")
	}

	clk.Add(time.Minute)
	if err := r.StopContainer(ctx, web, "main", 30*time.Second); err != nil {
		t.Fatalf("StopContainer(main) = %v", err)
	}
	if err := r.StopContainer(ctx, web, "main", 30*time.Second); err != nil {
		t.Errorf("StopContainer(main, exited) = %v, want nil", err)
	}
	if got, want := state(t, r, "u1"), "main:exited/0/0 side:running/0/0 "; got != want {
		t.Errorf("after stop: %s, want %s", got, want)
	}
	// An exited container is replaced, keeping its place.
	if err := r.StartContainer(ctx, web, spec("main", "nginx:1.28"), 1); err != nil {
		t.Fatal(err)
	}
	if got, want := state(t, r, "u1"), "main:running/1/0 side:running/0/0 "; got != want {
		t.Errorf("after restart: %s, want %s", got, want)
	}
	for _, err := range []error{
		r.StopContainer(ctx, web, "nope", 0),
		r.StopContainer(ctx, runtime.PodRef{UID: "nope"}, "main", 0),
		r.Exit("u1", "nope", 1),
		r.ExitPod("nope", 1),
	} {
		if !errors.Is(err, runtime.ErrNotFound) {
			t.Errorf("on an unknown pod or container: %v, want ErrNotFound", err)
		}
	}
	if err := r.RemovePod(ctx, web); err != nil {
		t.Fatal(err)
	}
	if err := r.RemovePod(ctx, web); err != nil {
		t.Errorf("RemovePod(removed) = %v, want nil", err)
	}
	if l, _ := r.List(ctx); len(l) != 0 {
		t.Errorf("List() after RemovePod = %+v, want empty", l)
	}
	if got, want := r.Stats(), (Stats{Starts: 3, Stops: 1, Removes: 1}); got != want {
		t.Errorf("Stats() = %+v, want %+v", got, want)
	}
}

func TestStartRejectsBadSpec(t *testing.T) {
	r, _ := newTest(nil)
	for _, s := range []runtime.ContainerSpec{spec("", "nginx"), spec("main", "")} {
		if err := r.StartContainer(ctx, web, s, 0); !errors.Is(err, runtime.ErrNotSupported) {
			t.Errorf("StartContainer(%+v) = %v, want ErrNotSupported", s, err)
		}
	}
}

func TestFailPull(t *testing.T) {
	r, _ := newTest(nil)
	r.FailPull("web:v2", "manifest unknown")
	err := r.StartContainer(ctx, web, spec("main", "web:v2"), 0)
	if !errors.Is(err, runtime.ErrImagePull) {
		t.Fatalf("StartContainer(failing image) = %v, want ErrImagePull", err)
	}
	if got := state(t, r, "u1"); got != "" {
		t.Errorf("after a failed pull: %q, want the pod with no containers", got)
	}
	r.AllowPull("web:v2")
	if err := r.StartContainer(ctx, web, spec("main", "web:v2"), 0); err != nil {
		t.Errorf("StartContainer(allowed image) = %v", err)
	}
	if s := r.Stats(); s.FailedPulls != 1 || s.Starts != 1 {
		t.Errorf("Stats() = %+v, want 1 failed pull and 1 start", s)
	}
}

func TestExits(t *testing.T) {
	r, clk := newTest(nil)
	r.StartContainer(ctx, web, spec("a", "x"), 0)
	r.StartContainer(ctx, web, spec("b", "x"), 0)
	r.StartContainer(ctx, web, spec("c", "x"), 0)
	clk.Add(time.Second)
	if err := r.Exit("u1", "a", 3); err != nil {
		t.Fatal(err)
	}
	if err := r.Exit("u1", "a", 3); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("Exit(exited) = %v, want ErrNotFound", err)
	}
	if err := r.ExitPod("u1", 0); err != nil {
		t.Fatal(err)
	}
	if got, want := state(t, r, "u1"), "a:exited/0/3 b:exited/0/0 c:exited/0/0 "; got != want {
		t.Errorf("after exits: %s, want %s", got, want)
	}
	l, _ := r.List(ctx)
	if c := l[0].Container("a"); c.Reason != "Error" || !c.FinishedAt.Equal(t0.Add(time.Second)) {
		t.Errorf("exited container a = %+v, want reason Error at +1s", c)
	}
	if c := l[0].Container("b"); c.Reason != "Completed" {
		t.Errorf("exited container b = %+v, want reason Completed", c)
	}
}

func TestScheduledExits(t *testing.T) {
	r, clk := newTest(ByImage)
	if !r.NextExit().IsZero() {
		t.Errorf("NextExit() = %v on an empty runtime, want zero", r.NextExit())
	}
	r.StartContainer(ctx, web, spec("job", "crash:0-after-30s"), 0)
	r.StartContainer(ctx, web, spec("bad", "registry.local/team/crash:2"), 0)
	r.StartContainer(ctx, web, spec("srv", "nginx"), 0)
	if got, want := state(t, r, "u1"), "job:running/0/0 bad:exited/0/2 srv:running/0/0 "; got != want {
		t.Errorf("at start: %s, want %s", got, want)
	}
	if got := r.NextExit(); !got.Equal(t0.Add(30 * time.Second)) {
		t.Errorf("NextExit() = %v, want +30s", got)
	}
	clk.Add(29 * time.Second)
	if got, want := state(t, r, "u1"), "job:running/0/0 bad:exited/0/2 srv:running/0/0 "; got != want {
		t.Errorf("at +29s: %s, want %s", got, want)
	}
	clk.Add(time.Hour)
	if got, want := state(t, r, "u1"), "job:exited/0/0 bad:exited/0/2 srv:running/0/0 "; got != want {
		t.Errorf("at +1h: %s, want %s", got, want)
	}
	l, _ := r.List(ctx)
	if c := l[0].Container("job"); !c.FinishedAt.Equal(t0.Add(30 * time.Second)) {
		t.Errorf("job finished at %v, want +30s (when it exited, not when it was seen)", c.FinishedAt)
	}
	if !r.NextExit().IsZero() {
		t.Errorf("NextExit() = %v, want zero", r.NextExit())
	}
}

func TestSlowStop(t *testing.T) {
	r, clk := newTest(ByImage)
	r.StartContainer(ctx, web, spec("quick", "slowstop:5s"), 0)
	r.StartContainer(ctx, web, spec("stuck", "slowstop:1h"), 0)
	r.StopContainer(ctx, web, "quick", 30*time.Second)
	r.StopContainer(ctx, web, "stuck", 10*time.Second)
	if got, want := state(t, r, "u1"), "quick:running/0/0 stuck:running/0/0 "; got != want {
		t.Errorf("right after stop: %s, want %s", got, want)
	}
	clk.Add(5 * time.Second)
	if got, want := state(t, r, "u1"), "quick:exited/0/0 stuck:running/0/0 "; got != want {
		t.Errorf("at +5s: %s, want %s", got, want)
	}
	clk.Add(5 * time.Second)
	if got, want := state(t, r, "u1"), fmt.Sprintf("quick:exited/0/0 stuck:exited/0/%d ", ExitKilled); got != want {
		t.Errorf("at +10s: %s, want %s", got, want)
	}
	// A stop without grace kills at once.
	r.StartContainer(ctx, web, spec("stuck", "slowstop:1h"), 1)
	r.StopContainer(ctx, web, "stuck", 0)
	if got, want := state(t, r, "u1"), fmt.Sprintf("quick:exited/0/0 stuck:exited/1/%d ", ExitKilled); got != want {
		t.Errorf("after a kill: %s, want %s", got, want)
	}
}

func TestReboot(t *testing.T) {
	r, _ := newTest(ByImage)
	r.StartContainer(ctx, web, spec("a", "nginx"), 0)
	r.StartContainer(ctx, web, spec("b", "crash:0-after-1h"), 0)
	r.Reboot()
	if got, want := state(t, r, "u1"), "a:exited/0/255 b:exited/0/255 "; got != want {
		t.Errorf("after Reboot: %s, want %s", got, want)
	}
	if !r.NextExit().IsZero() {
		t.Errorf("NextExit() after Reboot = %v, want zero", r.NextExit())
	}
}

func TestByImage(t *testing.T) {
	for _, tt := range []struct {
		image string
		want  Behavior
	}{
		{"nginx", Behavior{}},
		{"crash:1", Behavior{Exit: true, ExitCode: 1}},
		{"registry.local:5000/a/crash:3-after-1m@sha256:abc", Behavior{Exit: true, ExitCode: 3, ExitAfter: time.Minute}},
		{"crash:x", Behavior{}},
		{"crash:0-after-soon", Behavior{Exit: true}},
		{"pullfail", Behavior{PullError: "manifest unknown"}},
		{"slowstop:20s", Behavior{StopDelay: 20 * time.Second}},
		{"slowstop", Behavior{}},
	} {
		if got := ByImage(web, spec("c", tt.image), 0); got != tt.want {
			t.Errorf("ByImage(%q) = %+v, want %+v", tt.image, got, tt.want)
		}
	}
	r, _ := newTest(ByImage)
	if err := r.StartContainer(ctx, web, spec("c", "pullfail:1"), 0); !errors.Is(err, runtime.ErrImagePull) {
		t.Errorf("StartContainer(pullfail:1) = %v, want ErrImagePull", err)
	}
}

func TestCanceledContext(t *testing.T) {
	r, _ := newTest(nil)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	for _, err := range []error{
		r.StartContainer(cctx, web, spec("a", "x"), 0),
		r.StopContainer(cctx, web, "a", 0),
		r.RemovePod(cctx, web),
		func() error { _, err := r.List(cctx); return err }(),
	} {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("call with a canceled context = %v, want context.Canceled", err)
		}
	}
}

func TestPodIPs(t *testing.T) {
	for n, want := range map[uint64]string{1: "10.88.0.1", 255: "10.88.0.255", 256: "10.88.1.0", 65534: "10.88.255.254", 65535: "10.88.0.1"} {
		if got := podIP(n); got != want {
			t.Errorf("podIP(%d) = %s, want %s", n, got, want)
		}
	}
}

// TestConcurrent runs pods through the runtime from many goroutines; run
// with -race.
func TestConcurrent(t *testing.T) {
	r, clk := newTest(ByImage)
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ref := runtime.PodRef{UID: fmt.Sprint(i), Namespace: "ns", Name: fmt.Sprint("p", i)}
			for j := range 50 {
				if err := r.StartContainer(ctx, ref, spec("c", "crash:1-after-1s"), j); err != nil && !errors.Is(err, runtime.ErrAlreadyRunning) {
					t.Error(err)
					return
				}
				clk.Add(time.Second)
				r.List(ctx)
				r.NextExit()
				r.StopContainer(ctx, ref, "c", time.Second)
			}
			r.RemovePod(ctx, ref)
		}()
	}
	wg.Wait()
	if l, _ := r.List(ctx); len(l) != 0 {
		t.Errorf("List() = %d pods, want none", len(l))
	}
}

// TestWatch: a watcher hears of each start, stop, exit and removal, and
// of an exit that comes with time, without listing.
func TestWatch(t *testing.T) {
	r := New(Config{Behavior: func(_ runtime.PodRef, c runtime.ContainerSpec, _ int) Behavior {
		if c.Name == "job" {
			return Behavior{Exit: true, ExitAfter: 50 * time.Millisecond}
		}
		return Behavior{}
	}})
	ctx, cancel := context.WithCancel(context.Background())
	evs := make(chan runtime.Event, 16)
	done := make(chan error)
	go func() { done <- r.Watch(ctx, func(ev runtime.Event) { evs <- ev }) }()
	ref := runtime.PodRef{UID: "u1", Namespace: "default", Name: "web"}
	want := func(typ runtime.EventType, container string) {
		t.Helper()
		select {
		case ev := <-evs:
			if ev.Type != typ || ev.Container != container || ev.Pod != ref {
				t.Fatalf("event %v %q of %v, want %v %q of %v", ev.Type, ev.Container, ev.Pod, typ, container, ref)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no %v event for %q", typ, container)
		}
	}
	// Events come only once Watch has registered: retry the first start
	// until it is heard.
	waitRegistered(t, r)
	if err := r.StartContainer(ctx, ref, runtime.ContainerSpec{Name: "main", Image: "busybox"}, 0); err != nil {
		t.Fatal(err)
	}
	want(runtime.ContainerStarted, "main")
	if err := r.StartContainer(ctx, ref, runtime.ContainerSpec{Name: "job", Image: "busybox"}, 0); err != nil {
		t.Fatal(err)
	}
	want(runtime.ContainerStarted, "job")
	want(runtime.ContainerExited, "job") // by itself, with time
	if err := r.StopContainer(ctx, ref, "main", time.Second); err != nil {
		t.Fatal(err)
	}
	want(runtime.ContainerExited, "main")
	if err := r.RemovePod(ctx, ref); err != nil {
		t.Fatal(err)
	}
	want(runtime.PodRemoved, "")
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Watch after cancel = %v, want nil", err)
	}
}

// waitRegistered waits until a Watch call has registered with r.
func waitRegistered(t *testing.T, r *Runtime) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r.mu.Lock()
		n := len(r.watchers)
		r.mu.Unlock()
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("Watch did not register")
		}
		goruntime.Gosched()
	}
}
