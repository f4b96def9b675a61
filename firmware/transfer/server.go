package transfer

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/outpost-mesh/outpost/firmware/manifest"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// ErrNotFound is returned by a Releases or Blobs that holds no such
// release or artifact; the node is answered wire.CodeNotFound.
var ErrNotFound = errors.New("not found")

// Releases gives the signed manifest envelopes the hub holds, by release
// name. The hub does not verify them: it decodes one only to find a
// component's size and chunking, and the node verifies it.
type Releases interface {
	Envelope(ctx context.Context, release string) ([]byte, error)
}

// Blobs opens the artifacts the hub holds, by lowercase hex sha256.
type Blobs interface {
	OpenBlob(ctx context.Context, sha256 string) (Blob, error)
}

// Blob is one artifact: read concurrently with ReadAt, closed once.
type Blob interface {
	io.ReaderAt
	io.Closer
	Size() int64
}

// Config is the hub side's.
type Config struct {
	Releases Releases     // non-nil
	Blobs    Blobs        // non-nil
	Logger   *slog.Logger // or nil

	// MaxStreams bounds the artifact streams served at once; a node asking
	// for more is answered wire.CodeUnavailable and tries again after its
	// back-off: 256. Each holds about two chunks in memory (the one read
	// and the frame writer's copy), 512 KiB at the default chunk size, so
	// 128 MiB in all.
	MaxStreams int
	// PatchCacheBytes bounds the patches kept in memory, least recently
	// used first out: 64 MiB, the patches of many (base, target) pairs
	// of a small change.
	PatchCacheBytes int64
	// MaxDeltaBase is the largest base a patch is made against: 128 MiB.
	// Making a patch reads its base into memory, one pair at a time; a
	// node with a larger base gets the artifact whole.
	MaxDeltaBase int64
	// MinRate raises a node's rate cap below it: 16 KiB/s, so that no
	// stream is held open for days.
	MinRate uint64
	// PatchWait is how long a request waits for the patches of its pair
	// that another request is making: 5s, under a node's no-progress
	// timeout (FetchConfig.NoProgress). Then the node is answered
	// wire.CodeUnavailable and asks again after its back-off. The request
	// that makes them (the first) makes them whatever the wait.
	PatchWait time.Duration
}

// DefaultConfig returns the defaults above; the required fields are left
// empty.
func DefaultConfig() Config {
	return Config{
		MaxStreams:      256,
		PatchCacheBytes: 64 << 20,
		MaxDeltaBase:    128 << 20,
		MinRate:         16 << 10,
		PatchWait:       5 * time.Second,
	}
}

// Validate reports the first invalid field.
func (c *Config) Validate() error {
	switch {
	case c.Releases == nil:
		return errors.New("no releases")
	case c.Blobs == nil:
		return errors.New("no blobs")
	case c.MaxStreams <= 0:
		return fmt.Errorf("max streams %d, want > 0", c.MaxStreams)
	case c.PatchCacheBytes < 0:
		return fmt.Errorf("patch cache of %d bytes", c.PatchCacheBytes)
	case c.PatchWait < 0:
		return fmt.Errorf("patch wait %v", c.PatchWait)
	case c.MaxDeltaBase < 0:
		return fmt.Errorf("max delta base of %d bytes", c.MaxDeltaBase)
	}
	return nil
}

// ServerStats counts what a Server served. Bytes are chunk data.
type ServerStats struct {
	Requests      atomic.Int64 // artifact streams served, refused ones too
	Refused       atomic.Int64
	Deltas        atomic.Int64 // streams served in delta mode
	ChunksSent    atomic.Int64
	BytesSent     atomic.Int64
	BytesSaved    atomic.Int64 // chunk bytes not sent thanks to patches
	PatchesMade   atomic.Int64 // (base, target) pairs patched
	PatchCacheHit atomic.Int64 // streams whose patches were cached
}

// Server serves artifact streams. All its methods are safe for
// concurrent use; it starts no goroutines.
type Server struct {
	cfg     Config
	log     *slog.Logger
	streams chan struct{} // a slot per stream served
	patches *patchCache
	stats   ServerStats
	sleep   func(ctx context.Context, d time.Duration) error
}

// NewServer checks cfg and returns a Server.
func NewServer(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("transfer config: %w", err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		cfg:     cfg,
		log:     log,
		streams: make(chan struct{}, cfg.MaxStreams),
		sleep:   sleepCtx,
	}
	s.patches = newPatchCache(cfg.PatchCacheBytes, &s.stats)
	return s, nil
}

// Stats returns the server's counters.
func (s *Server) Stats() *ServerStats { return &s.stats }

// refusal is a request the hub answers with an ArtifactReply's code.
type refusal struct {
	code wire.ErrorCode
	msg  string
}

func (r *refusal) Error() string { return fmt.Sprintf("%v: %s", r.code, r.msg) }

func refuse(code wire.ErrorCode, format string, args ...any) error {
	return &refusal{code, fmt.Sprintf(format, args...)}
}

// ServeArtifact answers req, the first frame of st, and sends what it
// asks for. It returns when the stream is done, ctx ends or the node
// goes away; it does not close st on error (the caller aborts it), and
// ends its writing side once all is sent. node is for logs only.
func (s *Server) ServeArtifact(ctx context.Context, node string, st wire.ArtifactStream, req *wire.ArtifactRequest) error {
	s.stats.Requests.Add(1)
	select {
	case s.streams <- struct{}{}:
		defer func() { <-s.streams }()
	default:
		s.stats.Refused.Add(1)
		return s.reply(st, &wire.ArtifactReply{Code: wire.CodeUnavailable, Message: fmt.Sprintf("%d artifact streams already", cap(s.streams))})
	}
	if c, ok := st.(interface{ SetCompression(bool) }); ok {
		c.SetCompression(false) // chunks are raw artifacts or zstd already
	}
	err := s.serve(ctx, st, req)
	var r *refusal
	if errors.As(err, &r) {
		s.stats.Refused.Add(1)
		s.log.Info("artifact request refused", "node", node, "release", req.Release, "component", req.Component, "code", r.code, "err", r.msg)
		return s.reply(st, &wire.ArtifactReply{Code: r.code, Message: r.msg})
	}
	return err
}

// reply sends a final reply and ends the writing side.
func (s *Server) reply(st wire.ArtifactStream, m *wire.ArtifactReply) error {
	if err := st.Write(m); err != nil {
		return fmt.Errorf("send artifact reply: %w", err)
	}
	return st.CloseWrite()
}

func (s *Server) serve(ctx context.Context, st wire.ArtifactStream, req *wire.ArtifactRequest) error {
	env, err := s.cfg.Releases.Envelope(ctx, req.Release)
	switch {
	case errors.Is(err, ErrNotFound):
		return refuse(wire.CodeNotFound, "no release %s", req.Release)
	case err != nil:
		return refuse(wire.CodeUnavailable, "release %s: %v", req.Release, err)
	case len(env) > wire.MaxArtifactEnvelope:
		return refuse(wire.CodeInvalid, "release %s envelope is %d bytes", req.Release, len(env))
	}
	if req.Component == "" {
		return s.reply(st, &wire.ArtifactReply{Envelope: env})
	}
	c, err := findComponent(env, req.Component)
	if err != nil {
		return refuse(wire.CodeNotFound, "release %s: %v", req.Release, err)
	}
	target := hex.EncodeToString(req.SHA256)
	switch {
	case c.SHA256 != target:
		return refuse(wire.CodeNotFound, "release %s component %s is not sha256 %s", req.Release, c.Name, target)
	case c.ChunkSize > wire.MaxArtifactChunkSize || c.ChunkCount() != len(c.Chunks) || c.ChunkCount() == 0:
		return refuse(wire.CodeInvalid, "release %s component %s: chunk size %d (at most %d on the wire)", req.Release, c.Name, c.ChunkSize, wire.MaxArtifactChunkSize)
	case int(req.FromChunk) > c.ChunkCount():
		return refuse(wire.CodeInvalid, "component %s has %d chunks, not %d", c.Name, c.ChunkCount(), req.FromChunk)
	}
	blob, err := s.open(ctx, target, c.Size)
	if err != nil {
		return err
	}
	defer blob.Close()

	reply := &wire.ArtifactReply{Mode: wire.ArtifactFull, Size: uint64(c.Size), ChunkSize: uint32(c.ChunkSize)}
	var p *patch
	if base := hex.EncodeToString(req.BaseSHA256); len(req.BaseSHA256) > 0 && base != target && int(req.FromChunk) < c.ChunkCount() {
		if p, err = s.patchFor(ctx, base, target, blob, c); err != nil {
			return err
		}
		if p != nil {
			reply.Mode = wire.ArtifactDelta
			s.stats.Deltas.Add(1)
		}
	}
	if err := st.Write(reply); err != nil {
		return fmt.Errorf("send artifact reply: %w", err)
	}
	return s.send(ctx, st, req, c, blob, p)
}

// patchFor returns the patches of target on base, nil when the hub
// cannot make them (it has no such base, or it is too large): the node
// then gets the artifact whole. It returns a refusal (CodeUnavailable)
// while another request makes them.
func (s *Server) patchFor(ctx context.Context, base, target string, blob Blob, c *manifest.Component) (*patch, error) {
	key := patchKey{base: base, target: target, chunkSize: c.ChunkSize}
	p, err := s.patches.get(ctx, key, s.cfg.PatchWait, func() (*patch, error) {
		b, err := s.cfg.Blobs.OpenBlob(ctx, base)
		if err != nil {
			return nil, err
		}
		defer b.Close()
		if b.Size() > s.cfg.MaxDeltaBase || b.Size() <= 0 {
			return nil, fmt.Errorf("base of %d bytes: %w", b.Size(), errNoDelta)
		}
		return makePatch(b, blob, c)
	})
	switch {
	case errors.Is(err, errPatchPending):
		return nil, refuse(wire.CodeUnavailable, "the delta from %s is being made: ask again shortly", base)
	case err != nil:
		if !errors.Is(err, ErrNotFound) && !errors.Is(err, errNoDelta) && ctx.Err() == nil {
			s.log.Warn("artifact patch failed; sending the artifact whole", "base", base, "target", target, "err", err)
		}
		return nil, nil
	}
	return p, nil
}

// open opens the artifact and checks its size against the manifest's.
func (s *Server) open(ctx context.Context, sha string, size int64) (Blob, error) {
	b, err := s.cfg.Blobs.OpenBlob(ctx, sha)
	switch {
	case errors.Is(err, ErrNotFound):
		return nil, refuse(wire.CodeNotFound, "no artifact %s", sha)
	case err != nil:
		return nil, refuse(wire.CodeUnavailable, "artifact %s: %v", sha, err)
	}
	if b.Size() != size {
		b.Close()
		return nil, refuse(wire.CodeInternal, "artifact %s is %d bytes, the manifest says %d", sha, b.Size(), size)
	}
	return b, nil
}

// send writes chunks req.FromChunk.. of blob, patched where p has a
// patch, at the node's rate, then ends the writing side.
func (s *Server) send(ctx context.Context, st wire.ArtifactStream, req *wire.ArtifactRequest, c *manifest.Component, blob Blob, p *patch) error {
	var buf []byte // made for the first raw chunk
	var pace *pacer
	if req.Rate > 0 {
		pace = newPacer(max(req.Rate, s.cfg.MinRate), int(c.ChunkSize), time.Now())
	}
	for i := int(req.FromChunk); i < c.ChunkCount(); i++ {
		off, n := c.ChunkBounds(i)
		m := &wire.ArtifactChunk{Index: uint32(i)}
		if p != nil && p.chunks[i] != nil {
			m.Data, m.Delta = p.chunks[i], true
		} else {
			if buf == nil {
				buf = make([]byte, c.ChunkSize)
			}
			if _, err := blob.ReadAt(buf[:n], off); err != nil && !(errors.Is(err, io.EOF) && off+n == blob.Size()) {
				return fmt.Errorf("read artifact %s chunk %d: %w", c.SHA256, i, err)
			}
			m.Data = buf[:n]
		}
		if pace != nil {
			if err := s.sleep(ctx, pace.take(time.Now(), len(m.Data))); err != nil {
				return err
			}
		}
		if err := st.Write(m); err != nil {
			return fmt.Errorf("send chunk %d: %w", i, err)
		}
		s.stats.ChunksSent.Add(1)
		s.stats.BytesSent.Add(int64(len(m.Data)))
		s.stats.BytesSaved.Add(n - int64(len(m.Data)))
	}
	return st.CloseWrite()
}

// findComponent decodes the manifest in env, without trusting it, and
// returns its component name.
func findComponent(env []byte, name string) (*manifest.Component, error) {
	e, err := manifest.DecodeEnvelope(env)
	if err != nil {
		return nil, fmt.Errorf("envelope: %w", err)
	}
	m, err := manifest.DecodeManifest(e.Payload)
	if err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	for i := range m.Components {
		if m.Components[i].Name == name {
			return &m.Components[i], nil
		}
	}
	return nil, fmt.Errorf("no component %s", name)
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
