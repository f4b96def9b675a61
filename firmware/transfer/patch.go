package transfer

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"sync"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/outpost-mesh/outpost/firmware/manifest"
)

// dictID names the base artifact as the raw dictionary of a chunk's zstd
// frame. It is not 0, which zstd frames leave out (--patch-from's), so a
// frame made against a dictionary says so in its header.
const dictID = 1

// errNoDelta says the hub will not make a patch for a pair.
var errNoDelta = errors.New("no delta")

// deltaWindow is the zstd window of a chunk patched against a base of
// baseSize bytes: large enough for a match anywhere in the base, which
// zstd sees as history before the chunk. Both ends compute it: the hub
// encodes with it, the node bounds its decoder with it.
func deltaWindow(baseSize, chunkSize int64) int {
	n := uint64(max(baseSize+chunkSize, zstd.MinWindowSize))
	if n > zstd.MaxWindowSize {
		return zstd.MaxWindowSize // matches past it are not found
	}
	return int(uint64(1) << bits.Len64(n-1)) // at most MaxWindowSize: an int on 32 bits too
}

// patch holds, for each chunk of a target, its zstd frame on the base,
// or nil where the frame is not smaller than the chunk.
type patch struct {
	chunks [][]byte
	bytes  int64 // of the frames
}

// makePatch encodes every chunk of target (component c) with base as the
// raw dictionary. It holds the base in memory while it runs.
func makePatch(base, target Blob, c *manifest.Component) (*patch, error) {
	b := make([]byte, base.Size())
	if _, err := base.ReadAt(b, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("read base: %w", err)
	}
	enc, err := zstd.NewWriter(nil,
		zstd.WithEncoderLevel(zstd.SpeedBestCompression), // once per pair: worth it
		zstd.WithWindowSize(deltaWindow(int64(len(b)), c.ChunkSize)),
		zstd.WithEncoderDictRaw(dictID, b),
		zstd.WithEncoderConcurrency(1),
		zstd.WithEncoderCRC(false)) // each chunk is checked by its digest
	if err != nil {
		return nil, fmt.Errorf("patch encoder: %w", err)
	}
	defer enc.Close()
	p := &patch{chunks: make([][]byte, c.ChunkCount())}
	buf := make([]byte, c.ChunkSize)
	for i := range p.chunks {
		off, n := c.ChunkBounds(i)
		chunk := buf[:n]
		if _, err := target.ReadAt(chunk, off); err != nil && !(errors.Is(err, io.EOF) && off+n == target.Size()) {
			return nil, fmt.Errorf("read chunk %d: %w", i, err)
		}
		z := enc.EncodeAll(chunk, nil)
		if int64(len(z)) < n {
			p.chunks[i] = z[:len(z):len(z)]
			p.bytes += int64(len(z))
		}
	}
	return p, nil
}

// patchKey names the patches of one pair at one chunk size.
type patchKey struct {
	base, target string
	chunkSize    int64
}

// maxPatchEntries bounds the pairs the cache remembers, patched or not.
const maxPatchEntries = 256

// patchEntry is a cached pair: ready once done is closed, then p, or err
// wrapping errNoDelta for a pair sent whole.
type patchEntry struct {
	key  patchKey
	done chan struct{}
	p    *patch
	err  error
	elem *list.Element // in lru once made
}

func (e *patchEntry) size() int64 {
	if e.p == nil {
		return 0
	}
	return e.p.bytes
}

// patchCache keeps the patches of recent pairs, at most max bytes, and
// makes one pair at a time: the many nodes asking for the same pair wait
// for its one making.
type patchCache struct {
	max   int64
	stats *ServerStats
	make  chan struct{} // one making at a time: it holds a base in memory

	mu      sync.Mutex
	entries map[patchKey]*patchEntry
	lru     *list.List // of *patchEntry, most recent first
	bytes   int64
}

func newPatchCache(max int64, stats *ServerStats) *patchCache {
	return &patchCache{max: max, stats: stats, make: make(chan struct{}, 1), entries: map[patchKey]*patchEntry{}, lru: list.New()}
}

// errPatchPending says another request is making the patches asked for
// and they were not ready within the wait.
var errPatchPending = errors.New("patches being made")

// get returns the patches of key, made by fn if no one has them or is
// making them; waiting for another's making, it gives up after wait with
// errPatchPending. A failed making is not kept: the next asker tries
// again.
func (pc *patchCache) get(ctx context.Context, key patchKey, wait time.Duration, fn func() (*patch, error)) (*patch, error) {
	pc.mu.Lock()
	e, ok := pc.entries[key]
	if ok {
		if e.elem != nil {
			pc.lru.MoveToFront(e.elem)
		}
		pc.mu.Unlock()
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-e.done:
		case <-t.C:
			return nil, errPatchPending
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		pc.stats.PatchCacheHit.Add(1)
		return e.p, e.err
	}
	e = &patchEntry{key: key, done: make(chan struct{})}
	pc.entries[key] = e
	pc.mu.Unlock()

	select {
	case pc.make <- struct{}{}:
		e.p, e.err = fn()
		<-pc.make
		if e.err == nil {
			pc.stats.PatchesMade.Add(1)
		}
	case <-ctx.Done():
		e.err = ctx.Err()
	}
	if e.err == nil && e.p.bytes > pc.max {
		// Too large to keep, and too dear to make for every node: the
		// pair is sent whole while it is remembered.
		e.p, e.err = nil, fmt.Errorf("patches of %d bytes, over the cache's %d: %w", e.p.bytes, pc.max, errNoDelta)
	}
	pc.mu.Lock()
	if e.err != nil && !errors.Is(e.err, errNoDelta) {
		delete(pc.entries, key) // served to the waiters, not kept
	} else {
		e.elem = pc.lru.PushFront(e)
		pc.bytes += e.size()
		for pc.bytes > pc.max || pc.lru.Len() > maxPatchEntries {
			old := pc.lru.Remove(pc.lru.Back()).(*patchEntry)
			delete(pc.entries, old.key)
			pc.bytes -= old.size()
		}
	}
	pc.mu.Unlock()
	close(e.done)
	return e.p, e.err
}
