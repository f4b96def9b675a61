// Package relay is the counting UDP relay the fleet benchmarks put between
// each simulated edge agent and the hub: it forwards one agent's datagrams
// to the hub's sync address and back, counts them, and can black-hole the
// link for a while. Only bench/ imports it.
package relay

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Relay forwards one agent's UDP datagrams to the hub's sync address and
// back, counting them: the agent's bytes on the wire, QUIC's own packets
// included, which nothing above the socket sees. Each client address (the
// agent opens a new socket for every connection) gets its own socket
// toward the hub, as a NAT would.
//
// It is lighter than internal/netem's relay, which degrades one link in
// tests: no conditions but a cut, small buffers, and client sockets
// forgotten once idle for PeerIdle, so that a thousand of them are cheap.
// It keeps forwarding while the hub is down and after it is back on the
// same port: a closed port answers with ICMP, which a connected UDP socket
// reports as ECONNREFUSED on its next read, and that ends nothing. A cut
// (Cut, ArmCut) drops every datagram both ways for a while, uncounted.
// Its methods are safe for concurrent use.
type Relay struct {
	target *net.UDPAddr
	ln     *net.UDPConn

	mu     sync.Mutex
	peers  map[netip.AddrPort]*peer
	closed bool

	up, down             atomic.Int64 // payload bytes client->hub, hub->client
	upPackets, downPacks atomic.Int64
	small, smallBytes    atomic.Int64 // datagrams of at most SmallDatagram bytes, both ways
	truncated            atomic.Int64

	holeUntil atomic.Int64 // unix nanoseconds until which datagrams are dropped
	// armedAt, unless 0, is the down count at which the link is cut for
	// armedFor; the cut disarms it, and sets cutAt to the down count.
	armedAt, armedFor, cutAt atomic.Int64

	wg sync.WaitGroup
}

// peer is one client socket and its socket toward the hub.
type peer struct {
	client netip.AddrPort
	conn   *net.UDPConn // connected to the hub
	last   atomic.Int64 // unix nanoseconds of the last datagram either way
}

// MaxDatagram bounds the datagrams relayed: quic-go sends none over 1,452
// bytes (protocol.MaxPacketBufferSize), and GSO batches arrive split.
// Larger ones are dropped and counted in Truncated.
const MaxDatagram = 2048

// SmallDatagram is the largest payload counted as small: the size class of
// QUIC's keep-alive PINGs and acknowledgements, about 25 bytes with
// quic-go's 4-byte connection IDs. A small frame of the sync protocol can
// fit too; the agents' sync counters tell whether any flowed.
const SmallDatagram = 64

// PeerIdle is how long a client socket may be silent both ways before the
// relay forgets it: twice the sync idle timeout (15s), past which the QUIC
// connection on it is dead anyway.
const PeerIdle = 30 * time.Second

// Listen starts a relay on a free loopback port toward target: it reads
// from its clients until Close. The caller must call Close.
func Listen(target *net.UDPAddr) (*Relay, error) {
	ln, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, fmt.Errorf("relay listen: %w", err)
	}
	r := &Relay{target: target, ln: ln, peers: map[netip.AddrPort]*peer{}}
	r.wg.Go(r.fromClients)
	return r, nil
}

// Addr returns the address the agent dials.
func (r *Relay) Addr() string { return r.ln.LocalAddr().String() }

// Counts returns the relay's counters.
func (r *Relay) Counts() Counts {
	return Counts{
		Up: r.up.Load(), Down: r.down.Load(), Packets: r.upPackets.Load() + r.downPacks.Load(),
		Small: r.small.Load(), SmallBytes: r.smallBytes.Load(),
	}
}

// Truncated returns the datagrams dropped as larger than MaxDatagram.
func (r *Relay) Truncated() int64 { return r.truncated.Load() }

// Cut drops every datagram both ways for d from now.
func (r *Relay) Cut(d time.Duration) { r.holeUntil.Store(time.Now().Add(d).UnixNano()) }

// ArmCut has the link cut for d once, after more payload bytes toward the
// client than after; it replaces a cut armed before.
func (r *Relay) ArmCut(after int64, d time.Duration) {
	r.armedFor.Store(int64(d))
	r.armedAt.Store(r.down.Load() + after)
}

// Disarm drops the armed cut if it has not come yet.
func (r *Relay) Disarm() { r.armedAt.Store(0) }

// CutDown returns the down count at which the armed cut came, 0 if it has
// not.
func (r *Relay) CutDown() int64 { return r.cutAt.Load() }

func (r *Relay) holed() bool { return time.Now().UnixNano() < r.holeUntil.Load() }

// Counts is a reading of a relay's counters: payload bytes toward the hub
// (Up) and back (Down), datagrams both ways, and of those the ones of at
// most SmallDatagram bytes and their payload.
type Counts struct{ Up, Down, Packets, Small, SmallBytes int64 }

// IPUDPHeaders is the size of an IPv4 and a UDP header, which every
// datagram carries on the wire besides its payload.
const IPUDPHeaders = 28

// Wire returns the bytes on the wire, headers included.
func (c Counts) Wire() int64 { return c.Up + c.Down + IPUDPHeaders*c.Packets }

// SmallWire returns the small datagrams' bytes on the wire.
func (c Counts) SmallWire() int64 { return c.SmallBytes + IPUDPHeaders*c.Small }

// Sub returns c less o, counter by counter.
func (c Counts) Sub(o Counts) Counts {
	return Counts{Up: c.Up - o.Up, Down: c.Down - o.Down, Packets: c.Packets - o.Packets,
		Small: c.Small - o.Small, SmallBytes: c.SmallBytes - o.SmallBytes}
}

// Add returns c plus o, counter by counter.
func (c Counts) Add(o Counts) Counts {
	return Counts{Up: c.Up + o.Up, Down: c.Down + o.Down, Packets: c.Packets + o.Packets,
		Small: c.Small + o.Small, SmallBytes: c.SmallBytes + o.SmallBytes}
}

// Close stops the relay and waits for its goroutines. It may be called
// more than once.
func (r *Relay) Close() {
	r.mu.Lock()
	if !r.closed {
		r.closed = true
		r.ln.Close()
		for _, p := range r.peers {
			p.conn.Close()
		}
	}
	r.mu.Unlock()
	r.wg.Wait()
}

func (r *Relay) fromClients() {
	buf := make([]byte, MaxDatagram)
	for {
		n, _, flags, from, err := r.ln.ReadMsgUDPAddrPort(buf, nil)
		if err != nil {
			if isRefused(err) {
				continue
			}
			return // closed
		}
		if flags&syscall.MSG_TRUNC != 0 {
			r.truncated.Add(1)
			continue
		}
		if r.holed() {
			continue
		}
		p := r.peerFor(from)
		if p == nil {
			return // closed
		}
		p.last.Store(time.Now().UnixNano())
		r.up.Add(int64(n))
		r.upPackets.Add(1)
		r.countSmall(n)
		// An error is a datagram lost, as on any network; QUIC resends.
		p.conn.Write(buf[:n])
	}
}

// peerFor returns the socket toward the hub for a client, opening one for
// a new client; nil once the relay is closed or no socket can be opened.
func (r *Relay) peerFor(client netip.AddrPort) *peer {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	if p := r.peers[client]; p != nil {
		return p
	}
	conn, err := net.DialUDP("udp", nil, r.target)
	if err != nil {
		return nil
	}
	p := &peer{client: client, conn: conn}
	p.last.Store(time.Now().UnixNano())
	r.peers[client] = p
	r.wg.Go(func() { r.fromHub(p) })
	return p
}

func (r *Relay) fromHub(p *peer) {
	defer r.forget(p)
	buf := make([]byte, MaxDatagram)
	p.conn.SetReadDeadline(time.Now().Add(PeerIdle))
	for {
		n, _, flags, _, err := p.conn.ReadMsgUDPAddrPort(buf, nil)
		switch {
		case err == nil:
		case isRefused(err):
			continue // the hub is down for now
		case errors.Is(err, os.ErrDeadlineExceeded):
			last := time.Unix(0, p.last.Load())
			if time.Since(last) >= PeerIdle {
				return
			}
			p.conn.SetReadDeadline(last.Add(PeerIdle))
			continue
		default:
			return // closed
		}
		if flags&syscall.MSG_TRUNC != 0 {
			r.truncated.Add(1)
			continue
		}
		p.last.Store(time.Now().UnixNano()) // a cut link is not an idle one
		if r.holed() {
			continue
		}
		down := r.down.Add(int64(n))
		r.downPacks.Add(1)
		r.countSmall(n)
		if at := r.armedAt.Load(); at > 0 && down >= at && r.armedAt.CompareAndSwap(at, 0) {
			r.cutAt.Store(down)
			r.Cut(time.Duration(r.armedFor.Load()))
		}
		r.ln.WriteToUDPAddrPort(buf[:n], p.client)
	}
}

func (r *Relay) countSmall(n int) {
	if n <= SmallDatagram {
		r.small.Add(1)
		r.smallBytes.Add(int64(n))
	}
}

// forget closes a peer's socket and drops it, unless the relay closed it.
func (r *Relay) forget(p *peer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.peers[p.client] == p {
		delete(r.peers, p.client)
	}
	if !r.closed {
		p.conn.Close()
	}
}

func isRefused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }
