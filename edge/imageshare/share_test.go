package imageshare

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/netip"
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

	"github.com/outpost-mesh/outpost/edge/mesh"
	"github.com/outpost-mesh/outpost/internal/wait"
)

// testCA is a hub CA that signs node certificates as the hub does:
// client-auth key usage only, no SANs.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "hub CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

func (ca *testCA) identity(t *testing.T, node string) Identity {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: nodePrefix + node},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	c := &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	return Identity{Certificate: func() (*tls.Certificate, error) { return c, nil }, Roots: func() *x509.CertPool { return ca.pool }}
}

// fakeContent is a content store in memory; corrupt has it serve every
// blob with its first byte changed; onInfo, if set, is called after
// each look at a blob's record, with how many looks there were.
type fakeContent struct {
	mu      sync.Mutex
	blobs   map[digest.Digest][]byte
	corrupt bool
	reads   atomic.Int64 // blobs opened
	infos   atomic.Int64 // records looked at
	onInfo  func(n int64)
}

func (c *fakeContent) put(b []byte) digest.Digest {
	d := digest.FromBytes(b)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.blobs == nil {
		c.blobs = map[digest.Digest][]byte{}
	}
	c.blobs[d] = b
	return d
}

func (c *fakeContent) Info(_ context.Context, d digest.Digest) (content.Info, error) {
	n := c.infos.Add(1)
	if c.onInfo != nil {
		defer c.onInfo(n)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	b, ok := c.blobs[d]
	if !ok {
		return content.Info{}, errdefs.ErrNotFound
	}
	return content.Info{Digest: d, Size: int64(len(b))}, nil
}

func (c *fakeContent) ReaderAt(_ context.Context, desc ocispec.Descriptor) (content.ReaderAt, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, ok := c.blobs[desc.Digest]
	if !ok {
		return nil, errdefs.ErrNotFound
	}
	c.reads.Add(1)
	if c.corrupt {
		b = slices.Clone(b)
		b[0] ^= 0xff
	}
	return readerAt{bytes.NewReader(b)}, nil
}

type readerAt struct{ *bytes.Reader }

func (readerAt) Close() error { return nil }

// testPeer is a node's Server on loopback.
type testPeer struct {
	name    string
	content *fakeContent
	addr    netip.AddrPort
	pulling func(digest.Digest) bool
	meta    mesh.Meta
}

// startPeer serves content as node name until the test ends; allowed
// says which nodes may read.
func startPeer(t *testing.T, ca *testCA, name string, c *fakeContent, allowed func(string) bool, pulling func(digest.Digest) bool) *testPeer {
	t.Helper()
	return startPeerWith(t, ca, name, c, allowed, pulling, nil)
}

// startPeerWith is startPeer with a Server that serves files too.
func startPeerWith(t *testing.T, ca *testCA, name string, c *fakeContent, allowed func(string) bool, pulling func(digest.Digest) bool, files Files) *testPeer {
	t.Helper()
	cfg := DefaultServerConfig()
	cfg.Identity, cfg.Allowed, cfg.Content, cfg.Pulling, cfg.Files = ca.identity(t, name), allowed, c, pulling, files
	cfg.Poll = 10 * time.Millisecond
	s, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	ap := netip.MustParseAddrPort(ln.Addr().String())
	return &testPeer{name: name, content: c, addr: ap, meta: mesh.Meta{ImagePort: ap.Port()}}
}

func (p *testPeer) peer() mesh.Peer {
	return mesh.Peer{Name: p.name, Addr: netip.AddrPortFrom(p.addr.Addr(), 7946), Meta: p.meta}
}

// announcements records what a Fetcher announces.
type announcements struct {
	mu   sync.Mutex
	said [][][32]byte
}

func (a *announcements) announce(p [][32]byte) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.said = append(a.said, slices.Clone(p))
	return nil
}

func (a *announcements) all() [][][32]byte {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.said)
}

// last returns what was said last; none before anything was.
func (a *announcements) last() [][32]byte {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.said) == 0 {
		return nil
	}
	return a.said[len(a.said)-1]
}

// sameSaid reports whether two sequences of announcements are equal.
func sameSaid(x, y [][][32]byte) bool {
	return slices.EqualFunc(x, y, func(a, b [][32]byte) bool { return slices.Equal(a, b) })
}

func newTestFetcher(t *testing.T, ca *testCA, node string, peers func() []mesh.Peer, ann *announcements) *Fetcher {
	t.Helper()
	cfg := DefaultFetcherConfig()
	cfg.Node, cfg.Identity, cfg.Peers, cfg.Announce, cfg.TempDir = node, ca.identity(t, node), peers, ann.announce, t.TempDir()
	cfg.Window = 50 * time.Millisecond
	f, err := NewFetcher(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	return f
}

// get fetches d through f's site host as containerd's fetcher would.
func get(t *testing.T, f *Fetcher, kind string, d digest.Digest) (int, []byte) {
	t.Helper()
	h := f.Host()
	req, err := http.NewRequest(http.MethodGet, "https://"+h.Host+"/v2/library/app/"+kind+"/"+d.String()+"?ns=registry.test", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := h.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

func allowAll(string) bool { return true }

// A peer that serves bad bytes is skipped, for a while; the blob comes
// from one that serves it right.
func TestFetchSkipsBadPeer(t *testing.T) {
	ca := newTestCA(t)
	blob := bytes.Repeat([]byte("layer "), 50000)
	bad := &fakeContent{corrupt: true}
	good := &fakeContent{}
	d := bad.put(blob)
	good.put(blob)
	a := startPeer(t, ca, "a", bad, allowAll, nil)
	b := startPeer(t, ca, "b", good, allowAll, nil)
	ann := &announcements{}
	f := newTestFetcher(t, ca, "c", func() []mesh.Peer { return []mesh.Peer{a.peer(), b.peer()} }, ann)

	for i := range 2 {
		code, got := get(t, f, kindBlob, d)
		if code != http.StatusOK || !bytes.Equal(got, blob) {
			t.Fatalf("fetch %d: status %d, %d bytes equal %v; want 200 and the blob", i, code, len(got), bytes.Equal(got, blob))
		}
	}
	if n := bad.reads.Load(); n != 1 {
		t.Errorf("the bad peer was read %d times, want once: it is skipped after its bad bytes", n)
	}
	if n := good.reads.Load(); n != 2 {
		t.Errorf("the good peer was read %d times, want 2", n)
	}
	if s := ann.all(); len(s) != 0 {
		t.Errorf("announced %v, though a peer held the blob", s)
	}
	// No temporary file is left once the bodies are closed.
	if left, _ := filepathGlob(f.cfg.TempDir); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

// A blob no peer holds or pulls is announced, and 404 sends the fetch on
// to the registry; it is withdrawn once the pull is done with it, when
// containerd has committed it, not at the registry's last byte.
func TestFetchFromOriginAnnounces(t *testing.T) {
	ca := newTestCA(t)
	a := startPeer(t, ca, "a", &fakeContent{}, allowAll, nil)
	ann := &announcements{}
	f := newTestFetcher(t, ca, "b", func() []mesh.Peer { return []mesh.Peer{a.peer()} }, ann)
	now := time.Now()
	f.now = func() time.Time { return now } // read by this goroutine alone
	d := digest.FromString("nobody has it")
	if code, _ := get(t, f, kindBlob, d); code != http.StatusNotFound {
		t.Fatalf("status %d, want 404", code)
	}
	if !f.Pulling(d) {
		t.Fatalf("Pulling(%s) false after the site sent the fetch to the registry", d)
	}
	origin := f.Origin(roundTripFunc(func(*http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 200, Body: io.NopCloser(bytes.NewReader([]byte("x")))}, nil
	}))
	req, _ := http.NewRequest(http.MethodGet, "https://registry.test/v2/library/app/blobs/"+d.String(), nil)
	resp, err := origin.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	if !f.Pulling(d) {
		t.Errorf("withdrawn before the registry's body was read")
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	// Still said, and a peer's request waits, until containerd has
	// committed it.
	if !f.Pulling(d) {
		t.Errorf("not Pulling(%s) right after the registry's body was read: a peer's request would not wait for the commit", d)
	}
	sum, _ := sha256Of(d)
	if got, want := ann.all(), [][][32]byte{{sum}}; !sameSaid(got, want) {
		t.Errorf("announced %x once the registry's body was read, want %x: said until committed", got, want)
	}
	f.Done(d)
	if f.Pulling(d) {
		t.Errorf("still Pulling(%s) once the pull was done with it", d)
	}
	if got, want := ann.all(), [][][32]byte{{sum}, {}}; !sameSaid(got, want) {
		t.Errorf("announced %x, want %x", got, want)
	}

	// A pull that never says it is done with a blob: it counts for
	// commitGrace after the registry's last byte.
	d2 := digest.FromString("nobody has it either")
	if code, _ := get(t, f, kindBlob, d2); code != http.StatusNotFound {
		t.Fatalf("status %d, want 404", code)
	}
	req, _ = http.NewRequest(http.MethodGet, "https://registry.test/v2/library/app/blobs/"+d2.String(), nil)
	resp, err = origin.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	now = now.Add(commitGrace - time.Second)
	if !f.Pulling(d2) {
		t.Errorf("not Pulling(%s) %v after the registry's body was read", d2, commitGrace-time.Second)
	}
	now = now.Add(time.Second)
	if f.Pulling(d2) {
		t.Errorf("still Pulling(%s) %v after the registry's body was read", d2, commitGrace)
	}
}

// Nodes that pull one blob at once: the one of the higher name, having
// announced it, takes it from the lower one, which serves it once it
// has committed it. (A node that sees a peer pull it before it
// announces takes it from that peer the same way, announcing nothing.)
func TestFetchWaitsForLowerPuller(t *testing.T) {
	ca := newTestCA(t)
	blob := []byte("a layer being pulled")
	d := digest.FromBytes(blob)
	sum, _ := sha256Of(d)
	ac := &fakeContent{}
	var committed atomic.Bool
	a := startPeer(t, ca, "a", ac, allowAll, func(digest.Digest) bool { return !committed.Load() })
	// Node b first sees a pull nothing: both announce; then it hears a.
	var looks atomic.Int32
	peers := func() []mesh.Peer {
		p := a.peer()
		if looks.Add(1) > 1 {
			p.Meta.Pulling = [][32]byte{sum}
		}
		return []mesh.Peer{p}
	}
	ann := &announcements{}
	f := newTestFetcher(t, ca, "b", peers, ann)
	// Node a commits the blob a while after b asks.
	timer := time.AfterFunc(300*time.Millisecond, func() {
		ac.put(blob)
		committed.Store(true)
	})
	defer timer.Stop()
	code, got := get(t, f, kindBlob, d)
	if code != http.StatusOK || !bytes.Equal(got, blob) {
		t.Fatalf("status %d, %q; want 200 and the blob from the lower puller", code, got)
	}
	// Node b says it pulls the blob until its containerd has it.
	if !f.Pulling(d) {
		t.Errorf("b no longer pulls %s before its pull was done with it", d)
	}
	if got, want := ann.all(), [][][32]byte{{sum}}; !sameSaid(got, want) {
		t.Errorf("announced %x before b's pull was done with the blob, want %x", got, want)
	}
	f.Done(d)
	if f.Pulling(d) {
		t.Errorf("b still says it pulls %s after its pull was done with it", d)
	}
	if got, want := ann.all(), [][][32]byte{{sum}, {}}; !sameSaid(got, want) {
		t.Errorf("announced %x, want %x: the blob, then nothing", got, want)
	}
}

// A peer that fetched a blob and whose containerd has not committed it
// yet, from the registry or from another peer, still says it pulls the
// blob, and serves it once committed: a node that asks it then is not
// sent to the registry. (It used to stop saying so at the last byte,
// and answer 404 until the commit.)
func TestFetchWaitsForCommit(t *testing.T) {
	for _, from := range []string{"registry", "peer"} {
		t.Run("from "+from, func(t *testing.T) {
			ca := newTestCA(t)
			blob := []byte("a layer in flight: " + from)
			d := digest.FromBytes(blob)
			sum, _ := sha256Of(d)

			// Node a's one peer, z, holds nothing at first; from a
			// peer, it has the blob once a said it pulls it.
			zc := &fakeContent{}
			z := startPeer(t, ca, "z", zc, allowAll, nil)
			annA := &announcements{}
			fa := newTestFetcher(t, ca, "a", func() []mesh.Peer { return []mesh.Peer{z.peer()} }, &announcements{})
			fa.cfg.Announce = func(p [][32]byte) error {
				if from == "peer" && len(p) > 0 {
					zc.put(blob)
				}
				return annA.announce(p)
			}
			if code, _ := get(t, fa, kindBlob, d); from == "registry" {
				if code != http.StatusNotFound {
					t.Fatalf("a: status %d, want 404: to the registry", code)
				}
				origin := fa.Origin(roundTripFunc(func(*http.Request) (*http.Response, error) {
					return &http.Response{StatusCode: 200, Body: io.NopCloser(bytes.NewReader(blob))}, nil
				}))
				req, _ := http.NewRequest(http.MethodGet, "https://registry.test/v2/library/app/blobs/"+d.String(), nil)
				resp, err := origin.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			} else if code != http.StatusOK {
				t.Fatalf("a: status %d, want 200 from z", code)
			}
			// Node a has every byte of the blob; its containerd has not
			// committed it. It commits it once b has asked for it
			// twice: HEAD, then GET.
			ac := &fakeContent{}
			var commit sync.WaitGroup
			ac.onInfo = func(n int64) {
				if n == 2 {
					commit.Go(func() {
						ac.put(blob)
						fa.Done(d)
					})
				}
			}
			defer commit.Wait()
			a := startPeer(t, ca, "a", ac, allowAll, fa.Pulling)
			if got, want := annA.all(), [][][32]byte{{sum}}; !sameSaid(got, want) {
				t.Errorf("a announced %x, want %x: said until committed", got, want)
			}
			annB := &announcements{}
			fb := newTestFetcher(t, ca, "b", func() []mesh.Peer {
				p := a.peer()
				p.Meta.Pulling = annA.last()
				return []mesh.Peer{p}
			}, annB)
			code, got := get(t, fb, kindBlob, d)
			if code != http.StatusOK || !bytes.Equal(got, blob) {
				t.Fatalf("b: status %d, %q; want 200 and the blob from a, once a committed it", code, got)
			}
			if got := annB.all(); len(got) != 0 {
				t.Errorf("b announced %x, though a said it pulled the blob", got)
			}
			wait.For(t, 5*time.Second, "a to stop saying it pulls the blob once committed", func() (bool, string) {
				got, want := annA.all(), [][][32]byte{{sum}, {}}
				return sameSaid(got, want), fmt.Sprintf("announced %x, want %x", got, want)
			})
		})
	}
}

// A node that said it pulls a blob asks its peers again after the
// Window: a peer that pulled the blob during it, and said so no more
// once committed, holds it now. (The node used to look only at what
// its peers said, and go to the registry.)
func TestFetchAsksAgainAfterWindow(t *testing.T) {
	ca := newTestCA(t)
	blob := []byte("a layer pulled during the window")
	d := digest.FromBytes(blob)
	sum, _ := sha256Of(d)
	ac := &fakeContent{}
	a := startPeer(t, ca, "a", ac, allowAll, nil)
	ann := &announcements{}
	f := newTestFetcher(t, ca, "b", func() []mesh.Peer { return []mesh.Peer{a.peer()} }, &announcements{})
	// Node a commits the blob while b waits the Window.
	f.cfg.Announce = func(p [][32]byte) error {
		if len(p) > 0 {
			ac.put(blob)
		}
		return ann.announce(p)
	}
	code, got := get(t, f, kindBlob, d)
	if code != http.StatusOK || !bytes.Equal(got, blob) {
		t.Fatalf("status %d, %q; want 200 and the blob from a", code, got)
	}
	f.Done(d)
	if got, want := ann.all(), [][][32]byte{{sum}, {}}; !sameSaid(got, want) {
		t.Errorf("announced %x, want %x", got, want)
	}
}

// Mutual TLS: a node of another CA, a node not allowed, and a server
// that is not the peer meant are refused.
func TestMutualTLS(t *testing.T) {
	ca, other := newTestCA(t), newTestCA(t)
	c := &fakeContent{}
	d := c.put([]byte("blob"))
	a := startPeer(t, ca, "a", c, func(n string) bool { return n == "b" }, nil)
	peers := func() []mesh.Peer { return []mesh.Peer{a.peer()} }

	if code, _ := get(t, newTestFetcher(t, ca, "b", peers, &announcements{}), kindBlob, d); code != http.StatusOK {
		t.Errorf("site peer b: status %d, want 200", code)
	}
	if code, _ := get(t, newTestFetcher(t, ca, "c", peers, &announcements{}), kindBlob, d); code != http.StatusNotFound {
		t.Errorf("node c, not allowed: status %d, want 404 (refused)", code)
	}
	if code, _ := get(t, newTestFetcher(t, other, "b", peers, &announcements{}), kindBlob, d); code != http.StatusNotFound {
		t.Errorf("node of another CA: status %d, want 404 (refused)", code)
	}
	// Node a's server reached as if it were node z.
	z := a.peer()
	z.Name = "z"
	if code, _ := get(t, newTestFetcher(t, ca, "b", func() []mesh.Peer { return []mesh.Peer{z} }, &announcements{}), kindBlob, d); code != http.StatusNotFound {
		t.Errorf("server of the wrong node: status %d, want 404 (refused)", code)
	}
	if n := c.reads.Load(); n != 1 {
		t.Errorf("content read %d times, want once (by b)", n)
	}
}

// The Server's answers: digests only, read-only, manifests typed.
func TestServer(t *testing.T) {
	ca := newTestCA(t)
	c := &fakeContent{}
	manifest := []byte(`{"schemaVersion":2,"config":{},"layers":[]}`)
	md := c.put(manifest)
	bd := c.put([]byte("blob"))
	a := startPeer(t, ca, "a", c, allowAll, nil)
	cl := &http.Client{Transport: &http.Transport{TLSClientConfig: clientTLS(ca.identity(t, "b"), "a")}}
	defer cl.CloseIdleConnections()
	base := "https://" + a.addr.String()
	for _, tc := range []struct {
		method, path string
		code         int
		ctype        string
	}{
		{"GET", "/v2/", 200, ""},
		{"GET", "/v2/x/manifests/" + md.String(), 200, ocispec.MediaTypeImageManifest},
		{"HEAD", "/v2/x/manifests/" + md.String(), 200, ocispec.MediaTypeImageManifest},
		{"GET", "/v2/x/blobs/" + bd.String(), 200, "application/octet-stream"},
		{"GET", "/v2/x/manifests/latest", 404, ""},
		{"GET", "/v2/x/blobs/" + digest.FromString("absent").String(), 404, ""},
		{"PUT", "/v2/x/blobs/" + bd.String(), 405, ""},
		{"DELETE", "/v2/x/manifests/" + md.String(), 405, ""},
	} {
		req, _ := http.NewRequest(tc.method, base+tc.path, nil)
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", tc.method, tc.path, err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.code || tc.ctype != "" && resp.Header.Get("Content-Type") != tc.ctype {
			t.Errorf("%s %s = %d %q, want %d %q", tc.method, tc.path, resp.StatusCode, resp.Header.Get("Content-Type"), tc.code, tc.ctype)
		}
		if tc.code == 200 && tc.path != "/v2/" && resp.Header.Get("Docker-Content-Digest") == "" {
			t.Errorf("%s %s: no Docker-Content-Digest", tc.method, tc.path)
		}
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func filepathGlob(dir string) ([]string, error) { return filepath.Glob(filepath.Join(dir, "*")) }
