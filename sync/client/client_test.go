package client_test

// These tests put the client in front of a scripted hub: plain quic-go
// and the wire package on the hub's side, so that each test says frame by
// frame what the hub sends and checks what the client answers. The tests
// of sync/server run the client against the real server.

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/outpost-mesh/outpost/internal/testca"
	"github.com/outpost-mesh/outpost/internal/testlog"
	"github.com/outpost-mesh/outpost/internal/wait"
	"github.com/outpost-mesh/outpost/sync/client"
	"github.com/outpost-mesh/outpost/sync/stream"
	"github.com/outpost-mesh/outpost/sync/wire"
)

const waitLong = 10 * time.Second

// pki is a throwaway hub CA with a serving certificate and one node's.
type pki struct {
	pool    *x509.CertPool
	serving tls.Certificate
	node    *tls.Certificate
}

// hubTLS is the TLS configuration of the hub's end.
func (p *pki) hubTLS() *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{p.serving},
		ClientCAs:    p.pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		NextProtos:   []string{wire.ALPN},
		MinVersion:   tls.VersionTLS13,
	}
}

func newPKI(t *testing.T, node string) *pki {
	t.Helper()
	ca := testca.New(t)
	n := ca.Node(t, node)
	return &pki{pool: ca.Pool, serving: ca.Serving(t), node: &n}
}

// scriptedHub is the hub's end, played by the test.
type scriptedHub struct {
	t    *testing.T
	ln   *quic.Listener
	addr string
}

func listen(t *testing.T, p *pki) *scriptedHub {
	t.Helper()
	ln, err := quic.ListenAddr("127.0.0.1:0", p.hubTLS(), &quic.Config{MaxIdleTimeout: 2 * time.Second, KeepAlivePeriod: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return &scriptedHub{t: t, ln: ln, addr: ln.Addr().String()}
}

func (h *scriptedHub) accept() *quic.Conn {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	conn, err := h.ln.Accept(ctx)
	if err != nil {
		h.t.Fatalf("accept the client's connection: %v", err)
	}
	h.t.Cleanup(func() { conn.CloseWithError(0, "") })
	return conn
}

// rawStream is one stream as the test drives it: the QUIC stream, and f
// its frames; every read or write fails after waitLong rather than hang
// the test.
type rawStream struct {
	*quic.Stream
	f *stream.Stream
}

func newRawStream(qs *quic.Stream) *rawStream {
	qs.SetDeadline(time.Now().Add(waitLong))
	return &rawStream{Stream: qs, f: stream.New(qs)}
}

func acceptStream(t *testing.T, conn *quic.Conn) *rawStream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	qs, err := conn.AcceptStream(ctx)
	if err != nil {
		t.Fatalf("accept a stream: %v", err)
	}
	return newRawStream(qs)
}

func openStream(t *testing.T, conn *quic.Conn) *rawStream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	qs, err := conn.OpenStreamSync(ctx)
	if err != nil {
		t.Fatalf("open a stream: %v", err)
	}
	return newRawStream(qs)
}

func (s *rawStream) send(t *testing.T, m wire.Message) {
	t.Helper()
	if err := s.f.Write(m); err != nil {
		t.Fatalf("send %v: %v", m.Type(), err)
	}
}

func (s *rawStream) recv(t *testing.T) wire.Message {
	t.Helper()
	m, err := s.f.Read()
	if err != nil {
		t.Fatalf("read a frame: %v", err)
	}
	return m
}

// store is a client.Store and client.Outbox in memory, which records the
// revision of every ApplyBatch and can fail them.
type store struct {
	mu      sync.Mutex
	rev     int64
	inv     []wire.InventoryEntry
	applies []int64 // the revision of each ApplyBatch
	changes []wire.Change
	fail    error
}

func (s *store) LastRevision() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rev
}

func (s *store) Inventory() ([]wire.InventoryEntry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.inv), nil
}

func (s *store) ApplyBatch(changes []wire.Change, rev int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return s.fail
	}
	if rev < s.rev {
		return fmt.Errorf("revision %d before %d", rev, s.rev)
	}
	s.applies = append(s.applies, rev)
	s.changes = append(s.changes, changes...)
	s.rev = rev
	return nil
}

func (s *store) Pending(int) ([]wire.StatusItem, error) { return nil, nil }
func (s *store) Ack(...uint64) error                    { return nil }

func (s *store) state() (int64, []int64, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rev, slices.Clone(s.applies), len(s.changes)
}

func config(t *testing.T, p *pki, addr string, st *store) client.Config {
	cfg := client.DefaultConfig()
	cfg.HubAddr = addr
	cfg.NodeName = "edge-1"
	cfg.AgentVersion = "v9.9.9"
	cfg.Certificate = func() (*tls.Certificate, error) { return p.node, nil }
	cfg.RootCAs = p.pool
	cfg.Store, cfg.Outbox = st, st
	cfg.Logger = testlog.New(t, slog.LevelDebug)
	cfg.MinBackoff, cfg.MaxBackoff = 50*time.Millisecond, 400*time.Millisecond
	cfg.IdleTimeout, cfg.KeepAlive = 2*time.Second, 500*time.Millisecond
	return cfg
}

// run runs a client until the test ends, and checks that Run returns nil
// promptly once its context ends.
func run(t *testing.T, cfg client.Config) *client.Client {
	t.Helper()
	c, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	bg := wait.Start(t, waitLong, "client Run", c.Run)
	t.Cleanup(func() {
		if err := bg.Stop(); err != nil {
			t.Errorf("Run = %v after its context ended, want nil", err)
		}
	})
	return c
}

func put(name string, rev int64) wire.Change {
	return wire.Change{Op: wire.OpPut, Key: wire.Key{Resource: wire.ResourcePods, Namespace: "default", Name: name}, Revision: rev, Object: []byte("pod " + name)}
}

func TestConfigValidate(t *testing.T) {
	p := newPKI(t, "edge-1")
	good := config(t, p, "127.0.0.1:1", &store{})
	if _, err := client.New(good); err != nil {
		t.Fatalf("New(good config) = %v", err)
	}
	for name, mod := range map[string]func(*client.Config){
		"no hub":            func(c *client.Config) { c.HubAddr = "" },
		"no node":           func(c *client.Config) { c.NodeName = "" },
		"no certificate":    func(c *client.Config) { c.Certificate = nil },
		"no roots":          func(c *client.Config) { c.RootCAs = nil },
		"no store":          func(c *client.Config) { c.Store = nil },
		"no outbox":         func(c *client.Config) { c.Outbox = nil },
		"backoff backwards": func(c *client.Config) { c.MaxBackoff = c.MinBackoff / 2 },
		"no backoff":        func(c *client.Config) { c.MinBackoff = 0 },
		"keep-alive long":   func(c *client.Config) { c.KeepAlive = c.IdleTimeout },
		"no status batch":   func(c *client.Config) { c.StatusBatch = 0 },
		"address no port":   func(c *client.Config) { c.HubAddr = "hub.example" },
	} {
		cfg := good
		mod(&cfg)
		if _, err := client.New(cfg); err == nil {
			t.Errorf("New() with %s = nil error, want one", name)
		}
	}
}

// TestSession: the client says who it is and where its view is, sends its
// inventory when asked, in frames, and acknowledges each step once it is
// durable and not before: the parts of a step (revision 0) are applied at
// the old revision and not acknowledged.
func TestSession(t *testing.T) {
	p := newPKI(t, "edge-1")
	h := listen(t, p)
	st := &store{rev: 7}
	for i := range 12_001 {
		st.inv = append(st.inv, wire.InventoryEntry{Key: wire.Key{Resource: wire.ResourceSecrets, Namespace: "ns", Name: fmt.Sprint("s", i)}, Revision: 3})
	}
	var applied, sessions atomic.Int64
	cfg := config(t, p, h.addr, st)
	cfg.Applied = func(c []wire.Change) { applied.Add(int64(len(c))) }
	held := []wire.InventoryEntry{{Key: wire.PodTokensKey("default", "uid-1"), Revision: 1796256000}}
	cfg.HeldTokens = func() ([]wire.InventoryEntry, error) { return held, nil }
	cfg.Connected = func() { sessions.Add(1) }
	c := run(t, cfg)

	conn := h.accept()
	s := acceptStream(t, conn)
	hello, ok := s.recv(t).(*wire.Hello)
	if !ok {
		t.Fatalf("first frame %#v, want a Hello", hello)
	}
	if want := (wire.Hello{CapabilityVersion: wire.CapabilityVersion, NodeName: "edge-1", LastRevision: 7, AgentVersion: "v9.9.9", Tokens: held}); !reflect.DeepEqual(*hello, want) {
		t.Errorf("Hello = %+v, want %+v", *hello, want)
	}
	s.send(t, &wire.Welcome{CapabilityVersion: wire.CapabilityVersion, HubRevision: 40, SendInventory: true})

	var sizes []int
	var mores []bool
	var got []wire.InventoryEntry
	for {
		inv, ok := s.recv(t).(*wire.Inventory)
		if !ok {
			t.Fatalf("got %#v, want an Inventory", inv)
		}
		sizes, mores = append(sizes, len(inv.Entries)), append(mores, inv.More)
		got = append(got, inv.Entries...)
		if !inv.More {
			break
		}
	}
	if !slices.Equal(sizes, []int{5000, 5000, 2001}) || !slices.Equal(mores, []bool{true, true, false}) {
		t.Errorf("inventory frames of %v entries with More %v, want [5000 5000 2001] [true true false]", sizes, mores)
	}
	if !slices.Equal(got, st.inv) {
		t.Errorf("inventory differs from the store's")
	}

	// A step in three parts: only the last carries its revision.
	s.send(t, &wire.Batch{Changes: []wire.Change{put("a", 20)}})
	s.send(t, &wire.Batch{Changes: []wire.Change{put("b", 30)}})
	s.send(t, &wire.Batch{Changes: []wire.Change{put("c", 40)}, Revision: 40})
	ack, ok := s.recv(t).(*wire.Ack)
	if !ok || ack.Revision != 40 {
		t.Fatalf("got %#v, want the Ack of revision 40 and none for the parts", ack)
	}
	rev, applies, n := st.state()
	if rev != 40 || !slices.Equal(applies, []int64{7, 7, 40}) || n != 3 {
		t.Errorf("when acknowledged: store at %d after applies at %v of %d changes, want 40 after [7 7 40] of 3", rev, applies, n)
	}
	// A batch without changes moves the revision on.
	s.send(t, &wire.Batch{Revision: 41})
	if ack, ok := s.recv(t).(*wire.Ack); !ok || ack.Revision != 41 {
		t.Fatalf("got %#v, want the Ack of revision 41", ack)
	}
	if got := applied.Load(); got != 3 {
		t.Errorf("Applied heard %d changes, want 3", got)
	}
	if !c.Connected() {
		t.Errorf("Connected() = false during a session")
	}
	if got := c.Stats().Inventories.Load(); got != 1 {
		t.Errorf("Stats().Inventories = %d, want 1", got)
	}
	if got := sessions.Load(); got != 1 {
		t.Errorf("Connected called %d times in the first session, want once", got)
	}

	// A frame out of place ends the session; the client comes back, from
	// where its view is now.
	s.send(t, &wire.Welcome{CapabilityVersion: wire.CapabilityVersion})
	if m := recvEnd(t, s); m != nil && m.Code != wire.CodeBadRequest {
		t.Fatalf("got %#v after a Welcome in a session, want an Error of code BadRequest or the end", m)
	}
	conn = h.accept()
	s = acceptStream(t, conn)
	if hello, ok := s.recv(t).(*wire.Hello); !ok || hello.LastRevision != 41 {
		t.Fatalf("after reconnecting: got %#v, want a Hello from revision 41", hello)
	}
	// Connected is called once the hub welcomed the node, not before.
	if got := sessions.Load(); got != 1 {
		t.Errorf("Connected called %d times before the second Welcome, want once", got)
	}
	s.send(t, &wire.Welcome{CapabilityVersion: wire.CapabilityVersion, HubRevision: 41})
	wait.For(t, waitLong, "Connected called for the second session", func() (bool, string) {
		return sessions.Load() == 2, fmt.Sprint(sessions.Load(), " calls")
	})
}

// TestApplyFails: a batch the store could not make durable is not
// acknowledged.
func TestApplyFails(t *testing.T) {
	p := newPKI(t, "edge-1")
	h := listen(t, p)
	st := &store{fail: errors.New("disk full")}
	run(t, config(t, p, h.addr, st))
	s := acceptStream(t, h.accept())
	s.recv(t) // Hello
	s.send(t, &wire.Welcome{CapabilityVersion: wire.CapabilityVersion, HubRevision: 5})
	s.send(t, &wire.Batch{Changes: []wire.Change{put("a", 5)}, Revision: 5})
	if m := recvEnd(t, s); m != nil && m.Code != wire.CodeInternal {
		t.Fatalf("got %#v for a batch the store refused, want an Error of code Internal or the end", m)
	}
	st.mu.Lock()
	st.fail = nil
	st.mu.Unlock()
	s = acceptStream(t, h.accept())
	if hello, ok := s.recv(t).(*wire.Hello); !ok || hello.LastRevision != 0 {
		t.Fatalf("after reconnecting: got %#v, want a Hello from revision 0", hello)
	}
}

// recvEnd reads the frames that end a session the client ended: an Error
// (returned), or none when the connection closed before it arrived. Any
// other frame, an Ack first, fails the test.
func recvEnd(t *testing.T, s *rawStream) *wire.Error {
	t.Helper()
	m, err := s.f.Read()
	if err != nil {
		var ae *quic.ApplicationError
		var se *quic.StreamError
		if errors.As(err, &ae) || errors.As(err, &se) || errors.Is(err, io.EOF) {
			return nil
		}
		t.Fatalf("read: %v, want an Error frame or the session's end", err)
	}
	e, ok := m.(*wire.Error)
	if !ok {
		t.Fatalf("got %#v, want an Error frame or the session's end", m)
	}
	return e
}

// TestHubRefusesSession: a refused Hello is retried with back-off: each
// wait is at least half the back-off, which doubles up to its maximum.
func TestHubRefusesSession(t *testing.T) {
	p := newPKI(t, "edge-1")
	h := listen(t, p)
	cfg := config(t, p, h.addr, &store{})
	run(t, cfg)
	var at []time.Time
	for range 6 {
		conn := h.accept()
		at = append(at, time.Now())
		s := acceptStream(t, conn)
		s.recv(t)
		s.send(t, &wire.Error{Code: wire.CodeUnauthorized, Message: "unknown node"})
		s.Close()
	}
	backoff := cfg.MinBackoff
	for i := 1; i < len(at); i++ {
		gap := at[i].Sub(at[i-1])
		t.Logf("attempt %d after %v (back-off %v)", i+1, gap, backoff)
		if gap < backoff/2 {
			t.Errorf("attempt %d came %v after the previous one, want at least %v", i+1, gap, backoff/2)
		}
		backoff = min(2*backoff, cfg.MaxBackoff)
	}
}

// echoSession runs a client serving "echo" tunnels, which echo their
// bytes, in a session with a scripted hub, and returns the hub's end of
// its connection, the PKI of both, and how many tunnels the handler took.
func echoSession(t *testing.T) (*quic.Conn, *pki, *atomic.Int32) {
	t.Helper()
	p := newPKI(t, "edge-1")
	h := listen(t, p)
	cfg := config(t, p, h.addr, &store{})
	served := new(atomic.Int32)
	cfg.Tunnels = map[string]client.TunnelHandler{
		"echo": func(ctx context.Context, open *wire.TunnelOpen) (func(wire.TunnelStream), error) {
			served.Add(1)
			return func(rw wire.TunnelStream) {
				defer rw.Close()
				io.Copy(rw, rw)
			}, nil
		},
	}
	run(t, cfg)
	conn := h.accept()
	s := acceptStream(t, conn)
	s.recv(t) // Hello
	s.send(t, &wire.Welcome{CapabilityVersion: wire.CapabilityVersion, HubRevision: 1})
	return conn, p, served
}

// TestTunnelFraming: the client answers the streams the hub opens: an
// unknown kind or a stream that is not a tunnel is refused, and bytes the
// hub sent with its TunnelOpen reach the handler.
func TestTunnelFraming(t *testing.T) {
	conn, _, _ := echoSession(t)

	for _, tc := range []struct {
		first wire.Message
		code  wire.ErrorCode
	}{
		{&wire.TunnelOpen{Kind: "exec"}, wire.CodeNotFound},
		{&wire.Hello{CapabilityVersion: 1}, wire.CodeBadRequest},
	} {
		ts := openStream(t, conn)
		ts.send(t, tc.first)
		if e, ok := ts.recv(t).(*wire.Error); !ok || e.Code != tc.code {
			t.Errorf("stream opened with %v: got %#v, want an Error of code %v", tc.first.Type(), e, tc.code)
		}
	}

	// The TunnelOpen and the first bytes in one write: the client's frame
	// reader holds the bytes, and the handler must get them.
	ts := openStream(t, conn)
	var first bytes.Buffer
	wire.NewWriter(&first).Write(&wire.TunnelOpen{Kind: "echo"})
	first.WriteString("early bytes")
	if _, err := ts.Write(first.Bytes()); err != nil {
		t.Fatal(err)
	}
	if m := ts.recv(t); m.Type() != wire.TypeTunnelReply {
		t.Fatalf("got %#v, want a TunnelReply", m)
	}
	ts.Write([]byte(", then more"))
	ts.Close()
	got, err := io.ReadAll(ts.f.Tunnel())
	if err != nil {
		t.Fatalf("read the echo: %v", err)
	}
	if want := "early bytes, then more"; string(got) != want {
		t.Errorf("echo %q, want %q", got, want)
	}
}

// TestOnlyTheHubOpensStreams: the node serves tunnels on the connection
// it made to its hub, and nothing else reaches its handlers. A peer that
// dials the node's own address, even one holding the hub's certificate,
// finds no listener there: nothing listens on the node, so no stream can
// be opened to it but by the hub's end of the session.
func TestOnlyTheHubOpensStreams(t *testing.T) {
	conn, p, served := echoSession(t)
	ts := openStream(t, conn)
	ts.send(t, &wire.TunnelOpen{Kind: "echo"})
	if m := ts.recv(t); m.Type() != wire.TypeTunnelReply {
		t.Fatalf("the hub's stream: got %#v, want a TunnelReply", m)
	}
	ts.Close()

	// The node's address, as the hub sees it: its one UDP socket.
	node := conn.RemoteAddr().String()
	tlsConf := &tls.Config{
		Certificates: []tls.Certificate{p.serving}, RootCAs: p.pool, ServerName: "localhost",
		NextProtos: []string{wire.ALPN}, MinVersion: tls.VersionTLS13,
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	rogue, err := quic.DialAddr(ctx, node, tlsConf, &quic.Config{HandshakeIdleTimeout: time.Second})
	if err == nil {
		rogue.CloseWithError(0, "")
		t.Fatalf("a peer dialled the node at %s and got a connection: something listens on the node", node)
	}
	if got := served.Load(); got != 1 {
		t.Errorf("the handler ran %d times, want once: for the hub's stream alone", got)
	}
}

// silentConn is a hub's socket that, once armed, goes silent at the next
// new connection (a QUIC Initial): from then on it drops everything, and
// reports the first byte of every datagram that comes.
type silentConn struct {
	net.PacketConn
	armed, silent atomic.Bool
	knocks        chan byte
}

func (c *silentConn) ReadFrom(p []byte) (int, net.Addr, error) {
	for {
		n, addr, err := c.PacketConn.ReadFrom(p)
		if err != nil || n == 0 {
			return n, addr, err
		}
		// A long header's first four bits are not protected: 0xc for
		// an Initial.
		if c.armed.Load() && p[0]&0xf0 == 0xc0 {
			c.silent.Store(true)
		}
		if !c.silent.Load() {
			return n, addr, err
		}
		select {
		case c.knocks <- p[0]:
		default:
		}
	}
}

func (c *silentConn) WriteTo(p []byte, addr net.Addr) (int, error) {
	if c.silent.Load() {
		return len(p), nil
	}
	return c.PacketConn.WriteTo(p, addr)
}

// TestRunStopsAfterHubWentAway: a client that dials a hub that has gone
// silent mid-handshake (after it handed out a session ticket) returns from
// Run as soon as its context ends, not when the handshake times out.
func TestRunStopsAfterHubWentAway(t *testing.T) {
	p := newPKI(t, "edge-1")
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hubPC := &silentConn{PacketConn: udp, knocks: make(chan byte, 64)}
	tr := &quic.Transport{Conn: hubPC}
	defer udp.Close()
	defer tr.Close()
	ln, err := tr.ListenEarly(p.hubTLS(), &quic.Config{MaxIdleTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := client.New(config(t, p, udp.LocalAddr().String(), &store{}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()

	actx, acancel := context.WithTimeout(context.Background(), waitLong)
	defer acancel()
	conn, err := ln.Accept(actx)
	if err != nil {
		t.Fatal(err)
	}
	<-conn.HandshakeComplete() // the client has its ticket
	s := acceptStream(t, conn)
	s.recv(t)
	s.send(t, &wire.Welcome{CapabilityVersion: wire.CapabilityVersion, HubRevision: 1})
	wait.For(t, waitLong, "session", func() (bool, string) { return c.Connected(), "not connected" })

	// The hub ends the connection and is silent from the next one on: the
	// client tries again and waits in the handshake.
	hubPC.armed.Store(true)
	conn.CloseWithError(0, "hub going away")
	select {
	case <-hubPC.knocks:
	case err := <-done:
		t.Fatalf("Run = %v before its context ended", err)
	case <-time.After(waitLong):
		t.Fatal("the client did not try again")
	}

	start := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
		if took := time.Since(start); took > time.Second {
			t.Errorf("Run returned %v after its context ended, want at once", took)
		}
	case <-time.After(waitLong):
		t.Fatalf("Run did not return within %v of its context's end", waitLong)
	}
}

// TestReconnectResumesWithoutEarlyData: a client reconnecting to a hub
// that would take 0-RTT resumes its TLS session from the ticket but opens
// its session stream only after the handshake, for quic-go races when a
// stream is opened on an early connection (quic-go/quic-go#4303).
func TestReconnectResumesWithoutEarlyData(t *testing.T) {
	p := newPKI(t, "edge-1")
	ln, err := quic.ListenAddrEarly("127.0.0.1:0", p.hubTLS(), &quic.Config{Allow0RTT: true, MaxIdleTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c := run(t, config(t, p, ln.Addr().String(), &store{}))
	for i := range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), waitLong)
		conn, err := ln.Accept(ctx)
		cancel()
		if err != nil {
			t.Fatalf("accept connection %d: %v", i+1, err)
		}
		s := acceptStream(t, conn)
		s.recv(t)
		s.send(t, &wire.Welcome{CapabilityVersion: wire.CapabilityVersion, HubRevision: 1})
		wait.For(t, waitLong, "session", func() (bool, string) { return c.Connected(), "not connected" })
		<-conn.HandshakeComplete()
		st := conn.ConnectionState()
		if st.Used0RTT {
			t.Errorf("connection %d used 0-RTT", i+1)
		}
		if resumed := st.TLS.DidResume; resumed != (i > 0) {
			t.Errorf("connection %d: resumed = %v, want %v", i+1, resumed, i > 0)
		}
		conn.CloseWithError(0, "hub going away")
		wait.For(t, waitLong, "disconnected", func() (bool, string) { return !c.Connected(), "still connected" })
	}
}

// TestRunStopsWhileDialing: with no hub to reach, Run returns once its
// context ends.
func TestRunStopsWhileDialing(t *testing.T) {
	p := newPKI(t, "edge-1")
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := pc.LocalAddr().String()
	pc.Close()
	c := run(t, config(t, p, addr, &store{}))
	if c.Connected() {
		t.Errorf("Connected() = true with no hub")
	}
}

func (s *store) Rewind() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rev = 0
	return nil
}
