package transfer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/outpost-mesh/outpost/firmware/manifest"
)

// RangeOpener opens a copy of an artifact that is not the hub's, such as
// a site peer's: it returns the copy's bytes from off to its end, and the
// size of the whole copy. The caller closes the body.
type RangeOpener func(ctx context.Context, off int64) (body io.ReadCloser, size int64, err error)

// ErrBadCopy is wrapped by the error of FetchCopy when the copy is not
// the artifact the manifest describes: a chunk that does not match its
// digest, or the wrong size. The bad bytes were not written; the caller
// should not take the copy again, and fetches the rest elsewhere.
var ErrBadCopy = errors.New("copy does not match the manifest")

// FetchCopy is Fetch from a copy instead of the hub, in one attempt: it
// resumes dst+".part" from its last verified chunk, reads the rest from
// open, verifies each chunk against c's digests before it writes it, and
// renames the file to dst once complete and whole. A stall of noProgress
// with nothing read ends it. When it fails, the partial file holds every
// chunk verified so far, for a Fetch from the hub, or another copy, to
// resume from. c must be from a manifest the caller verified.
//
// Stats.Received counts the bytes read from the copy.
func FetchCopy(ctx context.Context, open RangeOpener, noProgress time.Duration, dst string, c manifest.Component) (Stats, error) {
	st := Stats{Size: c.Size}
	if noProgress <= 0 {
		return st, fmt.Errorf("fetch %s: no-progress timeout %v, want > 0", c.Name, noProgress)
	}
	if err := checkComponent(&c); err != nil {
		return st, err
	}
	if c.VerifyFile(dst) == nil {
		return st, nil
	}
	f, good, err := openPart(dst, &c)
	if err != nil {
		return st, err
	}
	defer f.Close()
	st.Reused = chunksEnd(&c, good)
	if good < c.ChunkCount() {
		if err := copyChunks(ctx, open, noProgress, &c, good, fileSink{f, &c}, &st); err != nil {
			return st, fmt.Errorf("fetch %s: %w", c.Name, err)
		}
	}
	return st, finishPart(f, dst, &c)
}

// copyChunks reads chunks from.. of c from open, verifies each, and hands
// it to sink.
func copyChunks(ctx context.Context, open RangeOpener, noProgress time.Duration, c *manifest.Component, from int, sink Sink, st *Stats) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var stalled atomic.Bool
	watchdog := time.AfterFunc(noProgress, func() {
		stalled.Store(true)
		cancel()
	})
	defer watchdog.Stop()
	off := chunksEnd(c, from)
	body, size, err := open(ctx, off)
	if err != nil {
		return stallOr(&stalled, noProgress, fmt.Errorf("open copy at %d: %w", off, err))
	}
	defer body.Close()
	if size != c.Size {
		return fmt.Errorf("%w: %d bytes, the manifest says %d", ErrBadCopy, size, c.Size)
	}
	buf := make([]byte, c.ChunkSize)
	for i := from; i < c.ChunkCount(); i++ {
		_, n := c.ChunkBounds(i)
		got, err := io.ReadFull(body, buf[:n])
		st.Received += int64(got)
		if err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
				if ctx.Err() == nil {
					return fmt.Errorf("%w: it ends in chunk %d", ErrBadCopy, i)
				}
			}
			return stallOr(&stalled, noProgress, fmt.Errorf("read chunk %d: %w", i, err))
		}
		watchdog.Reset(noProgress)
		if err := c.VerifyChunk(i, buf[:n]); err != nil {
			// Not the manifest's refusal of the release: the copy is bad.
			st.Refused++
			return fmt.Errorf("%w: %v", ErrBadCopy, err)
		}
		if err := sink.PutChunk(i, buf[:n]); err != nil {
			return fmt.Errorf("%w %d: %w", errSink, i, err)
		}
	}
	return nil
}

// stallOr returns err marked as a stall if the watchdog ended the read.
func stallOr(stalled *atomic.Bool, d time.Duration, err error) error {
	if stalled.Load() {
		return fmt.Errorf("%w for %v: %v", errStalled, d, err)
	}
	return err
}
