package streams

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	gwebsocket "github.com/gorilla/websocket"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	pfconst "k8s.io/apimachinery/pkg/util/portforward"
	"k8s.io/streaming/pkg/httpstream"
	"k8s.io/streaming/pkg/httpstream/spdy"
	"k8s.io/streaming/pkg/httpstream/wsstream"

	"github.com/outpost-mesh/outpost/sync/server"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// Connected is an optional interface of an Opener: whether a node has a
// session now, so that a port-forward to a node that has none is refused
// at once rather than on its first connection.
type Connected interface {
	Connected(node string) bool
}

// servePortForward serves pods/portforward: SPDY (portforward.k8s.io),
// or SPDY tunnelled through a WebSocket (SPDY/3.1+portforward.k8s.io), as
// kubectl 1.31 and later ask first. Each connection the client forwards
// is a data and an error stream, and a tunnel of its own to the node.
func (s *Server) servePortForward(w http.ResponseWriter, r *http.Request, pod *corev1.Pod) error {
	if pod.Spec.NodeName == "" {
		return apierrors.NewBadRequest(fmt.Sprintf("pod %s does not have a host assigned", pod.Name))
	}
	if c, ok := s.cfg.Tunnels.(Connected); ok && !c.Connected(pod.Spec.NodeName) {
		return tunnelError(pod.Spec.NodeName, server.ErrNotConnected)
	}
	pf := &portForward{s: s, pod: pod, pairs: map[string]*streamPair{}, streams: make(chan httpstream.Stream)}
	pf.ctx, pf.cancel = context.WithCancel(context.WithoutCancel(r.Context()))
	defer pf.cancel()
	var conn httpstream.Connection
	switch {
	case wsstream.IsWebSocketRequestWithTunnelingProtocol(r):
		up := gwebsocket.Upgrader{
			Subprotocols:    []string{pfconst.WebsocketsSPDYTunnelingPortForwardV1},
			CheckOrigin:     func(*http.Request) bool { return true },
			ReadBufferSize:  copyBuffer,
			WriteBufferSize: copyBuffer,
		}
		ws, err := up.Upgrade(hijacker{w}, r, nil)
		if err != nil {
			return nil // the upgrader answered
		}
		if ws.Subprotocol() != pfconst.WebsocketsSPDYTunnelingPortForwardV1 {
			ws.Close()
			return nil
		}
		c, err := spdy.NewServerConnectionWithPings(&wsConn{ws: ws}, pf.received, 0)
		if err != nil {
			ws.Close()
			return nil
		}
		conn = c
	case wsstream.IsWebSocketRequest(r):
		// The channel protocol of old WebSocket port-forwards is not
		// served: an upgrade failure, after which kubectl falls back.
		return apierrors.NewBadRequest("unable to upgrade: only the SPDY/3.1+portforward.k8s.io WebSocket subprotocol is served for port forwarding")
	case httpstream.IsUpgradeRequest(r):
		if _, err := httpstream.Handshake(r, w, []string{pfconst.PortForwardV1Name}); err != nil {
			return nil // Handshake answered
		}
		conn = spdy.NewResponseUpgraderWithPings(0).UpgradeResponse(hijacker{w}, r, pf.received)
		if conn == nil {
			return nil // the upgrader answered
		}
	default:
		return apierrors.NewBadRequest("Upgrade request required")
	}
	defer conn.Close()
	conn.SetIdleTimeout(s.cfg.IdleTimeout)
	pf.conn = conn
	pf.run()
	return nil
}

// portForward is one client's port-forward connection.
type portForward struct {
	s       *Server
	pod     *corev1.Pod
	conn    httpstream.Connection
	ctx     context.Context
	cancel  context.CancelFunc
	streams chan httpstream.Stream

	mu    sync.Mutex
	pairs map[string]*streamPair
	wg    sync.WaitGroup
}

// streamPair is the data and error stream of one forwarded connection.
type streamPair struct {
	id          string
	data, error httpstream.Stream
	created     time.Time
}

// received takes a stream the client created: it must name a port and be
// a data or an error stream.
func (pf *portForward) received(st httpstream.Stream, replySent <-chan struct{}) error {
	if st.Headers().Get(corev1.PortHeader) == "" {
		return fmt.Errorf("%q header is required", corev1.PortHeader)
	}
	switch t := st.Headers().Get(corev1.StreamType); t {
	case corev1.StreamTypeError, corev1.StreamTypeData:
	default:
		return fmt.Errorf("invalid stream type %q", t)
	}
	select {
	case pf.streams <- st:
		return nil
	case <-pf.ctx.Done():
		return errors.New("port forward ended")
	}
}

// run pairs the client's streams and forwards each pair, until the
// client's connection ends; it returns when every forward has.
func (pf *portForward) run() {
	timeout := pf.s.cfg.StreamCreationTimeout
	tick := time.NewTicker(max(timeout/4, 10*time.Millisecond))
	defer tick.Stop()
	defer func() {
		pf.cancel()
		pf.conn.Close()
		pf.wg.Wait()
	}()
	for {
		select {
		case <-pf.conn.CloseChan():
			return
		case <-tick.C:
			// Drop pairs the client never completed.
			pf.mu.Lock()
			for id, p := range pf.pairs {
				if time.Since(p.created) > timeout {
					delete(pf.pairs, id)
					if p.error != nil {
						p.error.Write([]byte("timed out waiting for streams"))
						p.error.Reset()
					}
					if p.data != nil {
						p.data.Reset()
					}
				}
			}
			pf.mu.Unlock()
		case st := <-pf.streams:
			id := requestID(st)
			pf.mu.Lock()
			p := pf.pairs[id]
			if p == nil {
				p = &streamPair{id: id, created: time.Now()}
				pf.pairs[id] = p
			}
			var dup bool
			switch st.Headers().Get(corev1.StreamType) {
			case corev1.StreamTypeError:
				dup, p.error = p.error != nil, st
			case corev1.StreamTypeData:
				dup, p.data = p.data != nil, st
			}
			complete := p.data != nil && p.error != nil
			if complete || dup {
				delete(pf.pairs, id)
			}
			pf.mu.Unlock()
			switch {
			case dup:
				st.Reset()
				if p.error != nil {
					p.error.Reset()
				}
				if p.data != nil {
					p.data.Reset()
				}
			case complete:
				pf.wg.Go(func() { pf.forward(p) })
			}
		}
	}
}

// requestID returns the id pairing a stream with its partner: its
// requestID header, or for clients too old to send one, derived from
// the stream's identifier as kubelet derives it (the data stream follows
// its error stream, ids going up by two).
func requestID(st httpstream.Stream) string {
	if id := st.Headers().Get(corev1.PortForwardRequestIDHeader); id != "" {
		return id
	}
	id := st.Identifier()
	if st.Headers().Get(corev1.StreamType) == corev1.StreamTypeData {
		id -= 2
	}
	return strconv.FormatUint(uint64(id), 10)
}

// forward carries one connection: a tunnel to the pod's port, its bytes
// both ways with half-closes, and an error on the pair's error stream if
// the node could not connect.
func (pf *portForward) forward(p *streamPair) {
	defer p.error.Close()
	defer pf.conn.RemoveStreams(p.data, p.error)
	portText := p.data.Headers().Get(corev1.PortHeader)
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil || port == 0 {
		fmt.Fprintf(p.error, "invalid port %q", portText)
		p.data.Close()
		return
	}
	t, err := pf.s.openTunnel(pf.ctx, pf.pod, "portforward", []wire.Param{{Name: "port", Value: portText}}, func() { p.data.Reset() })
	if err != nil {
		msg := err.Error()
		if st, ok := err.(apierrors.APIStatus); ok {
			msg = st.Status().Message
		}
		fmt.Fprintf(p.error, "error forwarding port %d to pod %s, uid %v: %s", port, pf.pod.Name, pf.pod.UID, msg)
		// Closed, as kubelet closes it, not reset: a reset may reach
		// the client before the reply to its stream's creation, which
		// spdystream then reports as a failed creation, the error
		// stream's message unread.
		p.data.Close()
		return
	}
	defer t.Close()
	stop := context.AfterFunc(pf.ctx, func() { t.Close() }) // the client's connection ended
	defer stop()
	var wg sync.WaitGroup
	wg.Go(func() {
		// client -> pod; the client's half-close ends the tunnel's write side
		buf := make([]byte, copyBuffer)
		if _, err := io.CopyBuffer(t, readerOnly{p.data}, buf); err == nil {
			t.CloseWrite()
		} else {
			t.Close()
		}
	})
	buf := make([]byte, copyBuffer)
	_, err = io.CopyBuffer(writerOnly{p.data}, readerOnly{t}, buf)
	if err == nil {
		p.data.Close() // half-close toward the client
	} else {
		p.data.Reset()
		t.Close()
	}
	wg.Wait()
}

// readerOnly and writerOnly hide ReaderFrom/WriterTo, so that copies go
// through the fixed buffer they are given.
type readerOnly struct{ io.Reader }
type writerOnly struct{ io.Writer }

// wsConn is a WebSocket carrying a byte stream in binary messages, as
// client-go's tunnelling connection sends it: a net.Conn for a SPDY
// connection.
type wsConn struct {
	ws  *gwebsocket.Conn
	cur io.Reader
	wmu sync.Mutex
}

func (c *wsConn) Read(p []byte) (int, error) {
	for {
		if c.cur == nil {
			typ, r, err := c.ws.NextReader()
			if err != nil {
				var ce *gwebsocket.CloseError
				if errors.As(err, &ce) && ce.Code == gwebsocket.CloseNormalClosure {
					return 0, io.EOF
				}
				return 0, err
			}
			if typ != gwebsocket.BinaryMessage {
				return 0, errors.New("websocket tunnel: message not binary")
			}
			c.cur = r
		}
		n, err := c.cur.Read(p)
		if err == io.EOF {
			c.cur = nil
			if n > 0 {
				return n, nil
			}
			continue
		}
		return n, err
	}
}

func (c *wsConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.ws.WriteMessage(gwebsocket.BinaryMessage, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (c *wsConn) Close() error {
	c.wmu.Lock()
	_ = c.ws.WriteControl(gwebsocket.CloseMessage, gwebsocket.FormatCloseMessage(gwebsocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	c.wmu.Unlock()
	return c.ws.Close()
}

func (c *wsConn) LocalAddr() net.Addr                { return c.ws.LocalAddr() }
func (c *wsConn) RemoteAddr() net.Addr               { return c.ws.RemoteAddr() }
func (c *wsConn) SetDeadline(t time.Time) error      { return c.ws.NetConn().SetDeadline(t) }
func (c *wsConn) SetReadDeadline(t time.Time) error  { return c.ws.SetReadDeadline(t) }
func (c *wsConn) SetWriteDeadline(t time.Time) error { return c.ws.SetWriteDeadline(t) }

var _ Connected = (*server.Server)(nil)
