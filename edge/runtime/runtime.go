// Package runtime is the edge agent's interface to a container runtime: the
// Runtime that pods run through, the specs and statuses that cross it, and
// its errors. Implementations: fake, for tests and simulation; containerd.
package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"
)

// Errors returned by Runtime implementations, possibly wrapped; test them
// with errors.Is.
var (
	// ErrNotFound is returned by StopContainer for a pod or container the
	// runtime does not hold.
	ErrNotFound = errors.New("not found")

	// ErrImagePull is returned by StartContainer when the image could not
	// be pulled (or, with PullNever, is not present). The error's text says
	// why, for the container's status.
	ErrImagePull = errors.New("image pull failed")

	// ErrAlreadyRunning is returned by StartContainer when a container of
	// that name is running in the pod; nothing was changed.
	ErrAlreadyRunning = errors.New("container is already running")

	// ErrNotSupported is returned by StartContainer for a spec that asks
	// for something this runtime or node cannot provide (a feature the
	// kernel lacks, an option the implementation does not have). Retrying
	// the same spec fails the same way.
	ErrNotSupported = errors.New("not supported")

	// ErrContainerConfig is returned by StartContainer for a spec that
	// contradicts itself or the image, such as runAsNonRoot with an image
	// that runs as root: kubelet's CreateContainerConfigError. Retrying
	// the same spec fails the same way.
	ErrContainerConfig = errors.New("container config error")

	// ErrCreateContainer is returned by StartContainer when the runtime
	// could not create the container from its spec and image (a user
	// the image does not have, a spec the runtime refuses) before
	// starting anything: kubelet's CreateContainerError, for CRI's
	// CreateContainer failing. A container created but failed to start
	// is not this: kubelet's RunContainerError.
	ErrCreateContainer = errors.New("create container failed")
)

// Runtime runs the containers of pods. All methods must be safe for
// concurrent use; calls for different pods must not wait on each other
// longer than the work at hand needs. Every call blocks until done or
// until ctx is done.
//
// A Runtime keeps its state across restarts of the agent (containerd keeps
// containers and their tasks; the fake is shared by the agent instances of
// a test), which is how an agent that restarts adopts its pods: List shows
// what runs, and nothing is restarted.
type Runtime interface {
	// List returns every pod the runtime holds, running or not, with its
	// containers. The caller owns the returned slices.
	List(ctx context.Context) ([]PodStatus, error)

	// StartContainer pulls c.Image as c.PullPolicy says, creates the
	// container and starts it, recording attempt (0 for the first run,
	// then one more for every restart) with it. The pod is created first
	// if the runtime does not hold it yet, even if the pull then fails.
	// A created or exited container of the same name is replaced: the
	// runtime keeps only the newest instance of each container.
	//
	// It returns an error wrapping ErrImagePull if the image could not be
	// had, ErrAlreadyRunning if a container of that name runs,
	// ErrNotSupported for a spec it cannot run, ErrContainerConfig for
	// one that contradicts itself or the image, or ErrCreateContainer if
	// creating the container failed.
	StartContainer(ctx context.Context, pod PodRef, c ContainerSpec, attempt int) error

	// StopContainer asks the named container to stop (SIGTERM, or the
	// image's stop signal), kills it once grace has passed (a grace of 0
	// kills at once), and returns when it has exited. Stopping a container
	// that is not running is not an error; an unknown pod or container is
	// ErrNotFound.
	StopContainer(ctx context.Context, pod PodRef, name string, grace time.Duration) error

	// RemovePod kills whatever of the pod still runs, without grace (stop
	// containers first), and removes its containers, network and other
	// state. Removing a pod the runtime does not hold is not an error.
	RemovePod(ctx context.Context, pod PodRef) error
}

// PodRef names a pod. UID identifies it; a pod recreated under the same
// name has another UID and is another pod.
type PodRef struct {
	UID       string
	Namespace string
	Name      string
}

// String returns "namespace/name (uid)".
func (p PodRef) String() string { return fmt.Sprintf("%s/%s (%s)", p.Namespace, p.Name, p.UID) }

// PullPolicy says when StartContainer pulls the image.
type PullPolicy string

// Pull policies, as in a Kubernetes container's imagePullPolicy. The empty
// policy is PullIfNotPresent.
const (
	PullAlways       PullPolicy = "Always"
	PullIfNotPresent PullPolicy = "IfNotPresent"
	PullNever        PullPolicy = "Never"
)

// ContainerSpec is what the runtime needs to create a container. The agent
// builds it from the pod: the pods package fills what the pod alone says;
// the agent adds what needs other objects or node state (Env from
// configMaps, secrets and the downward API; Mounts of the pod's volumes;
// NetNS).
type ContainerSpec struct {
	Name       string
	Image      string
	PullPolicy PullPolicy
	// PullCredentials are tried, those for the image's registry, when
	// the registry asks for them (the pod's imagePullSecrets).
	PullCredentials []Credential
	Command         []string // replaces the image's entrypoint when non-empty
	Args            []string // replaces the image's cmd when non-empty
	Env             []EnvVar // in order; a later name overrides an earlier one
	WorkingDir      string   // "" for the image's
	Mounts          []Mount
	TTY             bool
	Stdin           bool

	Hostname string // the pod's hostname
	NetNS    string // path of the pod's network namespace; "" for the host's

	RunAsUser  *int64 // nil for the image's user
	RunAsGroup *int64 // nil for the image's group
	// RunAsNonRoot refuses to start the container (ErrNotSupported, with
	// the reason) when it would run as UID 0, the image's user included.
	RunAsNonRoot bool
	// SupplementalGroups are added to the process's groups (a pod's
	// fsGroup and supplementalGroups).
	SupplementalGroups     []int64
	Privileged             bool
	ReadOnlyRootFilesystem bool
	// Capabilities adjusts the runtime's default capability set;
	// Privileged grants all whatever it says.
	CapAdd  []string // such as "NET_ADMIN" or "CAP_NET_ADMIN"
	CapDrop []string // "ALL" drops every default one
	// NoNewPrivileges sets the process's no_new_privs bit
	// (allowPrivilegeEscalation: false).
	NoNewPrivileges bool
	// SeccompRuntimeDefault applies the runtime's default seccomp profile
	// (seccompProfile type RuntimeDefault); otherwise none (Unconfined),
	// kubelet's default.
	SeccompRuntimeDefault bool

	// CgroupParent is the cgroup the container's own is made in, a path
	// relative to the root of each hierarchy, such as
	// "/outpost-gw1/kubepods/burstable/pod<uid>"; "" for the runtime's
	// default.
	CgroupParent     string
	CPURequestMilli  int64 // relative CPU weight; 0 for the default
	CPULimitMilli    int64 // CPU quota; 0 for none
	MemoryLimitBytes int64 // 0 for none
	OOMScoreAdj      int   // by the pod's QoS class, as kubelet's

	// LogPath is the file the container's stdout and stderr go to, in
	// the CRI log format (kubelet's /var/log/pods/NS_NAME_UID/C/N.log);
	// "" discards them.
	LogPath string

	// TerminationMessagePath is the file whose content becomes the
	// termination message; "" for /dev/termination-log.
	TerminationMessagePath string
}

// Credential is what a registry accepts from a puller, as one entry of a
// kubernetes.io/dockerconfigjson secret holds it.
type Credential struct {
	// Registry is the host[:port] (or host/path prefix) it is for, such
	// as "registry.example.com:5000"; "docker.io" for Docker Hub.
	Registry      string
	Username      string
	Password      string
	IdentityToken string // a bearer refresh token, in place of a password
}

// EnvVar is one environment variable.
type EnvVar struct {
	Name  string
	Value string
}

// Mount binds a host path into a container.
type Mount struct {
	HostPath      string
	ContainerPath string
	ReadOnly      bool
}

// ContainerState is the state of a container instance.
type ContainerState string

// Container states.
const (
	StateCreated ContainerState = "created" // created, not started
	StateRunning ContainerState = "running"
	StateExited  ContainerState = "exited"
	StateUnknown ContainerState = "unknown" // the runtime cannot tell; it may run
)

// ContainerStatus is the newest instance of one container of a pod.
type ContainerStatus struct {
	Name    string
	ID      string // "runtime://id", as Kubernetes shows container IDs
	Image   string // the image reference as given in the ContainerSpec
	ImageID string // the resolved image, "name@sha256:..."
	State   ContainerState
	Attempt int // as given to StartContainer

	CreatedAt  time.Time
	StartedAt  time.Time // zero until started
	FinishedAt time.Time // zero until exited

	ExitCode int32  // for StateExited
	Reason   string // for StateExited: "Completed", "Error", "OOMKilled", ...
	Message  string // for StateExited: the termination message, if any
}

// PodStatus is one pod as the runtime holds it.
type PodStatus struct {
	Pod        PodRef
	Containers []ContainerStatus // newest instance of each container, in no particular order
	IP         string            // the pod's IP, "" if it has none
	CreatedAt  time.Time
}

// Equal reports whether p and o hold the same values, containers in the
// same order.
func (p *PodStatus) Equal(o *PodStatus) bool {
	return p.Pod == o.Pod && p.IP == o.IP && p.CreatedAt.Equal(o.CreatedAt) &&
		slices.EqualFunc(p.Containers, o.Containers, ContainerStatus.Equal)
}

// Clone returns a copy of p that shares nothing with it.
func (p *PodStatus) Clone() PodStatus {
	c := *p
	c.Containers = slices.Clone(p.Containers)
	return c
}

// Equal reports whether c and o hold the same values.
func (c ContainerStatus) Equal(o ContainerStatus) bool {
	return c.Name == o.Name && c.ID == o.ID && c.Image == o.Image && c.ImageID == o.ImageID &&
		c.State == o.State && c.Attempt == o.Attempt && c.CreatedAt.Equal(o.CreatedAt) &&
		c.StartedAt.Equal(o.StartedAt) && c.FinishedAt.Equal(o.FinishedAt) &&
		c.ExitCode == o.ExitCode && c.Reason == o.Reason && c.Message == o.Message
}

// Container returns the status of the named container, or nil. The result
// points into p.
func (p *PodStatus) Container(name string) *ContainerStatus {
	for i := range p.Containers {
		if p.Containers[i].Name == name {
			return &p.Containers[i]
		}
	}
	return nil
}

// EventType says what happened to a pod or container.
type EventType int

// Event types.
const (
	ContainerStarted EventType = iota + 1
	ContainerExited            // exited by itself or stopped: List shows how
	ContainerRemoved
	PodRemoved
)

// String returns the type's name.
func (t EventType) String() string {
	switch t {
	case ContainerStarted:
		return "ContainerStarted"
	case ContainerExited:
		return "ContainerExited"
	case ContainerRemoved:
		return "ContainerRemoved"
	case PodRemoved:
		return "PodRemoved"
	}
	return fmt.Sprintf("EventType(%d)", int(t))
}

// Event says that something changed about a pod in the runtime; List
// tells what it now is. Container is "" when the event concerns the pod.
type Event struct {
	Pod       PodRef
	Container string
	Type      EventType
}

// Watcher is implemented by a Runtime that reports changes as they
// happen (containerd's event stream), so that its user lists only when
// something changed, as kubelet's evented PLEG does, and relists seldom,
// as a safety net.
type Watcher interface {
	// Watch calls fn with each change from when it is called until ctx
	// is done, when it returns nil, or until it cannot go on (the
	// runtime's stream broke), when it returns an error: the caller,
	// which may have missed changes, relists and calls Watch again. fn is
	// called from one goroutine at a time and must not block.
	Watch(ctx context.Context, fn func(Event)) error
}

// ExecOptions is what Exec runs and where its input and output go.
type ExecOptions struct {
	Command []string  // required
	Stdin   io.Reader // nil for none
	Stdout  io.Writer // nil discards
	Stderr  io.Writer // nil discards; unused with TTY
	TTY     bool
	// Resize carries the terminal's sizes, with TTY: a size already
	// waiting when Exec is called is the terminal's size from the start,
	// and each later one is applied as it comes. nil for none. Exec never
	// closes it; the sender may close it when it has no more.
	Resize <-chan TermSize
}

// TermSize is the size of a terminal, in characters.
type TermSize struct {
	Width, Height uint16
}

// Execer is implemented by a Runtime that can run a command in a running
// container: exec probes, lifecycle hooks, kubectl exec.
type Execer interface {
	// Exec runs opts.Command in the named running container and returns
	// its exit code once it has exited and its output has been written.
	// When ctx is done the command is killed. An unknown pod or
	// container, or one not running, is ErrNotFound.
	Exec(ctx context.Context, pod PodRef, container string, opts ExecOptions) (exitCode int, err error)
}

// AttachOptions is what Attach hands a container's main process and
// where it copies the process's output to.
type AttachOptions struct {
	// Stdin is copied into the process's stdin, for a container started
	// with Stdin; nil for none. Its end does what it does under
	// containerd's CRI plugin: with StdinOnce on a container without a
	// TTY, the end of Stdin (or of the attach) closes the process's
	// stdin for good (it reads EOF) and the attach goes on until the
	// container exits; otherwise the end of Stdin ends the attach
	// (Attach returns 0 and the container goes on, its stdin open for
	// the next attacher). A stdin closed for good takes no more input:
	// Stdin is not read and the attach goes on with the output. Attach
	// may return while a Read of Stdin is in progress: a Stdin still
	// open then is read until that Read returns, and what it returns is
	// dropped.
	Stdin io.Reader
	// StdinOnce is the container's stdinOnce.
	StdinOnce bool
	Stdout    io.Writer // nil discards
	Stderr    io.Writer // nil discards; a container with a TTY has none
	// Resize carries the terminal's sizes, applied as they come to a
	// container with a TTY and ignored for one without; nil for none.
	// Attach never closes it; the sender may close it when it has no
	// more.
	Resize <-chan TermSize
}

// ErrNoStdin is returned by Attach for an attach with a Stdin to a
// container that has none (one not started with Stdin).
var ErrNoStdin = errors.New("the container has no stdin")

// Attacher is implemented by a Runtime that can attach to the main
// process of a container: kubectl attach.
type Attacher interface {
	// Attach copies what the named running container writes from now on
	// to opts, and opts.Stdin to its stdin as AttachOptions says, and
	// returns its exit code once it has exited and its output has been
	// copied; when ctx is done it returns ctx's error and the container
	// goes on. A writer that blocks never delays the container or its
	// log: an attacher that falls behind by more than the runtime
	// buffers for it is cut off with ErrAttachBehind. An unknown pod or
	// container, or one not running, is ErrNotFound; a Stdin for a
	// container without one is ErrNoStdin.
	Attach(ctx context.Context, pod PodRef, container string, opts AttachOptions) (exitCode int, err error)
}

// ErrAttachBehind is returned by Attach when the attacher did not keep up
// with the container's output.
var ErrAttachBehind = errors.New("attach fell behind the container's output")
