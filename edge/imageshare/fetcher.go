package imageshare

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/containerd/containerd/v2/core/remotes/docker"
	digest "github.com/opencontainers/go-digest"

	"github.com/outpost-mesh/outpost/edge/mesh"
)

// FetcherConfig configures a Fetcher.
type FetcherConfig struct {
	// Node is the node's name; required.
	Node string
	// Identity is the node's certificate, which the Fetcher presents to
	// its peers, and the hub CA, to which it checks theirs.
	Identity Identity
	// Peers returns the site's alive peers with what each says of
	// itself; nil while the node is in no site mesh. Non-nil.
	Peers func() []mesh.Peer
	// Announce has the node say it is pulling pulling from outside the
	// site (mesh.Meta.Pulling); at most mesh.MaxPulling digests. It may
	// block a little while the news goes out. Non-nil.
	Announce func(pulling [][32]byte) error
	// Window is how long a node that said it pulls a blob waits for its
	// peers to hear it, and to hear theirs, before fetching it from the
	// registry: 2s, a few rounds of the mesh's gossip.
	Window time.Duration
	// BadFor is how long a peer that served bad bytes is skipped: 5m.
	BadFor time.Duration
	// HeadTimeout bounds the question to each peer whether it holds a
	// blob: 2s.
	HeadTimeout time.Duration
	// FetchTimeout bounds a blob's fetch from a peer, including the
	// peer's wait for it while it pulls it itself: 30m.
	FetchTimeout time.Duration
	// MaxBlob bounds the bytes of a blob taken from a peer: 16 GiB.
	MaxBlob int64
	// AnnounceFor bounds how long a blob stays announced if its pull
	// never says it ended: 30m.
	AnnounceFor time.Duration
	// TempDir holds blobs being fetched from peers, until containerd has
	// read them; "" for the system's.
	TempDir string
	// Logger; nil discards.
	Logger *slog.Logger
	// Now is the clock; nil for the wall clock.
	Now func() time.Time
}

// DefaultFetcherConfig returns the defaults above.
func DefaultFetcherConfig() FetcherConfig {
	return FetcherConfig{
		Window:       2 * time.Second,
		BadFor:       5 * time.Minute,
		HeadTimeout:  2 * time.Second,
		FetchTimeout: 30 * time.Minute,
		MaxBlob:      16 << 30,
		AnnounceFor:  30 * time.Minute,
	}
}

// Validate reports the first invalid field.
func (c *FetcherConfig) Validate() error {
	switch {
	case c.Node == "":
		return errors.New("imageshare: no node name")
	case c.Identity.Certificate == nil || c.Identity.Roots == nil:
		return errors.New("imageshare: no identity")
	case c.Peers == nil || c.Announce == nil:
		return errors.New("imageshare: no Peers or Announce")
	case c.Window < 0 || c.BadFor < 0 || c.HeadTimeout <= 0 || c.FetchTimeout <= 0 || c.MaxBlob <= 0 || c.AnnounceFor <= 0:
		return errors.New("imageshare: window and bad-for must not be negative, the timeouts and MaxBlob must be positive")
	}
	return nil
}

// Fetcher fetches content by digest from the site's peers, for the
// node's image pulls (images.Config.Site): Host is the site, tried
// before the image's registry, and Origin wraps the transport to the
// registry. Its methods are safe for concurrent use.
type Fetcher struct {
	cfg FetcherConfig
	log *slog.Logger
	now func() time.Time

	mu      sync.Mutex
	bad     map[string]time.Time // peer -> until when it is skipped
	pulls   map[digest.Digest]*pull
	clients map[string]*peerClient // by peer name

	annMu sync.Mutex // orders calls of Announce
}

// pull is a blob the node is fetching, from outside the site or from a
// peer, until its pull is Done with it: until containerd has committed
// it, which is a moment after its last byte was fetched.
type pull struct {
	// said is whether the node says it pulls the blob
	// (mesh.Meta.Pulling), and since when.
	said  bool
	since time.Time
	// ended is when the blob's last byte was fetched; zero before.
	ended time.Time
}

// live reports whether p still counts at now: a pull never said Done
// lasts announceFor from when it was said, or commitGrace from its last
// byte.
func (p *pull) live(now time.Time, announceFor time.Duration) bool {
	if p.ended.IsZero() {
		return now.Sub(p.since) < announceFor
	}
	return now.Sub(p.ended) < commitGrace
}

// peerClient is the HTTP client of one peer's Server at one address.
type peerClient struct {
	addr netip.AddrPort
	c    *http.Client
}

// NewFetcher returns a Fetcher as cfg says; it starts nothing.
func NewFetcher(cfg FetcherConfig) (*Fetcher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	f := &Fetcher{cfg: cfg, log: cfg.Logger, now: cfg.Now,
		bad: map[string]time.Time{}, pulls: map[digest.Digest]*pull{}, clients: map[string]*peerClient{}}
	if f.log == nil {
		f.log = slog.New(slog.DiscardHandler)
	}
	if f.now == nil {
		f.now = time.Now
	}
	return f, nil
}

// siteHost is the name of the site's host in the URLs containerd makes;
// the Fetcher's transport reads only their paths.
const siteHost = "site.outpost.invalid"

// Host returns the site as a registry host with the pull capability only:
// it never resolves a tag. Its transport answers a request for content
// by digest with the content from a peer, verified, or 404, which has
// containerd's fetcher go on to the next host, the registry.
func (f *Fetcher) Host() docker.RegistryHost {
	return docker.RegistryHost{
		Client: &http.Client{Transport: siteTransport{f}},
		Host:   siteHost, Scheme: "https", Path: "/v2",
		Capabilities: docker.HostCapabilityPull,
	}
}

// Origin wraps rt, the transport to an image's registry, to see the
// fetches of the blobs the node said it pulls end.
func (f *Fetcher) Origin(rt http.RoundTripper) http.RoundTripper {
	return originTransport{f: f, rt: rt}
}

// Done is told that a pull is done with d: the node's containerd has
// committed it, or the pull failed to have it. Only then does the node
// stop saying it pulls d, so that a peer never finds it neither pulling
// nor holding d while it has the blob.
func (f *Fetcher) Done(d digest.Digest) { f.withdraw(d) }

// commitGrace is how long after its last byte was fetched a blob still
// counts as pulling when its pull never says it is Done: containerd
// commits it once it has read and checked that byte, a moment later.
const commitGrace = 30 * time.Second

// Pulling reports whether the node is fetching d, from outside the site
// or from a peer, and its containerd has not committed it yet: whether
// a peer's request for d should wait for the node's containerd to have
// it (ServerConfig.Pulling).
func (f *Fetcher) Pulling(d digest.Digest) bool {
	now := f.now()
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.pulls[d]
	return ok && p.live(now, f.cfg.AnnounceFor)
}

// siteTransport is the site host's transport.
type siteTransport struct{ f *Fetcher }

func (t siteTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		req.Body.Close()
	}
	kind, d, err := parsePath(req.URL.Path)
	// Only whole GETs: a ranged one resumes a fetch, from the host
	// it began at.
	if err != nil || req.Method != http.MethodGet || req.Header.Get("Range") != "" {
		return notFound(req), nil
	}
	if resp := t.f.fetch(req.Context(), kind, d); resp != nil {
		resp.Request = req
		return resp, nil
	}
	return notFound(req), nil
}

// fetch returns d's content from a peer, verified, or nil: from a peer
// that holds it or pulls it, else, once the node said it pulls it, from
// a peer that holds it then or one of a lower name that said so too.
// When it returns nil the node has said it pulls d, unless no peer could
// hear it. Until the pull is Done with d, the node's Server has a peer
// that asks for d wait for its commit.
func (f *Fetcher) fetch(ctx context.Context, kind string, d digest.Digest) *http.Response {
	var resp *http.Response
	f.fetchVia(ctx, kind, d, func(ctx context.Context, b Blob) error {
		r, err := f.fetchFrom(ctx, b.p, kind, d)
		resp = r
		return err
	})
	return resp
}

// Blob is a site peer's copy of a blob, as FetchBlob hands it to its
// getter.
type Blob struct {
	f    *Fetcher
	p    mesh.Peer
	kind string
	d    digest.Digest
}

// Peer returns the peer's name.
func (b Blob) Peer() string { return b.p.Name }

// FetchBlob has get fetch blob d from a site peer, as the node's image
// pulls do (Sources): from the peers that hold d or say they pull it;
// if none served it, the node says it pulls d, waits the Window, and
// asks its peers again. get reads d from the Blob it is handed, checks
// it, and returns nil once the node holds it, or an error wrapping
// ErrBadContent if the peer served bytes that are not d (the peer is
// then skipped for BadFor); it runs with a deadline of FetchTimeout.
//
// FetchBlob returns whether a peer served d. When it did not, the node
// says it pulls d (unless no peer could hear it): the caller fetches d
// from outside the site and calls Done(d) once its Server can serve it,
// or once it gave up. When it did, the caller calls Done(d) too.
func (f *Fetcher) FetchBlob(ctx context.Context, d digest.Digest, get func(ctx context.Context, b Blob) error) bool {
	return f.fetchVia(ctx, kindBlob, d, get)
}

// fetchVia is FetchBlob for content of kind.
func (f *Fetcher) fetchVia(ctx context.Context, kind string, d digest.Digest, get func(ctx context.Context, b Blob) error) bool {
	peers := f.usable()
	if len(peers) == 0 {
		return false
	}
	// A node that said it pulls d already (a caller trying again while
	// a peer of a lower name pulls it) waits for none of a higher name,
	// which may wait for it.
	cands := f.ask(ctx, peers, kind, d)
	if f.tryAll(ctx, Sources(f.cfg.Node, f.saying(d), cands, f.badNow()), peers, kind, d, get) {
		f.ended(d)
		return true
	}
	if !f.announce(d) {
		return false
	}
	t := time.NewTimer(f.cfg.Window)
	select {
	case <-ctx.Done():
		t.Stop()
		f.withdraw(d)
		return false
	case <-t.C:
	}
	// Asked again: a peer that pulled d during the Window holds it now,
	// and says so no more.
	peers = f.usable()
	cands = f.ask(ctx, peers, kind, d)
	ok := f.tryAll(ctx, Sources(f.cfg.Node, true, cands, f.badNow()), peers, kind, d, get)
	if ok {
		f.ended(d)
	}
	return ok
}

// saying reports whether the node says it pulls d now.
func (f *Fetcher) saying(d digest.Digest) bool {
	now := f.now()
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.pulls[d]
	return ok && p.said && p.live(now, f.cfg.AnnounceFor)
}

// LowerPulling reports whether an alive peer of a lower name than the
// node's, not skipped for bad bytes, says it pulls d: one whose fetch
// from outside the site the node should wait for (Sources), if it
// outlasts a peer's CommitWait.
func (f *Fetcher) LowerPulling(d digest.Digest) bool {
	sum, ok := sha256Of(d)
	if !ok {
		return false
	}
	bad := f.badNow()
	for name, p := range f.usable() {
		if name < f.cfg.Node && !bad[name] && slices.Contains(p.Meta.Pulling, sum) {
			return true
		}
	}
	return false
}

// usable returns the alive peers that serve their images.
func (f *Fetcher) usable() map[string]mesh.Peer {
	out := map[string]mesh.Peer{}
	for _, p := range f.cfg.Peers() {
		if p.Meta.ImagePort != 0 && p.Addr.IsValid() && p.Name != f.cfg.Node {
			out[p.Name] = p
		}
	}
	return out
}

// candidates returns peers as Sources weighs them for d, has saying which
// answered HEAD with 200.
func candidates(peers map[string]mesh.Peer, d digest.Digest, has map[string]bool) []Candidate {
	sum, _ := sha256Of(d)
	out := make([]Candidate, 0, len(peers))
	for name, p := range peers {
		c := Candidate{Name: name, Has: has[name]}
		for _, x := range p.Meta.Pulling {
			if x == sum {
				c.Pulling = true
			}
		}
		out = append(out, c)
	}
	return out
}

// ask asks each of peers, at once, whether it holds d.
func (f *Fetcher) ask(ctx context.Context, peers map[string]mesh.Peer, kind string, d digest.Digest) []Candidate {
	bad := f.badNow()
	var mu sync.Mutex
	has := map[string]bool{}
	var wg sync.WaitGroup
	for name, p := range peers {
		if bad[name] {
			continue
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, f.cfg.HeadTimeout)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodHead, peerURL(p, kind, d), nil)
			if err != nil {
				return
			}
			resp, err := f.client(p).Do(req)
			if err != nil {
				f.log.Debug("image share: peer not asked", "peer", name, "err", err)
				return
			}
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				mu.Lock()
				has[name] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return candidates(peers, d, has)
}

// tryAll has get fetch d from each of sources in turn until one serves
// it.
func (f *Fetcher) tryAll(ctx context.Context, sources []string, peers map[string]mesh.Peer, kind string, d digest.Digest, get func(context.Context, Blob) error) bool {
	for _, name := range sources {
		gctx, cancel := context.WithTimeout(ctx, f.cfg.FetchTimeout)
		err := get(gctx, Blob{f: f, p: peers[name], kind: kind, d: d})
		cancel()
		if err == nil {
			f.log.Debug("image share: fetched from a peer", "peer", name, "digest", d)
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		if errors.Is(err, ErrBadContent) {
			f.markBad(name, err)
		} else {
			f.log.Debug("image share: peer did not serve", "peer", name, "digest", d, "err", err)
		}
	}
	return false
}

// ErrBadContent is wrapped by the error of a FetchBlob getter when the
// peer served bytes that are not the content asked for.
var ErrBadContent = errors.New("a peer served bad content")

// badBytesError is a peer's response that was not the content asked for.
type badBytesError struct{ why string }

func (e *badBytesError) Error() string { return e.why }

// Is makes errors.Is(err, ErrBadContent) hold.
func (e *badBytesError) Is(target error) bool { return target == ErrBadContent }

// fetchFrom fetches d from p into a temporary file, checks its digest,
// and returns a response that reads the file, which its Body's Close
// removes.
func (f *Fetcher) fetchFrom(ctx context.Context, p mesh.Peer, kind string, d digest.Digest) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, peerURL(p, kind, d), nil)
	if err != nil {
		return nil, err
	}
	resp, err := f.client(p).Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %s", resp.Status)
	}
	size := resp.ContentLength
	if size < 0 || size > f.cfg.MaxBlob {
		return nil, &badBytesError{fmt.Sprintf("length %d of %s", size, d)}
	}
	tmp, err := os.CreateTemp(f.cfg.TempDir, "imageshare-")
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), io.LimitReader(resp.Body, size+1))
	switch {
	case err != nil:
		return nil, err
	case n != size:
		return nil, &badBytesError{fmt.Sprintf("%d bytes of %s, not the %d it said", n, d, size)}
	case digest.NewDigest(digest.SHA256, h) != d:
		return nil, &badBytesError{fmt.Sprintf("bytes of %s for %s", digest.NewDigest(digest.SHA256, h), d)}
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	ok = true
	out := &http.Response{
		Status: "200 OK", StatusCode: http.StatusOK, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{},
		ContentLength: size,
		Body:          tempBody{tmp},
	}
	out.Header.Set("Content-Length", strconv.FormatInt(size, 10))
	out.Header.Set("Docker-Content-Digest", d.String())
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		out.Header.Set("Content-Type", ct)
	}
	return out, nil
}

// tempBody reads a temporary file, removed when closed.
type tempBody struct{ f *os.File }

func (b tempBody) Read(p []byte) (int, error) { return b.f.Read(p) }

func (b tempBody) Close() error {
	err := b.f.Close()
	if rerr := os.Remove(b.f.Name()); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
		err = errors.Join(err, rerr)
	}
	return err
}

// client returns the HTTP client of p's Server, made anew when p's
// address changed.
func (f *Fetcher) client(p mesh.Peer) *http.Client {
	addr := netip.AddrPortFrom(p.Addr.Addr(), p.Meta.ImagePort)
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok := f.clients[p.Name]; ok && c.addr == addr {
		return c.c
	}
	if c, ok := f.clients[p.Name]; ok {
		c.c.CloseIdleConnections()
	}
	tr := &http.Transport{
		TLSClientConfig:     clientTLS(f.cfg.Identity, p.Name),
		ForceAttemptHTTP2:   true,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout: 5 * time.Second,
		IdleConnTimeout:     time.Minute,
		// The peer may wait for its own pull before it answers.
		ResponseHeaderTimeout: 3 * time.Minute,
	}
	c := &peerClient{addr: addr, c: &http.Client{Transport: tr}}
	f.clients[p.Name] = c
	return c.c
}

// Close closes the idle connections to peers. It is safe to call twice.
func (f *Fetcher) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.clients {
		c.c.CloseIdleConnections()
	}
	clear(f.clients)
}

// peerURL is the URL of d on p's Server.
func peerURL(p mesh.Peer, kind string, d digest.Digest) string {
	addr := netip.AddrPortFrom(p.Addr.Addr(), p.Meta.ImagePort)
	return "https://" + addr.String() + "/v2/x/" + kind + "/" + d.String()
}

// markBad skips peer for BadFor, and says so once.
func (f *Fetcher) markBad(peer string, err error) {
	now := f.now()
	f.mu.Lock()
	was := f.bad[peer].After(now)
	f.bad[peer] = now.Add(f.cfg.BadFor)
	f.mu.Unlock()
	if !was {
		f.log.Warn("image share: a peer served bad bytes; skipped for a while", "peer", peer, "for", f.cfg.BadFor, "err", err)
	}
}

// badNow returns the peers skipped now.
func (f *Fetcher) badNow() map[string]bool {
	now := f.now()
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]bool{}
	for p, until := range f.bad {
		if until.After(now) {
			out[p] = true
		} else {
			delete(f.bad, p)
		}
	}
	return out
}

// announce adds d to what the node says it pulls, and says it; false if
// there was no room for it or it could not be said.
func (f *Fetcher) announce(d digest.Digest) bool {
	if _, ok := sha256Of(d); !ok {
		return false
	}
	now := f.now()
	f.mu.Lock()
	f.prune(now)
	said := 0
	for _, p := range f.pulls {
		if p.said {
			said++
		}
	}
	if p, dup := f.pulls[d]; (!dup || !p.said) && said >= mesh.MaxPulling {
		f.mu.Unlock()
		return false
	}
	f.pulls[d] = &pull{said: true, since: now}
	f.mu.Unlock()
	if err := f.say(); err != nil {
		f.log.Debug("image share: pull not announced", "digest", d, "err", err)
		return false
	}
	return true
}

// prune forgets the pulls that no longer count at now. f.mu is held.
func (f *Fetcher) prune(now time.Time) {
	for x, p := range f.pulls {
		if !p.live(now, f.cfg.AnnounceFor) {
			delete(f.pulls, x)
		}
	}
}

// withdraw forgets d, whose pull is Done with it or whose fetch failed or
// was given up, and removes it from what the node says it pulls.
func (f *Fetcher) withdraw(d digest.Digest) {
	f.mu.Lock()
	p, ok := f.pulls[d]
	delete(f.pulls, d)
	f.mu.Unlock()
	f.sayIf(ok && p.said, d)
}

// ended notes that d's last byte was fetched: it counts as pulling, and
// stays said if it was, until its pull is Done with it, or commitGrace.
func (f *Fetcher) ended(d digest.Digest) {
	now := f.now()
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.pulls[d]
	if !ok {
		p = &pull{}
		f.pulls[d] = p
	}
	p.ended = now
}

// sayIf says the announced digests again if ok: d left them.
func (f *Fetcher) sayIf(ok bool, d digest.Digest) {
	if !ok {
		return
	}
	if err := f.say(); err != nil {
		f.log.Debug("image share: pull end not announced", "digest", d, "err", err)
	}
}

// say has the node say the announced digests as they are now.
func (f *Fetcher) say() error {
	f.annMu.Lock()
	defer f.annMu.Unlock()
	f.mu.Lock()
	f.prune(f.now())
	list := make([][32]byte, 0, mesh.MaxPulling)
	for d, p := range f.pulls {
		if sum, ok := sha256Of(d); ok && p.said {
			list = append(list, sum)
		}
	}
	f.mu.Unlock()
	return f.cfg.Announce(list)
}

// sha256Of returns d's bytes, if it is a valid sha256 digest.
func sha256Of(d digest.Digest) ([32]byte, bool) {
	var sum [32]byte
	if d.Validate() != nil || d.Algorithm() != digest.SHA256 {
		return sum, false
	}
	b, err := hex.DecodeString(d.Encoded())
	if err != nil || len(b) != len(sum) {
		return sum, false
	}
	copy(sum[:], b)
	return sum, true
}

// originTransport is the transport to an image's registry, which notes
// the end of a blob's fetch, or withdraws it when the fetch failed.
type originTransport struct {
	f  *Fetcher
	rt http.RoundTripper
}

func (t originTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	_, d, perr := parsePath(req.URL.Path)
	resp, err := t.rt.RoundTrip(req)
	if perr != nil || req.Method != http.MethodGet || !t.f.Pulling(d) {
		return resp, err
	}
	if err != nil || resp.StatusCode/100 != 2 {
		// A redirect to the blob's storage is followed by the client,
		// through this transport again: only the final answer ends it.
		if err != nil || !(resp.StatusCode >= 300 && resp.StatusCode < 400) {
			t.f.withdraw(d)
		}
		return resp, err
	}
	resp.Body = &endBody{ReadCloser: resp.Body, done: func() { t.f.ended(d) }}
	return resp, nil
}

// endBody calls done once, at the end of the body or its Close.
type endBody struct {
	io.ReadCloser
	once sync.Once
	done func()
}

func (b *endBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.once.Do(b.done)
	}
	return n, err
}

func (b *endBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(b.done)
	return err
}

// notFound is the site's answer for content no peer served.
func notFound(req *http.Request) *http.Response {
	return &http.Response{
		Status: "404 Not Found", StatusCode: http.StatusNotFound, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:  http.Header{"Content-Type": {"application/json"}},
		Body:    io.NopCloser(strings.NewReader(`{"errors":[{"code":"BLOB_UNKNOWN","message":"no site peer holds it"}]}`)),
		Request: req,
	}
}
