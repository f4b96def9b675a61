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
