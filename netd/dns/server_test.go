package dns

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	miekg "github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1_800_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// upstream is a resolver on loopback, UDP and TCP on one port, made with
// miekg/dns's server. It answers:
//
//	example.com. A      93.184.216.34, TTL 60
//	nx.example.com.     NXDOMAIN, SOA minimum 30
//	big.example.com. TXT  forty records; over UDP only TC
//	www.example.com. A  192.0.2.53
//	fail.example.com.   SERVFAIL
type upstream struct {
	addr    string
	udpQs   atomic.Int64
	tcpQs   atomic.Int64
	servers []*miekg.Server
	done    chan struct{}
	stopped bool
}

// listenPair listens on one free port of loopback over UDP and TCP, as a
// resolver does. The kernel picks the UDP port, which another process may
// hold over TCP: then it tries another.
func listenPair(t *testing.T) (net.PacketConn, net.Listener) {
	t.Helper()
	var err error
	for range 20 {
		var pc net.PacketConn
		if pc, err = net.ListenPacket("udp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		ln, lerr := net.Listen("tcp", pc.LocalAddr().String())
		if lerr == nil {
			return pc, ln
		}
		pc.Close()
		err = lerr
	}
	t.Fatalf("no port free over both UDP and TCP: %v", err)
	return nil, nil
}

func startUpstream(t *testing.T) *upstream {
	t.Helper()
	pc, ln := listenPair(t)
	u := &upstream{addr: pc.LocalAddr().String(), done: make(chan struct{})}
	h := miekg.HandlerFunc(u.serve)
	var started sync.WaitGroup
	started.Add(2)
	u.servers = []*miekg.Server{
		{PacketConn: pc, Handler: h, NotifyStartedFunc: started.Done},
		{Listener: ln, Handler: h, NotifyStartedFunc: started.Done},
	}
	var wg sync.WaitGroup
	for _, srv := range u.servers {
		wg.Go(func() { srv.ActivateAndServe() })
	}
	go func() { wg.Wait(); close(u.done) }()
	started.Wait()
	t.Cleanup(u.stop)
	return u
}

func (u *upstream) stop() {
	if u.stopped {
		return
	}
	u.stopped = true
	for _, srv := range u.servers {
		srv.Shutdown()
	}
	<-u.done
}

func (u *upstream) serve(w miekg.ResponseWriter, r *miekg.Msg) {
	udp := w.RemoteAddr().Network() == "udp"
	if udp {
		u.udpQs.Add(1)
	} else {
		u.tcpQs.Add(1)
	}
	m := new(miekg.Msg)
	m.SetReply(r)
	m.RecursionAvailable = true
	q := r.Question[0]
	rr := func(s string) miekg.RR {
		x, err := miekg.NewRR(s)
		if err != nil {
			panic(err)
		}
		return x
	}
	switch strings.ToLower(q.Name) {
	case "example.com.":
		if q.Qtype == miekg.TypeA {
			m.Answer = []miekg.RR{rr("example.com. 60 IN A 93.184.216.34")}
		}
	case "www.example.com.":
		if q.Qtype == miekg.TypeA {
			m.Answer = []miekg.RR{rr("www.example.com. 300 IN A 192.0.2.53")}
		}
	case "nx.example.com.":
		m.Rcode = miekg.RcodeNameError
		m.Ns = []miekg.RR{rr("example.com. 3600 IN SOA ns.example.com. h.example.com. 1 2 3 4 30")}
	case "big.example.com.":
		if udp {
			m.Truncated = true
			break
		}
		for i := range 40 {
			m.Answer = append(m.Answer, rr(fmt.Sprintf(`big.example.com. 60 IN TXT "record %02d %s"`, i, strings.Repeat("x", 40))))
		}
	case "fail.example.com.":
		m.Rcode = miekg.RcodeServerFailure
	default:
		m.Rcode = miekg.RcodeNameError
	}
	w.WriteMsg(m)
}

// running is a Server serving on loopback.
type running struct {
	s        *Server
	udp, tcp string
}

func startServer(t *testing.T, mod func(*Config)) *running {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		pc.Close()
		t.Fatal(err)
	}
	s := testServer(t, func(c *Config) {
		c.PacketConn, c.Listener = pc, ln
		if mod != nil {
			mod(c)
		}
	})
	s.SetZone(testZone())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return &running{s: s, udp: pc.LocalAddr().String(), tcp: ln.Addr().String()}
}

func exchange(t *testing.T, network, addr, name string, qtype uint16, edns uint16) *miekg.Msg {
	t.Helper()
	req := new(miekg.Msg)
	req.SetQuestion(name, qtype)
	if edns > 0 {
		req.SetEdns0(edns, false)
	}
	c := &miekg.Client{Net: network, Timeout: 10 * time.Second}
	m, _, err := c.Exchange(req, addr)
	if err != nil {
		t.Fatalf("%s query %s: %v", network, name, err)
	}
	return m
}

func TestServeClusterNames(t *testing.T) {
	r := startServer(t, nil)
	for _, network := range []string{"udp", "tcp"} {
		addr := r.udp
		if network == "tcp" {
			addr = r.tcp
		}
		m := exchange(t, network, addr, "kubernetes.default.svc.cluster.local.", miekg.TypeA, 0)
		if got := rrData(m.Answer); m.Rcode != miekg.RcodeSuccess || !slices.Equal(got, []string{"A 10.43.0.1"}) {
			t.Errorf("%s: kubernetes.default = %s %q, want A 10.43.0.1", network, miekg.RcodeToString[m.Rcode], got)
		}
		m = exchange(t, network, addr, "nope.default.svc.cluster.local.", miekg.TypeA, 1232)
		if m.Rcode != miekg.RcodeNameError || m.IsEdns0() == nil {
			t.Errorf("%s: nope.default = %s, EDNS %v, want NXDOMAIN with an OPT", network, miekg.RcodeToString[m.Rcode], m.IsEdns0())
		}
	}
	if st := r.s.Stats(); st.Queries != 4 || st.NoError != 2 || st.NXDomain != 2 || st.Forwarded != 0 {
		t.Errorf("Stats() = %+v, want 4 queries, 2 NOERROR, 2 NXDOMAIN, none forwarded", st)
	}
}

func TestForwardCacheStale(t *testing.T) {
	up := startUpstream(t)
	clock := newFakeClock()
	r := startServer(t, func(c *Config) {
		c.Upstreams = []string{up.addr}
		c.Clock = clock.Now
	})
	a := func(want uint32) {
		t.Helper()
		m := exchange(t, "udp", r.udp, "Example.COM.", miekg.TypeA, 0)
		if m.Rcode != miekg.RcodeSuccess || len(m.Answer) != 1 || m.Authoritative || !m.RecursionAvailable {
			t.Fatalf("example.com = %v, want one A, not authoritative, recursion available", m)
		}
		if got := m.Answer[0].Header().Ttl; got != want {
			t.Errorf("example.com TTL = %d, want %d", got, want)
		}
		if m.Question[0].Name != "Example.COM." {
			t.Errorf("question %q, want it as asked", m.Question[0].Name)
		}
	}
	a(60)
	if n := up.udpQs.Load(); n != 1 {
		t.Fatalf("upstream asked %d times, want 1", n)
	}
	clock.Advance(10 * time.Second)
	a(50) // from the cache, its TTL aged
	if n := up.udpQs.Load(); n != 1 {
		t.Errorf("upstream asked %d times after a cached answer, want 1", n)
	}
	clock.Advance(51 * time.Second)
	a(60) // expired: asked again
	if n := up.udpQs.Load(); n != 2 {
		t.Errorf("upstream asked %d times after expiry, want 2", n)
	}

	// Negative answers are cached for the SOA's minimum.
	m := exchange(t, "udp", r.udp, "nx.example.com.", miekg.TypeA, 0)
	if m.Rcode != miekg.RcodeNameError {
		t.Fatalf("nx.example.com = %s, want NXDOMAIN", miekg.RcodeToString[m.Rcode])
	}
	exchange(t, "udp", r.udp, "nx.example.com.", miekg.TypeA, 0)
	if n := up.udpQs.Load(); n != 3 {
		t.Errorf("upstream asked %d times after a cached NXDOMAIN, want 3", n)
	}

	// The uplink goes down: the expired answer is served stale.
	up.stop()
	clock.Advance(2 * time.Hour)
	a(StaleTTL)
	if st := r.s.Stats(); st.ForwardErrors != 1 || st.StaleServed != 1 {
		t.Errorf("Stats() = %+v, want 1 forward error, 1 stale", st)
	}
	// For the next 30 s (RFC 8767's failure recheck timer) it is served
	// without asking again.
	clock.Advance(failureRecheck - time.Second)
	a(StaleTTL)
	if st := r.s.Stats(); st.ForwardErrors != 1 || st.StaleServed != 2 {
		t.Errorf("Stats() = %+v, want still 1 forward error, 2 stale", st)
	}
	m = exchange(t, "tcp", r.tcp, "nx.example.com.", miekg.TypeA, 0)
	if m.Rcode != miekg.RcodeNameError || len(m.Ns) != 1 || m.Ns[0].Header().Ttl != StaleTTL {
		t.Errorf("stale nx.example.com = %v, want NXDOMAIN with its SOA at TTL %d", m, StaleTTL)
	}
	// Nothing cached: SERVFAIL.
	m = exchange(t, "udp", r.udp, "never.example.org.", miekg.TypeA, 0)
	if m.Rcode != miekg.RcodeServerFailure {
		t.Errorf("never.example.org with the upstream down = %s, want SERVFAIL", miekg.RcodeToString[m.Rcode])
	}
	// After the recheck timer, the upstreams are asked again.
	clock.Advance(time.Second)
	a(StaleTTL)
	// Past MaxStale the stale answer is gone.
	clock.Advance(DefaultConfig().MaxStale)
	m = exchange(t, "udp", r.udp, "example.com.", miekg.TypeA, 0)
	if m.Rcode != miekg.RcodeServerFailure {
		t.Errorf("example.com past MaxStale = %s, want SERVFAIL", miekg.RcodeToString[m.Rcode])
	}
	// Cluster names do not need the upstream.
	m = exchange(t, "udp", r.udp, "web.prod.svc.cluster.local.", miekg.TypeA, 0)
	if m.Rcode != miekg.RcodeSuccess || len(m.Answer) != 1 {
		t.Errorf("web.prod with the upstream down = %v, want its A", m)
	}

	st := r.s.Stats()
	if st.CacheHits != 2 || st.StaleServed != 4 || st.ForwardErrors != 5 || st.Forwarded != 3 || st.ServFail != 2 {
		t.Errorf("Stats() = %+v, want 2 cache hits, 4 stale, 3 forwarded, 5 forward errors, 2 SERVFAIL", st)
	}
}

func TestForwardTruncatedThenTCP(t *testing.T) {
	up := startUpstream(t)
	r := startServer(t, func(c *Config) { c.Upstreams = []string{up.addr} })

	// Over UDP without EDNS0 the answer is cut to 512 bytes with TC.
	m := exchange(t, "udp", r.udp, "big.example.com.", miekg.TypeTXT, 0)
	if !m.Truncated || m.Rcode != miekg.RcodeSuccess {
		t.Fatalf("UDP big.example.com: TC %v rcode %s, want TC and NOERROR", m.Truncated, miekg.RcodeToString[m.Rcode])
	}
	if up.udpQs.Load() != 1 || up.tcpQs.Load() != 1 {
		t.Errorf("upstream asked over UDP %d, TCP %d times, want 1 and 1 (the retry of a truncated answer)", up.udpQs.Load(), up.tcpQs.Load())
	}
	// The client's retry over TCP gets it whole, from the cache.
	m = exchange(t, "tcp", r.tcp, "big.example.com.", miekg.TypeTXT, 0)
	if m.Truncated || len(m.Answer) != 40 {
		t.Errorf("TCP big.example.com: TC %v, %d records, want 40 and no TC", m.Truncated, len(m.Answer))
	}
	// miekg's client retries over TCP itself when asked to.
	if st := r.s.Stats(); st.Truncated != 1 || st.CacheHits != 1 {
		t.Errorf("Stats() = %+v, want 1 truncated, 1 cache hit", st)
	}
}

func TestForwardFailover(t *testing.T) {
	up := startUpstream(t)
	dead, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.LocalAddr().String()
	dead.Close() // nothing listens: the exchange fails at once
	r := startServer(t, func(c *Config) { c.Upstreams = []string{deadAddr, up.addr} })
	m := exchange(t, "udp", r.udp, "example.com.", miekg.TypeA, 0)
	if m.Rcode != miekg.RcodeSuccess || len(m.Answer) != 1 {
		t.Fatalf("example.com with the first upstream dead = %v, want its A", m)
	}
	// A SERVFAIL from the only live upstream is a failure, not an answer
	// to cache; with nothing stale the client gets SERVFAIL.
	m = exchange(t, "udp", r.udp, "fail.example.com.", miekg.TypeA, 0)
	if m.Rcode != miekg.RcodeServerFailure {
		t.Errorf("fail.example.com = %s, want SERVFAIL", miekg.RcodeToString[m.Rcode])
	}
	if st := r.s.Stats(); st.ForwardErrors != 1 || st.Forwarded != 1 {
		t.Errorf("Stats() = %+v, want 1 forwarded, 1 error", st)
	}
}

func TestForwardTimeout(t *testing.T) {
	// An upstream that reads and never answers.
	silent, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	r := startServer(t, func(c *Config) {
		c.Upstreams = []string{silent.LocalAddr().String()}
		c.ForwardTimeout = 50 * time.Millisecond
	})
	m := exchange(t, "udp", r.udp, "example.com.", miekg.TypeA, 0)
	if m.Rcode != miekg.RcodeServerFailure {
		t.Errorf("example.com with a silent upstream = %s, want SERVFAIL", miekg.RcodeToString[m.Rcode])
	}
}

func TestExternalNameChased(t *testing.T) {
	up := startUpstream(t)
	r := startServer(t, func(c *Config) { c.Upstreams = []string{up.addr} })
	m := exchange(t, "udp", r.udp, "ext.prod.svc.cluster.local.", miekg.TypeA, 0)
	want := []string{"A 192.0.2.53", "CNAME www.example.com."}
	if got := rrData(m.Answer); m.Rcode != miekg.RcodeSuccess || !slices.Equal(got, want) {
		t.Errorf("ext.prod = %s %q, want %q", miekg.RcodeToString[m.Rcode], got, want)
	}
}

func TestBadInput(t *testing.T) {
	var logs bytes.Buffer
	var logMu sync.Mutex
	r := startServer(t, func(c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &logMu}, nil))
	})
	conn, err := net.Dial("udp", r.udp)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	roundTrip := func(raw []byte) *miekg.Msg {
		t.Helper()
		if _, err := conn.Write(raw); err != nil {
			t.Fatal(err)
		}
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		buf := make([]byte, 65535)
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatalf("read response: %v", err)
		}
		m := new(miekg.Msg)
		if err := m.Unpack(buf[:n]); err != nil {
			t.Fatalf("unpack response: %v", err)
		}
		return m
	}
	query := func(f func(*miekg.Msg)) []byte {
		m := new(miekg.Msg)
		m.SetQuestion("kubernetes.default.svc.cluster.local.", miekg.TypeA)
		m.Id = 4242
		f(m)
		raw, err := m.Pack()
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	for _, tc := range []struct {
		name  string
		raw   []byte
		rcode int
	}{
		{"two questions", query(func(m *miekg.Msg) {
			m.Question = append(m.Question, m.Question[0])
		}), miekg.RcodeFormatError},
		{"no question", query(func(m *miekg.Msg) { m.Question = nil }), miekg.RcodeFormatError},
		{"class CHAOS", query(func(m *miekg.Msg) { m.Question[0].Qclass = miekg.ClassCHAOS }), miekg.RcodeNotImplemented},
		{"opcode UPDATE", query(func(m *miekg.Msg) { m.Opcode = miekg.OpcodeUpdate }), miekg.RcodeNotImplemented},
		{"AXFR", query(func(m *miekg.Msg) { m.Question[0].Qtype = miekg.TypeAXFR }), miekg.RcodeRefused},
		{"EDNS version 1", query(func(m *miekg.Msg) {
			m.SetEdns0(1232, false)
			m.IsEdns0().SetVersion(1)
		}), miekg.RcodeBadVers},
		{"over 512 without EDNS0", query(func(m *miekg.Msg) {
			m.Extra = append(m.Extra, &miekg.TXT{
				Hdr: miekg.RR_Header{Name: ".", Rrtype: miekg.TypeTXT, Class: miekg.ClassINET},
				Txt: []string{strings.Repeat("a", 250), strings.Repeat("b", 250)},
			})
		}), miekg.RcodeFormatError},
		{"truncated question", query(func(*miekg.Msg) {})[:20], miekg.RcodeFormatError},
	} {
		m := roundTrip(tc.raw)
		if m.Rcode != tc.rcode || m.Id != 4242 || !m.Response {
			t.Errorf("%s: rcode %s id %d, want %s id 4242", tc.name, miekg.RcodeToString[m.Rcode], m.Id, miekg.RcodeToString[tc.rcode])
		}
	}
	// Dropped: too short, a response, over MaxUDPSize. A well-formed
	// query after them shows they were read and not answered.
	resp := query(func(m *miekg.Msg) { m.Response = true })
	for _, raw := range [][]byte{{1, 2, 3}, resp, make([]byte, 2000)} {
		conn.Write(raw)
	}
	if m := roundTrip(query(func(m *miekg.Msg) { m.Id = 4243 })); m.Id != 4243 {
		t.Errorf("after the dropped ones: response id %d, want 4243", m.Id)
	}
	st := r.s.Stats()
	if st.Dropped != 3 || st.FormErr != 4 || st.NotImp != 2 || st.Refused != 1 || st.BadVers != 1 || st.Queries != 12 {
		t.Errorf("Stats() = %+v, want 12 queries, 3 dropped, 4 FORMERR, 2 NOTIMP, 1 REFUSED, 1 BADVERS", st)
	}
	logMu.Lock()
	lines := strings.Count(logs.String(), "\n")
	logMu.Unlock()
	if lines != 1 {
		t.Errorf("bad input logged %d lines, want 1 (rate-limited):\n%s", lines, logs.String())
	}
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

func TestTCPLimits(t *testing.T) {
	r := startServer(t, func(c *Config) { c.MaxTCPConns = 1 })
	// A length over MaxTCPQuerySize closes the connection.
	c, err := net.Dial("tcp", r.tcp)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte{0xff, 0xff})
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Errorf("read after an oversized length: no error, want the connection closed")
	}
	// With the one connection slot taken, a second is closed at once.
	c1, err := net.Dial("tcp", r.tcp)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	m := exchangeConn(t, c1, "kubernetes.default.svc.cluster.local.")
	if len(m.Answer) != 1 {
		t.Fatalf("first connection: %v, want an answer", m)
	}
	c2, err := net.Dial("tcp", r.tcp)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	c2.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c2.Read(make([]byte, 1)); err == nil {
		t.Errorf("second connection over MaxTCPConns: read no error, want it closed")
	}
	if st := r.s.Stats(); st.TCPRejected != 1 || st.Dropped != 1 {
		t.Errorf("Stats() = %+v, want 1 TCP connection rejected, 1 dropped", st)
	}
	// Pipelined queries on the first connection are all answered.
	for i := range 3 {
		if m := exchangeConn(t, c1, "db.prod.svc.cluster.local."); len(m.Answer) != 2 {
			t.Errorf("query %d on a kept connection: %v, want two answers", i, m)
		}
	}
}

func exchangeConn(t *testing.T, c net.Conn, name string) *miekg.Msg {
	t.Helper()
	co := &miekg.Conn{Conn: c}
	req := new(miekg.Msg)
	req.SetQuestion(name, miekg.TypeA)
	if err := co.WriteMsg(req); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	m, err := co.ReadMsg()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestRunListensOnAddr(t *testing.T) {
	// Find a port free for UDP and TCP both; another process may take it
	// between here and Run, which then fails, and the test tries again.
	for attempt := 0; ; attempt++ {
		err := runOnFreePort(t)
		if err == nil {
			return
		}
		if attempt == 3 {
			t.Fatalf("Run: %v", err)
		}
		t.Logf("Run: %v; again", err)
	}
}

// runOnFreePort runs a Server on a free loopback port, queries it and
// stops it; it returns Run's error when Run fails to listen.
func runOnFreePort(t *testing.T) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	s := testServer(t, func(c *Config) { c.Addr = addr })
	s.SetZone(testZone())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		req := new(miekg.Msg)
		req.SetQuestion("kubernetes.default.svc.cluster.local.", miekg.TypeA)
		c := &miekg.Client{Net: "udp", Timeout: 100 * time.Millisecond}
		m, _, err := c.Exchange(req, addr)
		if err == nil {
			if len(m.Answer) != 1 {
				t.Errorf("query on %s = %v, want an answer", addr, m)
			}
			break
		}
		select {
		case err := <-done:
			return err
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("query on %s: %v", addr, err)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if err := s.Run(context.Background()); err == nil {
		t.Errorf("second Run: no error")
	}
	return nil
}

func TestConfigValidate(t *testing.T) {
	base := DefaultConfig()
	base.Addr = "10.42.0.1:53"
	base.Logger = discard()
	if err := base.Validate(); err != nil {
		t.Fatalf("Validate(default) = %v", err)
	}
	for _, tc := range []struct {
		name string
		mod  func(*Config)
	}{
		{"no domain", func(c *Config) { c.Domain = "" }},
		{"bad addr", func(c *Config) { c.Addr = "10.42.0.1" }},
		{"bad upstream", func(c *Config) { c.Upstreams = []string{"8.8.8.8"} }},
		{"self upstream", func(c *Config) { c.Upstreams = []string{"10.42.0.1:53"} }},
		{"fractional TTL", func(c *Config) { c.TTL = 1500 * time.Millisecond }},
		{"UDP size", func(c *Config) { c.MaxUDPSize = 100 }},
		{"CIDR", func(c *Config) { c.ClusterCIDRs = []netip.Prefix{netip.MustParsePrefix("10.42.0.1/16")} }},
		{"no logger", func(c *Config) { c.Logger = nil }},
	} {
		c := base
		tc.mod(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("Validate(%s) = nil, want an error", tc.name)
		}
	}
	_, err := New(Config{})
	if err == nil {
		t.Errorf("New(Config{}) = nil error")
	}
}

func TestForwardOverload(t *testing.T) {
	silent, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	r := startServer(t, func(c *Config) {
		c.Upstreams = []string{silent.LocalAddr().String()}
		c.ForwardTimeout = time.Minute // Run's end cuts it short
		c.MaxForwards = 1
	})
	// The first query takes the one forwarding slot and waits on the
	// silent upstream.
	c, err := net.Dial("udp", r.udp)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := new(miekg.Msg)
	req.SetQuestion("slow.example.com.", miekg.TypeA)
	raw, _ := req.Pack()
	c.Write(raw)
	// It has the slot once its question reaches the upstream.
	silent.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, _, err := silent.ReadFrom(make([]byte, 2048)); err != nil {
		t.Fatalf("the first query never reached the upstream: %v", err)
	}
	// The second gets SERVFAIL at once, not a wait for a slot.
	start := time.Now()
	m := exchange(t, "udp", r.udp, "other.example.com.", miekg.TypeA, 0)
	if m.Rcode != miekg.RcodeServerFailure {
		t.Errorf("query while overloaded = %s, want SERVFAIL", miekg.RcodeToString[m.Rcode])
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("query while overloaded took %v", d)
	}
	// Cluster names are answered regardless.
	if m := exchange(t, "udp", r.udp, "kubernetes.default.svc.cluster.local.", miekg.TypeA, 0); len(m.Answer) != 1 {
		t.Errorf("cluster name while overloaded = %v", m)
	}
	if st := r.s.Stats(); st.Overloaded != 1 {
		t.Errorf("Stats().Overloaded = %d, want 1", st.Overloaded)
	}
}

func TestForwardShared(t *testing.T) {
	// An upstream that answers only when told to.
	up, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	r := startServer(t, func(c *Config) { c.Upstreams = []string{up.LocalAddr().String()} })

	const n = 5
	results := make(chan *miekg.Msg, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			req := new(miekg.Msg)
			req.SetQuestion("shared.example.com.", miekg.TypeA)
			c := &miekg.Client{Net: "udp", Timeout: 10 * time.Second}
			m, _, err := c.Exchange(req, r.udp)
			if err != nil {
				t.Errorf("query: %v", err)
			}
			results <- m
		})
	}
	buf := make([]byte, 2048)
	up.SetReadDeadline(time.Now().Add(10 * time.Second))
	k, from, err := up.ReadFrom(buf)
	if err != nil {
		t.Fatalf("upstream read: %v", err)
	}
	// Every query has missed the cache and so waits on the one question.
	deadline := time.Now().Add(10 * time.Second)
	for r.s.Stats().CacheMisses < n {
		if time.Now().After(deadline) {
			t.Fatalf("Stats().CacheMisses = %d, want %d", r.s.Stats().CacheMisses, n)
		}
		runtime.Gosched()
	}
	q := new(miekg.Msg)
	if err := q.Unpack(buf[:k]); err != nil {
		t.Fatal(err)
	}
	resp := new(miekg.Msg)
	resp.SetReply(q)
	rr, _ := miekg.NewRR("shared.example.com. 60 IN A 192.0.2.7")
	resp.Answer = []miekg.RR{rr}
	out, _ := resp.Pack()
	up.WriteTo(out, from)
	wg.Wait()
	close(results)
	for m := range results {
		if m == nil || len(m.Answer) != 1 {
			t.Errorf("answer %v, want one A", m)
		}
	}
	// Had any query asked upstream on its own, it would have got no
	// answer and SERVFAIL after the forward timeout.
	if st := r.s.Stats(); st.Forwarded != 1 {
		t.Errorf("Stats().Forwarded = %d, want 1", st.Forwarded)
	}
}

func TestServeTruncatesBigAnswers(t *testing.T) {
	r := startServer(t, nil)
	var eps []endpoint
	for i := range 60 {
		eps = append(eps, endpoint{addr: fmt.Sprintf("10.42.7.%d", i+1)})
	}
	r.s.SetZone(newZone("cluster.local", []*corev1.Service{headless("prod", "many")},
		[]*discoveryv1.EndpointSlice{slice("prod", "many", "many-a", discoveryv1.AddressTypeIPv4, nil, eps...)}))
	const name = "many.prod.svc.cluster.local."
	for _, tc := range []struct {
		network string
		edns    uint16
		tc      bool
	}{
		{"udp", 0, true},     // 512 bytes hold about 30 A records
		{"udp", 4096, false}, // 1232, the server's limit, holds sixty
		{"tcp", 0, false},
	} {
		addr := r.udp
		if tc.network == "tcp" {
			addr = r.tcp
		}
		m := exchange(t, tc.network, addr, name, miekg.TypeA, tc.edns)
		if m.Truncated != tc.tc || (!tc.tc && len(m.Answer) != 60) {
			t.Errorf("%s EDNS %d: TC %v with %d records, want TC %v", tc.network, tc.edns, m.Truncated, len(m.Answer), tc.tc)
		}
	}
}

func TestBadInputLogRateLimit(t *testing.T) {
	var logs bytes.Buffer
	clock := newFakeClock()
	s := testServer(t, func(c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		c.Clock = clock.Now
	})
	junk := []byte{1, 2, 3}
	for range 3 {
		s.answer(context.Background(), junk, true)
	}
	clock.Advance(logInterval)
	s.answer(context.Background(), junk, true)
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[1], "suppressed=2") {
		t.Errorf("logs = %q, want two lines, the second saying 2 were suppressed", lines)
	}
	if st := s.Stats(); st.Dropped != 4 {
		t.Errorf("Stats().Dropped = %d, want 4", st.Dropped)
	}
}

func TestSetZoneWhileServing(t *testing.T) {
	s := testServer(t, nil)
	s.SetZone(testZone())
	req := new(miekg.Msg)
	req.SetQuestion("web.prod.svc.cluster.local.", miekg.TypeA)
	raw, _ := req.Pack()
	zones := []*Zone{
		testZone(),
		newZone("cluster.local", []*corev1.Service{service("prod", "web", []string{"10.43.0.11"})}, nil),
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			s.SetZone(zones[i%2])
		}
	})
	for range 2000 {
		m := new(miekg.Msg)
		if err := m.Unpack(s.answer(context.Background(), raw, true)); err != nil {
			t.Fatal(err)
		}
		// Either zone's answer, never a mix or nothing.
		got := rrData(m.Answer)
		if !slices.Equal(got, []string{"A 10.43.0.10"}) && !slices.Equal(got, []string{"A 10.43.0.11"}) {
			t.Fatalf("answer during swaps = %q", got)
		}
	}
	close(stop)
	wg.Wait()
}

func TestExternalNameToMissingName(t *testing.T) {
	up := startUpstream(t)
	r := startServer(t, func(c *Config) { c.Upstreams = []string{up.addr} })
	r.s.SetZone(newZone("cluster.local", []*corev1.Service{{
		ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "gone"},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "nx.example.com"},
	}}, nil))
	m := exchange(t, "udp", r.udp, "gone.prod.svc.cluster.local.", miekg.TypeA, 0)
	// RFC 6604: the rcode is the last name's, with its SOA.
	if got := rrData(m.Answer); m.Rcode != miekg.RcodeNameError || !slices.Equal(got, []string{"CNAME nx.example.com."}) || len(m.Ns) != 1 {
		t.Errorf("gone.prod = %s %q authority %v, want NXDOMAIN, the CNAME and the target's SOA", miekg.RcodeToString[m.Rcode], got, m.Ns)
	}
	if st := r.s.Stats(); st.CacheEntries != 1 || st.CacheBytes == 0 {
		t.Errorf("Stats() = %+v, want the target's answer cached", st)
	}
}
