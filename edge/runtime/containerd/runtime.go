package containerd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	tasksapi "github.com/containerd/containerd/api/services/tasks/v1"
	"github.com/containerd/containerd/api/types/runc/options"
	tasktypes "github.com/containerd/containerd/api/types/task"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/identifiers"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"github.com/moby/sys/signal"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/outpost-mesh/outpost/edge/logs"
	"github.com/outpost-mesh/outpost/edge/runtime"
)

var (
	_ runtime.Runtime = (*Runtime)(nil)
	_ runtime.Watcher = (*Runtime)(nil)
	_ runtime.Execer  = (*Runtime)(nil)
)

// Labels on every container. The first four are CRI's, so that tools
// that know them (crictl-like listings, nerdctl) show the pod.
const (
	LabelPodUID        = "io.kubernetes.pod.uid"
	LabelPodNamespace  = "io.kubernetes.pod.namespace"
	LabelPodName       = "io.kubernetes.pod.name"
	LabelContainerName = "io.kubernetes.container.name"
	LabelAttempt       = "outpost.dev/attempt"

	labelImage      = "outpost.dev/image"    // the reference as the spec gave it
	labelImageID    = "outpost.dev/image-id" // name@sha256:...
	labelLogPath    = "outpost.dev/log-path"
	labelPrevLog    = "outpost.dev/previous-log" // the log of the instance this one replaced
	labelStopSignal = "outpost.dev/stop-signal"
	labelStartedAt  = "outpost.dev/started-at" // RFC 3339 nanoseconds
	labelFinishedAt = "outpost.dev/finished-at"
	labelExitCode   = "outpost.dev/exit-code"
	labelReason     = "outpost.dev/reason"
	labelMessage    = "outpost.dev/message"
	labelOOM        = "outpost.dev/oom" // "true" once the task was OOM-killed
	labelCreatedAt  = "outpost.dev/created-at"
	// labelStdinClosed is "true" once an attach to a stdinOnce container
	// closed its stdin, so that a later agent does not open it again.
	labelStdinClosed = "outpost.dev/stdin-closed"

	leasePrefix = "outpost-pod-"
)

// Exit codes and reasons recorded as CRI does.
const (
	exitStartError = 128 // CRI's errorStartExitCode
	exitUnknown    = 255 // the task vanished (reboot, a shim killed)
)

// Config configures a Runtime.
type Config struct {
	// Address is containerd's gRPC socket (Supervisor.Address). Required.
	Address string
	// Namespace is the containerd namespace of the agent's pods, its own
	// on a machine others share, such as "outpost-" + node name.
	// Required.
	Namespace string
	// OCIRuntime is the OCI runtime binary the runc shim runs: "runc"
	// (default) or "crun", by name in PATH or by path.
	OCIRuntime string
	// RuncRoot is the OCI runtime's state directory (RuncRoot(dir) for a
	// Supervisor's containerd); "" for the shim's default,
	// /run/containerd/runc.
	RuncRoot string
	// ShimPerNode runs all pods of the node in one shim instead of one
	// shim per pod: less memory, one process whose death takes every pod.
	ShimPerNode bool
	// Snapshotter unpacks images and makes root filesystems; default
	// "overlayfs".
	Snapshotter string
	// Puller gets images; nil for DefaultPuller.
	Puller Puller
	// StateDir holds the containers' FIFOs, one directory per pod.
	// Required; a tmpfs (/run/...) is best, the agent's data dir works.
	StateDir string
	// Logs configures the containers' log files; zero for
	// logs.DefaultConfig.
	Logs   logs.Config
	Logger *slog.Logger // non-nil
}

// DefaultConfig returns a Config with the defaults filled in and the
// required fields empty.
func DefaultConfig() Config {
	return Config{
		OCIRuntime:  "runc",
		Snapshotter: "overlayfs",
		Logs:        logs.DefaultConfig(),
		Logger:      slog.Default(),
	}
}

// Validate reports whether c can be used.
func (c Config) Validate() error {
	switch {
	case c.Address == "":
		return errors.New("containerd Address is empty")
	case c.Namespace == "":
		return errors.New("containerd Namespace is empty")
	case c.StateDir == "" || !filepath.IsAbs(c.StateDir):
		return errors.New("containerd StateDir must be an absolute path")
	case c.Snapshotter == "":
		return errors.New("containerd Snapshotter is empty")
	case c.Logger == nil:
		return errors.New("containerd Logger is nil")
	}
	if err := identifiers.Validate(c.Namespace); err != nil {
		return fmt.Errorf("containerd Namespace: %w", err)
	}
	return c.Logs.Validate()
}

// Runtime runs pods on containerd. Its methods are safe for concurrent
// use; calls for one pod that change it (StartContainer, StopContainer,
// RemovePod, and List where it reaps an exited task) are serialized,
// calls for different pods are not.
type Runtime struct {
	cfg    Config
	c      *client.Client
	puller Puller

	mu        sync.Mutex
	pods      map[string]*podLock      // by UID; entries live as long as a call holds them
	ios       map[string]*logIO        // by container ID: the log copiers this Runtime runs
	names     map[string]containerName // by container ID, for events
	gone      map[string]containerName // names of the last containers removed
	goneOrder []string                 // their IDs, oldest first
	closed    bool

	kept taskCache // the tasks, as the events of Watch tell them

	// nodeShim runs the task creations of the node's one shim, with
	// ShimPerNode, one at a time. Started at once, the shim's "start"
	// commands raced for its socket: one that found it bound but not
	// yet listening took it for a dead shim's and removed it, and the
	// other task failed ("create new shim socket: chmod ...: no such
	// file or directory"; in the density benchmark about once in five
	// batches of ten, and the pod waited out its 10s back-off). And
	// containerd 1.6's shim makes each start wait behind every create
	// queued before it: after a reboot the node's 100 pods started only
	// once all were created, 53s after the agent's start; one at a time
	// they are back in 7s, and containerd 2.4's shim is as fast either
	// way. A pod's own shim needs nothing of this: its containers start
	// one at a time under the pod's lock. It holds a token while a
	// creation runs.
	nodeShim chan struct{}
}

type podLock struct {
	mu   sync.Mutex
	refs int
}

type containerName struct {
	pod  runtime.PodRef
	name string
}

// New returns a Runtime on the containerd at cfg.Address. It dials
// lazily: it starts no goroutine of its own (the gRPC connection's, which
// reconnects after containerd restarts, are stopped by Close) and
// succeeds while containerd is down. Close it when done.
func New(cfg Config) (*Runtime, error) {
	if cfg.OCIRuntime == "" {
		cfg.OCIRuntime = "runc"
	}
	if cfg.Logs.MaxSize == 0 && cfg.Logs.MaxFiles == 0 && cfg.Logs.LineSize == 0 {
		cfg.Logs = logs.DefaultConfig()
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c, err := client.New(cfg.Address, client.WithDefaultNamespace(cfg.Namespace), client.WithTimeout(2*time.Second))
	if err != nil {
		return nil, fmt.Errorf("containerd client: %w", err)
	}
	p := cfg.Puller
	if p == nil {
		p = DefaultPuller{}
	}
	return &Runtime{
		cfg:    cfg,
		c:      c,
		puller: p,
		pods:   make(map[string]*podLock),
		ios:    make(map[string]*logIO),
		names:  make(map[string]containerName),
		gone:   make(map[string]containerName),

		nodeShim: make(chan struct{}, 1),
	}, nil
}

// Client returns the containerd client, for an image service sharing it.
func (r *Runtime) Client() *client.Client { return r.c }

// Close stops the log copiers, leaving the containers running and their
// FIFOs in place for the next Runtime to reattach, and closes the
// connection. It is safe to call twice; other calls fail after it.
func (r *Runtime) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	ios := r.ios
	r.ios = map[string]*logIO{}
	r.mu.Unlock()
	for _, l := range ios {
		l.detach()
	}
	return r.c.Close()
}

// Version returns the runtime's name and version as a node's status
// shows it, such as "containerd://1.6.20".
func (r *Runtime) Version(ctx context.Context) (string, error) {
	v, err := r.c.Version(ctx)
	if err != nil {
		return "", fmt.Errorf("containerd version: %w", native(err))
	}
	return "containerd://" + strings.TrimPrefix(v.Version, "v"), nil
}

func (r *Runtime) nsctx(ctx context.Context) context.Context {
	return namespaces.WithNamespace(ctx, r.cfg.Namespace)
}

// lockPod locks the pod's lock; the returned func unlocks it.
func (r *Runtime) lockPod(uid string) func() {
	r.mu.Lock()
	l := r.podLock(uid)
	r.mu.Unlock()
	l.mu.Lock()
	return func() { r.unlockPod(uid, l) }
}

// tryLockPod locks the pod's lock if no call holds it, and returns the
// func that unlocks it; nil if a call holds it.
func (r *Runtime) tryLockPod(uid string) func() {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := r.podLock(uid)
	if !l.mu.TryLock() {
		r.dropPodLock(uid, l)
		return nil
	}
	return func() { r.unlockPod(uid, l) }
}

// podLock returns the pod's lock with a reference more. r.mu is held.
func (r *Runtime) podLock(uid string) *podLock {
	l := r.pods[uid]
	if l == nil {
		l = &podLock{}
		r.pods[uid] = l
	}
	l.refs++
	return l
}

// dropPodLock drops a reference to the pod's lock. r.mu is held.
func (r *Runtime) dropPodLock(uid string, l *podLock) {
	if l.refs--; l.refs == 0 {
		delete(r.pods, uid)
	}
}

func (r *Runtime) unlockPod(uid string, l *podLock) {
	l.mu.Unlock()
	r.mu.Lock()
	r.dropPodLock(uid, l)
	r.mu.Unlock()
}

// native converts a gRPC error from containerd to the errdefs error it
// stands for. Errors the client already converted are returned as they
// are: converting twice would lose their kind.
func native(err error) error {
	if _, ok := grpcstatus.FromError(err); ok && err != nil {
		return errgrpc.ToNative(err)
	}
	return err
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func formatTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

func parseTime(s string) time.Time {
	t, _ := time.Parse(time.RFC3339Nano, s)
	return t
}

func podLabels(p runtime.PodRef) map[string]string {
	return map[string]string{LabelPodUID: p.UID, LabelPodNamespace: p.Namespace, LabelPodName: p.Name}
}

func podFromLabels(l map[string]string) runtime.PodRef {
	return runtime.PodRef{UID: l[LabelPodUID], Namespace: l[LabelPodNamespace], Name: l[LabelPodName]}
}

// ensurePod records the pod as a lease of the namespace, so that List
// shows it before any of its containers exists.
func (r *Runtime) ensurePod(ctx context.Context, p runtime.PodRef) error {
	labels := podLabels(p)
	labels[labelCreatedAt] = formatTime(time.Now())
	_, err := r.c.LeasesService().Create(ctx, leases.WithID(leasePrefix+p.UID), leases.WithLabels(labels))
	if err != nil && !errdefs.IsAlreadyExists(err) {
		return fmt.Errorf("record pod %s: %w", p, native(err))
	}
	return nil
}

// instance is one container as listed, with its task's status.
type instance struct {
	info containers.Container
	task *tasktypes.Process // nil: no task
}

func (in *instance) label(k string) string { return in.info.Labels[k] }

// podContainers returns the containers of the pod uid, or of all pods if
// uid is "".
func (r *Runtime) podContainers(ctx context.Context, uid string) ([]containers.Container, error) {
	var filters []string
	if uid != "" {
		filters = append(filters, fmt.Sprintf("labels.%q==%q", LabelPodUID, uid))
	} else {
		filters = append(filters, fmt.Sprintf("labels.%q", LabelPodUID))
	}
	cs, err := r.c.ContainerService().List(ctx, filters...)
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", native(err))
	}
	return cs, nil
}

// tasks returns the namespace's tasks by container ID: the kept ones
// while Watch runs, listed anew every fullListEvery.
func (r *Runtime) tasks(ctx context.Context) (map[string]*tasktypes.Process, error) {
	now := time.Now()
	states, ok := r.kept.get(now)
	if !ok {
		l := r.kept.beginList(now)
		resp, err := r.c.TaskService().List(ctx, &tasksapi.ListTasksRequest{})
		if err != nil {
			r.kept.endList(l, nil, false)
			return nil, fmt.Errorf("list tasks: %w", native(err))
		}
		states = r.kept.endList(l, taskStates(resp.Tasks), true)
	}
	m := make(map[string]*tasktypes.Process, len(states))
	for id, st := range states {
		m[id] = st.process(id)
	}
	return m, nil
}

// getTask returns the container's task's status, or nil if it has none.
func (r *Runtime) getTask(ctx context.Context, id string) (*tasktypes.Process, error) {
	resp, err := r.c.TaskService().Get(ctx, &tasksapi.GetRequest{ContainerID: id})
	if err != nil {
		if err = native(err); errdefs.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("get task %s: %w", id, err)
	}
	return resp.Process, nil
}

// List implements runtime.Runtime. It also settles what it finds: an
// exited task's status is recorded on its container and the task deleted
// (freeing the shim), and the log copiers of running containers this
// Runtime did not start (an earlier agent did) are reattached.
func (r *Runtime) List(ctx context.Context) ([]runtime.PodStatus, error) {
	ctx = r.nsctx(ctx)
	// Tasks before containers: a container listed after its task was
	// reaped carries the exit the reaper recorded.
	tasks, err := r.tasks(ctx)
	if err != nil {
		return nil, err
	}
	cs, err := r.podContainers(ctx, "")
	if err != nil {
		return nil, err
	}
	ls, err := r.c.LeasesService().List(ctx)
	if err != nil {
		return nil, fmt.Errorf("list pods: %w", native(err))
	}
	pods := map[string]*runtime.PodStatus{}
	for _, l := range ls {
		if !strings.HasPrefix(l.ID, leasePrefix) || l.Labels[LabelPodUID] == "" {
			continue
		}
		pods[l.Labels[LabelPodUID]] = &runtime.PodStatus{Pod: podFromLabels(l.Labels), CreatedAt: parseTime(l.Labels[labelCreatedAt])}
	}
	for _, info := range cs {
		in := &instance{info: info, task: tasks[info.ID]}
		st, err := r.settle(ctx, in)
		if errdefs.IsNotFound(err) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, err
		}
		ref := podFromLabels(info.Labels)
		p := pods[ref.UID]
		if p == nil {
			p = &runtime.PodStatus{Pod: ref, CreatedAt: info.CreatedAt}
			pods[ref.UID] = p
		}
		// Only the newest instance of a name; StartContainer removes
		// older ones, but one may be left by a crash between its steps.
		if old := p.Container(st.Name); old != nil {
			if old.CreatedAt.Before(st.CreatedAt) {
				*old = st
			}
			continue
		}
		p.Containers = append(p.Containers, st)
	}
	out := make([]runtime.PodStatus, 0, len(pods))
	for _, p := range pods {
		out = append(out, *p)
	}
	return out, nil
}

// settle returns the status of one container, recording the exit of a
// stopped task (and deleting the task) and reattaching the log of a
// running one.
func (r *Runtime) settle(ctx context.Context, in *instance) (runtime.ContainerStatus, error) {
	r.remember(in.info)
	stopped := in.task != nil && in.task.Status == tasktypes.Status_STOPPED
	vanished := in.task == nil && in.label(labelStartedAt) != "" && in.label(labelExitCode) == ""
	if stopped || vanished {
		// Reaped under the pod's lock: a call that holds it (a stop, a
		// start, a removal) settles what it finds itself, and two
		// reapers of one task would race to delete it and to record its
		// exit. Until then the container shows as listed.
		unlock := r.tryLockPod(in.label(LabelPodUID))
		if unlock == nil {
			return status(in), nil
		}
		defer unlock()
	}
	if stopped {
		if err := r.reap(ctx, in); err != nil {
			return runtime.ContainerStatus{}, err
		}
	}
	if vanished {
		// Started, no task, no exit: the task vanished (a reboot, a
		// killed shim), or it was started after our task listing.
		t, err := r.getTask(ctx, in.info.ID)
		if err != nil {
			return runtime.ContainerStatus{}, err
		}
		in.task = t
		if t == nil {
			if err := r.recordExit(ctx, in, exitUnknown, time.Now(), "Unknown", ""); err != nil {
				return runtime.ContainerStatus{}, err
			}
		} else if t.Status == tasktypes.Status_STOPPED {
			if err := r.reap(ctx, in); err != nil {
				return runtime.ContainerStatus{}, err
			}
		}
	}
	if in.task != nil && in.task.Status == tasktypes.Status_RUNNING {
		r.reattach(ctx, in.info)
	}
	return status(in), nil
}

// status is the container's status from its labels and task. Pure.
func status(in *instance) runtime.ContainerStatus {
	attempt, _ := strconv.Atoi(in.label(LabelAttempt))
	st := runtime.ContainerStatus{
		Name:      in.label(LabelContainerName),
		ID:        "containerd://" + in.info.ID,
		Image:     in.label(labelImage),
		ImageID:   in.label(labelImageID),
		Attempt:   attempt,
		CreatedAt: in.info.CreatedAt,
		StartedAt: parseTime(in.label(labelStartedAt)),
		State:     runtime.StateCreated,
	}
	if in.task != nil && in.task.Status == tasktypes.Status_STOPPED && in.label(labelExitCode) == "" {
		// Exited and not reaped yet: the task says how.
		st.State = runtime.StateExited
		st.ExitCode = int32(in.task.ExitStatus)
		if in.task.ExitedAt != nil {
			st.FinishedAt = in.task.ExitedAt.AsTime()
		}
		st.Reason = exitReason(in.task.ExitStatus, false)
		return st
	}
	if in.task != nil {
		switch in.task.Status {
		case tasktypes.Status_CREATED:
			st.State = runtime.StateCreated
		case tasktypes.Status_RUNNING, tasktypes.Status_PAUSED, tasktypes.Status_PAUSING:
			st.State = runtime.StateRunning
		case tasktypes.Status_UNKNOWN:
			st.State = runtime.StateUnknown
		}
		if in.task.Status != tasktypes.Status_STOPPED {
			return st
		}
	}
	if code := in.label(labelExitCode); code != "" {
		n, _ := strconv.ParseInt(code, 10, 32)
		st.State = runtime.StateExited
		st.ExitCode = int32(n)
		st.FinishedAt = parseTime(in.label(labelFinishedAt))
		st.Reason = in.label(labelReason)
		st.Message = in.label(labelMessage)
	}
	return st
}

// exitReason is kubelet's reason for an exit. Pure.
func exitReason(code uint32, oom bool) string {
	switch {
	case oom:
		return "OOMKilled"
	case code == 0:
		return "Completed"
	}
	return "Error"
}

// reap records the exit of in's stopped task on its container, then
// drains its log and deletes the task. Concurrent reaps of one container
// record the same values.
func (r *Runtime) reap(ctx context.Context, in *instance) error {
	t := in.task
	oom := in.label(labelOOM) == "true"
	if !oom {
		oom = cgroupOOMKilled(in.info)
	}
	exitedAt := time.Now()
	if t.ExitedAt != nil && t.ExitedAt.AsTime().After(time.Unix(0, 0)) {
		exitedAt = t.ExitedAt.AsTime()
	}
	r.finishLog(in.info.ID)
	if err := r.recordExit(ctx, in, t.ExitStatus, exitedAt, exitReason(t.ExitStatus, oom), ""); err != nil {
		return err
	}
	if err := r.deleteTask(ctx, in.info.ID); err != nil {
		return err
	}
	in.task = nil
	return nil
}

// deleteTask deletes the task of container id. A task that is gone is
// deleted, even if the delete failed: List and StopContainer both reap an
// exited task, and the second delete of a shim's last task can find the
// shim gone ("ttrpc: closed") once the first has shut it down.
func (r *Runtime) deleteTask(ctx context.Context, id string) error {
	_, err := r.c.TaskService().Delete(ctx, &tasksapi.DeleteTaskRequest{ContainerID: id})
	if err != nil && !errdefs.IsNotFound(native(err)) {
		if t, gerr := r.getTask(ctx, id); gerr != nil || t != nil {
			return fmt.Errorf("delete task %s: %w", id, native(err))
		}
	}
	r.kept.deleted(id)
	return nil
}

// recordExit writes the exit onto the container's labels.
func (r *Runtime) recordExit(ctx context.Context, in *instance, code uint32, at time.Time, reason, msg string) error {
	set := map[string]string{
		labelExitCode:   strconv.FormatUint(uint64(code), 10),
		labelFinishedAt: formatTime(at),
		labelReason:     reason,
	}
	if msg != "" {
		set[labelMessage] = truncate(msg, 1024)
	}
	if err := r.setLabels(ctx, in.info.ID, set); err != nil {
		return err
	}
	for k, v := range set {
		in.info.Labels[k] = v
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// setLabels sets labels on the container, keeping the others.
func (r *Runtime) setLabels(ctx context.Context, id string, set map[string]string) error {
	c := containers.Container{ID: id, Labels: set}
	paths := make([]string, 0, len(set))
	for k := range set {
		paths = append(paths, "labels."+k)
	}
	if _, err := r.c.ContainerService().Update(ctx, c, paths...); err != nil {
		return fmt.Errorf("label container %s: %w", id, native(err))
	}
	return nil
}

// cgroupOOMKilled reports whether the kernel OOM-killed a process of the
// container's cgroup, for an exit whose OOM event was missed. The cgroup
// is there until the task is deleted.
func cgroupOOMKilled(info containers.Container) bool {
	var s specs.Spec
	if info.Spec == nil || json.Unmarshal(info.Spec.GetValue(), &s) != nil || s.Linux == nil || s.Linux.CgroupsPath == "" {
		return false
	}
	p := s.Linux.CgroupsPath
	if strings.Contains(p, ":") { // systemd style: not ours
		return false
	}
	for _, f := range []string{
		filepath.Join("/sys/fs/cgroup/memory", p, "memory.oom_control"), // v1
		filepath.Join("/sys/fs/cgroup", p, "memory.events"),             // v2
	} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, " "); ok && k == "oom_kill" && v != "0" {
				return true
			}
		}
	}
	return false
}

// remember notes the pod and name of a container, for events.
func (r *Runtime) remember(info containers.Container) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.names[info.ID] = containerName{pod: podFromLabels(info.Labels), name: info.Labels[LabelContainerName]}
}

// find returns the pod's containers named name, newest last.
func (r *Runtime) find(ctx context.Context, uid, name string) ([]containers.Container, error) {
	cs, err := r.podContainers(ctx, uid)
	if err != nil {
		return nil, err
	}
	var out []containers.Container
	for _, c := range cs {
		if c.Labels[LabelContainerName] == name {
			out = append(out, c)
		}
	}
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j].CreatedAt.Before(out[j-1].CreatedAt); j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out, nil
}

// StartContainer implements runtime.Runtime. The image is got and the
// new container created before the old instance is removed, so a failed
// pull or create leaves the old one as List showed it. A container that
// was created but failed to start (a missing executable, a bad mount) is
// returned as an error saying why and is listed as exited with code 128,
// reason "StartError" and the error as message, as CRI does; kubelet
// words this as RunContainerError.
func (r *Runtime) StartContainer(ctx context.Context, pod runtime.PodRef, spec runtime.ContainerSpec, attempt int) error {
	if pod.UID == "" || spec.Name == "" || spec.Image == "" {
		return fmt.Errorf("start container %q of pod %s: empty pod UID, container name or image: %w", spec.Name, pod, runtime.ErrNotSupported)
	}
	ctx = r.nsctx(ctx)
	defer r.lockPod(pod.UID)()
	if err := r.ensurePod(ctx, pod); err != nil {
		return err
	}
	old, err := r.find(ctx, pod.UID, spec.Name)
	if err != nil {
		return err
	}
	// The tasks of this container's instances alone: listing every task
	// of the node costs containerd a call to a shim per task, which made
	// each start slower the more pods ran.
	for _, o := range old {
		t, err := r.getTask(ctx, o.ID)
		if err != nil {
			return err
		}
		if t != nil && (t.Status == tasktypes.Status_RUNNING || t.Status == tasktypes.Status_PAUSED || t.Status == tasktypes.Status_PAUSING) {
			return fmt.Errorf("start container %q of pod %s: %w", spec.Name, pod, runtime.ErrAlreadyRunning)
		}
	}

	img, err := r.puller.Pull(ctx, r.c, spec.Image, spec.PullPolicy, spec.PullCredentials)
	if err != nil {
		return err
	}
	if err := unpack(ctx, img, r.cfg.Snapshotter); err != nil {
		return fmt.Errorf("start container %q of pod %s: %w", spec.Name, pod, err)
	}
	ic, err := img.Spec(ctx)
	if err != nil {
		return fmt.Errorf("image config of %s: %w", spec.Image, err)
	}
	podName := pod.Name + "_" + pod.Namespace + "(" + pod.UID + ")"
	if err := verifyNonRoot(&spec, ic.Config.User, podName); err != nil {
		return err
	}

	id := newID()
	group := pod.UID
	if r.cfg.ShimPerNode {
		group = nodeGroup
	}
	opts, err := specOpts(&spec, ic.Config, id, group)
	if err != nil {
		return fmt.Errorf("start container %q of pod %s: %w", spec.Name, pod, err)
	}
	labels := podLabels(pod)
	labels[LabelContainerName] = spec.Name
	labels[LabelAttempt] = strconv.Itoa(attempt)
	labels[labelImage] = spec.Image
	labels[labelImageID] = imageID(img)
	labels[labelLogPath] = spec.LogPath
	if ic.Config.StopSignal != "" {
		labels[labelStopSignal] = ic.Config.StopSignal
	}
	var prevLog string
	if n := len(old); n > 0 {
		prevLog = old[n-1].Labels[labelLogPath]
		labels[labelPrevLog] = prevLog
	}
	for k, v := range labels {
		if v == "" {
			delete(labels, k)
		}
	}
	runcOpts := &options.Options{Root: r.cfg.RuncRoot}
	if r.cfg.OCIRuntime != "runc" {
		runcOpts.BinaryName = r.cfg.OCIRuntime
	}
	ctr, err := r.c.NewContainer(ctx, id,
		client.WithImage(img),
		client.WithSnapshotter(r.cfg.Snapshotter),
		client.WithNewSnapshot(id, img),
		client.WithRuntime("io.containerd.runc.v2", runcOpts),
		client.WithNewSpec(opts...),
		client.WithContainerLabels(labels),
	)
	if err != nil {
		if errors.Is(err, runtime.ErrNotSupported) {
			return fmt.Errorf("create container %q of pod %s: %w", spec.Name, pod, err)
		}
		return fmt.Errorf("create container %q of pod %s: %w", spec.Name, pod, createError{native(err)})
	}
	info, err := ctr.Info(ctx, client.WithoutRefreshedMetadata)
	if err != nil {
		return fmt.Errorf("create container %q of pod %s: %w", spec.Name, pod, native(err))
	}
	r.remember(info)

	// The old instances go; the newest one's log stays as the previous
	// log, older logs go with their containers.
	for _, o := range old {
		if err := r.removeContainer(ctx, o.ID); err != nil {
			return fmt.Errorf("replace container %q of pod %s: %w", spec.Name, pod, err)
		}
		for _, l := range []string{o.Labels[labelLogPath], o.Labels[labelPrevLog]} {
			if l != "" && l != prevLog && l != spec.LogPath {
				_ = logs.Remove(l)
			}
		}
	}
	return r.start(ctx, ctr, info, &spec)
}

// createError is a failure to create a container: its text is the
// cause's, and it is runtime.ErrCreateContainer too.
type createError struct{ err error }

func (e createError) Error() string   { return e.err.Error() }
func (e createError) Unwrap() []error { return []error{runtime.ErrCreateContainer, e.err} }

// start creates and starts the container's task with its log copiers,
// recording a failure on the container.
func (r *Runtime) start(ctx context.Context, ctr client.Container, info containers.Container, spec *runtime.ContainerSpec) error {
	lio, creator, err := r.newLogIO(info.Labels[LabelPodUID], spec)
	if err != nil {
		return fmt.Errorf("start container %q: %w", spec.Name, err)
	}
	// A placeholder holds the container's place until its copiers are
	// in: a List meanwhile (the task's start event prompts one) must not
	// take the running task for one an earlier agent started and attach
	// copiers of its own to the FIFOs, which would take part of the
	// output from the log and the attachers.
	placeholder := &logIO{pending: true}
	r.mu.Lock()
	if !r.closed {
		r.ios[info.ID] = placeholder
	}
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		if r.ios[info.ID] == placeholder {
			delete(r.ios, info.ID)
		}
		r.mu.Unlock()
	}()
	fail := func(err error) error {
		err = native(err)
		in := &instance{info: info}
		// A container that never started has no start time, as CRI's.
		if rerr := r.setLabels(context.WithoutCancel(ctx), info.ID, map[string]string{labelStartedAt: ""}); rerr != nil {
			r.cfg.Logger.Warn("record start error", "container", info.ID, "err", rerr)
		}
		if rerr := r.recordExit(context.WithoutCancel(ctx), in, exitStartError, time.Now(), "StartError", err.Error()); rerr != nil {
			r.cfg.Logger.Warn("record start error", "container", info.ID, "err", rerr)
		}
		return fmt.Errorf("start container %q: %w", spec.Name, err)
	}
	release, err := r.taskTurn(ctx)
	if err != nil {
		// Nothing was tried: the container stays created, to be
		// replaced by the next start.
		lio.finish(0)
		return fmt.Errorf("start container %q: %w", spec.Name, err)
	}
	task, err := ctr.NewTask(ctx, creator)
	release()
	if err != nil {
		lio.finish(0)
		return fail(err)
	}
	// The start time is taken and recorded before the start: a process
	// that exits at once must not show it finished before it started,
	// and a listing prompted by the task's start event must find it.
	if err := r.setLabels(ctx, info.ID, map[string]string{labelStartedAt: formatTime(time.Now())}); err != nil {
		_, _ = task.Delete(context.WithoutCancel(ctx), client.WithProcessKill)
		lio.finish(0)
		return fail(err)
	}
	if err := task.Start(ctx); err != nil {
		_, _ = task.Delete(context.WithoutCancel(ctx), client.WithProcessKill)
		lio.finish(0)
		return fail(err)
	}
	r.kept.started(info.ID)
	r.mu.Lock()
	closed := r.closed
	if !closed {
		lio.io = task.IO()
		r.ios[info.ID] = lio
	}
	r.mu.Unlock()
	if closed {
		lio.io = task.IO()
		lio.detach()
	}
	return nil
}

// taskTurn waits for the turn to create a task, with ShimPerNode one at
// a time (see Runtime.nodeShim), and returns the func that ends it.
func (r *Runtime) taskTurn(ctx context.Context) (release func(), err error) {
	if !r.cfg.ShimPerNode {
		return func() {}, nil
	}
	select {
	case r.nodeShim <- struct{}{}:
		return func() { <-r.nodeShim }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// removeContainer kills and deletes the container's task, closes its log
// and deletes the container with its snapshot. A missing container is
// not an error.
func (r *Runtime) removeContainer(ctx context.Context, id string) error {
	t, err := r.getTask(ctx, id)
	if err != nil {
		return err
	}
	if t != nil {
		if t.Status != tasktypes.Status_STOPPED {
			_, err := r.c.TaskService().Kill(ctx, &tasksapi.KillRequest{ContainerID: id, Signal: uint32(syscall.SIGKILL), All: true})
			if err != nil && !errdefs.IsNotFound(native(err)) {
				return fmt.Errorf("kill task %s: %w", id, native(err))
			}
			if err := r.waitStopped(ctx, id); err != nil {
				return err
			}
		}
		r.finishLog(id)
		if err := r.deleteTask(ctx, id); err != nil {
			return err
		}
	}
	r.finishLog(id)
	ctr, err := r.c.LoadContainer(ctx, id)
	if errdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("load container %s: %w", id, native(err))
	}
	if err := ctr.Delete(ctx, client.WithSnapshotCleanup); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("delete container %s: %w", id, native(err))
	}
	r.forget(id)
	return nil
}

// maxGone is how many removed containers' names are kept for the events
// that report their removal.
const maxGone = 256

// forget moves a removed container's name to the few kept for events.
func (r *Runtime) forget(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n, ok := r.names[id]
	if !ok {
		return
	}
	delete(r.names, id)
	r.gone[id] = n
	r.goneOrder = append(r.goneOrder, id)
	if len(r.goneOrder) > maxGone {
		delete(r.gone, r.goneOrder[0])
		r.goneOrder = r.goneOrder[1:]
	}
}

// waitStopped polls the task until it has stopped.
func (r *Runtime) waitStopped(ctx context.Context, id string) error {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		t, err := r.getTask(ctx, id)
		if err != nil {
			return err
		}
		if t == nil || t.Status == tasktypes.Status_STOPPED {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for task %s: %w", id, ctx.Err())
		case <-tick.C:
		}
	}
}

// StopContainer implements runtime.Runtime. The signal is the image's
// stop signal, SIGTERM if it has none. The exit is recorded and the task
// deleted before it returns.
func (r *Runtime) StopContainer(ctx context.Context, pod runtime.PodRef, name string, grace time.Duration) error {
	ctx = r.nsctx(ctx)
	defer r.lockPod(pod.UID)()
	cs, err := r.find(ctx, pod.UID, name)
	if err != nil {
		return err
	}
	if len(cs) == 0 {
		return fmt.Errorf("stop container %q of pod %s: %w", name, pod, runtime.ErrNotFound)
	}
	info := cs[len(cs)-1]
	ctr, err := r.c.LoadContainer(ctx, info.ID)
	if err != nil {
		return fmt.Errorf("stop container %q of pod %s: %w", name, pod, native(err))
	}
	task, err := ctr.Task(ctx, nil)
	if errdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("stop container %q of pod %s: %w", name, pod, native(err))
	}
	exited, err := task.Wait(ctx)
	if err != nil {
		return fmt.Errorf("stop container %q of pod %s: %w", name, pod, native(err))
	}
	st, err := task.Status(ctx)
	if err != nil {
		return fmt.Errorf("stop container %q of pod %s: %w", name, pod, native(err))
	}
	if st.Status == client.Running || st.Status == client.Paused || st.Status == client.Created {
		sig := syscall.SIGKILL
		if grace > 0 {
			sig = syscall.SIGTERM
			if s := info.Labels[labelStopSignal]; s != "" {
				if parsed, err := signal.ParseSignal(s); err == nil {
					sig = parsed
				}
			}
		}
		if err := task.Kill(ctx, sig); err != nil && !errdefs.IsNotFound(err) {
			return fmt.Errorf("stop container %q of pod %s: %w", name, pod, native(err))
		}
		if sig != syscall.SIGKILL {
			timer := time.NewTimer(grace)
			select {
			case <-exited:
			case <-timer.C:
				if err := task.Kill(ctx, syscall.SIGKILL, client.WithKillAll); err != nil && !errdefs.IsNotFound(err) {
					return fmt.Errorf("kill container %q of pod %s: %w", name, pod, native(err))
				}
			case <-ctx.Done():
				timer.Stop()
				return ctx.Err()
			}
			timer.Stop()
		}
		select {
		case <-exited:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	t, err := r.getTask(ctx, info.ID)
	if err != nil || t == nil {
		return err
	}
	return r.reap(ctx, &instance{info: info, task: t})
}

// RemovePod implements runtime.Runtime: it kills and removes the pod's
// containers with their snapshots, log files and FIFOs, then the pod.
func (r *Runtime) RemovePod(ctx context.Context, pod runtime.PodRef) error {
	ctx = r.nsctx(ctx)
	defer r.lockPod(pod.UID)()
	cs, err := r.podContainers(ctx, pod.UID)
	if err != nil {
		return err
	}
	for _, c := range cs {
		if err := r.removeContainer(ctx, c.ID); err != nil {
			return fmt.Errorf("remove pod %s: %w", pod, err)
		}
		for _, l := range []string{c.Labels[labelLogPath], c.Labels[labelPrevLog]} {
			if l != "" {
				_ = logs.Remove(l)
			}
		}
	}
	if err := os.RemoveAll(r.fifoDir(pod.UID)); err != nil {
		return fmt.Errorf("remove pod %s: %w", pod, err)
	}
	err = r.c.LeasesService().Delete(ctx, leases.Lease{ID: leasePrefix + pod.UID})
	if err != nil && !errdefs.IsNotFound(native(err)) {
		return fmt.Errorf("remove pod %s: %w", pod, native(err))
	}
	return nil
}

func (r *Runtime) fifoDir(uid string) string { return filepath.Join(r.cfg.StateDir, uid) }

// newLogIO opens the container's log (none if its LogPath is ""),
// returning it with the IO creator of a task writing to it and, for a
// container with Stdin, reading its stdin from its attachers; without a
// log the container has neither, its stdin is /dev/null. Its io is set
// once the task exists.
func (r *Runtime) newLogIO(uid string, spec *runtime.ContainerSpec) (*logIO, cio.Creator, error) {
	if spec.LogPath == "" {
		return &logIO{}, cio.NullIO, nil
	}
	f, err := logs.Open(spec.LogPath, r.cfg.Logs)
	if err != nil {
		return nil, nil, err
	}
	l, stdout, stderr := newFileIO(f)
	l.tty = spec.TTY
	var stdin io.Reader
	if spec.Stdin {
		l.stdin = newStdinFeed()
		stdin = l.stdin
	}
	opts := []cio.Opt{cio.WithStreams(stdin, stdout, stderr), cio.WithFIFODir(r.fifoDir(uid))}
	if spec.TTY {
		opts = append(opts, cio.WithTerminal)
	}
	return l, cio.NewCreator(opts...), nil
}
