package agent

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/errdefs"
	digest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/outpost-mesh/outpost/edge/imageshare"
	"github.com/outpost-mesh/outpost/edge/mesh"
	fwv1 "github.com/outpost-mesh/outpost/firmware/apis/v1"
	"github.com/outpost-mesh/outpost/firmware/manifest"
	"github.com/outpost-mesh/outpost/firmware/transfer"
	"github.com/outpost-mesh/outpost/internal/testca"
	"github.com/outpost-mesh/outpost/internal/wait"
)

// noImages is a content store that holds no image.
type noImages struct{}

func (noImages) Info(context.Context, digest.Digest) (content.Info, error) {
	return content.Info{}, errdefs.ErrNotFound
}

func (noImages) ReaderAt(context.Context, ocispec.Descriptor) (content.ReaderAt, error) {
	return nil, errdefs.ErrNotFound
}

// testSite is a site's mesh as its nodes see it: every node alive, with
// what it last said of itself.
type testSite struct {
	mu    sync.Mutex
	peers map[string]mesh.Peer
}

func (s *testSite) list() []mesh.Peer {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]mesh.Peer, 0, len(s.peers))
	for _, p := range s.peers {
		p.Meta.Pulling = slices.Clone(p.Meta.Pulling)
		out = append(out, p)
	}
	return out
}

func (s *testSite) say(node string, fn func(*mesh.Meta)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.peers[node]
	fn(&p.Meta)
	s.peers[node] = p
}

// testHubSource is the hub as peerSource falls back to it: it counts the
// bytes that cross the node's uplink, and writes them as transfer.Fetch
// would, verified chunk by chunk.
type testHubSource struct {
	data []byte
	// gate, if not nil, holds each fetch until it is closed.
	gate    chan struct{}
	fetches atomic.Int32
	bytes   atomic.Int64
}

func (h *testHubSource) Manifest(context.Context, string) ([]byte, error) {
	return nil, errors.New("no manifests in this test")
}

func (h *testHubSource) Fetch(ctx context.Context, _ string, c manifest.Component, dst, _ string, _ int64, received *atomic.Int64) (fwv1.TransferStats, error) {
	h.fetches.Add(1)
	if h.gate != nil {
		select {
		case <-h.gate:
		case <-ctx.Done():
			return fwv1.TransferStats{}, ctx.Err()
		}
	}
	open := func(_ context.Context, off int64) (io.ReadCloser, int64, error) {
		h.bytes.Add(int64(len(h.data)) - off)
		received.Add(int64(len(h.data)) - off)
		return io.NopCloser(bytes.NewReader(h.data[off:])), int64(len(h.data)), nil
	}
	st, err := transfer.FetchCopy(ctx, open, 5*time.Second, dst, c)
	return fwv1.TransferStats{Received: st.Received, Full: st.Size}, err
}

// testNode is a node of a testSite: its image share Server serving the
// artifacts in its staging directory, and its peerSource.
type testNode struct {
	name    string
	staging string
	src     peerSource
	looks   atomic.Int64 // its Server's looks for an artifact
}

// countingFiles counts the looks of a Server for an artifact.
type countingFiles struct {
	imageshare.Files
	n *atomic.Int64
}

func (f countingFiles) OpenBlob(d digest.Digest) (io.ReadSeekCloser, error) {
	f.n.Add(1)
	return f.Files.OpenBlob(d)
}

func startTestNode(t *testing.T, ca *testca.CA, site *testSite, name string, hub FirmwareSource) *testNode {
	t.Helper()
	return startTestNodeWait(t, ca, site, name, hub, 0)
}

// startTestNodeWait is startTestNode with a Server that has a request
// wait at most commitWait for an artifact it pulls (0: the default).
func startTestNodeWait(t *testing.T, ca *testca.CA, site *testSite, name string, hub FirmwareSource, commitWait time.Duration) *testNode {
	t.Helper()
	cert := ca.Node(t, name)
	id := imageshare.Identity{
		Certificate: func() (*tls.Certificate, error) { return &cert, nil },
		Roots:       func() *x509.CertPool { return ca.Pool },
	}
	log := slog.New(slog.DiscardHandler)
	fc := imageshare.DefaultFetcherConfig()
	fc.Node, fc.Identity, fc.Peers, fc.TempDir, fc.Logger = name, id, site.list, t.TempDir(), log
	fc.Announce = func(p [][32]byte) error {
		site.say(name, func(m *mesh.Meta) { m.Pulling = slices.Clone(p) })
		return nil
	}
	fc.Window = 100 * time.Millisecond
	f, err := imageshare.NewFetcher(fc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	n := &testNode{name: name, staging: t.TempDir()}
	sc := imageshare.DefaultServerConfig()
	sc.Identity, sc.Allowed, sc.Content, sc.Pulling, sc.Logger = id, func(string) bool { return true }, noImages{}, f.Pulling, log
	sc.Files, sc.Poll = countingFiles{firmwareFiles{staging: n.staging}, &n.looks}, 10*time.Millisecond
	if commitWait > 0 {
		sc.CommitWait = commitWait
	}
	srv, err := imageshare.NewServer(sc)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	ap := netip.MustParseAddrPort(ln.Addr().String())
	site.mu.Lock()
	site.peers[name] = mesh.Peer{Name: name, Addr: netip.AddrPortFrom(ap.Addr(), 7946), Meta: mesh.Meta{ImagePort: ap.Port()}}
	site.mu.Unlock()
	n.src = peerSource{hub: hub, site: f, noProgress: 2 * time.Second, maxWait: time.Minute, log: log, now: time.Now}
	return n
}

// fetch fetches c into the node's staging directory, where its Server
// serves it from.
func (n *testNode) fetch(ctx context.Context, c manifest.Component) (fwv1.TransferStats, error) {
	var received atomic.Int64
	st, err := n.src.Fetch(ctx, "rel", c, filepath.Join(n.staging, c.SHA256), "", 0, &received)
	if err == nil && received.Load() != st.Received {
		err = errors.New("progress counted other bytes than the stats")
	}
	return st, err
}

func testArtifact(t *testing.T, n int) ([]byte, manifest.Component) {
	t.Helper()
	r := rand.New(rand.NewPCG(7, 9))
	data := make([]byte, n)
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	c, err := manifest.BuildComponent("modem", manifest.KindFile, "", "", "", bytes.NewReader(data), 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	return data, c
}

func checkArtifact(t *testing.T, n *testNode, c manifest.Component) {
	t.Helper()
	if err := c.VerifyFile(filepath.Join(n.staging, c.SHA256)); err != nil {
		t.Errorf("node %s: %v", n.name, err)
	}
}

// Three nodes of a site fetch one artifact: it crosses the uplink once,
// to the first, and the two others, which ask while it is on its way,
// wait for it and take it from their peers; a node that fetches it later
// takes it from a peer too.
func TestFirmwareFromSitePeers(t *testing.T) {
	ca := testca.New(t)
	site := &testSite{peers: map[string]mesh.Peer{}}
	data, c := testArtifact(t, 1<<20+12345)
	hub := &testHubSource{data: data, gate: make(chan struct{})}
	var nodes []*testNode
	for _, name := range []string{"edge-a", "edge-b", "edge-c"} {
		nodes = append(nodes, startTestNode(t, ca, site, name, hub))
	}
	stats := make([]fwv1.TransferStats, len(nodes))
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	fetch := func(i int) { wg.Go(func() { stats[i], errs[i] = nodes[i].fetch(t.Context(), c) }) }
	// Node a finds no peer with the artifact, says it pulls it, and
	// fetches it from the hub; while it does, b and c ask a, which has
	// them wait for it (its Server looks for the artifact until it is
	// there).
	fetch(0)
	wait.For(t, 10*time.Second, "edge-a to fetch from the hub", func() (bool, string) {
		return hub.fetches.Load() == 1, "no hub fetch"
	})
	fetch(1)
	fetch(2)
	wait.For(t, 10*time.Second, "edge-b and edge-c to wait for edge-a", func() (bool, string) {
		return nodes[0].looks.Load() >= 10, "edge-a's Server looked for the artifact too few times"
	})
	close(hub.gate)
	wg.Wait()
	for i, n := range nodes {
		if errs[i] != nil {
			t.Fatalf("node %s: %v", n.name, errs[i])
		}
		checkArtifact(t, n, c)
	}
	if f, b := hub.fetches.Load(), hub.bytes.Load(); f != 1 || b != int64(len(data)) {
		t.Errorf("the hub served %d fetches, %d bytes; want 1 fetch of the %d bytes", f, b, len(data))
	}
	if st := stats[0]; st.FromPeers != 0 || st.Received != int64(len(data)) {
		t.Errorf("edge-a stats %+v; want all from the hub", st)
	}
	for i, st := range stats[1:] {
		if st.FromPeers != int64(len(data)) || st.Received != st.FromPeers {
			t.Errorf("%s stats %+v; want all %d bytes from peers", nodes[i+1].name, st, len(data))
		}
	}
	for _, p := range site.list() {
		if len(p.Meta.Pulling) != 0 {
			t.Errorf("%s still says it pulls %x", p.Name, p.Meta.Pulling)
		}
	}

	// A node that comes later, of the lowest name.
	late := startTestNode(t, ca, site, "edge-0", hub)
	st, err := late.fetch(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	checkArtifact(t, late, c)
	if st.FromPeers != int64(len(data)) || hub.fetches.Load() != 1 {
		t.Errorf("late node: stats %+v, hub fetches %d; want all from peers", st, hub.fetches.Load())
	}
}

// A hub transfer that outlasts a peer's wait for it, many times: the
// node of a higher name asks again while the puller of a lower name
// says it pulls the artifact, and takes it from it in the end.
func TestFirmwareWaitsForSlowPuller(t *testing.T) {
	ca := testca.New(t)
	site := &testSite{peers: map[string]mesh.Peer{}}
	data, c := testArtifact(t, 512<<10)
	hub := &testHubSource{data: data, gate: make(chan struct{})}
	a := startTestNodeWait(t, ca, site, "edge-a", hub, 50*time.Millisecond)
	b := startTestNode(t, ca, site, "edge-b", hub)
	var wg sync.WaitGroup
	var errA error
	wg.Go(func() { _, errA = a.fetch(t.Context(), c) })
	wait.For(t, 10*time.Second, "edge-a to fetch from the hub", func() (bool, string) {
		return hub.fetches.Load() == 1, "no hub fetch"
	})
	var st fwv1.TransferStats
	var errB error
	wg.Go(func() { st, errB = b.fetch(t.Context(), c) })
	// Each of b's requests waits 50ms, some 5 looks at 10ms.
	wait.For(t, 20*time.Second, "edge-b to ask edge-a several times", func() (bool, string) {
		return a.looks.Load() >= 25, "too few looks"
	})
	close(hub.gate)
	wg.Wait()
	if errA != nil || errB != nil {
		t.Fatalf("edge-a: %v; edge-b: %v", errA, errB)
	}
	checkArtifact(t, b, c)
	if hub.fetches.Load() != 1 || st.FromPeers != int64(len(data)) {
		t.Errorf("hub fetches %d, edge-b stats %+v; want 1, and all of edge-b's from edge-a", hub.fetches.Load(), st)
	}
}

// A peer that serves an artifact with a bad chunk is detected, the
// chunks before it kept, and the rest comes from the hub.
func TestFirmwareBadPeer(t *testing.T) {
	ca := testca.New(t)
	site := &testSite{peers: map[string]mesh.Peer{}}
	data, c := testArtifact(t, 1<<20)
	hub := &testHubSource{data: data}
	bad := startTestNode(t, ca, site, "edge-a", hub)
	corrupt := bytes.Clone(data)
	corrupt[5*64<<10+100] ^= 0x40
	if err := os.WriteFile(filepath.Join(bad.staging, c.SHA256), corrupt, 0o600); err != nil {
		t.Fatal(err)
	}
	n := startTestNode(t, ca, site, "edge-b", hub)
	st, err := n.fetch(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	checkArtifact(t, n, c)
	good := int64(5 * 64 << 10)
	if hub.fetches.Load() != 1 || hub.bytes.Load() != int64(len(data))-good {
		t.Errorf("hub: %d fetches, %d bytes; want 1 of the %d bytes after the good chunks", hub.fetches.Load(), hub.bytes.Load(), int64(len(data))-good)
	}
	if st.FromPeers < good || st.FromPeers > good+64<<10 || st.Received != st.FromPeers+int64(len(data))-good {
		t.Errorf("stats %+v; want the %d good bytes and at most the bad chunk from the peer, the rest from the hub", st, good)
	}
}

// The Server's files: complete downloads in staging, then the slots'.
func TestFirmwareFiles(t *testing.T) {
	dir := t.TempDir()
	data := []byte("an installed artifact")
	d := digest.FromBytes(data)
	kept := filepath.Join(t.TempDir(), "kept")
	if err := os.WriteFile(kept, data, 0o600); err != nil {
		t.Fatal(err)
	}
	staged := digest.FromString("staged")
	if err := os.WriteFile(filepath.Join(dir, staged.Encoded()), []byte("staged"), 0o600); err != nil {
		t.Fatal(err)
	}
	partial := digest.FromString("partial")
	if err := os.WriteFile(filepath.Join(dir, partial.Encoded()+".part"), []byte("par"), 0o600); err != nil {
		t.Fatal(err)
	}
	files := firmwareFiles{staging: dir, slots: openerSlots{d.Encoded(): kept}}
	for _, tc := range []struct {
		d    digest.Digest
		want string
	}{
		{staged, "staged"},
		{d, string(data)},
		{partial, ""},
		{digest.Digest("sha256:../../etc/passwd"), ""},
		{digest.FromString("nothing"), ""},
	} {
		f, err := files.OpenBlob(tc.d)
		if tc.want == "" {
			if !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("OpenBlob(%s) = %v, want fs.ErrNotExist", tc.d, err)
			}
			if f != nil {
				f.Close()
			}
			continue
		}
		if err != nil {
			t.Errorf("OpenBlob(%s): %v", tc.d, err)
			continue
		}
		got, _ := io.ReadAll(f)
		f.Close()
		if string(got) != tc.want {
			t.Errorf("OpenBlob(%s) = %q, want %q", tc.d, got, tc.want)
		}
	}
}

// openerSlots keeps artifacts at paths by sha256; it is FirmwareSlots
// only for its OpenArtifact.
type openerSlots map[string]string

func (s openerSlots) OpenArtifact(sha string) (*os.File, error) {
	p, ok := s[sha]
	if !ok {
		return nil, fs.ErrNotExist
	}
	return os.Open(p)
}

func (openerSlots) State() SlotState             { return SlotState{} }
func (openerSlots) Base(string) (string, bool)   { return "", false }
func (openerSlots) Commit(context.Context) error { return nil }
func (openerSlots) RevertCommitted(context.Context, string) (bool, error) {
	return false, nil
}
func (openerSlots) Revert(context.Context, string, string) (bool, error) { return false, nil }
func (openerSlots) Install(context.Context, string, *manifest.Manifest, map[string]string, time.Duration, bool) (bool, error) {
	return false, nil
}
