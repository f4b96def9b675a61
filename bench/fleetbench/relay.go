package fleetbench

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

// relay forwards one agent's UDP datagrams to the hub's sync address and
// back, counting them: the agent's bytes on the wire, QUIC's own packets
// included, which nothing above the socket sees. Each client address (the
// agent opens a new socket for every connection) gets its own socket
// toward the hub, as a NAT would.
//
// It is lighter than internal/netem's relay, which degrades one link in
// tests: no conditions, small buffers, and client sockets forgotten once
// idle for relayPeerIdle, so that a thousand of them are cheap. It keeps
// forwarding while the hub is down and after it is back on the same
// port: a closed port answers with ICMP, which a connected UDP socket
// reports as ECONNREFUSED on its next read, and that ends nothing. Its
// methods are safe for concurrent use.
type relay struct {
	target *net.UDPAddr
	ln     *net.UDPConn

	mu     sync.Mutex
	peers  map[netip.AddrPort]*relayPeer
	closed bool

	up, down             atomic.Int64 // payload bytes client->hub, hub->client
	upPackets, downPacks atomic.Int64
	small, smallBytes    atomic.Int64 // datagrams of at most smallDatagram bytes, both ways
	truncated            atomic.Int64

	wg sync.WaitGroup
}

// relayPeer is one client socket and its socket toward the hub.
type relayPeer struct {
	client netip.AddrPort
	conn   *net.UDPConn // connected to the hub
	last   atomic.Int64 // unix nanoseconds of the last datagram either way
}

// maxDatagram bounds the datagrams relayed: quic-go sends none over 1,452
// bytes (protocol.MaxPacketBufferSize), and GSO batches arrive split.
// Larger ones are dropped and counted in truncated.
const maxDatagram = 2048

// smallDatagram is the largest payload counted as small: the size class of
// QUIC's keep-alive PINGs and acknowledgements, about 25 bytes with
// quic-go's 4-byte connection IDs. A small frame of the sync protocol can
// fit too; the agents' sync counters tell whether any flowed.
const smallDatagram = 64

// relayPeerIdle is how long a client socket may be silent both ways before
// the relay forgets it: twice the sync idle timeout (15s), past which the
// QUIC connection on it is dead anyway.
const relayPeerIdle = 30 * time.Second

// listenRelay starts a relay on a free loopback port toward target. The
// caller must call close.
func listenRelay(target *net.UDPAddr) (*relay, error) {
	ln, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, fmt.Errorf("relay listen: %w", err)
	}
	r := &relay{target: target, ln: ln, peers: map[netip.AddrPort]*relayPeer{}}
	r.wg.Go(r.fromClients)
	return r, nil
}

// addr returns the address the agent dials.
func (r *relay) addr() string { return r.ln.LocalAddr().String() }

// counts returns the payload bytes carried toward the hub and back, and the
// datagrams both ways.
func (r *relay) counts() relayCounts {
	return relayCounts{
		up: r.up.Load(), down: r.down.Load(), packets: r.upPackets.Load() + r.downPacks.Load(),
		small: r.small.Load(), smallBytes: r.smallBytes.Load(),
	}
}

// relayCounts is a reading of a relay's counters.
type relayCounts struct{ up, down, packets, small, smallBytes int64 }

// ipUDPHeaders is the size of an IPv4 and a UDP header, which every
// datagram carries on the wire besides its payload.
const ipUDPHeaders = 28

// wire returns the bytes on the wire, headers included.
func (c relayCounts) wire() int64 { return c.up + c.down + ipUDPHeaders*c.packets }

// smallWire returns the small datagrams' bytes on the wire.
func (c relayCounts) smallWire() int64 { return c.smallBytes + ipUDPHeaders*c.small }

func (c relayCounts) sub(o relayCounts) relayCounts {
	return relayCounts{up: c.up - o.up, down: c.down - o.down, packets: c.packets - o.packets,
		small: c.small - o.small, smallBytes: c.smallBytes - o.smallBytes}
}

func (c relayCounts) add(o relayCounts) relayCounts {
	return relayCounts{up: c.up + o.up, down: c.down + o.down, packets: c.packets + o.packets,
		small: c.small + o.small, smallBytes: c.smallBytes + o.smallBytes}
}

// close stops the relay and waits for its goroutines. It may be called
// more than once.
func (r *relay) close() {
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

func (r *relay) fromClients() {
	buf := make([]byte, maxDatagram)
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
func (r *relay) peerFor(client netip.AddrPort) *relayPeer {
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
	p := &relayPeer{client: client, conn: conn}
	p.last.Store(time.Now().UnixNano())
	r.peers[client] = p
	r.wg.Go(func() { r.fromHub(p) })
	return p
}

func (r *relay) fromHub(p *relayPeer) {
	defer r.forget(p)
	buf := make([]byte, maxDatagram)
	p.conn.SetReadDeadline(time.Now().Add(relayPeerIdle))
	for {
		n, _, flags, _, err := p.conn.ReadMsgUDPAddrPort(buf, nil)
		switch {
		case err == nil:
		case isRefused(err):
			continue // the hub is down for now
		case errors.Is(err, os.ErrDeadlineExceeded):
			last := time.Unix(0, p.last.Load())
			if time.Since(last) >= relayPeerIdle {
				return
			}
			p.conn.SetReadDeadline(last.Add(relayPeerIdle))
			continue
		default:
			return // closed
		}
		if flags&syscall.MSG_TRUNC != 0 {
			r.truncated.Add(1)
			continue
		}
		p.last.Store(time.Now().UnixNano())
		r.down.Add(int64(n))
		r.downPacks.Add(1)
		r.countSmall(n)
		r.ln.WriteToUDPAddrPort(buf[:n], p.client)
	}
}

func (r *relay) countSmall(n int) {
	if n <= smallDatagram {
		r.small.Add(1)
		r.smallBytes.Add(int64(n))
	}
}

// forget closes a peer's socket and drops it, unless the relay closed it.
func (r *relay) forget(p *relayPeer) {
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
