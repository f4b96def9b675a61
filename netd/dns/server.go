// Package dns is the node-local DNS server that the edge agent runs on its
// pod bridge address. It answers the cluster domain's names (Services,
// endpoints, pods, and the PTR records of the cluster and service CIDRs)
// from an immutable Zone that the agent builds from its checkpoint, so
// names resolve while the hub is away, and forwards every other name to
// the node's upstream resolvers through a cache that serves stale answers
// (RFC 8767) while the uplink is down.
//
// NewZone is pure; Server is the I/O shell: New starts nothing, Run
// serves UDP and TCP until its context ends.
package dns

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	miekg "github.com/miekg/dns"
)

// StaleTTL is the TTL of a stale answer, as RFC 8767 recommends.
const StaleTTL = 30

// Config configures a Server.
type Config struct {
	// Domain is the cluster domain, answered from the Zone.
	Domain string
	// Addr is the host:port to listen on, UDP and TCP: the bridge
	// address, port 53. It is unused when PacketConn and Listener are
	// both set.
	Addr string
	// PacketConn, or nil to listen on Addr, serves UDP; Listener, or nil
	// to listen on Addr, serves TCP. They let the caller listen inside
	// another network namespace. Run owns and closes them.
	PacketConn net.PacketConn
	Listener   net.Listener
	// ClusterCIDRs and ServiceCIDRs are answered for in the reverse
	// zones: a PTR query inside them never goes upstream.
	ClusterCIDRs []netip.Prefix
	ServiceCIDRs []netip.Prefix
	// Upstreams are the resolvers, host:port, that names outside the
	// cluster's zones are forwarded to, asked in turn (see
	// ParseResolvConf). None means such names get SERVFAIL.
	Upstreams []string
	// TTL of the cluster's records, whole seconds.
	TTL time.Duration
	// ForwardTimeout bounds one exchange with one upstream.
	ForwardTimeout time.Duration
	// CacheBytes bounds the cache of upstream answers; 0 disables it.
	CacheBytes int
	// MaxCacheTTL caps how long an upstream answer is fresh.
	MaxCacheTTL time.Duration
	// MaxStale is how long past its expiry an upstream answer may be
	// served stale when every upstream fails.
	MaxStale time.Duration
	// MaxUDPSize is the largest UDP message read or written, for clients
	// that advertise EDNS0 buffers at least as large; without EDNS0 it is
	// 512 bytes.
	MaxUDPSize int
	// MaxTCPQuerySize is the largest query read over TCP; a longer one
	// closes the connection.
	MaxTCPQuerySize int
	// MaxTCPConns bounds the open TCP connections; past it new ones are
	// closed at once.
	MaxTCPConns int
	// TCPIdleTimeout closes a TCP connection that sends no query for
	// that long.
	TCPIdleTimeout time.Duration
	// MaxForwards bounds the UDP queries waiting on an upstream at once;
	// past it a query is answered from the cache, stale or not, or gets
	// SERVFAIL.
	MaxForwards int
	// Logger is non-nil.
	Logger *slog.Logger
	// Clock, or nil for the wall clock, times the cache and the SOA
	// serial.
	Clock func() time.Time
}

// DefaultConfig returns a Config with the defaults set; Addr (or the
// connections), the CIDRs, Upstreams and Logger are the caller's to fill.
func DefaultConfig() Config {
	return Config{
		Domain:          "cluster.local",  // kubelet's default cluster domain
		TTL:             5 * time.Second,  // CoreDNS kubernetes plugin's default
		ForwardTimeout:  2 * time.Second,  // glibc's 5 s per try leaves room for two upstreams
		CacheBytes:      4 << 20,          // a few tens of thousands of answers; small on a gateway
		MaxCacheTTL:     time.Hour,        // CoreDNS cache's default for positive answers
		MaxStale:        72 * time.Hour,   // the longest RFC 8767 suggests: uplinks stay down for days
		MaxUDPSize:      1232,             // DNS flag day 2020: no IP fragmentation
		MaxTCPQuerySize: 4096,             // a query is one question and an OPT; generous
		MaxTCPConns:     128,              // pods of one node
		TCPIdleTimeout:  10 * time.Second, // CoreDNS's read timeout
		MaxForwards:     256,              // queries waiting on a slow upstream at once
	}
}

// Validate reports the first problem of c.
func (c Config) Validate() error {
	if _, ok := miekg.IsDomainName(c.Domain); !ok || strings.Trim(c.Domain, ".") == "" {
		return fmt.Errorf("domain %q: want a domain name", c.Domain)
	}
	if c.PacketConn == nil || c.Listener == nil {
		if _, err := netip.ParseAddrPort(c.Addr); err != nil {
			return fmt.Errorf("listen address %q: %w", c.Addr, err)
		}
	}
	for _, p := range append(append([]netip.Prefix(nil), c.ClusterCIDRs...), c.ServiceCIDRs...) {
		if !p.IsValid() || p.Masked() != p {
			return fmt.Errorf("CIDR %v: want a canonical prefix", p)
		}
	}
	for _, u := range c.Upstreams {
		ap, err := netip.ParseAddrPort(u)
		if err != nil {
			return fmt.Errorf("upstream %q: %w", u, err)
		}
		if u == c.Addr || ap.String() == c.Addr {
			return fmt.Errorf("upstream %q is the server's own address", u)
		}
	}
	switch {
	case c.TTL < 0 || c.TTL > time.Hour || c.TTL%time.Second != 0:
		return fmt.Errorf("TTL %v: want whole seconds, at most an hour", c.TTL)
	case c.ForwardTimeout <= 0:
		return fmt.Errorf("forward timeout %v: want more than 0", c.ForwardTimeout)
	case c.CacheBytes < 0:
		return fmt.Errorf("cache bytes %d: want 0 or more", c.CacheBytes)
	case c.MaxCacheTTL <= 0 || c.MaxStale < 0:
		return fmt.Errorf("cache TTL %v, stale %v: want more than 0", c.MaxCacheTTL, c.MaxStale)
	case c.MaxUDPSize < miekg.MinMsgSize || c.MaxUDPSize > miekg.MaxMsgSize:
		return fmt.Errorf("UDP size %d: want 512 to 65535", c.MaxUDPSize)
	case c.MaxTCPQuerySize < miekg.MinMsgSize || c.MaxTCPQuerySize > miekg.MaxMsgSize:
		return fmt.Errorf("TCP query size %d: want 512 to 65535", c.MaxTCPQuerySize)
	case c.MaxTCPConns <= 0 || c.MaxForwards <= 0:
		return fmt.Errorf("TCP connections %d, forwards %d: want more than 0", c.MaxTCPConns, c.MaxForwards)
	case c.TCPIdleTimeout <= 0:
		return fmt.Errorf("TCP idle timeout %v: want more than 0", c.TCPIdleTimeout)
	case c.Logger == nil:
		return errors.New("no logger")
	}
	return nil
}

// Server is the node-local DNS server. Its methods are safe for
// concurrent use.
type Server struct {
	cfg          Config
	domain       string // lowercase FQDN
	reverseCIDRs []netip.Prefix
	ttl          uint32
	// self is the address the server listens on, the address of its name
	// ns.dns.DOMAIN; invalid when it listens on an unspecified address.
	self  netip.Addr
	log   *slog.Logger
	now   func() time.Time
	fwd   *forwarder
	cache *cache

	zone    atomic.Pointer[zoneState]
	running atomic.Bool
	stats   counters
	badLog  rateLimit
	ioLog   rateLimit

	flightMu sync.Mutex
	flights  map[cacheKey]*flight

	connMu sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

// zoneState is the zone queries are answered from, with the serial of
// its SOA.
type zoneState struct {
	z      *Zone
	serial uint32
	synced bool // false until the first SetZone
}

// ErrDomain is returned by SetZone for a zone of another domain.
var ErrDomain = errors.New("zone of another domain")

// New returns a Server for cfg. It starts nothing.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("dns config: %w", err)
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	s := &Server{
		cfg:     cfg,
		domain:  canonicalDomain(cfg.Domain),
		ttl:     uint32(cfg.TTL / time.Second),
		log:     cfg.Logger,
		now:     cfg.Clock,
		fwd:     newForwarder(cfg.Upstreams, cfg.ForwardTimeout),
		cache:   newCache(cfg.CacheBytes, cfg.MaxStale),
		conns:   make(map[net.Conn]struct{}),
		flights: make(map[cacheKey]*flight),
	}
	s.reverseCIDRs = append(append(s.reverseCIDRs, cfg.ServiceCIDRs...), cfg.ClusterCIDRs...)
	if cfg.PacketConn != nil {
		if ua, ok := cfg.PacketConn.LocalAddr().(*net.UDPAddr); ok {
			s.self = ua.AddrPort().Addr().Unmap()
		}
	} else if ap, err := netip.ParseAddrPort(cfg.Addr); err == nil {
		s.self = ap.Addr().Unmap()
	}
	if s.self.IsUnspecified() {
		s.self = netip.Addr{}
	}
	s.zone.Store(&zoneState{z: NewZone(cfg.Domain, nil, nil)})
	return s, nil
}

// SetZone makes z the zone queries are answered from; queries already
// under way finish with the zone they started with. Until the first
// SetZone, cluster names get SERVFAIL, as CoreDNS answers before it has
// synced, so that no resolver caches a name as absent. z must be of the
// server's domain, else SetZone returns ErrDomain.
func (s *Server) SetZone(z *Zone) error {
	if z.Domain() != s.domain {
		return fmt.Errorf("set zone %s on a server of %s: %w", z.Domain(), s.domain, ErrDomain)
	}
	for {
		old := s.zone.Load()
		serial := max(uint32(s.now().Unix()), old.serial+1)
		if s.zone.CompareAndSwap(old, &zoneState{z: z, serial: serial, synced: true}) {
			return nil
		}
	}
}

// Run serves UDP and TCP until ctx ends, then returns nil after every
// goroutine it started has stopped; it returns an error when it cannot
// listen or a listener fails. Run may be called once.
func (s *Server) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("dns server already run")
	}
	pc, ln := s.cfg.PacketConn, s.cfg.Listener
	var lc net.ListenConfig
	if pc == nil {
		var err error
		if pc, err = lc.ListenPacket(ctx, "udp", s.cfg.Addr); err != nil {
			if ln != nil {
				ln.Close()
			}
			return fmt.Errorf("listen dns: %w", err)
		}
	}
	if ln == nil {
		var err error
		if ln, err = lc.Listen(ctx, "tcp", s.cfg.Addr); err != nil {
			pc.Close()
			return fmt.Errorf("listen dns: %w", err)
		}
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var errMu sync.Mutex
	var firstErr error
	fail := func(err error) {
		if err == nil {
			return
		}
		errMu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		errMu.Unlock()
		cancel()
	}
	wg.Go(func() {
		<-ctx.Done()
		pc.Close()
		ln.Close()
		s.closeConns()
	})
	wg.Go(func() { fail(s.serveUDP(ctx, pc, &wg)) })
	wg.Go(func() { fail(s.serveTCP(ctx, ln, &wg)) })
	wg.Wait()
	return firstErr
}

func (s *Server) serveUDP(ctx context.Context, pc net.PacketConn, wg *sync.WaitGroup) error {
	buf := make([]byte, s.cfg.MaxUDPSize+1)
	sem := make(chan struct{}, s.cfg.MaxForwards)
	var delay time.Duration
	for {
		n, addr, err := pc.ReadFrom(buf)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("dns udp: %w", err)
			}
			s.logBad(&s.ioLog, "dns udp read", "err", err)
			if !s.backoff(ctx, &delay) {
				return nil
			}
			continue
		}
		delay = 0
		out, j := s.begin(buf[:n], true)
		if j == nil {
			if out != nil {
				pc.WriteTo(out, addr)
			}
			continue
		}
		select {
		case sem <- struct{}{}:
			wg.Go(func() {
				defer func() { <-sem }()
				if out := s.finish(ctx, j); out != nil {
					pc.WriteTo(out, addr)
				}
			})
		default:
			s.stats.overloaded.Add(1)
			if out := s.finish(nil, j); out != nil {
				pc.WriteTo(out, addr)
			}
		}
	}
}

func (s *Server) serveTCP(ctx context.Context, ln net.Listener, wg *sync.WaitGroup) error {
	sem := make(chan struct{}, s.cfg.MaxTCPConns)
	var delay time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("dns tcp: %w", err)
			}
			s.logBad(&s.ioLog, "dns tcp accept", "err", err)
			if !s.backoff(ctx, &delay) {
				return nil
			}
			continue
		}
		delay = 0
		select {
		case sem <- struct{}{}:
		default:
			s.stats.tcpRejected.Add(1)
			c.Close()
			continue
		}
		if !s.track(c) {
			<-sem
			c.Close()
			return nil
		}
		wg.Go(func() {
			s.serveConn(ctx, c)
			// Free the slot before the client sees the close.
			<-sem
			s.untrack(c)
		})
	}
}

// backoff waits after a failed read or accept (out of file descriptors
// and the like), as net/http's server does, rather than spin: 5 ms, then
// twice as long each time up to a second. It reports false when ctx ends.
func (s *Server) backoff(ctx context.Context, delay *time.Duration) bool {
	*delay = min(max(2**delay, 5*time.Millisecond), time.Second)
	t := time.NewTimer(*delay)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// track records an open connection, to be closed when Run stops; it
// reports false when Run is stopping already.
func (s *Server) track(c net.Conn) bool {
	s.connMu.Lock()
	defer s.connMu.Unlock()
	if s.closed {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *Server) untrack(c net.Conn) {
	s.connMu.Lock()
	delete(s.conns, c)
	s.connMu.Unlock()
	c.Close()
}

func (s *Server) closeConns() {
	s.connMu.Lock()
	defer s.connMu.Unlock()
	s.closed = true
	for c := range s.conns {
		c.Close()
	}
}

// serveConn answers the queries of one TCP connection in order, each
// framed by its two-byte length (RFC 1035 4.2.2, RFC 7766).
func (s *Server) serveConn(ctx context.Context, c net.Conn) {
	var lenBuf [2]byte
	for {
		c.SetReadDeadline(time.Now().Add(s.cfg.TCPIdleTimeout))
		if _, err := io.ReadFull(c, lenBuf[:]); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint16(lenBuf[:]))
		s.stats.queries.Add(1)
		if n < headerLen || n > s.cfg.MaxTCPQuerySize {
			s.stats.dropped.Add(1)
			s.logBad(&s.badLog, "dns query dropped", "reason", "TCP length out of bounds", "length", n, "from", c.RemoteAddr())
			return
		}
		buf := make([]byte, n)
		if _, err := io.ReadFull(c, buf); err != nil {
			return
		}
		out := s.answer(ctx, buf, false)
		if out == nil {
			continue
		}
		msg := make([]byte, 2+len(out))
		binary.BigEndian.PutUint16(msg, uint16(len(out)))
		copy(msg[2:], out)
		c.SetWriteDeadline(time.Now().Add(s.cfg.TCPIdleTimeout))
		if _, err := c.Write(msg); err != nil {
			return
		}
	}
}

// answer returns the response to the raw query that came over UDP (udp)
// or TCP, or nil when it is to be dropped. It blocks while asking
// upstream. It counts the query when it came over UDP (serveConn counts
// TCP queries as it reads their length).
func (s *Server) answer(ctx context.Context, raw []byte, udp bool) []byte {
	out, j := s.begin(raw, udp)
	if j == nil {
		return out
	}
	return s.finish(ctx, j)
}

// job is a query that waits on an upstream: a name outside the cluster's
// zones, or the target of an ExternalName's CNAME.
type job struct {
	req  *miekg.Msg
	size int // the largest response the client takes
	// q is asked upstream. When prefix is set (a CNAME), the answer
	// follows it; else it is the answer.
	q      miekg.Question
	prefix *miekg.Msg
}

const headerLen = 12

// flagQR is the header's response bit, read before a message unpacks.
const flagQR = 1 << 15

// begin decodes raw and answers it when it can without an upstream: it
// returns the response (nil to drop) or a job for finish.
func (s *Server) begin(raw []byte, udp bool) ([]byte, *job) {
	if udp {
		s.stats.queries.Add(1)
	}
	if len(raw) < headerLen {
		s.stats.dropped.Add(1)
		s.logBad(&s.badLog, "dns query dropped", "reason", "shorter than a header", "length", len(raw))
		return nil, nil
	}
	if udp && len(raw) > s.cfg.MaxUDPSize {
		s.stats.dropped.Add(1)
		s.logBad(&s.badLog, "dns query dropped", "reason", "UDP message over the size limit", "limit", s.cfg.MaxUDPSize)
		return nil, nil
	}
	flags := binary.BigEndian.Uint16(raw[2:])
	if flags&flagQR != 0 {
		// A response: answering it could start a loop between servers.
		s.stats.dropped.Add(1)
		s.logBad(&s.badLog, "dns query dropped", "reason", "a response, not a query")
		return nil, nil
	}
	req := new(miekg.Msg)
	if err := req.Unpack(raw); err != nil {
		s.logBad(&s.badLog, "dns query malformed", "err", err)
		m := &miekg.Msg{MsgHdr: miekg.MsgHdr{
			Id:               binary.BigEndian.Uint16(raw),
			Response:         true,
			Opcode:           int(flags>>11) & 0xf,
			RecursionDesired: flags&(1<<8) != 0,
			Rcode:            miekg.RcodeFormatError,
		}}
		return s.pack(nil, m, miekg.MinMsgSize), nil
	}
	size := miekg.MaxMsgSize
	opt, nopt := findOPT(req)
	if udp {
		size = miekg.MinMsgSize
		if opt != nil {
			size = max(miekg.MinMsgSize, min(int(opt.UDPSize()), s.cfg.MaxUDPSize))
		}
	}
	fail := func(rcode int) ([]byte, *job) {
		m := new(miekg.Msg)
		m.SetRcode(req, rcode)
		m.RecursionAvailable = true
		return s.pack(req, m, size), nil
	}
	switch {
	case req.Opcode != miekg.OpcodeQuery:
		return fail(miekg.RcodeNotImplemented)
	case len(req.Question) != 1 || nopt > 1:
		return fail(miekg.RcodeFormatError)
	case opt != nil && opt.Version() != 0:
		return fail(miekg.RcodeBadVers)
	case udp && opt == nil && len(raw) > miekg.MinMsgSize:
		return fail(miekg.RcodeFormatError)
	}
	q := req.Question[0]
	switch {
	case q.Qclass != miekg.ClassINET:
		return fail(miekg.RcodeNotImplemented)
	case q.Qtype == miekg.TypeOPT:
		return fail(miekg.RcodeFormatError)
	case q.Qtype == miekg.TypeAXFR || q.Qtype == miekg.TypeIXFR:
		return fail(miekg.RcodeRefused)
	}

	st := s.zone.Load()
	lname := strings.ToLower(q.Name)
	if miekg.IsSubDomain(s.domain, lname) {
		if !st.synced {
			return fail(miekg.RcodeServerFailure)
		}
		m, chase := s.answerZone(st, req, q, lname)
		if chase == "" {
			return s.pack(req, m, size), nil
		}
		return nil, &job{req: req, size: size, q: miekg.Question{Name: chase, Qtype: q.Qtype, Qclass: q.Qclass}, prefix: m}
	}
	if p, ok := parseReverse(lname); ok {
		if apex, ok := reverseZone(s.reverseCIDRs, p); ok {
			if !st.synced {
				return fail(miekg.RcodeServerFailure)
			}
			return s.pack(req, s.answerReverse(st, req, q, lname, p, apex), size), nil
		}
		if p.IsSingleIP() && (q.Qtype == miekg.TypePTR || q.Qtype == miekg.TypeANY) {
			if targets := st.z.ptr(p.Addr()); len(targets) > 0 {
				m := s.reply(req)
				m.Answer = ptrRecords(q.Name, targets, s.ttl)
				return s.pack(req, m, size), nil
			}
		}
	}
	return nil, &job{req: req, size: size, q: q}
}

// finish asks upstream for j and returns the response. With a nil ctx it
// does not ask and answers from the cache alone.
func (s *Server) finish(ctx context.Context, j *job) []byte {
	r := s.resolve(ctx, j.q)
	if j.prefix != nil {
		// The ExternalName's target: the CNAME, and what the target holds.
		m := j.prefix
		if r != nil {
			m.Answer = append(m.Answer, r.Answer...)
			if r.Rcode == miekg.RcodeNameError {
				m.Rcode = miekg.RcodeNameError
			}
			if len(r.Answer) == 0 {
				m.Ns = r.Ns // the target's SOA, for a negative answer
			}
		}
		return s.pack(j.req, m, j.size)
	}
	if r == nil {
		m := new(miekg.Msg)
		m.SetRcode(j.req, miekg.RcodeServerFailure)
		m.RecursionAvailable = true
		return s.pack(j.req, m, j.size)
	}
	r.Id = j.req.Id
	r.Response = true
	r.Opcode = j.req.Opcode
	r.RecursionDesired = j.req.RecursionDesired
	r.CheckingDisabled = j.req.CheckingDisabled
	r.RecursionAvailable = true
	r.Authoritative = false
	r.Truncated = false
	r.Question = j.req.Question
	return s.pack(j.req, r, j.size)
}

// resolve returns the answer to q from the cache or upstream, a stale
// answer when every upstream fails, or nil. The caller owns the answer.
// With a nil ctx it does not ask upstream.
func (s *Server) resolve(ctx context.Context, q miekg.Question) *miekg.Msg {
	k := keyOf(q)
	cached, stale, ok := s.cache.get(k, s.now(), StaleTTL)
	if ok && !stale {
		s.stats.cacheHits.Add(1)
		return cached
	}
	s.stats.cacheMisses.Add(1)
	if ctx != nil {
		if r, err := s.forwardShared(ctx, k, q); err == nil {
			return r
		}
	}
	if ok {
		s.stats.staleServed.Add(1)
		return cached
	}
	return nil
}

// flight is one question on its way upstream, which the queries asking
// the same question meanwhile wait for instead of asking again.
type flight struct {
	done chan struct{}
	r    *miekg.Msg // read-only once done is closed
	err  error
}

// forwardShared asks upstream for q, or waits for the same question
// already asked, and caches the answer. The caller owns the answer.
func (s *Server) forwardShared(ctx context.Context, k cacheKey, q miekg.Question) (*miekg.Msg, error) {
	s.flightMu.Lock()
	if f, ok := s.flights[k]; ok {
		s.flightMu.Unlock()
		select {
		case <-f.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if f.err != nil {
			return nil, f.err
		}
		return f.r.Copy(), nil
	}
	f := &flight{done: make(chan struct{})}
	s.flights[k] = f
	s.flightMu.Unlock()

	r, err := s.fwd.exchange(ctx, q)
	if err == nil {
		s.stats.forwarded.Add(1)
		s.cache.put(k, r, cacheTTL(r, s.cfg.MaxCacheTTL), s.now())
		f.r = r.Copy()
	} else {
		s.stats.forwardErrors.Add(1)
		s.logBad(&s.ioLog, "dns forward failed", "err", err)
	}
	f.err = err
	s.flightMu.Lock()
	delete(s.flights, k)
	s.flightMu.Unlock()
	close(f.done)
	return r, err
}

// reply returns an authoritative NOERROR response to req.
func (s *Server) reply(req *miekg.Msg) *miekg.Msg {
	m := new(miekg.Msg)
	m.SetReply(req)
	m.Authoritative = true
	m.RecursionAvailable = true
	return m
}

func (s *Server) soa(st *zoneState, apex string) *miekg.SOA {
	return &miekg.SOA{
		Hdr:     miekg.RR_Header{Name: apex, Rrtype: miekg.TypeSOA, Class: miekg.ClassINET, Ttl: s.ttl},
		Ns:      "ns.dns." + s.domain,
		Mbox:    "hostmaster." + s.domain,
		Serial:  st.serial,
		Refresh: 7200,
		Retry:   1800,
		Expire:  86400,
		Minttl:  s.ttl,
	}
}

// negative sets m to NXDOMAIN (or NODATA, exists) with the SOA of apex.
func (s *Server) negative(st *zoneState, m *miekg.Msg, apex string, exists bool) *miekg.Msg {
	if !exists {
		m.Rcode = miekg.RcodeNameError
	}
	m.Answer = nil
	m.Ns = []miekg.RR{s.soa(st, apex)}
	return m
}

// answerZone answers q, a name of the cluster domain (lname lowercase).
// When the name is an ExternalName's CNAME to a name outside the domain,
// it returns that name to chase upstream too.
func (s *Server) answerZone(st *zoneState, req *miekg.Msg, q miekg.Question, lname string) (*miekg.Msg, string) {
	m := s.reply(req)
	nsName := "ns.dns." + s.domain
	switch {
	case lname == s.domain:
		if q.Qtype == miekg.TypeSOA || q.Qtype == miekg.TypeANY {
			m.Answer = []miekg.RR{s.soa(st, q.Name)}
		}
		if s.self.IsValid() && (q.Qtype == miekg.TypeNS || q.Qtype == miekg.TypeANY) {
			m.Answer = append(m.Answer, &miekg.NS{
				Hdr: miekg.RR_Header{Name: q.Name, Rrtype: miekg.TypeNS, Class: miekg.ClassINET, Ttl: s.ttl},
				Ns:  nsName,
			})
			m.Extra = appendAddrs(m.Extra, []netip.Addr{s.self}, nsName, miekg.TypeANY, s.ttl)
		}
		if len(m.Answer) == 0 {
			return s.negative(st, m, s.domain, true), ""
		}
		return m, ""
	case s.self.IsValid() && (lname == nsName || lname == "dns."+s.domain):
		// The server's own name, which the SOA and NS records give, as
		// CoreDNS answers it when it is not a Service's endpoint.
		if lname == nsName {
			m.Answer = appendAddrs(nil, []netip.Addr{s.self}, q.Name, q.Qtype, s.ttl)
		}
		if len(m.Answer) == 0 {
			return s.negative(st, m, s.domain, true), ""
		}
		return m, ""
	}
	owner, qname := q.Name, lname
	// Follow CNAMEs inside the domain, a few at most; ExternalNames
	// pointing at each other cannot loop.
	for range 8 {
		n, ok := st.z.lookup(qname)
		if !ok {
			if len(m.Answer) > 0 { // a CNAME to a name that is not there
				m.Rcode = miekg.RcodeNameError
				m.Ns = []miekg.RR{s.soa(st, s.domain)}
				return m, ""
			}
			return s.negative(st, m, s.domain, false), ""
		}
		ans, extra := st.z.records(n, owner, q.Qtype, s.ttl)
		if len(ans) == 0 {
			if len(m.Answer) > 0 {
				m.Ns = []miekg.RR{s.soa(st, s.domain)}
				return m, ""
			}
			return s.negative(st, m, s.domain, true), ""
		}
		m.Answer = append(m.Answer, ans...)
		m.Extra = append(m.Extra, extra...)
		if n.cname == "" || q.Qtype == miekg.TypeCNAME {
			return m, ""
		}
		if !miekg.IsSubDomain(s.domain, n.cname) {
			return m, n.cname
		}
		owner, qname = n.cname, n.cname
	}
	return m, ""
}

// answerReverse answers q, a name of the reverse zone apex of the
// cluster's CIDRs, naming prefix p.
func (s *Server) answerReverse(st *zoneState, req *miekg.Msg, q miekg.Question, lname string, p netip.Prefix, apex string) *miekg.Msg {
	m := s.reply(req)
	if p.IsSingleIP() {
		targets := st.z.ptr(p.Addr())
		if len(targets) == 0 {
			return s.negative(st, m, apex, false)
		}
		if q.Qtype != miekg.TypePTR && q.Qtype != miekg.TypeANY {
			return s.negative(st, m, apex, true)
		}
		m.Answer = ptrRecords(q.Name, targets, s.ttl)
		return m
	}
	if lname == apex && (q.Qtype == miekg.TypeSOA || q.Qtype == miekg.TypeANY) {
		m.Answer = []miekg.RR{s.soa(st, q.Name)}
		return m
	}
	return s.negative(st, m, apex, lname == apex || st.z.hasPTRWithin(p))
}

func ptrRecords(owner string, targets []string, ttl uint32) []miekg.RR {
	rrs := make([]miekg.RR, len(targets))
	for i, t := range targets {
		rrs[i] = &miekg.PTR{Hdr: miekg.RR_Header{Name: owner, Rrtype: miekg.TypePTR, Class: miekg.ClassINET, Ttl: ttl}, Ptr: t}
	}
	return rrs
}

// findOPT returns the request's OPT record and how many it has.
func findOPT(m *miekg.Msg) (*miekg.OPT, int) {
	var opt *miekg.OPT
	n := 0
	for _, rr := range m.Extra {
		if o, ok := rr.(*miekg.OPT); ok {
			if opt == nil {
				opt = o
			}
			n++
		}
	}
	return opt, n
}

// pack returns m in wire form, cut to size with TC set when it does not
// fit, with an OPT record when req had one (req nil: a request that did
// not decode), and counts it by rcode.
func (s *Server) pack(req, m *miekg.Msg, size int) []byte {
	m.Extra = dropOPT(m.Extra)
	if req != nil {
		if opt, _ := findOPT(req); opt != nil {
			m.SetEdns0(uint16(s.cfg.MaxUDPSize), opt.Do())
		}
	}
	m.Compress = true
	m.Truncate(size)
	if m.Truncated {
		s.stats.truncated.Add(1)
	}
	out, err := m.Pack()
	if err != nil {
		// Records from an upstream that do not pack again: give the
		// client SERVFAIL rather than nothing.
		s.logBad(&s.ioLog, "dns pack response", "err", err)
		f := &miekg.Msg{MsgHdr: m.MsgHdr, Question: m.Question}
		f.Rcode = miekg.RcodeServerFailure
		f.Truncated = false
		if out, err = f.Pack(); err != nil {
			return nil
		}
		m = f
	}
	s.stats.countRcode(m.Rcode)
	return out
}

// rateLimit lets a kind of message be logged once a minute, saying how
// many were held back.
type rateLimit struct {
	mu         sync.Mutex
	last       time.Time
	suppressed int
}

const logInterval = time.Minute

func (s *Server) logBad(rl *rateLimit, msg string, args ...any) {
	now := s.now()
	rl.mu.Lock()
	if !rl.last.IsZero() && now.Sub(rl.last) < logInterval {
		rl.suppressed++
		rl.mu.Unlock()
		return
	}
	suppressed := rl.suppressed
	rl.last, rl.suppressed = now, 0
	rl.mu.Unlock()
	if suppressed > 0 {
		args = append(args, "suppressed", suppressed)
	}
	s.log.Warn(msg, args...)
}
