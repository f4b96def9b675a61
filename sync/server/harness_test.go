package server_test

// The harness runs a real server and real clients over QUIC on loopback:
// a real view.Index fed by hand, and fakes of what the hub and the edge
// plug in (Authority, Sink, Presence; Store and Outbox).

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"

	"github.com/outpost-mesh/outpost/internal/testca"
	"github.com/outpost-mesh/outpost/internal/testlog"
	"github.com/outpost-mesh/outpost/internal/wait"
	"github.com/outpost-mesh/outpost/sync/client"
	"github.com/outpost-mesh/outpost/sync/memnet"
	"github.com/outpost-mesh/outpost/sync/server"
	"github.com/outpost-mesh/outpost/sync/stream"
	"github.com/outpost-mesh/outpost/sync/view"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// Timeouts of the tests: small, so that a dead link shows within seconds.
const (
	idleTimeout = 2 * time.Second
	keepAlive   = 500 * time.Millisecond
	minBackoff  = 50 * time.Millisecond
	maxBackoff  = time.Second
	// waitLong bounds every wait for something that should happen.
	waitLong = 10 * time.Second
)

// --- certificates ---

// testCA is a throwaway hub CA, with what the hub does with its key.
type testCA struct{ *testca.CA }

func newTestCA(t testing.TB) *testCA { return &testCA{testca.New(t)} }

// nodeTemplate is the subject and usage of a node certificate, valid from
// notBefore for life.
func nodeTemplate(node string, notBefore time.Time, life time.Duration) *x509.Certificate {
	tmpl := testca.NodeTemplate(node)
	tmpl.NotBefore, tmpl.NotAfter = notBefore, notBefore.Add(life)
	return tmpl
}

// nodeCert returns a certificate of node, valid from now (to the second,
// as X.509 has it) for life.
func (ca *testCA) nodeCert(t testing.TB, node string, life time.Duration) *tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der := ca.Sign(t, nodeTemplate(node, time.Now().Truncate(time.Second), life), &key.PublicKey)
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
}

// signCSR signs a node's CSR for life, as the hub does.
func (ca *testCA) signCSR(t testing.TB, node string, csrDER []byte, life time.Duration) ([]byte, error) {
	csr, err := x509.ParseCertificateRequest(csrDER)
	if err != nil {
		return nil, &wire.Error{Code: wire.CodeBadRequest, Message: err.Error()}
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, &wire.Error{Code: wire.CodeBadRequest, Message: err.Error()}
	}
	return ca.Sign(t, nodeTemplate(node, time.Now().Truncate(time.Second), life), csr.PublicKey), nil
}

// newCSR returns a key and a CSR for node.
func newCSR(t testing.TB, node string) (*ecdsa.PrivateKey, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: wire.NodeUserPrefix + node, Organization: []string{wire.NodesGroup}},
	}, key)
	if err != nil {
		t.Fatal(err)
	}
	return key, csr
}

// --- fakes of the hub's parts ---

// fakeAuthority admits nodes with one token and signs with the test CA.
type fakeAuthority struct {
	t     testing.TB
	ca    *testCA
	token string
	life  time.Duration // of the certificates it signs

	mu       sync.Mutex
	joins    []string     // node names of the joins asked for
	froms    []netip.Addr // and where they came from
	refuse   error        // if set, what every join is refused with
	renews   []string     // node names of the renewals asked for
	renewErr []error      // returned by the next renewals, first first
	// block, if set, holds every join until it is closed or the join's
	// context ends.
	block chan struct{}
}

var _ server.Authority = (*fakeAuthority)(nil)

func (a *fakeAuthority) Join(ctx context.Context, from netip.Addr, req *wire.JoinRequest) ([]byte, []byte, error) {
	a.mu.Lock()
	a.joins = append(a.joins, req.NodeName)
	a.froms = append(a.froms, from)
	block, refuse := a.block, a.refuse
	a.mu.Unlock()
	if refuse != nil {
		return nil, nil, refuse
	}
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	}
	if req.Token != a.token {
		return nil, nil, &wire.Error{Code: wire.CodeUnauthorized, Message: fmt.Sprintf("bootstrap token %q not found", req.Token)}
	}
	cert, err := a.ca.signCSR(a.t, req.NodeName, req.CSR, a.life)
	if err != nil {
		return nil, nil, err
	}
	return cert, a.ca.Cert.Raw, nil
}

func (a *fakeAuthority) Renew(ctx context.Context, node string, csr []byte) ([]byte, error) {
	a.mu.Lock()
	a.renews = append(a.renews, node)
	var err error
	if len(a.renewErr) > 0 {
		err, a.renewErr = a.renewErr[0], a.renewErr[1:]
	}
	a.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return a.ca.signCSR(a.t, node, csr, a.life)
}

func (a *fakeAuthority) calls() (joins, renews []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.joins), slices.Clone(a.renews)
}

// sinkCall is one ApplyStatus the sink heard.
type sinkCall struct {
	node string
	item wire.StatusItem
}

// fakeSink records what nodes send; decide, if set, says what to answer.
type fakeSink struct {
	mu     sync.Mutex
	calls  []sinkCall
	decide func(node string, it wire.StatusItem, times int) error
	times  map[string]int // by item key and kind: how often it came
}

var _ server.Sink = (*fakeSink)(nil)

func (s *fakeSink) ApplyStatus(ctx context.Context, node string, it wire.StatusItem) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, sinkCall{node, it})
	if s.times == nil {
		s.times = map[string]int{}
	}
	id := fmt.Sprintf("%d %s", it.Kind, it.Key)
	s.times[id]++
	if s.decide != nil {
		return s.decide(node, it, s.times[id])
	}
	return nil
}

func (s *fakeSink) heard() []sinkCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

// fakePresence records Connected and Disconnected as "+node" and "-node",
// and whether each node is connected as the hub's glue would track it (the
// last call wins).
type fakePresence struct {
	mu     sync.Mutex
	events []string
	up     map[string]bool
}

var _ server.Presence = (*fakePresence)(nil)

func (p *fakePresence) Connected(node string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.events = append(p.events, "+"+node)
	if p.up == nil {
		p.up = map[string]bool{}
	}
	p.up[node] = true
}

func (p *fakePresence) Disconnected(node string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.events = append(p.events, "-"+node)
	delete(p.up, node)
}

func (p *fakePresence) state() ([]string, map[string]bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	up := map[string]bool{}
	for k, v := range p.up {
		up[k] = v
	}
	return slices.Clone(p.events), up
}

// --- the edge's store and outbox ---

// memStore is an in-memory client.Store and client.Outbox with the
// checkpoint's rules (a revision never moves back; outbox entries of one
// kind and key coalesce).
type memStore struct {
	mu       sync.Mutex
	applyErr error // if set, what ApplyBatch fails with
	rev      int64
	objs     map[wire.Key]wire.Change
	batches  [][]wire.Change // the changes of every ApplyBatch, in order
	outbox   []wire.StatusItem
	seq      uint64
	acked    []uint64
}

var (
	_ client.Store  = (*memStore)(nil)
	_ client.Outbox = (*memStore)(nil)
)

func newMemStore() *memStore { return &memStore{objs: map[wire.Key]wire.Change{}} }

func (s *memStore) LastRevision() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rev
}

func (s *memStore) Inventory() ([]wire.InventoryEntry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var inv []wire.InventoryEntry
	for k, c := range s.objs {
		inv = append(inv, wire.InventoryEntry{Key: k, Revision: c.Revision})
	}
	slices.SortFunc(inv, func(a, b wire.InventoryEntry) int { return strings.Compare(a.Key.String(), b.Key.String()) })
	return inv, nil
}

func (s *memStore) ApplyBatch(changes []wire.Change, revision int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.applyErr != nil {
		return s.applyErr
	}
	if revision < s.rev {
		return fmt.Errorf("apply batch at %d: before the last revision %d", revision, s.rev)
	}
	for _, c := range changes {
		switch c.Op {
		case wire.OpPut:
			c.Object = bytes.Clone(c.Object)
			s.objs[c.Key] = c
		case wire.OpDelete:
			delete(s.objs, c.Key)
		}
	}
	s.batches = append(s.batches, slices.Clone(changes))
	s.rev = revision
	return nil
}

func (s *memStore) Pending(max int) ([]wire.StatusItem, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.outbox)
	if max > 0 {
		n = min(n, max)
	}
	return slices.Clone(s.outbox[:n]), nil
}

func (s *memStore) Ack(seqs ...uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.acked = append(s.acked, seqs...)
	s.outbox = slices.DeleteFunc(s.outbox, func(it wire.StatusItem) bool { return slices.Contains(seqs, it.Seq) })
	return nil
}

// enqueue adds an outbox entry, replacing a pending one of its kind and key.
func (s *memStore) enqueue(kind wire.StatusKind, key wire.Key, obj []byte) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.outbox = slices.DeleteFunc(s.outbox, func(it wire.StatusItem) bool { return it.Kind == kind && it.Key == key })
	s.seq++
	s.outbox = append(s.outbox, wire.StatusItem{Seq: s.seq, Kind: kind, Key: key, Object: obj})
	return s.seq
}

// view returns what the store holds: key -> revision.
func (s *memStore) view() map[wire.Key]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[wire.Key]int64, len(s.objs))
	for k, c := range s.objs {
		out[k] = c.Revision
	}
	return out
}

func (s *memStore) batchCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.batches)
}

// batchesSince returns the changes of the batches applied from the n-th on.
func (s *memStore) batchesSince(n int) [][]wire.Change {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.batches[n:])
}

func (s *memStore) pendingSeqs() []uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []uint64
	for _, it := range s.outbox {
		out = append(out, it.Seq)
	}
	return out
}

// --- objects, encoded as the hub stores them ---

var (
	testScheme = func() *runtime.Scheme {
		s := runtime.NewScheme()
		utilruntime.Must(corev1.AddToScheme(s))
		return s
	}()
	testCodec = protobuf.NewSerializer(testScheme, testScheme)
)

// encode returns obj as Kubernetes protobuf, the form the hub stores.
func encode(t testing.TB, obj runtime.Object) []byte {
	t.Helper()
	gvks, _, err := testScheme.ObjectKinds(obj)
	if err != nil {
		t.Fatal(err)
	}
	obj.GetObjectKind().SetGroupVersionKind(gvks[0])
	var buf bytes.Buffer
	if err := testCodec.Encode(obj, &buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func podKey(name string) wire.Key {
	return wire.Key{Resource: wire.ResourcePods, Namespace: "default", Name: name}
}

func nodeKey(name string) wire.Key { return wire.Key{Resource: wire.ResourceNodes, Name: name} }

func configMapKey(name string) wire.Key {
	return wire.Key{Resource: wire.ResourceConfigMaps, Namespace: "default", Name: name}
}

// testPod is a pod bound to node whose container takes its environment
// from the configmaps named.
func testPod(name, node string, configMaps ...string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)},
		Spec: corev1.PodSpec{
			NodeName:   node,
			Containers: []corev1.Container{{Name: "main", Image: "nginx"}},
		},
	}
	for _, cm := range configMaps {
		p.Spec.Containers[0].EnvFrom = append(p.Spec.Containers[0].EnvFrom, corev1.EnvFromSource{
			ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm}},
		})
	}
	return p
}

func testNode(name string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

func testConfigMap(name, value string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Data: map[string]string{"v": value}}
}

// feed stands for the hub's store: it feeds the index one revision at a
// time, and serves the server's Objects as a compacted store would, with
// the latest version of each key only.
type feed struct {
	t      testing.TB
	x      *view.Index
	mu     sync.Mutex
	rev    int64
	latest map[wire.Key]wire.Change
	reads  []string // the objects read, as key@revision
	// beforeRead, if set, is called (without f.mu) before each read.
	beforeRead func(key wire.Key, rev int64)
}

var _ server.Objects = (*feed)(nil)

// put stores obj at key at the next revision and returns it.
func (f *feed) put(key wire.Key, obj runtime.Object) int64 {
	f.t.Helper()
	return f.apply(view.Event{Key: key, Raw: encode(f.t, obj)})
}

// del deletes key at the next revision and returns it.
func (f *feed) del(key wire.Key) int64 {
	f.t.Helper()
	return f.apply(view.Event{Key: key, Deleted: true})
}

func (f *feed) apply(ev view.Event) int64 {
	f.t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rev++
	ev.Revision = f.rev
	if err := f.x.Apply([]view.Event{ev}); err != nil {
		f.t.Fatalf("Apply(%v) = %v", ev.Key, err)
	}
	if f.latest == nil {
		f.latest = map[wire.Key]wire.Change{}
	}
	if ev.Deleted {
		delete(f.latest, ev.Key)
	} else {
		f.latest[ev.Key] = wire.Change{Key: ev.Key, Revision: ev.Revision, Object: bytes.Clone(ev.Raw)}
	}
	return f.rev
}

// Object implements server.Objects.
func (f *feed) Object(ctx context.Context, key wire.Key, rev int64) ([]byte, error) {
	f.mu.Lock()
	hook := f.beforeRead
	f.mu.Unlock()
	if hook != nil {
		hook(key, rev)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads = append(f.reads, fmt.Sprintf("%s@%d", key, rev))
	c, ok := f.latest[key]
	if !ok || c.Revision != rev {
		return nil, fmt.Errorf("%s at %d: %w", key, rev, server.ErrObjectGone)
	}
	return bytes.Clone(c.Object), nil
}

// objectReads returns the reads of Object so far.
func (f *feed) objectReads() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.reads)
}

// --- the hub ---

// hub is a sync server for a test, with its fakes; it can be stopped and
// started again on the same address with the same keys.
type hub struct {
	t        *testing.T
	ca       *testCA
	x        *view.Index
	feed     *feed
	auth     *fakeAuthority
	sink     *fakeSink
	presence *fakePresence
	logs     *testlog.Recorder
	cfg      server.Config
	addr     string
	caHash   string
	net      *memnet.Network // or nil for UDP on loopback

	srv   *server.Server
	pc    *flakyConn
	serve *wait.Background // nil while stopped
}

// hubOptions change the defaults of startHub.
type hubOptions struct {
	views    view.Config
	certLife time.Duration // of the certificates the authority signs
	// net, if set, carries the hub's and the clients' packets in memory:
	// the hub at memHub, every client from memNode.
	net *memnet.Network
}

// The addresses on a hubOptions.net.
const (
	memHub  = "127.0.0.1:443"
	memNode = "10.0.0.2"
)

func defaultHubOptions() hubOptions {
	return hubOptions{views: view.DefaultConfig(), certLife: time.Hour}
}

// startHub starts a hub on a free loopback port; the test's end stops it.
func startHub(t *testing.T, opts hubOptions) *hub {
	t.Helper()
	ca := newTestCA(t)
	x := view.NewIndex(opts.views)
	if err := x.Reset(0, nil); err != nil {
		t.Fatal(err)
	}
	h := &hub{
		t: t, ca: ca, x: x,
		feed:     &feed{t: t, x: x},
		auth:     &fakeAuthority{t: t, ca: ca, token: "abcdef.0123456789abcdef", life: opts.certLife},
		sink:     &fakeSink{},
		presence: &fakePresence{},
		caHash:   wire.CAHash(ca.Cert),
		net:      opts.net,
	}
	var ticket [32]byte
	var reset quic.StatelessResetKey
	rand.Read(ticket[:])
	rand.Read(reset[:])
	cfg := server.DefaultConfig()
	cfg.Certificate = ca.Serving(t)
	cfg.ClientCAs = ca.Pool
	cfg.SessionTicketKeys = [][32]byte{ticket}
	cfg.StatelessResetKey = &reset
	cfg.Views, cfg.Objects, cfg.Authority, cfg.Sink, cfg.Presence = x, h.feed, h.auth, h.sink, h.presence
	h.logs = testlog.NewRecorder(t, slog.LevelDebug)
	cfg.Logger = slog.New(h.logs).With("side", "hub")
	cfg.IdleTimeout, cfg.KeepAlive = idleTimeout, keepAlive
	h.cfg = cfg
	if h.net != nil {
		h.startMem()
	} else {
		h.start("127.0.0.1:0")
	}
	t.Cleanup(h.stop)
	return h
}

// start serves on addr.
func (h *hub) start(addr string) {
	h.t.Helper()
	srv, err := server.New(h.cfg)
	if err != nil {
		h.t.Fatal(err)
	}
	// The port of a hub that just stopped may take a moment to be free.
	var pc net.PacketConn
	wait.For(h.t, waitLong, "listen on "+addr, func() (bool, string) {
		pc, err = net.ListenPacket("udp", addr)
		return err == nil, fmt.Sprint(err)
	})
	h.srv, h.pc, h.addr = srv, &flakyConn{PacketConn: pc}, pc.LocalAddr().String()
	h.serve = wait.Start(h.t, waitLong, "Serve", func(ctx context.Context) error { return srv.Serve(ctx, h.pc) })
}

// startMem serves on h.net at memHub. The hub cannot crash: cut the
// node's link instead.
func (h *hub) startMem() {
	h.t.Helper()
	srv, err := server.New(h.cfg)
	if err != nil {
		h.t.Fatal(err)
	}
	pc, err := h.net.Listen(memHub)
	if err != nil {
		h.t.Fatal(err)
	}
	h.srv, h.addr = srv, memHub
	h.serve = wait.Start(h.t, waitLong, "Serve", func(ctx context.Context) error { return srv.Serve(ctx, pc) })
}

// stop stops the server and waits for Serve to return; it may be called
// more than once.
func (h *hub) stop() {
	h.t.Helper()
	if h.serve == nil {
		return
	}
	if err := h.serve.Stop(); err != nil {
		h.t.Errorf("Serve = %v", err)
	}
	h.serve = nil
}

// crash makes the hub vanish without a word to its peers, as a power cut
// would: its socket stops sending, then it stops.
func (h *hub) crash() {
	h.pc.mute.Store(true)
	h.stop()
}

// flakyConn is the hub's socket; once muted it drops what the hub sends.
// It hides the socket's batch I/O, through which quic-go would bypass
// WriteTo, but not its buffer sizes.
type flakyConn struct {
	net.PacketConn
	mute atomic.Bool
}

func (c *flakyConn) SetReadBuffer(n int) error  { return c.PacketConn.(*net.UDPConn).SetReadBuffer(n) }
func (c *flakyConn) SetWriteBuffer(n int) error { return c.PacketConn.(*net.UDPConn).SetWriteBuffer(n) }
func (c *flakyConn) SyscallConn() (syscall.RawConn, error) {
	return c.PacketConn.(*net.UDPConn).SyscallConn()
}

func (c *flakyConn) WriteTo(p []byte, addr net.Addr) (int, error) {
	if c.mute.Load() {
		return len(p), nil
	}
	return c.PacketConn.WriteTo(p, addr)
}

// clientConfig returns a client configuration for node with cert.
func (h *hub) clientConfig(node string, cert *tls.Certificate, st *memStore) client.Config {
	cfg := client.DefaultConfig()
	cfg.HubAddr = h.addr
	cfg.NodeName = node
	cfg.AgentVersion = "test"
	var mu sync.Mutex
	cfg.Certificate = func() (*tls.Certificate, error) {
		mu.Lock()
		defer mu.Unlock()
		return cert, nil
	}
	cfg.RootCAs = h.ca.Pool
	cfg.Store, cfg.Outbox = st, st
	cfg.Logger = testlog.New(h.t, slog.LevelDebug).With("side", "edge", "node", node)
	cfg.MinBackoff, cfg.MaxBackoff = minBackoff, maxBackoff
	cfg.IdleTimeout, cfg.KeepAlive = idleTimeout, keepAlive
	if h.net != nil {
		hub := net.UDPAddrFromAddrPort(netip.MustParseAddrPort(memHub))
		cfg.Dial = func(context.Context) (net.PacketConn, net.Addr, error) {
			pc, err := h.net.Listen(memNode + ":0")
			return pc, hub, err
		}
	}
	return cfg
}

// runClient runs a client until the returned stop is called or the test
// ends; stop fails the test if Run does not return promptly.
func runClient(t *testing.T, cfg client.Config) (*client.Client, func()) {
	t.Helper()
	c, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	bg := wait.Start(t, waitLong, "client Run", c.Run)
	stop := func() {
		t.Helper()
		if err := bg.Stop(); err != nil {
			t.Errorf("client Run = %v, want nil after its context ended", err)
		}
	}
	t.Cleanup(stop)
	return c, stop
}

// rawConn dials the hub with plain quic-go, with cert as the client
// certificate (nil for none), to speak the protocol by hand.
func (h *hub) rawConn(t *testing.T, cert *tls.Certificate) *quic.Conn {
	t.Helper()
	tc := &tls.Config{
		RootCAs:    h.ca.Pool,
		ServerName: "127.0.0.1",
		NextProtos: []string{wire.ALPN},
		MinVersion: tls.VersionTLS13,
	}
	if cert != nil {
		tc.Certificates = []tls.Certificate{*cert}
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	conn, err := quic.DialAddr(ctx, h.addr, tc, &quic.Config{MaxIdleTimeout: idleTimeout, KeepAlivePeriod: keepAlive})
	if err != nil {
		t.Fatalf("dial hub: %v", err)
	}
	t.Cleanup(func() { conn.CloseWithError(0, "test over") })
	return conn
}

// rawStream is a stream opened by hand: the QUIC stream, and f its
// frames.
type rawStream struct {
	*quic.Stream
	f *stream.Stream
}

func openStream(t *testing.T, conn *quic.Conn) *rawStream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	qs, err := conn.OpenStreamSync(ctx)
	if err != nil {
		t.Fatalf("open stream: %v", err)
	}
	qs.SetDeadline(time.Now().Add(waitLong)) // no read or write hangs a test
	return &rawStream{Stream: qs, f: stream.New(qs)}
}

func (s *rawStream) send(t *testing.T, m wire.Message) {
	t.Helper()
	if err := s.f.Write(m); err != nil {
		t.Fatalf("write %v: %v", m.Type(), err)
	}
}

func (s *rawStream) recv(t *testing.T) wire.Message {
	t.Helper()
	m, err := s.f.Read()
	if err != nil {
		t.Fatalf("read frame: %v", err)
	}
	return m
}

// recvError reads a frame and checks that it is an Error of code.
func (s *rawStream) recvError(t *testing.T, code wire.ErrorCode) *wire.Error {
	t.Helper()
	m := s.recv(t)
	e, ok := m.(*wire.Error)
	if !ok || e.Code != code {
		t.Fatalf("read %#v, want an Error of code %v", m, code)
	}
	return e
}

// isStreamEnd reports whether err is the end of a stream: its clean end,
// or the peer's reset.
func isStreamEnd(err error) bool {
	var se *quic.StreamError
	return errors.Is(err, io.EOF) || errors.As(err, &se)
}

func (s *memStore) Rewind() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rev = 0
	return nil
}
