package server

import (
	"context"
	"fmt"

	"github.com/quic-go/quic-go"

	"github.com/outpost-mesh/outpost/sync/wire"
)

// ErrNotConnected is returned by OpenTunnel for a node without a live
// connection.
var ErrNotConnected = fmt.Errorf("node not connected")

// OpenTunnel opens a stream to node on its live connection, for the edge
// service open names (logs, exec, port-forward). Once the edge accepts, the
// returned stream carries the service's bytes; the caller closes it. A
// refusal is returned as a *wire.Error. ctx bounds the opening only.
func (s *Server) OpenTunnel(ctx context.Context, node string, open *wire.TunnelOpen) (wire.TunnelStream, error) {
	s.mu.Lock()
	nc := s.conns[node]
	s.mu.Unlock()
	if nc == nil {
		return nil, fmt.Errorf("tunnel to %s: %w", node, ErrNotConnected)
	}
	qs, err := nc.conn.OpenStreamSync(ctx)
	if err != nil {
		return nil, fmt.Errorf("tunnel to %s: open stream: %w", node, err)
	}
	st := newStream(qs)
	if stop := context.AfterFunc(ctx, func() { qs.CancelRead(0); qs.CancelWrite(0) }); stop != nil {
		defer stop()
	}
	if err := st.w.Write(open); err != nil {
		qs.CancelRead(0)
		return nil, fmt.Errorf("tunnel to %s: %w", node, err)
	}
	m, err := st.r.Read()
	if err != nil {
		qs.CancelRead(0)
		qs.CancelWrite(0)
		return nil, fmt.Errorf("tunnel to %s: %w", node, err)
	}
	switch m := m.(type) {
	case *wire.TunnelReply:
		return &tunnelConn{st: st}, nil
	case *wire.Error:
		qs.CancelRead(0)
		qs.Close()
		return nil, m
	default:
		qs.CancelRead(quic.StreamErrorCode(wire.CodeBadRequest))
		qs.Close()
		return nil, fmt.Errorf("tunnel to %s: unexpected %v", node, m.Type())
	}
}

// tunnelConn reads what the frame reader may have buffered before the
// stream itself.
type tunnelConn struct{ st *stream }

func (t *tunnelConn) Read(p []byte) (int, error)  { return t.st.r.Rest().Read(p) }
func (t *tunnelConn) Write(p []byte) (int, error) { return t.st.st.Write(p) }
func (t *tunnelConn) CloseWrite() error           { return t.st.st.Close() }
func (t *tunnelConn) Close() error {
	t.st.st.CancelRead(0)
	return t.st.st.Close()
}
