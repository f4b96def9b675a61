package streams

import (
	"context"
	"errors"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/outpost-mesh/outpost/sync/server"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// DialPod connects to port of pod through a portforward tunnel over the
// sync session of the pod's node, as one connection of a port-forward
// does: the way the hub reaches a pod on an edge node, which it cannot
// dial (a service webhook's pod, say). ctx bounds the opening only, as
// for net.Dialer; the connection lives until closed, and counts against
// the node's MaxPerNode meanwhile. Its errors are API errors, as those of
// a port-forward: 400 for a pod on no node, 503 for a node without a
// session, 429 past MaxPerNode, and the node's refusal (a port nothing
// listens on) mapped to its status.
func (s *Server) DialPod(ctx context.Context, pod *corev1.Pod, port int32) (net.Conn, error) {
	if port <= 0 || port > 65535 {
		return nil, &net.AddrError{Err: "invalid port", Addr: strconv.Itoa(int(port))}
	}
	if c, ok := s.cfg.Tunnels.(Connected); ok && pod.Spec.NodeName != "" && !c.Connected(pod.Spec.NodeName) {
		return nil, tunnelError(pod.Spec.NodeName, server.ErrNotConnected)
	}
	p := strconv.Itoa(int(port))
	t, err := s.openTunnel(ctx, pod, "portforward", []wire.Param{{Name: "port", Value: p}}, nil)
	if err != nil {
		return nil, err
	}
	return &podConn{
		t:      t,
		remote: tunnelAddr(pod.Namespace + "/" + pod.Name + ":" + p),
		local:  tunnelAddr("hub->" + pod.Spec.NodeName),
	}, nil
}

// tunnelAddr is the address of either end of a pod connection: the node
// and the pod's port, for logs; the tunnel has no IP addresses.
type tunnelAddr string

func (tunnelAddr) Network() string  { return "tunnel" }
func (a tunnelAddr) String() string { return string(a) }

// podConn is a tunnel to a pod's port as a net.Conn. The tunnel cannot
// interrupt a read or write and resume it, so deadlines are emulated: a
// deadline that passes closes the connection, and the operations then
// return os.ErrDeadlineExceeded. A zero deadline disarms it.
type podConn struct {
	t             *tunnel
	local, remote net.Addr

	mu       sync.Mutex
	timer    *time.Timer
	deadline bool // a deadline passed and closed the connection
}

func (c *podConn) Read(p []byte) (int, error) {
	n, err := c.t.Read(p)
	return n, c.wrap(err)
}

func (c *podConn) Write(p []byte) (int, error) {
	n, err := c.t.Write(p)
	return n, c.wrap(err)
}

// wrap returns os.ErrDeadlineExceeded for the error of an operation cut
// by a deadline, err else.
func (c *podConn) wrap(err error) error {
	if err == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.deadline {
		return os.ErrDeadlineExceeded
	}
	return err
}

// Close closes the tunnel; safe to call more than once.
func (c *podConn) Close() error {
	c.mu.Lock()
	if c.timer != nil {
		c.timer.Stop()
	}
	c.mu.Unlock()
	return c.t.Close()
}

// CloseWrite half-closes the connection toward the pod.
func (c *podConn) CloseWrite() error { return c.t.CloseWrite() }

func (c *podConn) LocalAddr() net.Addr  { return c.local }
func (c *podConn) RemoteAddr() net.Addr { return c.remote }

func (c *podConn) SetDeadline(t time.Time) error { return c.setDeadline(t) }

// SetReadDeadline and SetWriteDeadline set the one deadline both share:
// either passing closes the connection.
func (c *podConn) SetReadDeadline(t time.Time) error  { return c.setDeadline(t) }
func (c *podConn) SetWriteDeadline(t time.Time) error { return c.setDeadline(t) }

func (c *podConn) setDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.deadline {
		return errDeadlinePassed
	}
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	if t.IsZero() {
		return nil
	}
	c.timer = time.AfterFunc(time.Until(t), func() {
		c.mu.Lock()
		c.deadline = true
		c.mu.Unlock()
		c.t.Close()
	})
	return nil
}

// errDeadlinePassed is returned by a deadline set after one passed: the
// connection is closed.
var errDeadlinePassed = errors.New("pod connection closed by a passed deadline")
