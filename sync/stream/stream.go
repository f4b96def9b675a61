// Package stream is the one framed-stream type of sync: a QUIC stream
// that carries sync/wire frames, used alike at the hub's end (sync/server)
// and the node's (sync/client), and that becomes a raw byte tunnel once a
// TunnelOpen has been answered. Only sync/client and sync/server import it.
package stream

import (
	"context"
	"errors"
	"io"

	"github.com/quic-go/quic-go"

	"github.com/outpost-mesh/outpost/sync/wire"
)

// Stream is a QUIC stream with frame reading and writing. One goroutine
// may read (Read, and the Tunnel's Read) while another writes (Write,
// CloseWrite, Fail and the Tunnel's Write), as on the QUIC stream itself;
// the cancel methods may be called from any goroutine.
type Stream struct {
	qs *quic.Stream
	r  *wire.Reader
	w  *wire.Writer
}

// New wraps qs, reading frames of at most wire's default size. The
// Stream owns qs from then on.
func New(qs *quic.Stream) *Stream {
	return &Stream{qs: qs, r: wire.NewReader(qs, 0), w: wire.NewWriter(qs)}
}

// NewLean wraps qs as New does, writing frames with wire's lean
// compression (wire.Writer.SetLean): a node's streams.
func NewLean(qs *quic.Stream) *Stream {
	s := New(qs)
	s.w.SetLean()
	return s
}

// SetCompression turns the compression of the frames written on or off
// (on by default): off for frames that are compressed already, such as
// release artifacts, which would only cost the CPU of trying.
func (s *Stream) SetCompression(on bool) { s.w.SetCompression(on) }

// Read reads the next frame; io.EOF at the clean end of the peer's side.
func (s *Stream) Read() (wire.Message, error) { return s.r.Read() }

// Write writes m as one frame.
func (s *Stream) Write(m wire.Message) error { return s.w.Write(m) }

// BytesRead is the number of frame bytes read so far.
func (s *Stream) BytesRead() int64 { return s.r.BytesRead() }

// BytesWritten is the number of frame bytes written so far.
func (s *Stream) BytesWritten() int64 { return s.w.BytesWritten() }

// CloseWrite ends the sending side cleanly: the peer reads what was
// written, then io.EOF. It must not run concurrently with a Write.
func (s *Stream) CloseWrite() error { return s.qs.Close() }

// CancelRead tells the peer that nothing more will be read, with code.
func (s *Stream) CancelRead(code wire.ErrorCode) { s.qs.CancelRead(quic.StreamErrorCode(code)) }

// Close stops reading and ends the sending side cleanly, as the end of a
// conversation that went well. It must not run concurrently with a Write.
func (s *Stream) Close() error {
	s.qs.CancelRead(0)
	return s.qs.Close()
}

// Abort resets the stream both ways with code: what was not yet delivered
// is dropped. It may run concurrently with anything, and unblocks a Read
// or Write in progress.
func (s *Stream) Abort(code wire.ErrorCode) {
	s.qs.CancelRead(quic.StreamErrorCode(code))
	s.qs.CancelWrite(quic.StreamErrorCode(code))
}

// AbortWhenDone aborts the stream when ctx ends, so that a peer that
// stops answering does not hold a Read or Write past ctx. Calling the
// returned stop before ctx ends cancels that, and reports whether it did.
func (s *Stream) AbortWhenDone(ctx context.Context) (stop func() bool) {
	return context.AfterFunc(ctx, func() { s.Abort(0) })
}

// Fail sends an Error frame of code and msg, and ends the stream both
// ways.
func (s *Stream) Fail(code wire.ErrorCode, msg string) {
	s.FailWith(&wire.Error{Code: code, Message: msg})
}

// FailWith sends e and ends the stream both ways: the peer reads e, then
// the end of the stream.
func (s *Stream) FailWith(e *wire.Error) {
	s.w.Write(e)
	s.qs.CancelRead(quic.StreamErrorCode(e.Code))
	s.qs.Close()
}

// ReadFailed ends the stream after Read returned err, telling the peer
// why when it is the peer's fault: a clean end is answered with a clean
// end, a frame over the limit with CodeTooLarge, a malformed frame with
// CodeBadRequest; anything else resets the stream.
func (s *Stream) ReadFailed(err error) {
	switch {
	case errors.Is(err, io.EOF):
		s.qs.Close()
	case errors.Is(err, wire.ErrFrameTooLarge):
		s.Fail(wire.CodeTooLarge, err.Error())
	case errors.Is(err, wire.ErrMalformed):
		s.Fail(wire.CodeBadRequest, err.Error())
	default:
		s.Abort(wire.CodeInternal)
	}
}

// Tunnel returns the stream as raw bytes, for after the TunnelOpen and
// TunnelReply frames: its reads begin with what the frame reader had
// already buffered. From then on the Stream's frame methods must not be
// used.
func (s *Stream) Tunnel() wire.TunnelStream { return tunnel{s} }

// tunnel reads what the frame reader buffered before the stream itself.
type tunnel struct{ s *Stream }

func (t tunnel) Read(p []byte) (int, error)  { return t.s.r.Rest().Read(p) }
func (t tunnel) Write(p []byte) (int, error) { return t.s.qs.Write(p) }
func (t tunnel) CloseWrite() error           { return t.s.qs.Close() }
func (t tunnel) Close() error                { return t.s.Close() }

// Context is done once the other end stopped reading the stream (it
// closed or reset it) or the connection ended, so that a server whose
// tunnel writes nothing for a while still learns that it is gone.
func (t tunnel) Context() context.Context { return t.s.qs.Context() }
