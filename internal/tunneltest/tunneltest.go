// Package tunneltest gives tests an in-memory tunnel: the hub's and the
// node's ends of one wire.TunnelStream, as the sync packages hand them
// to the servers of kubectl's streams. Only tests import it.
package tunneltest

import (
	"context"
	"io"

	"github.com/outpost-mesh/outpost/sync/wire"
)

// End is one end of an in-memory tunnel. As a QUIC stream's: CloseWrite
// ends what this end sends (the peer reads io.EOF); Close also stops
// reading, so that the peer's writes fail and its Context ends.
type End struct {
	r          *io.PipeReader
	w          *io.PipeWriter
	ctx        context.Context
	cancel     context.CancelFunc
	peerCancel context.CancelFunc
}

var _ wire.TunnelStream = (*End)(nil)

// Pair returns the two ends of a new tunnel.
func Pair() (hub, node *End) {
	r1, w1 := io.Pipe()
	r2, w2 := io.Pipe()
	hub, node = &End{r: r2, w: w1}, &End{r: r1, w: w2}
	hub.ctx, hub.cancel = context.WithCancel(context.Background())
	node.ctx, node.cancel = context.WithCancel(context.Background())
	hub.peerCancel, node.peerCancel = node.cancel, hub.cancel
	return hub, node
}

// Context ends when the peer closed its end.
func (e *End) Context() context.Context { return e.ctx }

func (e *End) Read(p []byte) (int, error)  { return e.r.Read(p) }
func (e *End) Write(p []byte) (int, error) { return e.w.Write(p) }
func (e *End) CloseWrite() error           { return e.w.Close() }

// Close ends both ways. It may be called more than once.
func (e *End) Close() error {
	e.w.Close()
	e.r.CloseWithError(io.ErrClosedPipe)
	e.peerCancel()
	return nil
}
