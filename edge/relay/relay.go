// Package relay forwards a site peer's sync datagrams to the hub through
// this node's uplink, when the peer's own uplink is down (issue 14).
//
// The relay sees only QUIC packets, encrypted end to end between the peer
// and the hub: the session stays the peer's own mTLS one, authorized by
// the hub as that peer, and the relay can read none of it. It forwards
// what it is sent, as a NAT would: each client address gets a socket of
// its own toward the hub, and what the hub sends back to that socket goes
// to the client. Only addresses Config.Allowed admits are served, no
// datagram over Config.MaxDatagram is forwarded, and each peer's bytes
// are capped. Only edge/agent should import this package.
package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sort"
	"sync"
	"time"
)

// Config configures a Relay.
type Config struct {
	// Bind is where the relay listens for its peers' datagrams; port 0
	// picks a free one. Required.
	Bind netip.AddrPort
	// Target returns the hub's address, where a new client's datagrams
	// go; it is called once per client, so a hub that moved is reached
	// by the clients that come after. Required.
	Target func() (netip.AddrPort, error)
	// Allowed reports whether a datagram's source may use the relay: a
	// site peer the mesh holds alive. It is called for every datagram
	// and must not block. Required.
	Allowed func(netip.Addr) bool
	// MaxDatagram is the largest datagram forwarded, either way; larger
	// ones are dropped: 1500 bytes. QUIC's datagrams are 1252 bytes and
	// grow only as far as path MTU discovery finds room.
	MaxDatagram int
	// BytesPerMinute caps what one peer (one source IP) may have
	// relayed, both ways together: 16 MiB a minute, refilled evenly,
	// in bursts up to one minute's worth. What is over is dropped, and
	// the peer's sender sees it as loss. A node's sync session needs a
	// small share of that; the cap keeps a peer from using a node's
	// uplink for more.
	BytesPerMinute int64
	// IdleTimeout ends a client that sent nothing for that long, closing
	// its socket toward the hub: 60s, well over the sync client's
	// keep-alive.
	IdleTimeout time.Duration
	// MaxClients bounds the clients served at once: 64.
	MaxClients int
	Logger     *slog.Logger // or nil to log nothing
	// Now is the clock, or nil for the wall clock.
	Now func() time.Time
}

// DefaultConfig returns the defaults above.
func DefaultConfig() Config {
	return Config{
		MaxDatagram:    1500,
		BytesPerMinute: 16 << 20,
		IdleTimeout:    60 * time.Second,
		MaxClients:     64,
	}
}

// Validate reports the first invalid field.
func (c *Config) Validate() error {
	switch {
	case !c.Bind.IsValid():
		return errors.New("bind address is required")
	case c.Target == nil || c.Allowed == nil:
		return errors.New("target and allowed are required")
	case c.MaxDatagram < 1200:
		return fmt.Errorf("max datagram %d is under QUIC's 1200", c.MaxDatagram)
	case c.BytesPerMinute < int64(c.MaxDatagram):
		return fmt.Errorf("bytes per minute %d is under one datagram", c.BytesPerMinute)
	case c.IdleTimeout <= 0:
		return fmt.Errorf("idle timeout %v is not positive", c.IdleTimeout)
	case c.MaxClients < 1:
		return fmt.Errorf("max clients %d is under 1", c.MaxClients)
	}
	return nil
}

// PeerStats counts one peer's use of the relay.
type PeerStats struct {
	Up, Down int64 // bytes forwarded toward the hub and back
	// Dropped counts datagrams dropped: over MaxDatagram, over the cap,
	// or beyond MaxClients.
	Dropped int64
	// Capped counts datagrams dropped for the cap; of Dropped.
	Capped int64
}

// Stats are the relay's counters.
type Stats struct {
	Peers   map[netip.Addr]PeerStats // by source IP
	Refused int64                    // datagrams from addresses not Allowed
	Clients int                      // clients served now
}

// Relay forwards datagrams between site peers and the hub. Its methods
// are safe for concurrent use.
type Relay struct {
	cfg Config
	log *slog.Logger
	ln  *net.UDPConn

	mu      sync.Mutex
	clients map[netip.AddrPort]*client
	peers   map[netip.Addr]*peer
	refused int64
	wg      sync.WaitGroup // the clients' readers
	closed  bool
}

// client is one source address's flow: its socket toward the hub.
type client struct {
	addr     netip.AddrPort
	up       *net.UDPConn
	lastSeen time.Time // guarded by Relay.mu
}

// peer is one source IP's counters and bucket; guarded by Relay.mu.
type peer struct {
	stats  PeerStats
	tokens float64 // bytes it may still have relayed
	filled time.Time
	capLog bool // the cap was logged since it was last under it
}

// Listen checks cfg and binds the relay's socket; Run serves it.
func Listen(cfg Config) (*Relay, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("relay config: %w", err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	ln, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(cfg.Bind))
	if err != nil {
		return nil, fmt.Errorf("relay listen: %w", err)
	}
	return &Relay{cfg: cfg, log: cfg.Logger, ln: ln, clients: map[netip.AddrPort]*client{}, peers: map[netip.Addr]*peer{}}, nil
}

// Addr returns the address the relay listens on.
func (r *Relay) Addr() netip.AddrPort { return r.ln.LocalAddr().(*net.UDPAddr).AddrPort() }

// Stats returns a copy of the relay's counters.
func (r *Relay) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := Stats{Peers: make(map[netip.Addr]PeerStats, len(r.peers)), Refused: r.refused, Clients: len(r.clients)}
	for ip, p := range r.peers {
		s.Peers[ip] = p.stats
	}
	return s
}

// Run serves until ctx ends, then closes the relay's sockets and returns
// once all it started has exited.
func (r *Relay) Run(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { r.ln.Close() })
	defer stop()
	var wg sync.WaitGroup
	wg.Go(func() { r.sweep(ctx) })
	r.fromPeers()
	r.ln.Close()
	r.mu.Lock()
	r.closed = true
	for _, c := range r.clients {
		c.up.Close()
	}
	r.mu.Unlock()
	wg.Wait()
	r.wg.Wait()
	return nil
}

// fromPeers forwards the peers' datagrams until the socket closes.
func (r *Relay) fromPeers() {
	buf := make([]byte, r.cfg.MaxDatagram+1)
	for {
		n, src, err := r.ln.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue // an ICMP error surfaced on the socket; not ours to act on
		}
		src = netip.AddrPortFrom(src.Addr().Unmap(), src.Port())
		c := r.admit(src, n)
		if c == nil {
			continue
		}
		// A hub socket that failed is the client's loss, as on any path.
		_, _ = c.up.Write(buf[:n])
	}
}

// admit accounts a datagram of n bytes from src and returns the client
// to forward it through, nil if it is dropped. Only fromPeers calls it,
// so only it adds clients.
func (r *Relay) admit(src netip.AddrPort, n int) *client {
	if !r.cfg.Allowed(src.Addr()) {
		r.mu.Lock()
		r.refused++
		r.mu.Unlock()
		return nil
	}
	now := r.cfg.Now()
	r.mu.Lock()
	p := r.peer(src.Addr(), now)
	if n > r.cfg.MaxDatagram || !r.spend(p, src.Addr(), n) {
		p.stats.Dropped++
		r.mu.Unlock()
		return nil
	}
	c := r.clients[src]
	if c == nil && len(r.clients) >= r.cfg.MaxClients {
		p.stats.Dropped++
		r.mu.Unlock()
		return nil
	}
	if c != nil {
		c.lastSeen = now
		p.stats.Up += int64(n)
		r.mu.Unlock()
		return c
	}
	r.mu.Unlock()

	// Target may resolve a name: not under the lock.
	c, err := r.open(src)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil || r.closed {
		if err != nil {
			r.log.Warn("relay cannot reach the hub for a peer", "peer", src, "err", err)
		} else {
			c.up.Close()
		}
		p.stats.Dropped++
		return nil
	}
	r.clients[src] = c
	r.log.Info("relaying a site peer's sync session", "peer", src, "hub", c.up.RemoteAddr())
	r.wg.Go(func() { r.fromHub(c) })
	c.lastSeen = now
	p.stats.Up += int64(n)
	return c
}

// open returns a new client for src with its socket toward the hub.
func (r *Relay) open(src netip.AddrPort) (*client, error) {
	target, err := r.cfg.Target()
	if err != nil {
		return nil, fmt.Errorf("hub address: %w", err)
	}
	up, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(target))
	if err != nil {
		return nil, err
	}
	return &client{addr: src, up: up}, nil
}

// peer returns ip's counters, adding them with a full bucket. The caller
// holds r.mu.
func (r *Relay) peer(ip netip.Addr, now time.Time) *peer {
	p := r.peers[ip]
	if p == nil {
		p = &peer{tokens: float64(r.cfg.BytesPerMinute), filled: now}
		r.peers[ip] = p
	}
	return p
}

// spend takes n bytes from p's bucket, refilled for the time since it
// last was, and reports whether they were there. The caller holds r.mu.
func (r *Relay) spend(p *peer, ip netip.Addr, n int) bool {
	now := r.cfg.Now()
	if d := now.Sub(p.filled); d > 0 {
		p.tokens = min(float64(r.cfg.BytesPerMinute), p.tokens+d.Minutes()*float64(r.cfg.BytesPerMinute))
		p.filled = now
	}
	if p.tokens < float64(n) {
		p.stats.Capped++
		if !p.capLog {
			p.capLog = true
			r.log.Warn("site peer reached its relay cap; dropping its datagrams", "peer", ip, "bytes_per_minute", r.cfg.BytesPerMinute)
		}
		return false
	}
	if p.capLog && p.tokens >= float64(r.cfg.BytesPerMinute)/2 {
		p.capLog = false
	}
	p.tokens -= float64(n)
	return true
}

// fromHub forwards what the hub sends to c's socket back to c, until the
// socket closes.
func (r *Relay) fromHub(c *client) {
	buf := make([]byte, r.cfg.MaxDatagram+1)
	for {
		n, err := c.up.Read(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue // ICMP port unreachable from a hub that is down
		}
		r.mu.Lock()
		p := r.peer(c.addr.Addr(), r.cfg.Now())
		ok := n <= r.cfg.MaxDatagram && r.spend(p, c.addr.Addr(), n)
		if ok {
			p.stats.Down += int64(n)
		} else {
			p.stats.Dropped++
		}
		r.mu.Unlock()
		if ok {
			_, _ = r.ln.WriteToUDPAddrPort(buf[:n], c.addr)
		}
	}
}

// sweep ends the clients idle for IdleTimeout, until ctx ends.
func (r *Relay) sweep(ctx context.Context) {
	t := time.NewTicker(max(r.cfg.IdleTimeout/4, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := r.cfg.Now()
		r.mu.Lock()
		for addr, c := range r.clients {
			if now.Sub(c.lastSeen) >= r.cfg.IdleTimeout {
				c.up.Close()
				delete(r.clients, addr)
				r.log.Info("site peer's relayed session idle; closed", "peer", addr)
			}
		}
		r.mu.Unlock()
	}
}

// Summary returns the peers' counters as log attributes, in address
// order: "ip=up/down/dropped".
func (s Stats) Summary() []string {
	ips := make([]netip.Addr, 0, len(s.Peers))
	for ip := range s.Peers {
		ips = append(ips, ip)
	}
	sort.Slice(ips, func(i, j int) bool { return ips[i].Less(ips[j]) })
	out := make([]string, 0, len(ips))
	for _, ip := range ips {
		p := s.Peers[ip]
		out = append(out, fmt.Sprintf("%s=%d/%d/%d", ip, p.Up, p.Down, p.Dropped))
	}
	return out
}
