package server_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/outpost-mesh/outpost/firmware/manifest"
	"github.com/outpost-mesh/outpost/firmware/transfer"
	"github.com/outpost-mesh/outpost/internal/wait"
	"github.com/outpost-mesh/outpost/sync/client"
	"github.com/outpost-mesh/outpost/sync/server"
)

var _ server.ArtifactServer = (*transfer.Server)(nil)

// releaseStore is a hub's releases and artifacts in memory.
type releaseStore struct {
	mu    sync.Mutex
	envs  map[string][]byte
	blobs map[string][]byte
}

func (s *releaseStore) Envelope(_ context.Context, name string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.envs[name]; ok {
		return e, nil
	}
	return nil, transfer.ErrNotFound
}

func (s *releaseStore) OpenBlob(_ context.Context, sha string) (transfer.Blob, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b, ok := s.blobs[sha]; ok {
		return blob{bytes.NewReader(b)}, nil
	}
	return nil, transfer.ErrNotFound
}

type blob struct{ *bytes.Reader }

func (blob) Close() error { return nil }

// add signs a release of data as its one component.
func (s *releaseStore) add(t *testing.T, name string, data []byte, key ed25519.PrivateKey) manifest.Component {
	t.Helper()
	c, err := manifest.BuildComponent("firmware", manifest.KindFile, "", "", "", bytes.NewReader(data), 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	env, err := manifest.Sign(&manifest.Manifest{Name: name, Version: "1.0.0", Created: time.Now().Add(-time.Hour),
		Expires: time.Now().Add(time.Hour), Components: []manifest.Component{c}}, key)
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.envs[name], s.blobs[c.SHA256] = env, data
	return c
}

// TestArtifacts: a node fetches a release's manifest and its artifact,
// whole and as a delta, over its real QUIC connection to the hub.
func TestArtifacts(t *testing.T) {
	h := startHub(t, defaultHubOptions())
	store := &releaseStore{envs: map[string][]byte{}, blobs: map[string][]byte{}}
	tcfg := transfer.DefaultConfig()
	tcfg.Releases, tcfg.Blobs = store, store
	ts, err := transfer.NewServer(tcfg)
	if err != nil {
		t.Fatal(err)
	}
	h.stop()
	h.cfg.Artifacts = ts
	h.start(h.addr)

	seed := sha256.Sum256([]byte("release key"))
	key := ed25519.NewKeyFromSeed(seed[:])
	base := bytes.Repeat([]byte("outpost edge agent build 1.4.0 "), 40_000) // ~1.2 MB
	target := bytes.Clone(base)
	copy(target[500_000:], "a small change in the new build")
	store.add(t, "v140", base, key)
	c := store.add(t, "v141", target, key)

	cl, _ := runClient(t, h.clientConfig("edge-1", h.ca.nodeCert(t, "edge-1", time.Hour), newMemStore()))
	// Before the session is up (or just after: the race is the test's).
	if st, err := cl.OpenArtifactStream(t.Context()); err == nil {
		st.Abort(0)
	} else if !errors.Is(err, client.ErrNotConnected) {
		t.Errorf("OpenArtifactStream before connecting = %v, want ErrNotConnected", err)
	}
	wait.For(t, waitLong, "the node to connect", func() (bool, string) { return cl.Connected(), "not connected" })

	env, err := transfer.Manifest(t.Context(), cl.OpenArtifactStream, "v141")
	if err != nil {
		t.Fatal(err)
	}
	m, err := manifest.Verify(env, manifest.Trust{Keys: []ed25519.PublicKey{key.Public().(ed25519.PublicKey)}}, manifest.VerifyOptions{})
	if err != nil || m.Components[0].SHA256 != c.SHA256 {
		t.Fatalf("Verify(fetched manifest) = %v", err)
	}

	dir := t.TempDir()
	cfg := transfer.DefaultFetchConfig()
	cfg.Release = "v141"
	cfg.MinBackoff, cfg.MaxBackoff = 10*time.Millisecond, 100*time.Millisecond
	ctx, cancel := context.WithTimeout(t.Context(), waitLong)
	defer cancel()
	full, err := transfer.Fetch(ctx, cl.OpenArtifactStream, cfg, filepath.Join(dir, "full"), m.Components[0], "")
	if err != nil {
		t.Fatalf("Fetch(full) = %+v, %v", full, err)
	}
	basePath := filepath.Join(dir, "base")
	if err := os.WriteFile(basePath, base, 0o600); err != nil {
		t.Fatal(err)
	}
	delta, err := transfer.Fetch(ctx, cl.OpenArtifactStream, cfg, filepath.Join(dir, "delta"), m.Components[0], basePath)
	if err != nil {
		t.Fatalf("Fetch(delta) = %+v, %v", delta, err)
	}
	for _, name := range []string{"full", "delta"} {
		if got, err := os.ReadFile(filepath.Join(dir, name)); err != nil || !bytes.Equal(got, target) {
			t.Errorf("%s fetch: %d bytes, %v; want the artifact", name, len(got), err)
		}
	}
	if full.Received < full.Size || !delta.Delta || delta.Received*4 >= delta.Size {
		t.Errorf("full %+v, delta %+v; want all bytes, then under a quarter", full, delta)
	}
	t.Logf("over QUIC: full %d bytes, delta %d bytes, of %d (auto rate %d B/s)", full.Received, delta.Received, full.Size, full.Rate)
	if n := ts.Stats().Requests.Load(); n < 3 {
		t.Errorf("transfer server served %d requests, want at least 3", n)
	}
}

// TestArtifactsRefused: a hub without an ArtifactServer refuses artifact
// streams for good.
func TestArtifactsRefused(t *testing.T) {
	h := startHub(t, defaultHubOptions())
	cl, _ := runClient(t, h.clientConfig("edge-1", h.ca.nodeCert(t, "edge-1", time.Hour), newMemStore()))
	wait.For(t, waitLong, "the node to connect", func() (bool, string) { return cl.Connected(), "not connected" })
	_, err := transfer.Manifest(t.Context(), cl.OpenArtifactStream, "v1")
	var re *transfer.RefusedError
	if !errors.As(err, &re) || !re.Permanent() {
		t.Errorf("Manifest from a hub without artifacts = %v, want a permanent refusal", err)
	}
}
