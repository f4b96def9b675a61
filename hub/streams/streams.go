// Package streams serves the streaming subresources of pods, pods/log,
// exec, attach and portforward, by opening tunnels to the pod's node over
// its sync connection: the node sits behind NAT and is never dialled. It
// speaks kubectl's protocols (SPDY, WebSocket) on one side and the tunnel
// contract of sync/wire on the other.
package streams

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/outpost-mesh/outpost/sync/server"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// Opener opens a tunnel to a node; *server.Server is one. It returns an
// error wrapping server.ErrNotConnected when the node has no session, and
// a *wire.Error when the node refused the open.
type Opener interface {
	OpenTunnel(ctx context.Context, node string, open *wire.TunnelOpen) (wire.TunnelStream, error)
}

var _ Opener = (*server.Server)(nil)

// Config configures a Server.
type Config struct {
	// Tunnels opens the tunnels to the nodes; non-nil.
	Tunnels Opener
	// MaxPerNode bounds the tunnels open at once to one node (a
	// port-forward holds one per connection); more are answered 429.
	// Default 32.
	MaxPerNode int
	// IdleTimeout cuts a stream on which no byte went either way for
	// that long, as kubelet's --streaming-connection-idle-timeout.
	// Default 4h.
	IdleTimeout time.Duration
	// StreamCreationTimeout bounds the wait for a SPDY client's streams
	// after the upgrade, as kubelet's. Default 30s.
	StreamCreationTimeout time.Duration
	// OpenTimeout bounds the wait for a node to answer a tunnel's open:
	// a node whose link just went dark is still connected until the sync
	// endpoint's idle timeout says otherwise. Default 10s.
	OpenTimeout time.Duration
	// Logger receives the server's logs; nil discards them.
	Logger *slog.Logger
}

// DefaultConfig returns the defaults, without Tunnels.
func DefaultConfig() Config {
	return Config{
		MaxPerNode:            32,
		IdleTimeout:           4 * time.Hour,
		StreamCreationTimeout: 30 * time.Second,
		OpenTimeout:           10 * time.Second,
	}
}

// Server serves the streaming subresources of pods; it implements
// apiserver.PodStreams. Its methods are safe for concurrent use. It owns
// no goroutine beyond the requests it serves: each ends with its request.
type Server struct {
	cfg Config
	log *slog.Logger

	mu sync.Mutex
	// open counts the tunnels open to each node.
	open map[string]int
	// tunnels are the open tunnels, for Close.
	tunnels map[*tunnel]struct{}
	closed  bool
}

// Close ends every open stream (their clients see them end) and refuses
// new ones with 503, so that an HTTP server's Shutdown does not wait for
// them. Safe to call more than once.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	ts := make([]*tunnel, 0, len(s.tunnels))
	for t := range s.tunnels {
		ts = append(ts, t)
	}
	s.mu.Unlock()
	for _, t := range ts {
		t.Close()
	}
}

// New checks cfg and returns a server; it starts nothing.
func New(cfg Config) (*Server, error) {
	if cfg.Tunnels == nil {
		return nil, errors.New("streams: Tunnels is nil")
	}
	def := DefaultConfig()
	if cfg.MaxPerNode <= 0 {
		cfg.MaxPerNode = def.MaxPerNode
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = def.IdleTimeout
	}
	if cfg.StreamCreationTimeout <= 0 {
		cfg.StreamCreationTimeout = def.StreamCreationTimeout
	}
	if cfg.OpenTimeout <= 0 {
		cfg.OpenTimeout = def.OpenTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Server{cfg: cfg, log: cfg.Logger, open: map[string]int{}, tunnels: map[*tunnel]struct{}{}}, nil
}

// ServePodStream serves subresource (log, exec, attach or portforward) of
// pod for r. It returns an API error when it has written nothing.
func (s *Server) ServePodStream(w http.ResponseWriter, r *http.Request, pod *corev1.Pod, subresource string) error {
	switch subresource {
	case "log":
		return s.serveLog(w, r, pod)
	case "exec", "attach":
		return s.serveRemoteCommand(w, r, pod, subresource)
	case "portforward":
		return s.servePortForward(w, r, pod)
	}
	return apierrors.NewNotFound(schema.GroupResource{Resource: "pods/" + subresource}, pod.Name)
}

// tunnel is an open tunnel: it counts against its node's limit until
// closed, and records when bytes last went through it, for the idle
// timeout.
type tunnel struct {
	wire.TunnelStream
	s     *Server
	node  string
	once  sync.Once
	last  *atomic.Int64 // unix nanoseconds of the last byte either way
	ended chan struct{}
}

func (t *tunnel) Read(p []byte) (int, error) {
	n, err := t.TunnelStream.Read(p)
	if n > 0 {
		t.last.Store(time.Now().UnixNano())
	}
	return n, err
}

func (t *tunnel) Write(p []byte) (int, error) {
	t.last.Store(time.Now().UnixNano())
	return t.TunnelStream.Write(p)
}

// Close closes the stream and gives its place back. Safe to call more
// than once.
func (t *tunnel) Close() error {
	var err error
	t.once.Do(func() {
		err = t.TunnelStream.Close()
		close(t.ended)
		t.s.mu.Lock()
		if t.s.open[t.node]--; t.s.open[t.node] <= 0 {
			delete(t.s.open, t.node)
		}
		delete(t.s.tunnels, t)
		t.s.mu.Unlock()
	})
	return err
}

// nodeUID returns the UID the pod's node knows it by: a mirror pod, the
// hub's copy of a static pod, stands for the node's static pod, whose UID
// the mirror annotation carries (kubelet finds the static pod of a
// mirror the same way); any other pod, its own.
func nodeUID(pod *corev1.Pod) string {
	if h := pod.Annotations[wire.AnnotationMirror]; h != "" {
		return h
	}
	return string(pod.UID)
}

// openTunnel opens a tunnel of kind to pod's node with params after the
// pod's namespace, name and uid. Its errors are API errors: 400 for a pod
// on no node, 503 for a node not connected, 429 past MaxPerNode, and a
// node's refusal mapped by refusal. The tunnel is cut after IdleTimeout
// without a byte either way: onIdle, if not nil, is then called too, to
// end the client's side.
func (s *Server) openTunnel(ctx context.Context, pod *corev1.Pod, kind string, params []wire.Param, onIdle func()) (*tunnel, error) {
	node := pod.Spec.NodeName
	if node == "" {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("pod %s does not have a host assigned", pod.Name))
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, apierrors.NewServiceUnavailable("the hub is shutting down")
	}
	if s.open[node] >= s.cfg.MaxPerNode {
		s.mu.Unlock()
		// No Retry-After: clients would retry for seconds and then hide
		// this message behind a generic one.
		return nil, apierrors.NewTooManyRequests(fmt.Sprintf("too many streams open to node %s (limit %d): close some and try again", node, s.cfg.MaxPerNode), 0)
	}
	s.open[node]++
	s.mu.Unlock()
	open := &wire.TunnelOpen{Kind: kind, Params: append([]wire.Param{
		{Name: "namespace", Value: pod.Namespace},
		{Name: "name", Value: pod.Name},
		{Name: "uid", Value: nodeUID(pod)},
	}, params...)}
	octx, cancel := context.WithTimeout(ctx, s.cfg.OpenTimeout)
	st, err := s.cfg.Tunnels.OpenTunnel(octx, node, open)
	cancel()
	if err != nil {
		s.mu.Lock()
		if s.open[node]--; s.open[node] <= 0 {
			delete(s.open, node)
		}
		s.mu.Unlock()
		if ctx.Err() == nil && errors.Is(octx.Err(), context.DeadlineExceeded) {
			return nil, &apierrors.StatusError{ErrStatus: metav1.Status{
				Status: metav1.StatusFailure, Code: http.StatusServiceUnavailable, Reason: metav1.StatusReasonServiceUnavailable,
				Message: fmt.Sprintf("node %s did not answer within %v: its link to the hub may be down", node, s.cfg.OpenTimeout),
			}}
		}
		return nil, tunnelError(node, err)
	}
	t := &tunnel{TunnelStream: st, s: s, node: node, last: new(atomic.Int64), ended: make(chan struct{})}
	t.last.Store(time.Now().UnixNano())
	s.mu.Lock()
	s.tunnels[t] = struct{}{}
	closed := s.closed
	s.mu.Unlock()
	if closed { // Close ran while the tunnel opened
		t.Close()
		return nil, apierrors.NewServiceUnavailable("the hub is shutting down")
	}
	go s.watchIdle(t, onIdle)
	return t, nil
}

// watchIdle closes t once it has been idle for IdleTimeout, and returns
// when t is closed.
func (s *Server) watchIdle(t *tunnel, onIdle func()) {
	timer := time.NewTimer(s.cfg.IdleTimeout)
	defer timer.Stop()
	for {
		select {
		case <-t.ended:
			return
		case <-timer.C:
		}
		idle := time.Since(time.Unix(0, t.last.Load()))
		if idle >= s.cfg.IdleTimeout {
			s.log.Info("stream idle; closing it", "node", t.node, "idle", idle)
			t.Close()
			if onIdle != nil {
				onIdle()
			}
			return
		}
		timer.Reset(s.cfg.IdleTimeout - idle)
	}
}

// tunnelError maps an OpenTunnel error to the API error a client gets.
func tunnelError(node string, err error) error {
	var we *wire.Error
	switch {
	case errors.Is(err, server.ErrNotConnected):
		return &apierrors.StatusError{ErrStatus: metav1.Status{
			Status: metav1.StatusFailure, Code: http.StatusServiceUnavailable, Reason: metav1.StatusReasonServiceUnavailable,
			Message: fmt.Sprintf("node %s is not connected to the hub", node),
		}}
	case errors.As(err, &we):
		return refusal(we)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return apierrors.NewTimeoutError(fmt.Sprintf("opening a stream to node %s: %v", node, err), 0)
	}
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusServiceUnavailable, Reason: metav1.StatusReasonServiceUnavailable,
		Message: fmt.Sprintf("opening a stream to node %s: %v", node, err),
	}}
}

// refusal maps a node's refusal to an API error with its message.
func refusal(we *wire.Error) error {
	st := func(code int, reason metav1.StatusReason) error {
		return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: int32(code), Reason: reason, Message: we.Message}}
	}
	switch we.Code {
	case wire.CodeNotFound:
		return st(http.StatusNotFound, metav1.StatusReasonNotFound)
	case wire.CodeBadRequest, wire.CodeInvalid:
		return st(http.StatusBadRequest, metav1.StatusReasonBadRequest)
	case wire.CodeForbidden:
		return st(http.StatusForbidden, metav1.StatusReasonForbidden)
	case wire.CodeUnauthorized:
		return st(http.StatusUnauthorized, metav1.StatusReasonUnauthorized)
	case wire.CodeConflict:
		return st(http.StatusConflict, metav1.StatusReasonConflict)
	case wire.CodeTooLarge:
		return st(http.StatusRequestEntityTooLarge, metav1.StatusReasonRequestEntityTooLarge)
	case wire.CodeUnavailable:
		e := st(http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable).(*apierrors.StatusError)
		if we.RetryAfter > 0 {
			e.ErrStatus.Details = &metav1.StatusDetails{RetryAfterSeconds: int32((we.RetryAfter + time.Second - 1) / time.Second)}
		}
		return e
	}
	return st(http.StatusInternalServerError, metav1.StatusReasonInternalError)
}

// hijacker gives the protocol libraries, which assert http.Hijacker and
// http.Flusher, the connection of a ResponseWriter that wraps the
// server's (through Unwrap, as http.ResponseController finds it).
type hijacker struct{ http.ResponseWriter }

func (h hijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(h.ResponseWriter).Hijack()
}

func (h hijacker) Flush() { _ = http.NewResponseController(h.ResponseWriter).Flush() }

func (h hijacker) Unwrap() http.ResponseWriter { return h.ResponseWriter }

// boolParam is a tunnel parameter set to "true" when on.
func boolParams(ps []wire.Param, name string, on bool) []wire.Param {
	if on {
		ps = append(ps, wire.Param{Name: name, Value: "true"})
	}
	return ps
}

func intParam(ps []wire.Param, name string, v *int64) []wire.Param {
	if v != nil {
		ps = append(ps, wire.Param{Name: name, Value: strconv.FormatInt(*v, 10)})
	}
	return ps
}
