package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/quic-go/quic-go"

	"github.com/outpost-mesh/outpost/sync/stream"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// ErrNotConnected is returned by OpenArtifactStream while no session with
// the hub is up.
var ErrNotConnected = errors.New("not connected to the hub")

// ErrNoArtifacts is returned (wrapped) by OpenArtifactStream when the hub
// speaks a capability version before wire.ArtifactVersion.
var ErrNoArtifacts = errors.New("hub serves no artifact streams")

// liveConn is the connection of the session that is up, and the version
// it speaks.
type liveConn struct {
	conn    *quic.Conn
	version uint32
}

// OpenArtifactStream opens an artifact stream on the current connection
// to the hub, for firmware/transfer's Fetch and Manifest (an Opener). The
// caller owns the stream; it ends with the connection. It may be called
// from any goroutine.
func (c *Client) OpenArtifactStream(ctx context.Context) (wire.ArtifactStream, error) {
	cur := c.current.Load()
	if cur == nil {
		return nil, ErrNotConnected
	}
	if cur.version < wire.ArtifactVersion {
		return nil, fmt.Errorf("%w: it speaks version %d", ErrNoArtifacts, cur.version)
	}
	qs, err := cur.conn.OpenStreamSync(ctx)
	if err != nil {
		return nil, fmt.Errorf("open artifact stream: %w", err)
	}
	return stream.NewLean(qs), nil
}
