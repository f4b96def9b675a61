package containerd

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync"
)

// errStdinClosed is returned by stdinFeed.copyFrom once the container's
// stdin is closed: its process read EOF, or its IO was finished.
var errStdinClosed = errors.New("the container's stdin is closed")

// stdinFeed is the stdin of a container's main process as its attachers
// write it: the reader that cio copies into the stdin FIFO, whose write
// end the Runtime keeps open between attachers as CRI's ContainerIO
// does. A piece an attacher reads is handed over unbuffered, so that
// nothing of it waits in the feed but the piece cio is writing, and an
// attacher whose process does not read is held back by the FIFO.
// Attachers may send at once; their pieces interleave, as upstream's.
type stdinFeed struct {
	ch     chan []byte
	closed chan struct{}
	once   sync.Once
	rest   []byte // what is left of the piece in hand; the reader's alone
}

func newStdinFeed() *stdinFeed {
	return &stdinFeed{ch: make(chan []byte), closed: make(chan struct{})}
}

// Read implements io.Reader for cio's copy into the FIFO: it blocks until
// an attacher sends, and returns EOF once the feed is closed and the
// piece in hand read.
func (f *stdinFeed) Read(p []byte) (int, error) {
	if len(f.rest) == 0 {
		select {
		case f.rest = <-f.ch:
		case <-f.closed:
			return 0, io.EOF
		}
	}
	n := copy(p, f.rest)
	f.rest = f.rest[n:]
	return n, nil
}

// close ends the feed: cio closes its end of the FIFO once it has written
// the piece in hand, and sends fail. It is safe to call twice.
func (f *stdinFeed) close() { f.once.Do(func() { close(f.closed) }) }

func (f *stdinFeed) isClosed() bool {
	select {
	case <-f.closed:
		return true
	default:
		return false
	}
}

// copyFrom copies src into the feed until src ends (nil), fails (its
// error), the feed is closed (errStdinClosed) or ctx is done (ctx's
// error). A Read of src in progress when ctx is done goes on until it
// returns, in the caller's goroutine.
func (f *stdinFeed) copyFrom(ctx context.Context, src io.Reader) error {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if ctx.Err() != nil {
			return ctx.Err() // what a late Read returned is dropped
		}
		if n > 0 {
			select {
			case f.ch <- bytes.Clone(buf[:n]):
			case <-f.closed:
				return errStdinClosed
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
