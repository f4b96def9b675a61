package transfer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/outpost-mesh/outpost/firmware/manifest"
	"github.com/outpost-mesh/outpost/internal/atomicfile"
	"github.com/outpost-mesh/outpost/internal/bytesize"
	"github.com/outpost-mesh/outpost/sync/session"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// Opener opens an artifact stream to the hub, as sync/client's
// Client.OpenArtifactStream does. It fails when the node is not
// connected; Fetch then tries again later.
type Opener func(ctx context.Context) (wire.ArtifactStream, error)

// AutoBandwidth, as FetchConfig.Bandwidth, caps a transfer at half the
// throughput measured on its first AutoSample bytes. Half, because the
// uplink the node measures is shared with its pods, whose traffic must
// keep flowing while it updates; and it is measured on the transfer
// itself, uncapped, since a node has no better estimate of its uplink
// than the bytes it just moved. The first chunks (including the hub's
// round trip) underestimate a fast link a little, which errs on the side
// of the pods.
const AutoBandwidth = -1

// ParseBandwidth reads an --ota-bandwidth value: "auto" (AutoBandwidth),
// "0" or "" (no cap), or bytes per second as bytesize.Parse reads them
// ("2MB", "512KiB").
func ParseBandwidth(s string) (int64, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "auto":
		return AutoBandwidth, nil
	case "", "0":
		return 0, nil
	}
	n, err := bytesize.Parse(s)
	if err != nil {
		return 0, fmt.Errorf("bandwidth %q: %w", s, err)
	}
	if n > 1<<62 {
		return 0, fmt.Errorf("bandwidth %q out of range", s)
	}
	return int64(n), nil
}

// FetchConfig is how Fetch fetches.
type FetchConfig struct {
	// Release names the release whose component is fetched. Required.
	Release string
	// Bandwidth is the most bytes per second the hub may send: 0 for no
	// cap, or AutoBandwidth. The default is AutoBandwidth.
	Bandwidth int64
	// AutoSample is how many bytes AutoBandwidth measures: 1 MiB (or the
	// first chunk, if larger).
	AutoSample int64
	// NoProgress ends a stream that brought nothing for this long, and
	// resumes on a new one: 10s, so that a black-holed link is noticed
	// well before the connection's idle timeout gives up on it.
	NoProgress time.Duration
	// MinBackoff and MaxBackoff space the attempts after a cut: 1s, 30s.
	MinBackoff, MaxBackoff time.Duration
	// MaxBase is the largest base Fetch offers for a delta: 128 MiB. A
	// delta transfer holds the base in memory.
	MaxBase int64
}

// DefaultFetchConfig returns the defaults above; Release is left empty.
func DefaultFetchConfig() FetchConfig {
	return FetchConfig{
		Bandwidth:  AutoBandwidth,
		AutoSample: 1 << 20,
		NoProgress: 10 * time.Second,
		MinBackoff: time.Second,
		MaxBackoff: 30 * time.Second,
		MaxBase:    128 << 20,
	}
}

// Validate reports the first invalid field.
func (c *FetchConfig) Validate() error {
	switch {
	case c.Release == "":
		return errors.New("no release")
	case c.Bandwidth < AutoBandwidth:
		return fmt.Errorf("bandwidth %d", c.Bandwidth)
	case c.NoProgress <= 0:
		return fmt.Errorf("no-progress timeout %v, want > 0", c.NoProgress)
	case c.MinBackoff <= 0 || c.MaxBackoff < c.MinBackoff:
		return fmt.Errorf("back-off %v..%v", c.MinBackoff, c.MaxBackoff)
	case c.MaxBase < 0 || c.AutoSample < 0:
		return errors.New("negative limit")
	}
	return nil
}

// Stats says what a Fetch moved. Received counts chunk data as it came
// (patches as patches, refused chunks too), so Received/Size is the cost
// of the transfer: about 1 for a full one, more after cuts, less for a
// delta.
type Stats struct {
	Size        int64  // the artifact's
	Reused      int64  // bytes of verified chunks found on disk at the start
	Received    int64  // chunk data bytes received
	Resumes     int    // streams opened again after a cut, a stall, a refused chunk or a busy hub
	Stalls      int    // of which after NoProgress with nothing
	Refused     int    // chunks refused by their digest
	Delta       bool   // the hub sent patches
	DeltaChunks int    // chunks that came as patches
	Rate        uint64 // the cap last asked of the hub, bytes per second (0: none)
}

// RefusedError is the hub's refusal of a request, from its ArtifactReply
// or an Error frame.
type RefusedError struct {
	Code    wire.ErrorCode
	Message string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("hub refused the artifact: %v: %s", e.Code, e.Message)
}

// Permanent reports whether asking again cannot help: Fetch gives up on
// these, and tries again after the others (the hub busy or failing).
func (e *RefusedError) Permanent() bool {
	switch e.Code {
	case wire.CodeUnavailable, wire.CodeInternal, wire.CodeTooLarge:
		return false
	}
	return true
}

// errStalled marks a stream ended by the no-progress timeout.
var errStalled = errors.New("no progress")

// Manifest fetches the signed envelope of release from the hub, at most
// manifest.MaxEnvelopeBytes; the caller verifies it. It tries once.
func Manifest(ctx context.Context, open Opener, release string) ([]byte, error) {
	st, err := open(ctx)
	if err != nil {
		return nil, fmt.Errorf("open artifact stream: %w", err)
	}
	defer st.Abort(0)
	stop := context.AfterFunc(ctx, func() { st.Abort(wire.CodeUnavailable) })
	defer stop()
	if err := st.Write(&wire.ArtifactRequest{Release: release}); err != nil {
		return nil, fmt.Errorf("ask for manifest of %s: %w", release, err)
	}
	m, err := st.Read()
	if err != nil {
		return nil, fmt.Errorf("read manifest of %s: %w", release, orCtx(ctx, err))
	}
	r, err := replyOf(m)
	if err != nil {
		return nil, err
	}
	switch {
	case len(r.Envelope) == 0:
		return nil, fmt.Errorf("manifest of %s: reply without an envelope", release)
	case len(r.Envelope) > manifest.MaxEnvelopeBytes:
		return nil, fmt.Errorf("manifest of %s: envelope of %d bytes, over %d", release, len(r.Envelope), manifest.MaxEnvelopeBytes)
	}
	return r.Envelope, nil
}

// replyOf reads m as an ArtifactReply that accepts the request.
func replyOf(m wire.Message) (*wire.ArtifactReply, error) {
	switch m := m.(type) {
	case *wire.ArtifactReply:
		if m.Code != wire.CodeOK {
			return nil, &RefusedError{Code: m.Code, Message: m.Message}
		}
		return m, nil
	case *wire.Error:
		return nil, &RefusedError{Code: m.Code, Message: m.Message}
	}
	return nil, fmt.Errorf("%w: %v where an artifact reply was due", wire.ErrMalformed, m.Type())
}

func orCtx(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// Fetch downloads component c of the release cfg names to dst, verifying
// each chunk against c's digests before it writes it, and the whole file
// at the end. It works in dst+".part", which holds only verified chunks
// and which a later Fetch resumes from (after a restart of the agent);
// dst appears, synced, only once complete. base, if not "", is the path
// of an earlier artifact the node holds, offered to the hub for a delta.
//
// After a cut, a stall of cfg.NoProgress or a refused chunk it opens a
// new stream with back-off and resumes from the last good chunk, until
// ctx ends or the hub refuses for good (a *RefusedError). c must be from
// a manifest the caller verified.
func Fetch(ctx context.Context, open Opener, cfg FetchConfig, dst string, c manifest.Component, base string) (Stats, error) {
	if err := checkFetch(&cfg, &c); err != nil {
		return Stats{Size: c.Size}, err
	}
	if c.VerifyFile(dst) == nil {
		return Stats{Size: c.Size}, nil
	}
	f, good, err := openPart(dst, &c)
	if err != nil {
		return Stats{Size: c.Size}, err
	}
	defer f.Close()
	st, err := Receive(ctx, open, cfg, c, good, base, fileSink{f, &c})
	st.Reused = chunksEnd(&c, good)
	if err != nil {
		return st, err
	}
	return st, finishPart(f, dst, &c)
}

// openPart opens dst+".part", the partial artifact of c, keeps only its
// verified chunks, and returns how many there are.
func openPart(dst string, c *manifest.Component) (*os.File, int, error) {
	f, err := os.OpenFile(dst+".part", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, 0, fmt.Errorf("fetch %s: %w", c.Name, err)
	}
	good, err := goodChunks(f, c)
	if err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("fetch %s: %w", c.Name, err)
	}
	return f, good, nil
}

// finishPart syncs and closes f, the complete partial artifact of c,
// checks it whole, and renames it to dst.
func finishPart(f *os.File, dst string, c *manifest.Component) error {
	part := dst + ".part"
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fetch %s: sync: %w", c.Name, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("fetch %s: %w", c.Name, err)
	}
	if err := c.VerifyFile(part); err != nil {
		os.Remove(part) // every chunk matched, yet the whole does not: start over
		return fmt.Errorf("fetch %s: %w", c.Name, err)
	}
	if err := os.Rename(part, dst); err != nil {
		return fmt.Errorf("fetch %s: %w", c.Name, err)
	}
	if err := atomicfile.SyncDir(filepath.Dir(dst)); err != nil {
		return fmt.Errorf("fetch %s: %w", c.Name, err)
	}
	return nil
}

// chunksEnd is the byte offset of the end of the first good chunks of c.
func chunksEnd(c *manifest.Component, good int) int64 {
	if good == 0 {
		return 0
	}
	off, n := c.ChunkBounds(good - 1)
	return off + n
}

// Sink takes the chunks Receive verified, in order. data is valid only
// during the call.
type Sink interface {
	PutChunk(i int, data []byte) error
}

// fileSink writes chunks at their offsets in a file.
type fileSink struct {
	f *os.File
	c *manifest.Component
}

func (s fileSink) PutChunk(i int, data []byte) error {
	off, _ := s.c.ChunkBounds(i)
	_, err := s.f.WriteAt(data, off)
	return err
}

// checkFetch checks a fetch's config and component.
func checkFetch(cfg *FetchConfig, c *manifest.Component) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("fetch config: %w", err)
	}
	return checkComponent(c)
}

// checkComponent checks that c can be fetched.
func checkComponent(c *manifest.Component) error {
	target, err := hex.DecodeString(c.SHA256)
	if err != nil || len(target) != sha256.Size || c.ChunkCount() == 0 || c.ChunkCount() > wire.MaxArtifactChunks ||
		len(c.Chunks) != c.ChunkCount() || c.ChunkSize > wire.MaxArtifactChunkSize {
		return fmt.Errorf("fetch %s: component cannot be fetched (chunk size %d, %d chunks)", c.Name, c.ChunkSize, len(c.Chunks))
	}
	return nil
}

// Receive is Fetch without the file: it receives chunks from.. of c,
// each verified against its digest, and hands them to sink in order, with
// the same resumes, back-off, delta and rate as Fetch. A sink that
// discards them makes a simulated node (outpost bench ota). The whole-file
// digest is not checked: the chunk digests, signed, pin every byte.
func Receive(ctx context.Context, open Opener, cfg FetchConfig, c manifest.Component, from int, base string, sink Sink) (Stats, error) {
	st := Stats{Size: c.Size}
	if err := checkFetch(&cfg, &c); err != nil {
		return st, err
	}
	if from < 0 || from > c.ChunkCount() {
		return st, fmt.Errorf("fetch %s: from chunk %d of %d", c.Name, from, c.ChunkCount())
	}
	target, _ := hex.DecodeString(c.SHA256)
	fe := &fetch{cfg: cfg, c: &c, open: open, sink: sink, target: target, stats: &st, good: from}
	if base != "" {
		fe.basePath = base
		fe.baseSum, fe.baseSize = hashBase(base, cfg.MaxBase) // none: no delta
	}
	defer fe.closeDecoder()
	if cfg.Bandwidth > 0 {
		fe.rate = uint64(cfg.Bandwidth)
	}
	fe.measured = cfg.Bandwidth != AutoBandwidth
	backoff := session.Backoff{Min: cfg.MinBackoff, Max: cfg.MaxBackoff}
	for fe.good < c.ChunkCount() {
		if err := ctx.Err(); err != nil {
			return st, fmt.Errorf("fetch %s: %w", c.Name, err)
		}
		before, start := fe.good, time.Now()
		reopen, err := fe.once(ctx)
		if err == nil {
			if !reopen && fe.good < c.ChunkCount() {
				err = fmt.Errorf("stream ended at chunk %d of %d", fe.good, c.ChunkCount())
			} else {
				continue
			}
		}
		if re := (*RefusedError)(nil); errors.As(err, &re) && re.Permanent() {
			return st, fmt.Errorf("fetch %s: %w", c.Name, err)
		}
		if errors.Is(err, errSink) {
			return st, fmt.Errorf("fetch %s: %w", c.Name, err)
		}
		if ctx.Err() != nil {
			return st, fmt.Errorf("fetch %s: %w", c.Name, ctx.Err())
		}
		st.Resumes++
		if errors.Is(err, errStalled) {
			st.Stalls++
		}
		if fe.good > before { // progress: start the back-off over
			backoff = session.Backoff{Min: cfg.MinBackoff, Max: cfg.MaxBackoff}
		}
		if err := sleepCtx(ctx, backoff.Next(time.Since(start))); err != nil {
			return st, fmt.Errorf("fetch %s: %w", c.Name, err)
		}
	}
	return st, nil
}

// errSink marks a failure of the Sink, which no new stream mends.
var errSink = errors.New("store chunk")

// fetch is one Fetch's state.
type fetch struct {
	cfg      FetchConfig
	c        *manifest.Component
	open     Opener
	sink     Sink
	target   []byte
	stats    *Stats
	good     int // chunks verified and written
	basePath string
	baseSum  []byte // nil: no base to offer
	baseSize int64
	dec      *zstd.Decoder
	rate     uint64
	measured bool // the auto rate is set, or not wanted
}

// once runs one stream from fe.good. It returns reopen when it stopped a
// healthy stream to ask again at the rate it just measured.
func (fe *fetch) once(ctx context.Context) (reopen bool, err error) {
	st, err := fe.open(ctx)
	if err != nil {
		return false, fmt.Errorf("open artifact stream: %w", err)
	}
	defer st.Abort(0)
	stop := context.AfterFunc(ctx, func() { st.Abort(wire.CodeUnavailable) })
	defer stop()
	var stalled atomic.Bool
	watchdog := time.AfterFunc(fe.cfg.NoProgress, func() {
		stalled.Store(true)
		st.Abort(wire.CodeUnavailable)
	})
	defer watchdog.Stop()
	fe.stats.Rate = fe.rate
	req := &wire.ArtifactRequest{Release: fe.cfg.Release, Component: fe.c.Name, SHA256: fe.target,
		FromChunk: uint32(fe.good), BaseSHA256: fe.baseSum, Rate: fe.rate}
	read := func() (wire.Message, error) {
		m, err := st.Read()
		if err != nil {
			if stalled.Load() {
				return nil, fmt.Errorf("%w for %v: %v", errStalled, fe.cfg.NoProgress, err)
			}
			return nil, orCtx(ctx, err)
		}
		watchdog.Reset(fe.cfg.NoProgress)
		return m, nil
	}
	if err := st.Write(req); err != nil {
		return false, fmt.Errorf("ask for chunk %d: %w", fe.good, err)
	}
	m, err := read()
	if err != nil {
		return false, fmt.Errorf("read artifact reply: %w", err)
	}
	reply, err := replyOf(m)
	if err != nil {
		return false, err
	}
	if reply.Size != uint64(fe.c.Size) || int64(reply.ChunkSize) != fe.c.ChunkSize {
		return false, &RefusedError{Code: wire.CodeInvalid, Message: fmt.Sprintf("hub serves %d bytes in chunks of %d, the manifest says %d in %d", reply.Size, reply.ChunkSize, fe.c.Size, fe.c.ChunkSize)}
	}
	delta := reply.Mode == wire.ArtifactDelta
	if delta {
		if fe.baseSum == nil {
			return false, fmt.Errorf("%w: delta reply to a request without a base", wire.ErrMalformed)
		}
		if err := fe.loadDecoder(); err != nil {
			fe.baseSum = nil // ask for the whole artifact from now on
			return false, err
		}
	}
	began, sampled := time.Now(), int64(0)
	for fe.good < fe.c.ChunkCount() {
		m, err := read()
		if err != nil {
			return false, fmt.Errorf("read chunk %d: %w", fe.good, err)
		}
		ch, ok := m.(*wire.ArtifactChunk)
		if !ok {
			if e, isErr := m.(*wire.Error); isErr {
				return false, &RefusedError{Code: e.Code, Message: e.Message}
			}
			return false, fmt.Errorf("%w: %v on an artifact stream", wire.ErrMalformed, m.Type())
		}
		fe.stats.Received += int64(len(ch.Data))
		if int(ch.Index) != fe.good {
			return false, fmt.Errorf("%w: chunk %d where %d was due", wire.ErrMalformed, ch.Index, fe.good)
		}
		_, n := fe.c.ChunkBounds(fe.good)
		data := ch.Data
		if ch.Delta {
			if !delta {
				return false, fmt.Errorf("%w: patched chunk %d in a full transfer", wire.ErrMalformed, ch.Index)
			}
			if data, err = fe.dec.DecodeAll(ch.Data, make([]byte, 0, n)); err != nil {
				fe.stats.Refused++
				fe.baseSum = nil
				return false, fmt.Errorf("chunk %d refused: patch: %w", ch.Index, err)
			}
		}
		if err := fe.c.VerifyChunk(fe.good, data); err != nil {
			fe.stats.Refused++
			if ch.Delta {
				// The patch may be right and the base not what it was
				// when hashed: ask for the whole artifact from now on.
				fe.baseSum = nil
			}
			return false, fmt.Errorf("chunk %d refused: %w", ch.Index, err)
		}
		if err := fe.sink.PutChunk(fe.good, data); err != nil {
			return false, fmt.Errorf("%w %d: %w", errSink, ch.Index, err)
		}
		if ch.Delta {
			fe.stats.Delta = true
			fe.stats.DeltaChunks++
		}
		fe.good++
		if !fe.measured {
			if sampled += int64(len(ch.Data)); sampled >= fe.cfg.AutoSample {
				fe.measured = true
				el := max(time.Since(began), time.Millisecond)
				fe.rate = max(uint64(float64(sampled)/el.Seconds()/2), 16<<10)
				if fe.good < fe.c.ChunkCount() {
					return true, nil
				}
			}
		}
	}
	return false, nil
}

// loadDecoder reads the base into memory as the dictionary of the
// patches, once per Fetch.
func (fe *fetch) loadDecoder() error {
	if fe.dec != nil {
		return nil
	}
	b, err := readBounded(fe.basePath, fe.cfg.MaxBase)
	if err != nil {
		return fmt.Errorf("read base: %w", err)
	}
	w := uint64(deltaWindow(int64(len(b)), fe.c.ChunkSize))
	fe.dec, err = zstd.NewReader(nil,
		zstd.WithDecoderDictRaw(dictID, b),
		zstd.WithDecoderMaxWindow(w),
		zstd.WithDecoderMaxMemory(w),
		zstd.WithDecodeAllCapLimit(true), // a patch decodes to at most its chunk
		zstd.WithDecoderConcurrency(1),
		zstd.WithDecoderLowmem(true))
	if err != nil {
		return fmt.Errorf("patch decoder: %w", err)
	}
	return nil
}

func (fe *fetch) closeDecoder() {
	if fe.dec != nil {
		fe.dec.Close()
	}
}

// goodChunks returns how many chunks from the start of f verify, and
// cuts f after them: what a crash left half-written is fetched again.
func goodChunks(f *os.File, c *manifest.Component) (int, error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	buf := make([]byte, c.ChunkSize)
	good := 0
	for ; good < c.ChunkCount(); good++ {
		off, n := c.ChunkBounds(good)
		if off+n > fi.Size() {
			break
		}
		if _, err := f.ReadAt(buf[:n], off); err != nil {
			return 0, err
		}
		if c.VerifyChunk(good, buf[:n]) != nil {
			break
		}
	}
	if end := chunksEnd(c, good); end != fi.Size() {
		if err := f.Truncate(end); err != nil {
			return 0, err
		}
	}
	return good, nil
}

// hashBase returns the sha256 and size of the file at path, or nil when
// it cannot be offered as a base (missing, unreadable, too large).
func hashBase(path string, maxSize int64) ([]byte, int64) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(f, maxSize+1))
	if err != nil || n > maxSize || n == 0 {
		return nil, 0
	}
	return h.Sum(nil), n
}

// readBounded reads the file at path, refusing one over max bytes.
func readBounded(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s is over %d bytes", path, max)
	}
	return b, nil
}
