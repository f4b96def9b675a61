package transfer

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"io"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/outpost-mesh/outpost/firmware/manifest"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// pipeStream is one end of an in-memory artifact stream: frames through
// io.Pipes, as sync/stream carries them on QUIC.
type pipeStream struct {
	r   *wire.Reader
	w   *wire.Writer
	in  *io.PipeReader
	out *io.PipeWriter
}

var errAborted = errors.New("stream aborted")

func pipePair() (a, b *pipeStream) {
	r1, w1 := io.Pipe()
	r2, w2 := io.Pipe()
	a = &pipeStream{r: wire.NewReader(r1, 0), w: wire.NewWriter(w2), in: r1, out: w2}
	b = &pipeStream{r: wire.NewReader(r2, 0), w: wire.NewWriter(w1), in: r2, out: w1}
	return a, b
}

func (p *pipeStream) Read() (wire.Message, error) { return p.r.Read() }
func (p *pipeStream) Write(m wire.Message) error  { return p.w.Write(m) }
func (p *pipeStream) CloseWrite() error           { return p.out.Close() }
func (p *pipeStream) Abort(wire.ErrorCode) {
	p.in.CloseWithError(errAborted)
	p.out.CloseWithError(errAborted)
}
func (p *pipeStream) SetCompression(on bool) { p.w.SetCompression(on) }

// memStore is a hub's releases and blobs in memory.
type memStore struct {
	mu    sync.Mutex
	envs  map[string][]byte
	blobs map[string][]byte
}

func (s *memStore) Envelope(_ context.Context, release string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.envs[release]; ok {
		return e, nil
	}
	return nil, ErrNotFound
}

func (s *memStore) OpenBlob(_ context.Context, sha string) (Blob, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b, ok := s.blobs[sha]; ok {
		return memBlob{bytes.NewReader(b)}, nil
	}
	return nil, ErrNotFound
}

type memBlob struct{ *bytes.Reader }

func (memBlob) Close() error { return nil }

// testHub serves artifact streams that its open makes.
type testHub struct {
	srv   *Server
	store *memStore
	ctx   context.Context
	wg    sync.WaitGroup
	mu    sync.Mutex
	opens int
}

func newTestHub(t testing.TB, cfg Config) *testHub {
	t.Helper()
	h := &testHub{store: &memStore{envs: map[string][]byte{}, blobs: map[string][]byte{}}}
	ctx, cancel := context.WithCancel(context.Background())
	h.ctx = ctx
	cfg.Releases, cfg.Blobs = h.store, h.store
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.srv = srv
	t.Cleanup(func() {
		cancel()
		h.wg.Wait()
	})
	return h
}

// open returns an Opener whose streams pass through wrap (nil: none).
func (h *testHub) open(wrap func(n int, s wire.ArtifactStream) wire.ArtifactStream) Opener {
	return func(ctx context.Context) (wire.ArtifactStream, error) {
		node, hub := pipePair()
		h.mu.Lock()
		h.opens++
		n := h.opens
		h.mu.Unlock()
		h.wg.Go(func() {
			m, err := hub.Read()
			if err != nil {
				hub.Abort(0)
				return
			}
			if err := h.srv.ServeArtifact(h.ctx, "edge-1", hub, m.(*wire.ArtifactRequest)); err != nil {
				hub.Abort(wire.CodeInternal)
			}
		})
		if wrap != nil {
			return wrap(n, node), nil
		}
		return node, nil
	}
}

var testNow = time.Now()

func testKey() ed25519.PrivateKey {
	seed := sha256.Sum256([]byte("transfer test key"))
	return ed25519.NewKeyFromSeed(seed[:])
}

// release adds a signed release of one file component of data, chunked
// by chunkSize, and its blob; it returns the component.
func (h *testHub) release(t testing.TB, name string, data []byte, chunkSize int64) manifest.Component {
	t.Helper()
	c, err := manifest.BuildComponent("firmware", manifest.KindFile, "", "", "", bytes.NewReader(data), chunkSize)
	if err != nil {
		t.Fatal(err)
	}
	m := &manifest.Manifest{Name: name, Version: "1.0.0", Created: testNow.Add(-time.Hour), Expires: testNow.Add(time.Hour), Components: []manifest.Component{c}}
	env, err := manifest.Sign(m, testKey())
	if err != nil {
		t.Fatal(err)
	}
	h.store.mu.Lock()
	h.store.envs[name] = env
	h.store.blobs[c.SHA256] = data
	h.store.mu.Unlock()
	return c
}

// artifacts returns a base of n pseudo-random bytes and a target like it
// but for a few hundred bytes changed in a few places and some inserted.
func artifacts(n int) (base, target []byte) {
	r := rand.New(rand.NewPCG(1, 2))
	base = make([]byte, n)
	for i := range base {
		base[i] = byte(r.Uint32())
	}
	target = bytes.Clone(base)
	for range 5 {
		off := r.IntN(n - 100)
		for j := range 60 {
			target[off+j] ^= 0x5a
		}
	}
	at := n / 3
	target = append(target[:at:at], append([]byte("a new version string, 1.4.1"), target[at:]...)...)
	return base, target
}

// cutAfter ends a stream with an error once it delivered n bytes of
// chunk data.
type cutAfter struct {
	wire.ArtifactStream
	n, lost int
}

// The chunk the cut falls in is lost, its bytes before the cut counted
// in lost: they crossed the link but never made a whole frame.
func (c *cutAfter) Read() (wire.Message, error) {
	m, err := c.ArtifactStream.Read()
	if ch, ok := m.(*wire.ArtifactChunk); ok {
		if c.n < len(ch.Data) {
			c.lost += c.n
			c.Abort(0)
			return nil, errors.New("link cut")
		}
		c.n -= len(ch.Data)
	}
	return m, err
}

// corrupt flips a byte of chunk index's data.
type corrupt struct {
	wire.ArtifactStream
	index uint32
}

func (c *corrupt) Read() (wire.Message, error) {
	m, err := c.ArtifactStream.Read()
	if ch, ok := m.(*wire.ArtifactChunk); ok && ch.Index == c.index {
		ch.Data[len(ch.Data)/2] ^= 0x01
	}
	return m, err
}

// blackHole delivers frames until chunk index, then nothing: its Read
// blocks until the stream is aborted.
type blackHole struct {
	wire.ArtifactStream
	index   uint32
	aborted chan struct{}
	once    sync.Once
}

func (b *blackHole) Read() (wire.Message, error) {
	m, err := b.ArtifactStream.Read()
	if ch, ok := m.(*wire.ArtifactChunk); ok && ch.Index >= b.index {
		<-b.aborted
		return nil, errAborted
	}
	return m, err
}

func (b *blackHole) Abort(code wire.ErrorCode) {
	b.once.Do(func() { close(b.aborted) })
	b.ArtifactStream.Abort(code)
}

func fastConfig(release string) FetchConfig {
	cfg := DefaultFetchConfig()
	cfg.Release = release
	cfg.Bandwidth = 0
	cfg.MinBackoff, cfg.MaxBackoff = time.Millisecond, 10*time.Millisecond
	return cfg
}
