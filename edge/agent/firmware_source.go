package agent

import (
	"context"
	"sync/atomic"

	fwv1 "github.com/outpost-mesh/outpost/firmware/apis/v1"
	"github.com/outpost-mesh/outpost/firmware/manifest"
	"github.com/outpost-mesh/outpost/firmware/transfer"
	"github.com/outpost-mesh/outpost/sync/client"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// syncSource fetches releases over the agent's sync connection, on
// artifact streams (firmware/transfer).
type syncSource struct{ a *Agent }

var _ FirmwareSource = syncSource{}

// open opens an artifact stream on the agent's current connection.
func (s syncSource) open(ctx context.Context) (wire.ArtifactStream, error) {
	s.a.clientMu.Lock()
	c := s.a.client
	s.a.clientMu.Unlock()
	if c == nil {
		return nil, client.ErrNotConnected
	}
	return c.OpenArtifactStream(ctx)
}

func (s syncSource) Manifest(ctx context.Context, release string) ([]byte, error) {
	return transfer.Manifest(ctx, s.open, release)
}

func (s syncSource) Fetch(ctx context.Context, release string, c manifest.Component, dst, base string, rate int64, received *atomic.Int64) (fwv1.TransferStats, error) {
	cfg := transfer.DefaultFetchConfig()
	cfg.Release, cfg.Bandwidth = release, rate
	open := func(ctx context.Context) (wire.ArtifactStream, error) {
		st, err := s.open(ctx)
		if err != nil {
			return nil, err
		}
		return countingStream{st, received}, nil
	}
	st, err := transfer.Fetch(ctx, open, cfg, dst, c, base)
	return fwv1.TransferStats{Received: st.Received, Full: st.Size, Resumes: int32(st.Resumes), Delta: st.Delta}, err
}

// countingStream counts the chunk bytes an artifact stream brings, for the
// node to report its progress while it downloads.
type countingStream struct {
	wire.ArtifactStream
	n *atomic.Int64
}

func (c countingStream) Read() (wire.Message, error) {
	m, err := c.ArtifactStream.Read()
	if ch, ok := m.(*wire.ArtifactChunk); ok {
		c.n.Add(int64(len(ch.Data)))
	}
	return m, err
}
