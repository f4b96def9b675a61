package hubd

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/outpost-mesh/outpost/hub/streams"
	"github.com/outpost-mesh/outpost/sync/server"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// newStreams builds the server of pods' streaming subresources over
// tunnels, or over h.cfg.Streams.Tunnels when a test plays the nodes.
func (h *Hub) newStreams(tunnels *lateTunnels, log *slog.Logger) (*streams.Server, error) {
	cfg := h.cfg.Streams
	if cfg.Tunnels == nil {
		cfg.Tunnels = tunnels
	}
	cfg.Logger = log.With("component", "streams")
	s, err := streams.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("pod streams: %w", err)
	}
	return s, nil
}

// lateTunnels opens tunnels through the sync endpoint, which starts after
// the API server: until then, and without one, no node is connected.
type lateTunnels struct{ srv atomic.Pointer[server.Server] }

var (
	_ streams.Opener    = (*lateTunnels)(nil)
	_ streams.Connected = (*lateTunnels)(nil)
)

func (l *lateTunnels) set(s *server.Server) { l.srv.Store(s) }

func (l *lateTunnels) OpenTunnel(ctx context.Context, node string, open *wire.TunnelOpen) (wire.TunnelStream, error) {
	s := l.srv.Load()
	if s == nil {
		return nil, fmt.Errorf("tunnel to %s: %w", node, server.ErrNotConnected)
	}
	return s.OpenTunnel(ctx, node, open)
}

func (l *lateTunnels) Connected(node string) bool {
	s := l.srv.Load()
	return s != nil && s.Connected(node)
}
