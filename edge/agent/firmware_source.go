package agent

import (
	"context"

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

func (s syncSource) Fetch(ctx context.Context, release string, c manifest.Component, dst, base string, rate int64) (fwv1.TransferStats, error) {
	cfg := transfer.DefaultFetchConfig()
	cfg.Release, cfg.Bandwidth = release, rate
	st, err := transfer.Fetch(ctx, s.open, cfg, dst, c, base)
	return fwv1.TransferStats{Received: st.Received, Full: st.Size, Resumes: int32(st.Resumes), Delta: st.Delta}, err
}
