// Package fake is an in-memory runtime.Runtime for unit tests and fleet
// simulation, not a container runtime: nothing runs; containers are map
// entries that change when a test says so or when an injected clock says.
//
// It starts no goroutines but one per Attach with a Stdin, which reads
// it, and no timers but Watch's, in its caller's goroutine, so thousands of them fit in one process. Only tests and simulations import it, never the agent's binary.
package fake

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/outpost-mesh/outpost/edge/runtime"
)

var (
	_ runtime.Runtime = (*Runtime)(nil)
	_ runtime.Watcher = (*Runtime)(nil)
)

// Exit codes and reasons the fake gives containers, as containerd would.
const (
	// ExitKilled is the exit code of a container killed once its stop's
	// grace ran out (SIGKILL).
	ExitKilled = 137
	// ExitReboot is the exit code of the containers a Reboot ended.
	ExitReboot = 255
)

// Config configures a fake Runtime.
type Config struct {
	// Clock returns the current time; nil for time.Now. Simulations and
	// tests pass a virtual clock and advance it themselves.
	Clock func() time.Time
	// Behavior says how each started container behaves; nil for
	// containers that run until stopped. ByImage scripts behavior by image
	// name.
	Behavior BehaviorFunc
	// Exec runs the commands of Exec, once Exec has checked that the
	// container runs; nil answers every Exec with ErrNotSupported. It
	// may block until ctx is done.
	Exec func(ctx context.Context, pod runtime.PodRef, container string, opts runtime.ExecOptions) (int, error)
}

// Behavior is how one started container behaves. The zero Behavior runs
// until stopped, and stops at once with exit code 0.
type Behavior struct {
	// Exit makes the container exit by itself ExitAfter after it started
	// (0: at once), with ExitCode.
	Exit      bool
	ExitAfter time.Duration
	ExitCode  int32

	// StopDelay is how long the container takes to exit once asked to
	// stop; if the stop's grace is shorter, it is killed (ExitKilled) when
	// the grace runs out. StopCode is its exit code when it exits in time.
	StopDelay time.Duration
	StopCode  int32

	// PullError, if set, fails the image pull with this reason.
	PullError string
}

// BehaviorFunc returns the behavior of a container about to start. It is
// called without the Runtime's lock held and must not block.
type BehaviorFunc func(pod runtime.PodRef, c runtime.ContainerSpec, attempt int) Behavior

// ByImage is a BehaviorFunc that reads the behavior from the image name,
// for simulations whose pods come from manifests. It looks at the last
// path element of the image, name[:tag]:
//
//   - crash:CODE exits with CODE right after it starts (crash:1);
//     crash:CODE-after-DURATION exits after DURATION (crash:0-after-30s
//     completes after 30 seconds, like a job);
//   - pullfail:* cannot be pulled ("manifest unknown");
//   - slowstop:DURATION takes DURATION to exit when asked to stop;
//   - any other image runs until stopped.
func ByImage(_ runtime.PodRef, c runtime.ContainerSpec, _ int) Behavior {
	ref := c.Image
	if i := strings.LastIndexByte(ref, '/'); i >= 0 {
		ref = ref[i+1:]
	}
	name, tag, _ := strings.Cut(ref, ":")
	if i := strings.IndexByte(tag, '@'); i >= 0 {
		tag = tag[:i]
	}
	switch name {
	case "crash":
		code, after, _ := strings.Cut(tag, "-after-")
		n, err := strconv.ParseInt(code, 10, 32)
		if err != nil {
			return Behavior{}
		}
		b := Behavior{Exit: true, ExitCode: int32(n)}
		if after != "" {
			if d, err := time.ParseDuration(after); err == nil && d > 0 {
				b.ExitAfter = d
			}
		}
		return b
	case "pullfail":
		return Behavior{PullError: "manifest unknown"}
	case "slowstop":
		if d, err := time.ParseDuration(tag); err == nil && d > 0 {
			return Behavior{StopDelay: d}
		}
	}
	return Behavior{}
}

// Stats counts the calls a Runtime served.
type Stats struct {
	Starts      int // StartContainer calls that started a container
	FailedPulls int // StartContainer calls whose pull failed
	Stops       int // StopContainer calls for a running container
	Removes     int // RemovePod calls for a pod the runtime held
}

// Runtime is the fake runtime. Share one between the agent instances of a
// test to test adoption: the agent is recreated, the runtime is kept. All
// methods are safe for concurrent use.
type Runtime struct {
	now    func() time.Time
	behave BehaviorFunc
	exec   func(ctx context.Context, pod runtime.PodRef, container string, opts runtime.ExecOptions) (int, error)

	mu        sync.Mutex
	pods      map[string]*pod   // by UID
	pullFails map[string]string // image -> reason
	seq       uint64            // containers started, for their IDs
	podSeq    uint64            // pods created, for their IPs
	nextExit  time.Time         // earliest exitAt of a running container; zero if none
	stats     Stats
	pending   []runtime.Event       // events not yet handed to the watchers
	watchers  map[*watcher]struct{} // the Watch calls in progress
}

// watcher is one Watch call's queue of events.
type watcher struct {
	mu     sync.Mutex
	queue  []runtime.Event
	signal chan struct{} // capacity 1: the queue has events
}

type pod struct {
	ref        runtime.PodRef
	ip         string
	createdAt  time.Time
	containers []*container // in order of first creation
}

type container struct {
	runtime.ContainerStatus
	exitAt   time.Time // when it exits by itself; zero: not until stopped
	exitCode int32     // its code then
	behavior Behavior
	attached map[*attacher]struct{} // the Attach calls in progress

	stdin, tty  bool               // as its spec says
	stdinData   []byte             // what its attachers wrote to its stdin
	stdinClosed bool               // an attach to it with StdinOnce ended
	resizes     []runtime.TermSize // applied to its terminal, oldest first
}

// New returns an empty fake runtime.
func New(cfg Config) *Runtime {
	now := cfg.Clock
	if now == nil {
		now = time.Now
	}
	return &Runtime{
		now:       now,
		behave:    cfg.Behavior,
		exec:      cfg.Exec,
		pods:      make(map[string]*pod),
		pullFails: make(map[string]string),
		watchers:  make(map[*watcher]struct{}),
	}
}

// List implements runtime.Runtime. Pods come in UID order, containers in
// the order they were first created.
func (r *Runtime) List(ctx context.Context) ([]runtime.PodStatus, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	defer r.flush()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.settle(r.now())
	out := make([]runtime.PodStatus, 0, len(r.pods))
	for _, p := range r.pods {
		ps := runtime.PodStatus{Pod: p.ref, IP: p.ip, CreatedAt: p.createdAt}
		ps.Containers = make([]runtime.ContainerStatus, len(p.containers))
		for i, c := range p.containers {
			ps.Containers[i] = c.ContainerStatus
		}
		out = append(out, ps)
	}
	slices.SortFunc(out, func(a, b runtime.PodStatus) int { return strings.Compare(a.Pod.UID, b.Pod.UID) })
	return out, nil
}

// StartContainer implements runtime.Runtime. The container is running
// when it returns; a Behavior that exits at once shows it exited from the
// next call on.
func (r *Runtime) StartContainer(ctx context.Context, ref runtime.PodRef, spec runtime.ContainerSpec, attempt int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if ref.UID == "" || spec.Name == "" || spec.Image == "" {
		return fmt.Errorf("start container %q of pod %s: empty pod UID, container name or image: %w", spec.Name, ref, runtime.ErrNotSupported)
	}
	var b Behavior
	if r.behave != nil {
		b = r.behave(ref, spec, attempt)
	}

	defer r.flush()
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	r.settle(now)
	p := r.pods[ref.UID]
	if p == nil {
		r.podSeq++
		p = &pod{ref: ref, ip: podIP(r.podSeq), createdAt: now}
		r.pods[ref.UID] = p
	}
	i := slices.IndexFunc(p.containers, func(c *container) bool { return c.Name == spec.Name })
	if i >= 0 && p.containers[i].State == runtime.StateRunning {
		return fmt.Errorf("start container %q of pod %s: %w", spec.Name, ref, runtime.ErrAlreadyRunning)
	}
	reason, fail := r.pullFails[spec.Image]
	if !fail && b.PullError != "" {
		reason, fail = b.PullError, true
	}
	if fail {
		r.stats.FailedPulls++
		return fmt.Errorf("pull image %q: %w: %s", spec.Image, runtime.ErrImagePull, reason)
	}

	r.seq++
	c := &container{behavior: b, stdin: spec.Stdin, tty: spec.TTY}
	c.ContainerStatus = runtime.ContainerStatus{
		Name:      spec.Name,
		ID:        fmt.Sprintf("fake://%016x", r.seq),
		Image:     spec.Image,
		ImageID:   imageID(spec.Image),
		State:     runtime.StateRunning,
		Attempt:   attempt,
		CreatedAt: now,
		StartedAt: now,
	}
	if b.Exit {
		r.schedule(c, now.Add(b.ExitAfter), b.ExitCode)
	}
	if i >= 0 {
		p.containers[i] = c
	} else {
		p.containers = append(p.containers, c)
	}
	r.stats.Starts++
	r.pending = append(r.pending, runtime.Event{Pod: ref, Container: spec.Name, Type: runtime.ContainerStarted})
	return nil
}

// StopContainer implements runtime.Runtime, except that it does not block:
// a container whose Behavior has a StopDelay stays running until the clock
// reaches the time it exits (or is killed).
func (r *Runtime) StopContainer(ctx context.Context, ref runtime.PodRef, name string, grace time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	defer r.flush()
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	r.settle(now)
	c, err := r.find(ref.UID, name)
	if err != nil {
		return fmt.Errorf("stop container %q of pod %s: %w", name, ref, err)
	}
	ref = r.pods[ref.UID].ref
	if c.State != runtime.StateRunning {
		return nil
	}
	r.stats.Stops++
	b := c.behavior
	switch {
	case b.StopDelay == 0:
		r.exit(ref, c, now, b.StopCode)
	case b.StopDelay < grace:
		r.schedule(c, now.Add(b.StopDelay), b.StopCode)
	case grace <= 0:
		r.exit(ref, c, now, ExitKilled)
	default:
		r.schedule(c, now.Add(grace), ExitKilled)
	}
	return nil
}

// RemovePod implements runtime.Runtime.
func (r *Runtime) RemovePod(ctx context.Context, ref runtime.PodRef) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	defer r.flush()
	r.mu.Lock()
	defer r.mu.Unlock()
	if p, ok := r.pods[ref.UID]; ok {
		for _, c := range p.containers {
			for a := range c.attached {
				a.end(ExitKilled)
			}
			c.attached = nil
		}
		delete(r.pods, ref.UID)
		r.stats.Removes++
		r.pending = append(r.pending, runtime.Event{Pod: ref, Type: runtime.PodRemoved})
	}
	return nil
}

// FailPull makes every pull of image fail with reason, until AllowPull.
func (r *Runtime) FailPull(image, reason string) {
	defer r.flush()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pullFails[image] = reason
}

// AllowPull undoes FailPull.
func (r *Runtime) AllowPull(image string) {
	defer r.flush()
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.pullFails, image)
}

// Exit makes the named running container of the pod exit now with code,
// as a crash (code != 0) or a normal end (0). It returns an error wrapping
// runtime.ErrNotFound if no such container runs.
func (r *Runtime) Exit(uid, name string, code int32) error {
	defer r.flush()
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	r.settle(now)
	c, err := r.find(uid, name)
	if err != nil {
		return fmt.Errorf("exit container %q of pod %s: %w", name, uid, err)
	}
	if c.State != runtime.StateRunning {
		return fmt.Errorf("exit container %q of pod %s: not running: %w", name, uid, runtime.ErrNotFound)
	}
	r.exit(r.pods[uid].ref, c, now, code)
	return nil
}

// ExitPod makes every running container of the pod exit now with code. It
// returns an error wrapping runtime.ErrNotFound for an unknown pod.
func (r *Runtime) ExitPod(uid string, code int32) error {
	defer r.flush()
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	r.settle(now)
	p := r.pods[uid]
	if p == nil {
		return fmt.Errorf("exit pod %s: %w", uid, runtime.ErrNotFound)
	}
	for _, c := range p.containers {
		if c.State == runtime.StateRunning {
			r.exit(p.ref, c, now, code)
		}
	}
	return nil
}

// Reboot ends every running container as a power cut would: they show as
// exited with ExitReboot and reason "Unknown". Pods and their IPs stay.
func (r *Runtime) Reboot() {
	defer r.flush()
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	r.settle(now)
	for _, p := range r.pods {
		for _, c := range p.containers {
			if c.State == runtime.StateRunning {
				r.exit(p.ref, c, now, ExitReboot)
				c.Reason = "Unknown"
			}
		}
	}
	r.nextExit = time.Time{}
}

// NextExit returns when the next container exits by itself (a Behavior's
// exit, or a stop that takes time), or the zero time if none will. A
// simulation advancing a virtual clock can jump to it.
func (r *Runtime) NextExit() time.Time {
	defer r.flush()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.settle(r.now())
	return r.nextExit
}

// Stats returns the calls served so far.
func (r *Runtime) Stats() Stats {
	defer r.flush()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stats
}

// find returns the named container of the pod, or an error wrapping
// runtime.ErrNotFound. r.mu is held.
func (r *Runtime) find(uid, name string) (*container, error) {
	p := r.pods[uid]
	if p == nil {
		return nil, fmt.Errorf("pod %s: %w", uid, runtime.ErrNotFound)
	}
	for _, c := range p.containers {
		if c.Name == name {
			return c, nil
		}
	}
	return nil, runtime.ErrNotFound
}

// schedule makes running container c exit at t with code, unless it
// already exits earlier. r.mu is held.
func (r *Runtime) schedule(c *container, t time.Time, code int32) {
	if !c.exitAt.IsZero() && !t.Before(c.exitAt) {
		return
	}
	c.exitAt, c.exitCode = t, code
	if r.nextExit.IsZero() || t.Before(r.nextExit) {
		r.nextExit = t
	}
}

// settle ends the running containers whose exit time has come, so that
// state is as of now. It does work only when an exit is due. r.mu is held.
func (r *Runtime) settle(now time.Time) {
	if r.nextExit.IsZero() || now.Before(r.nextExit) {
		return
	}
	r.nextExit = time.Time{}
	for _, p := range r.pods {
		for _, c := range p.containers {
			if c.State != runtime.StateRunning || c.exitAt.IsZero() {
				continue
			}
			if !now.Before(c.exitAt) {
				r.exit(p.ref, c, c.exitAt, c.exitCode)
				continue
			}
			if r.nextExit.IsZero() || c.exitAt.Before(r.nextExit) {
				r.nextExit = c.exitAt
			}
		}
	}
}

// exit ends running container c of pod ref at t with code. r.mu is held.
func (r *Runtime) exit(ref runtime.PodRef, c *container, t time.Time, code int32) {
	r.pending = append(r.pending, runtime.Event{Pod: ref, Container: c.Name, Type: runtime.ContainerExited})
	c.State = runtime.StateExited
	c.FinishedAt = t
	c.ExitCode = code
	c.Reason = "Completed"
	if code != 0 {
		c.Reason = "Error"
	}
	c.exitAt = time.Time{}
	for a := range c.attached {
		a.end(int(code))
	}
	c.attached = nil
}

// podIP returns the n-th pod IP of 10.88.0.0/16 (n >= 1), wrapping after
// 65534 pods.
func podIP(n uint64) string {
	n = (n-1)%65534 + 1
	return fmt.Sprintf("10.88.%d.%d", n>>8, n&0xff)
}

// imageID returns a stable, digest-shaped ID for image.
func imageID(image string) string {
	name := image
	if i := strings.IndexByte(name, '@'); i >= 0 {
		name = name[:i]
	}
	if i := strings.LastIndexByte(name, ':'); i > strings.LastIndexByte(name, '/') {
		name = name[:i]
	}
	sum := sha256.Sum256([]byte(image))
	return name + "@sha256:" + hex.EncodeToString(sum[:])
}

// Watch implements runtime.Watcher: it calls fn with each change a call of
// the Runtime made, and with each exit its clock brought, until ctx is
// done. Exits that come with time are seen when a call settles them, or
// when Watch's wall-clock timer for the next one fires: with a virtual
// clock, that timer is only a guess, and a simulation that jumps its
// clock lists the runtime (or calls NextExit) to settle them.
func (r *Runtime) Watch(ctx context.Context, fn func(runtime.Event)) error {
	w := &watcher{signal: make(chan struct{}, 1)}
	r.mu.Lock()
	r.watchers[w] = struct{}{}
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.watchers, w)
		r.mu.Unlock()
	}()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		if next := r.NextExit(); !next.IsZero() {
			timer.Reset(max(next.Sub(r.now()), time.Millisecond))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-w.signal:
		case <-timer.C:
			r.NextExit() // settles what is due, and queues its events
		}
		w.mu.Lock()
		evs := w.queue
		w.queue = nil
		w.mu.Unlock()
		for _, ev := range evs {
			fn(ev)
		}
	}
}

// flush hands the pending events to the watchers. It is deferred before
// r.mu is taken, so that it runs once r.mu is released.
func (r *Runtime) flush() {
	r.mu.Lock()
	evs := r.pending
	r.pending = nil
	ws := make([]*watcher, 0, len(r.watchers))
	for w := range r.watchers {
		ws = append(ws, w)
	}
	r.mu.Unlock()
	if len(evs) == 0 {
		return
	}
	for _, w := range ws {
		w.mu.Lock()
		w.queue = append(w.queue, evs...)
		w.mu.Unlock()
		select {
		case w.signal <- struct{}{}:
		default:
		}
	}
}
