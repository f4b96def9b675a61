package transfer

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/outpost-mesh/outpost/firmware/manifest"
	"github.com/outpost-mesh/outpost/internal/wait"
	"github.com/outpost-mesh/outpost/sync/wire"
)

const (
	artifactSize = 5 << 20
	chunkSize    = 256 << 10
)

func fetchTo(t *testing.T, h *testHub, open Opener, cfg FetchConfig, c manifest.Component, base string, want []byte) Stats {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "artifact")
	st, err := Fetch(t.Context(), open, cfg, dst, c, base)
	if err != nil {
		t.Fatalf("Fetch = %+v, %v", st, err)
	}
	got, err := os.ReadFile(dst)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("fetched file: %d bytes, %v; want the artifact's %d", len(got), err, len(want))
	}
	if _, err := os.Stat(dst + ".part"); !os.IsNotExist(err) {
		t.Errorf("partial file left behind: %v", err)
	}
	return st
}

func writeBase(t *testing.T, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "base")
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestFetchFull(t *testing.T) {
	h := newTestHub(t, DefaultConfig())
	_, target := artifacts(artifactSize)
	c := h.release(t, "r1", target, chunkSize)
	st := fetchTo(t, h, h.open(nil), fastConfig("r1"), c, "", target)
	if st.Received != int64(len(target)) || st.Resumes != 0 || st.Delta {
		t.Errorf("full fetch stats = %+v; want %d bytes received once, no delta", st, len(target))
	}
	t.Logf("full: %d bytes received for %d", st.Received, st.Size)
	if got := h.srv.Stats().BytesSent.Load(); got != int64(len(target)) {
		t.Errorf("hub sent %d bytes, want %d", got, len(target))
	}
}

// TestFetchDelta: a node holding the previous artifact receives a small
// change as patches, under a quarter of the artifact; a second node of
// the same pair is served from the cache.
func TestFetchDelta(t *testing.T) {
	h := newTestHub(t, DefaultConfig())
	base, target := artifacts(artifactSize)
	h.release(t, "r0", base, chunkSize)
	c := h.release(t, "r1", target, chunkSize)
	bp := writeBase(t, base)
	st := fetchTo(t, h, h.open(nil), fastConfig("r1"), c, bp, target)
	if !st.Delta || st.Received*4 >= st.Size {
		t.Errorf("delta fetch stats = %+v; want patches, under 25%% of %d bytes", st, st.Size)
	}
	t.Logf("delta: %d bytes received for %d (%.2f%%), %d of %d chunks patched", st.Received, st.Size, 100*float64(st.Received)/float64(st.Size), st.DeltaChunks, c.ChunkCount())
	st2 := fetchTo(t, h, h.open(nil), fastConfig("r1"), c, bp, target)
	if st2.Received != st.Received {
		t.Errorf("second node received %d bytes, the first %d", st2.Received, st.Received)
	}
	s := h.srv.Stats()
	// Under -race, making the patches may outlast the first node's
	// no-progress timeout: it then asks again, and is served from the
	// cache too.
	if s.PatchesMade.Load() != 1 || s.PatchCacheHit.Load() < 1 {
		t.Errorf("patches made %d, cache hits %d; want 1 and at least 1", s.PatchesMade.Load(), s.PatchCacheHit.Load())
	}
	if saved := s.BytesSaved.Load(); saved < 2*(st.Size-st.Received) {
		t.Errorf("hub saved %d bytes, want %d", saved, 2*(st.Size-st.Received))
	}
}

// TestFetchBaseMissingOnHub: a base the hub does not hold gets the
// artifact whole.
func TestFetchBaseMissingOnHub(t *testing.T) {
	h := newTestHub(t, DefaultConfig())
	base, target := artifacts(1 << 20)
	c := h.release(t, "r1", target, 64<<10)
	st := fetchTo(t, h, h.open(nil), fastConfig("r1"), c, writeBase(t, base), target)
	if st.Delta || st.Received != st.Size {
		t.Errorf("stats = %+v; want a full transfer", st)
	}
}

// TestFetchResume: a stream cut at a random point resumes from the last
// good chunk; the total is under 1.1 times the artifact, full or delta.
func TestFetchResume(t *testing.T) {
	for _, delta := range []bool{false, true} {
		name := map[bool]string{false: "full", true: "delta"}[delta]
		t.Run(name, func(t *testing.T) {
			h := newTestHub(t, DefaultConfig())
			base, target := artifacts(artifactSize)
			h.release(t, "r0", base, chunkSize)
			c := h.release(t, "r1", target, chunkSize)
			bp := ""
			limit := len(target)
			if delta {
				bp = writeBase(t, base)
				limit = 1000 // the patches are small: 1,145 bytes in all
			}
			cut := rand.IntN(limit)
			var first *cutAfter
			open := h.open(func(n int, s wire.ArtifactStream) wire.ArtifactStream {
				if n == 1 {
					first = &cutAfter{ArtifactStream: s, n: cut}
					return first
				}
				return s
			})
			st := fetchTo(t, h, open, fastConfig("r1"), c, bp, target)
			if st.Resumes < 1 {
				t.Errorf("resumes = %d, want 1", st.Resumes)
			}
			moved := st.Received + int64(first.lost)
			if !delta && float64(moved) >= 1.1*float64(st.Size) {
				t.Errorf("%d bytes moved for %d, over 1.1x", moved, st.Size)
			}
			t.Logf("%s, cut after %d bytes: %d bytes received and %d lost in the cut, for %d (%.3fx)", name, cut, st.Received, first.lost, st.Size, float64(moved)/float64(st.Size))
		})
	}
}

// TestFetchCorruptChunk: a chunk that does not match its digest is not
// written and is fetched again.
func TestFetchCorruptChunk(t *testing.T) {
	h := newTestHub(t, DefaultConfig())
	_, target := artifacts(1 << 20)
	c := h.release(t, "r1", target, 64<<10)
	open := h.open(func(n int, s wire.ArtifactStream) wire.ArtifactStream {
		if n == 1 {
			return &corrupt{ArtifactStream: s, index: 5}
		}
		return s
	})
	st := fetchTo(t, h, open, fastConfig("r1"), c, "", target)
	if st.Refused != 1 || st.Resumes != 1 {
		t.Errorf("stats = %+v; want 1 chunk refused, 1 resume", st)
	}
	if want := st.Size + 64<<10; st.Received != want {
		t.Errorf("received %d bytes, want %d: the artifact and the refused chunk", st.Received, want)
	}
}

// TestFetchBlackHole: a stream that stops delivering is noticed after
// NoProgress and the fetch resumes on a new one.
func TestFetchBlackHole(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newTestHub(t, DefaultConfig())
		_, target := artifacts(1 << 20)
		c := h.release(t, "r1", target, 64<<10)
		open := h.open(func(n int, s wire.ArtifactStream) wire.ArtifactStream {
			if n == 1 {
				return &blackHole{ArtifactStream: s, index: 7, aborted: make(chan struct{})}
			}
			return s
		})
		cfg := fastConfig("r1")
		start := time.Now()
		st := fetchTo(t, h, open, cfg, c, "", target)
		if st.Stalls != 1 || st.Resumes != 1 {
			t.Errorf("stats = %+v; want 1 stall, 1 resume", st)
		}
		if el := time.Since(start); el < cfg.NoProgress || el > cfg.NoProgress+time.Second {
			t.Errorf("took %v, want the no-progress timeout %v and a back-off", el, cfg.NoProgress)
		}
	})
}

// TestFetchRate: the hub paces its chunks at the node's rate, with a
// burst of one chunk (time is synctest's).
func TestFetchRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newTestHub(t, DefaultConfig())
		_, target := artifacts(4 << 20)
		c := h.release(t, "r1", target, chunkSize)
		cfg := fastConfig("r1")
		cfg.Bandwidth = 1 << 20
		start := time.Now()
		st := fetchTo(t, h, h.open(nil), cfg, c, "", target)
		want := time.Duration(float64(len(target)-chunkSize) / float64(cfg.Bandwidth) * float64(time.Second))
		if el := time.Since(start); el < want-10*time.Millisecond || el > want+10*time.Millisecond {
			t.Errorf("4 MiB at 1 MiB/s took %v, want %v", el, want)
		}
		if st.Rate != 1<<20 {
			t.Errorf("rate = %d, want %d", st.Rate, 1<<20)
		}
	})
}

// TestFetchAutoBandwidth: with AutoBandwidth, the fetch measures the
// first chunks uncapped, then asks again at half that.
func TestFetchAutoBandwidth(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newTestHub(t, DefaultConfig())
		_, target := artifacts(2 << 20)
		c := h.release(t, "r1", target, 64<<10)
		// The link: 1 MiB/s, as a node-side delay per chunk.
		open := h.open(func(_ int, s wire.ArtifactStream) wire.ArtifactStream { return &slowLink{s, 1 << 20} })
		cfg := fastConfig("r1")
		cfg.Bandwidth = AutoBandwidth
		cfg.AutoSample = 256 << 10
		st := fetchTo(t, h, open, cfg, c, "", target)
		if st.Rate < 400<<10 || st.Rate > 600<<10 || st.Resumes != 0 {
			t.Errorf("stats = %+v; want a rate of about 512 KiB/s, asked on a second stream", st)
		}
		if h.opens != 2 {
			t.Errorf("%d streams, want 2", h.opens)
		}
	})
}

// slowLink delivers chunks at rate bytes per second.
type slowLink struct {
	wire.ArtifactStream
	rate int
}

func (s *slowLink) Read() (wire.Message, error) {
	m, err := s.ArtifactStream.Read()
	if ch, ok := m.(*wire.ArtifactChunk); ok {
		time.Sleep(time.Duration(len(ch.Data)) * time.Second / time.Duration(s.rate))
	}
	return m, err
}

// TestFetchRestart: a partial file left by an earlier agent is resumed
// from its verified chunks; a half-written tail is fetched again.
func TestFetchRestart(t *testing.T) {
	h := newTestHub(t, DefaultConfig())
	_, target := artifacts(1 << 20)
	c := h.release(t, "r1", target, 64<<10)
	dst := filepath.Join(t.TempDir(), "artifact")
	partial := append(bytes.Clone(target[:6*64<<10]), make([]byte, 1000)...) // 6 chunks and junk
	if err := os.WriteFile(dst+".part", partial, 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := Fetch(t.Context(), h.open(nil), fastConfig("r1"), dst, c, "")
	if err != nil {
		t.Fatal(err)
	}
	if st.Reused != 6*64<<10 || st.Received != st.Size-st.Reused {
		t.Errorf("stats = %+v; want 6 chunks reused and the rest received", st)
	}
	if err := c.VerifyFile(dst); err != nil {
		t.Error(err)
	}
	// Done already: nothing moves.
	if st, err := Fetch(t.Context(), h.open(nil), fastConfig("r1"), dst, c, ""); err != nil || st.Received != 0 {
		t.Errorf("Fetch of a fetched file = %+v, %v", st, err)
	}
}

// TestFetchRefused: a request the hub cannot serve ends the fetch with
// a permanent *RefusedError; a busy hub is asked again.
func TestFetchRefused(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxStreams = 1
	h := newTestHub(t, cfg)
	_, target := artifacts(64 << 10)
	c := h.release(t, "r1", target, 4<<10)
	other := c
	other.SHA256 = "00" + c.SHA256[2:]
	_, err := Fetch(t.Context(), h.open(nil), fastConfig("r1"), filepath.Join(t.TempDir(), "a"), other, "")
	var re *RefusedError
	if !errors.As(err, &re) || re.Code != wire.CodeNotFound || !re.Permanent() {
		t.Errorf("Fetch(wrong sha256) = %v, want a NotFound refusal", err)
	}
	_, err = Fetch(t.Context(), h.open(nil), fastConfig("nope"), filepath.Join(t.TempDir(), "a"), c, "")
	if !errors.As(err, &re) || re.Code != wire.CodeNotFound {
		t.Errorf("Fetch(no release) = %v, want a NotFound refusal", err)
	}
	// The one stream slot held by a stalled node: the next is told to
	// wait, and gets through once it is free.
	wait.For(t, 10*time.Second, "the streams of the refused fetches to end", func() (bool, string) {
		return len(h.srv.streams) == 0, fmt.Sprintf("%d streams", len(h.srv.streams))
	})
	var hold atomic.Pointer[blackHole]
	first := h.open(func(_ int, s wire.ArtifactStream) wire.ArtifactStream {
		b := &blackHole{ArtifactStream: s, aborted: make(chan struct{})}
		hold.Store(b)
		return b
	})
	s1, err := first(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	sha, _ := hexBytes(c.SHA256)
	s1.Write(&wire.ArtifactRequest{Release: "r1", Component: c.Name, SHA256: sha})
	if m, err := s1.Read(); err != nil || m.(*wire.ArtifactReply).Code != wire.CodeOK {
		t.Fatalf("first stream: %v, %v", m, err)
	}
	refusals := 0
	open := h.open(func(n int, s wire.ArtifactStream) wire.ArtifactStream {
		return &onReply{s, func(r *wire.ArtifactReply) {
			if r.Code == wire.CodeUnavailable {
				if refusals++; refusals == 2 {
					hold.Load().Abort(0)
				}
			}
		}}
	})
	fetchTo(t, h, open, fastConfig("r1"), c, "", target)
	if refusals < 2 {
		t.Errorf("%d refusals of a busy hub, want 2 or more", refusals)
	}
}

type onReply struct {
	wire.ArtifactStream
	fn func(*wire.ArtifactReply)
}

func (o *onReply) Read() (wire.Message, error) {
	m, err := o.ArtifactStream.Read()
	if r, ok := m.(*wire.ArtifactReply); ok {
		o.fn(r)
	}
	return m, err
}

func TestManifest(t *testing.T) {
	h := newTestHub(t, DefaultConfig())
	_, target := artifacts(64 << 10)
	h.release(t, "r1", target, 4<<10)
	env, err := Manifest(t.Context(), h.open(nil), "r1")
	if err != nil || !bytes.Equal(env, h.store.envs["r1"]) {
		t.Fatalf("Manifest(r1) = %d bytes, %v", len(env), err)
	}
	trust := manifest.Trust{Keys: []ed25519.PublicKey{testKey().Public().(ed25519.PublicKey)}}
	if _, err := manifest.Verify(env, trust, manifest.VerifyOptions{Now: testNow}); err != nil {
		t.Errorf("Verify(fetched envelope) = %v", err)
	}
	var re *RefusedError
	if _, err := Manifest(t.Context(), h.open(nil), "r2"); !errors.As(err, &re) || re.Code != wire.CodeNotFound {
		t.Errorf("Manifest(r2) = %v, want NotFound", err)
	}
}

func TestPacer(t *testing.T) {
	t0 := time.Unix(0, 0)
	p := newPacer(1000, 500, t0)
	for _, tc := range []struct {
		at   time.Duration
		n    int
		want time.Duration
	}{
		{0, 500, 0},                      // the burst
		{0, 100, 100 * time.Millisecond}, // then the rate
		{100 * time.Millisecond, 100, 100 * time.Millisecond},
		{10 * time.Second, 500, 0},            // refilled, to the burst only
		{10 * time.Second, 1000, time.Second}, // more than the burst: debt
	} {
		if got := p.take(t0.Add(tc.at), tc.n); got != tc.want {
			t.Errorf("take(%v, %d) = %v, want %v", tc.at, tc.n, got, tc.want)
		}
	}
	if got := newPacer(0, 1, t0).take(t0, 1<<30); got != 0 {
		t.Errorf("uncapped take = %v, want 0", got)
	}
}

func TestParseBandwidth(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"auto", AutoBandwidth, true}, {"AUTO", AutoBandwidth, true}, {"0", 0, true}, {"", 0, true},
		{"2MB", 2_000_000, true}, {"512KiB", 512 << 10, true}, {"fast", 0, false}, {"-1", 0, false},
	} {
		got, err := ParseBandwidth(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseBandwidth(%q) = %d, %v; want %d, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestDeltaWindow(t *testing.T) {
	for _, tc := range []struct {
		base, chunk int64
		want        int
	}{
		{5 << 20, 256 << 10, 8 << 20}, {1, 4096, 8192}, {4<<20 - 4096, 4096, 4 << 20}, {1 << 40, 1 << 20, 1 << 29},
	} {
		if got := deltaWindow(tc.base, tc.chunk); got != tc.want {
			t.Errorf("deltaWindow(%d, %d) = %d, want %d", tc.base, tc.chunk, got, tc.want)
		}
	}
}

// discard is a stream that takes frames and drops them, counting bytes.
type discard struct{ n atomic.Int64 }

func (d *discard) Read() (wire.Message, error) { return nil, errors.New("nothing to read") }
func (d *discard) Write(m wire.Message) error {
	d.n.Add(int64(len(wire.Marshal(m))))
	return nil
}
func (d *discard) CloseWrite() error    { return nil }
func (d *discard) Abort(wire.ErrorCode) {}

// BenchmarkServeCachedChunk: the hub serving one patched chunk of a
// cached pair, as to each of many nodes.
func BenchmarkServeCachedChunk(b *testing.B) {
	h := newTestHub(b, DefaultConfig())
	base, target := artifacts(artifactSize)
	h.release(b, "r0", base, chunkSize)
	c := h.release(b, "r1", target, chunkSize)
	sha, _ := hexBytes(c.SHA256)
	bsum, _ := hexBytes(h.release(b, "r0", base, chunkSize).SHA256)
	// The last chunk: the one a small change at the end patches.
	req := &wire.ArtifactRequest{Release: "r1", Component: c.Name, SHA256: sha, BaseSHA256: bsum, FromChunk: uint32(c.ChunkCount() - 1)}
	var d discard
	if err := h.srv.ServeArtifact(context.Background(), "n", &d, req); err != nil { // makes the patch
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := h.srv.ServeArtifact(context.Background(), "n", &d, req); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func hexBytes(s string) ([]byte, error) { return hex.DecodeString(s) }

// countSink discards chunks, counting them, as a simulated node does.
type countSink struct{ chunks, bytes int }

func (s *countSink) PutChunk(i int, data []byte) error {
	if i != s.chunks {
		return fmt.Errorf("chunk %d after %d", i, s.chunks)
	}
	s.chunks++
	s.bytes += len(data)
	return nil
}

// TestReceiveManyNodes: many simulated nodes receive a delta at once,
// verifying each chunk and discarding it; the hub makes its patches once.
func TestReceiveManyNodes(t *testing.T) {
	h := newTestHub(t, DefaultConfig())
	base, target := artifacts(1 << 20)
	h.release(t, "r0", base, 64<<10)
	c := h.release(t, "r1", target, 64<<10)
	bp := writeBase(t, base)
	const nodes = 50
	errs := make(chan error, nodes)
	for range nodes {
		go func() {
			var s countSink
			st, err := Receive(t.Context(), h.open(nil), fastConfig("r1"), c, 0, bp, &s)
			if err == nil && (s.bytes != len(target) || !st.Delta) {
				err = fmt.Errorf("received %d bytes, stats %+v", s.bytes, st)
			}
			errs <- err
		}()
	}
	for range nodes {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if n := h.srv.Stats().PatchesMade.Load(); n != 1 {
		t.Errorf("patches made %d times, want once", n)
	}
}

// TestPatchTooLarge: patches over the cache's bound are not kept, and the
// pair is sent whole without being patched again for every node.
func TestPatchTooLarge(t *testing.T) {
	cfg := DefaultConfig()
	cfg.PatchCacheBytes = 100
	h := newTestHub(t, cfg)
	base, target := artifacts(256 << 10)
	h.release(t, "r0", base, 16<<10)
	c := h.release(t, "r1", target, 16<<10)
	bp := writeBase(t, base)
	for range 2 {
		if st := fetchTo(t, h, h.open(nil), fastConfig("r1"), c, bp, target); st.Delta || st.Received != st.Size {
			t.Errorf("stats = %+v; want a full transfer", st)
		}
	}
	if n := h.srv.Stats().PatchesMade.Load(); n != 1 {
		t.Errorf("patches made %d times, want once", n)
	}
}

// TestBaseTooLarge: a base over MaxDeltaBase is not read; the artifact
// goes whole.
func TestBaseTooLarge(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxDeltaBase = 1 << 10
	h := newTestHub(t, cfg)
	base, target := artifacts(64 << 10)
	h.release(t, "r0", base, 4<<10)
	c := h.release(t, "r1", target, 4<<10)
	if st := fetchTo(t, h, h.open(nil), fastConfig("r1"), c, writeBase(t, base), target); st.Delta {
		t.Errorf("stats = %+v; want a full transfer", st)
	}
	if n := h.srv.Stats().PatchesMade.Load(); n != 0 {
		t.Errorf("patches made %d times, want none", n)
	}
}
