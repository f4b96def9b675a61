package server

import (
	"context"
	"log/slog"

	"github.com/outpost-mesh/outpost/sync/stream"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// ArtifactServer serves the artifact streams nodes open, since capability
// version wire.ArtifactVersion: firmware/transfer's Server. It answers
// req, the stream's first frame, and returns when it has sent all (having
// ended its writing side) or failed; it may be called concurrently.
type ArtifactServer interface {
	ServeArtifact(ctx context.Context, node string, st wire.ArtifactStream, req *wire.ArtifactRequest) error
}

// The streams it is handed can turn their frames' compression off
// (artifact chunks are compressed already, or random).
var _ interface {
	wire.ArtifactStream
	SetCompression(bool)
} = (*stream.Stream)(nil)

// artifact hands a node's artifact stream to Config.Artifacts, ending
// the stream when the node's connection ends.
func (s *Server) artifact(ctx context.Context, log *slog.Logger, node string, st *stream.Stream, req *wire.ArtifactRequest) {
	if s.cfg.Artifacts == nil {
		st.Fail(wire.CodeNotFound, "this hub serves no artifacts")
		return
	}
	stop := st.AbortWhenDone(ctx)
	defer stop()
	if err := s.cfg.Artifacts.ServeArtifact(ctx, node, st, req); err != nil {
		log.Debug("artifact stream ended", "release", req.Release, "component", req.Component, "err", err)
		st.Abort(wire.CodeInternal)
		return
	}
	st.CancelRead(0) // the node sends nothing after its request
}
