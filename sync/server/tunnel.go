package server

import (
	"context"
	"fmt"

	"github.com/outpost-mesh/outpost/sync/stream"
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
	st := stream.New(qs)
	stop := st.AbortWhenDone(ctx)
	defer stop()
	if err := st.Write(open); err != nil {
		st.CancelRead(0)
		return nil, fmt.Errorf("tunnel to %s: %w", node, err)
	}
	m, err := st.Read()
	if err != nil {
		st.Abort(0)
		return nil, fmt.Errorf("tunnel to %s: %w", node, err)
	}
	switch m := m.(type) {
	case *wire.TunnelReply:
		return st.Tunnel(), nil
	case *wire.Error:
		st.Close()
		return nil, m
	default:
		st.CancelRead(wire.CodeBadRequest)
		st.CloseWrite()
		return nil, fmt.Errorf("tunnel to %s: unexpected %v", node, m.Type())
	}
}
