package streams

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/outpost-mesh/outpost/edge/runtime"
	"github.com/outpost-mesh/outpost/sync/client"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// Tunnel kinds, as TunnelOpen.Kind names them.
const (
	KindLogs        = "logs"
	KindExec        = "exec"
	KindAttach      = "attach"
	KindPortForward = "portforward"
)

// Pods finds the pods the node holds. It must be safe for concurrent
// use.
type Pods interface {
	// Pod returns the pod namespace/name as the node holds it, or nil
	// if the node holds none.
	Pod(ctx context.Context, namespace, name string) (*Pod, error)
}

// Pod is what the node holds of a pod.
type Pod struct {
	Spec   *corev1.Pod        // as the node runs it; required
	Status *runtime.PodStatus // what the runtime holds of it; nil if nothing
	IP     string             // the pod's IP; "" if it has none yet
}

// LogPaths names the log files of container instances.
type LogPaths interface {
	// LogPath returns the CRI log file that attempt of the container of
	// pod writes (it may not exist).
	LogPath(pod runtime.PodRef, container string, attempt int) string
}

// Config configures a Server.
type Config struct {
	Pods Pods // required
	// Logs names the containers' log files; nil serves no logs tunnels.
	Logs LogPaths
	// Exec runs commands in containers; nil serves no exec tunnels.
	Exec runtime.Execer
	// Attach attaches to containers' main processes (output, stdin and
	// terminal); nil serves no attach tunnels.
	Attach runtime.Attacher
	// Dial dials a pod's port for port-forward; nil for a net.Dialer.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// DialTimeout bounds a port-forward's dial: 10s.
	DialTimeout time.Duration
	// FollowPoll is the longest a followed log waits before it looks
	// for more lines, a rotation, and whether its container still runs:
	// 250ms. A write to the file ends the wait at once (inotify, where
	// the kernel gives it).
	FollowPoll time.Duration
	// MaxStreams bounds the tunnels served at once; one more is refused
	// with CodeUnavailable: 64.
	MaxStreams int
	Logger     *slog.Logger     // nil for slog.Default()
	Clock      func() time.Time // or nil for the wall clock
}

// DefaultConfig returns the defaults above; Pods is left nil.
func DefaultConfig() Config {
	return Config{DialTimeout: 10 * time.Second, FollowPoll: 250 * time.Millisecond, MaxStreams: 64}
}

// Server serves the tunnels. Its handlers may be called concurrently.
type Server struct {
	cfg Config
	log *slog.Logger
	now func() time.Time

	mu      sync.Mutex
	serving int // tunnels accepted and not yet done
}

// New returns a Server; it starts nothing.
func New(cfg Config) (*Server, error) {
	if cfg.Pods == nil {
		return nil, errors.New("streams: Pods is required")
	}
	if cfg.DialTimeout <= 0 || cfg.FollowPoll <= 0 || cfg.MaxStreams <= 0 {
		return nil, errors.New("streams: DialTimeout, FollowPoll and MaxStreams must be positive")
	}
	if cfg.Dial == nil {
		var d net.Dialer
		cfg.Dial = d.DialContext
	}
	s := &Server{cfg: cfg, log: cfg.Logger, now: cfg.Clock}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.now == nil {
		s.now = time.Now
	}
	return s, nil
}

// Handlers returns the handlers of the kinds this Server can serve, for
// client.Config.Tunnels. Each serve func they return runs until its
// tunnel is done and closes the stream.
func (s *Server) Handlers() map[string]client.TunnelHandler {
	h := map[string]client.TunnelHandler{KindPortForward: s.limited(s.PortForward)}
	if s.cfg.Logs != nil {
		h[KindLogs] = s.limited(s.Logs)
	}
	if s.cfg.Exec != nil {
		h[KindExec] = s.limited(s.ExecTunnel)
	}
	if s.cfg.Attach != nil {
		h[KindAttach] = s.limited(s.AttachTunnel)
	}
	return h
}

// limited refuses a tunnel beyond MaxStreams and counts the tunnel until
// its serve func returns.
func (s *Server) limited(h client.TunnelHandler) client.TunnelHandler {
	return func(ctx context.Context, open *wire.TunnelOpen) (func(wire.TunnelStream), error) {
		s.mu.Lock()
		if s.serving >= s.cfg.MaxStreams {
			s.mu.Unlock()
			return nil, &wire.Error{Code: wire.CodeUnavailable, Message: fmt.Sprintf("node serves its limit of %d streams at once", s.cfg.MaxStreams), RetryAfter: time.Second}
		}
		s.serving++
		s.mu.Unlock()
		done := func() {
			s.mu.Lock()
			s.serving--
			s.mu.Unlock()
		}
		serve, err := h(ctx, open)
		if err != nil {
			done()
			return nil, err
		}
		return func(st wire.TunnelStream) {
			defer done()
			serve(st)
		}, nil
	}
}

// refuse returns the refusal of a tunnel.
func refuse(code wire.ErrorCode, format string, args ...any) error {
	return &wire.Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// findPod returns the pod the open names, or a refusal: the hub and the
// node must agree on its UID, so that a stream never reaches a pod
// recreated under the same name.
func (s *Server) findPod(ctx context.Context, open *wire.TunnelOpen) (*Pod, error) {
	ns, name, uid := open.Param("namespace"), open.Param("name"), open.Param("uid")
	if ns == "" || name == "" || uid == "" {
		return nil, refuse(wire.CodeBadRequest, "a %s tunnel names the pod's namespace, name and uid", open.Kind)
	}
	p, err := s.cfg.Pods.Pod(ctx, ns, name)
	if err != nil {
		return nil, fmt.Errorf("find pod %s/%s: %w", ns, name, err)
	}
	if p == nil || p.Spec == nil || string(p.Spec.UID) != uid {
		return nil, refuse(wire.CodeNotFound, "pod %q (uid %s) is not on this node", ns+"/"+name, uid)
	}
	return p, nil
}

// ref returns the runtime's name of the pod.
func (p *Pod) ref() runtime.PodRef {
	return runtime.PodRef{UID: string(p.Spec.UID), Namespace: p.Spec.Namespace, Name: p.Spec.Name}
}

// spec returns the spec of the pod's container (init, app or ephemeral)
// named name, or nil.
func (p *Pod) container(name string) *corev1.Container {
	for _, l := range [][]corev1.Container{p.Spec.Spec.InitContainers, p.Spec.Spec.Containers} {
		for i := range l {
			if l[i].Name == name {
				return &l[i]
			}
		}
	}
	return nil
}

// status returns the runtime's newest instance of the named container,
// or nil.
func (p *Pod) status(name string) *runtime.ContainerStatus {
	if p.Status == nil {
		return nil
	}
	return p.Status.Container(name)
}

// running reports whether an instance is running (or may be: the runtime
// cannot tell).
func running(c *runtime.ContainerStatus) bool {
	return c != nil && (c.State == runtime.StateRunning || c.State == runtime.StateUnknown)
}

// boolParam reads a "true" parameter.
func boolParam(open *wire.TunnelOpen, name string) bool { return open.Param(name) == "true" }

// intParam reads a parameter of a non-negative number; ok is false if it
// is absent.
func intParam(open *wire.TunnelOpen, name string) (n int64, ok bool, err error) {
	v := open.Param(name)
	if v == "" {
		return 0, false, nil
	}
	n, err = strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, false, refuse(wire.CodeBadRequest, "%s=%q is not a non-negative number", name, v)
	}
	return n, true, nil
}

// streamContext returns a context that ends with ctx or, for a stream
// that can tell (a QUIC stream's Context), when the peer stopped reading
// it: the hub closed the tunnel.
func streamContext(ctx context.Context, st wire.TunnelStream) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	if sc, ok := st.(interface{ Context() context.Context }); ok {
		stop := context.AfterFunc(sc.Context(), cancel)
		return ctx, func() { stop(); cancel() }
	}
	return ctx, cancel
}
