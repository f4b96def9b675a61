package otabench

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
// back, counting the payload bytes each way, and can black-hole the link
// for a while (a cut: datagrams both ways are dropped). Each client
// address gets its own socket toward the hub, as a NAT would. Its methods
// are safe for concurrent use.
type relay struct {
	target *net.UDPAddr
	ln     *net.UDPConn

	mu     sync.Mutex
	peers  map[netip.AddrPort]*net.UDPConn
	closed bool

	up, down  atomic.Int64
	packets   atomic.Int64
	holeUntil atomic.Int64 // unix nanoseconds until which datagrams are dropped
	// armedAt, unless 0, is the down count at which the link is cut for
	// armedFor; the cut disarms it, and sets cutAt to the down count.
	armedAt, armedFor, cutAt atomic.Int64

	wg sync.WaitGroup
}

// maxDatagram bounds the datagrams relayed: quic-go sends none over 1,452
// bytes; larger ones are dropped.
const maxDatagram = 2048

// relayPeerIdle is how long a client socket may be silent before it is
// forgotten: twice the sync idle timeout.
const relayPeerIdle = 30 * time.Second

// listenRelay starts a relay on a free loopback port toward target. The
// caller must call close.
func listenRelay(target *net.UDPAddr) (*relay, error) {
	ln, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, fmt.Errorf("relay listen: %w", err)
	}
	r := &relay{target: target, ln: ln, peers: map[netip.AddrPort]*net.UDPConn{}}
	r.wg.Go(r.fromClients)
	return r, nil
}

func (r *relay) addr() string { return r.ln.LocalAddr().String() }

// cut drops every datagram both ways for d from now.
func (r *relay) cut(d time.Duration) { r.holeUntil.Store(time.Now().Add(d).UnixNano()) }

// armCut has the link cut for d once after more bytes toward the
// client.
func (r *relay) armCut(after int64, d time.Duration) {
	r.armedFor.Store(int64(d))
	r.armedAt.Store(r.down.Load() + after)
}

// cutDown returns the down count at which the armed cut happened, 0 if it
// has not.
func (r *relay) cutDown() int64 { return r.cutAt.Load() }

func (r *relay) holed() bool { return time.Now().UnixNano() < r.holeUntil.Load() }

// counts returns the payload bytes carried toward the hub and back, and
// the datagrams both ways.
func (r *relay) counts() (up, down, packets int64) {
	return r.up.Load(), r.down.Load(), r.packets.Load()
}

// close stops the relay and waits for its goroutines; it may be called
// more than once.
func (r *relay) close() {
	r.mu.Lock()
	if !r.closed {
		r.closed = true
		r.ln.Close()
		for _, c := range r.peers {
			c.Close()
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
			if errors.Is(err, syscall.ECONNREFUSED) {
				continue
			}
			return // closed
		}
		if flags&syscall.MSG_TRUNC != 0 || r.holed() {
			continue
		}
		c := r.peerFor(from)
		if c == nil {
			return
		}
		r.up.Add(int64(n))
		r.packets.Add(1)
		c.Write(buf[:n]) // a lost datagram is resent by QUIC
	}
}

func (r *relay) peerFor(client netip.AddrPort) *net.UDPConn {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	if c := r.peers[client]; c != nil {
		return c
	}
	c, err := net.DialUDP("udp", nil, r.target)
	if err != nil {
		return nil
	}
	r.peers[client] = c
	r.wg.Go(func() { r.fromHub(client, c) })
	return c
}

func (r *relay) fromHub(client netip.AddrPort, c *net.UDPConn) {
	defer func() {
		r.mu.Lock()
		if r.peers[client] == c {
			delete(r.peers, client)
		}
		if !r.closed {
			c.Close()
		}
		r.mu.Unlock()
	}()
	buf := make([]byte, maxDatagram)
	for {
		c.SetReadDeadline(time.Now().Add(relayPeerIdle))
		n, _, flags, _, err := c.ReadMsgUDPAddrPort(buf, nil)
		switch {
		case err == nil:
		case errors.Is(err, syscall.ECONNREFUSED):
			continue
		case errors.Is(err, os.ErrDeadlineExceeded):
			return
		default:
			return
		}
		if flags&syscall.MSG_TRUNC != 0 || r.holed() {
			continue
		}
		down := r.down.Add(int64(n))
		r.packets.Add(1)
		if at := r.armedAt.Load(); at > 0 && down >= at && r.armedAt.CompareAndSwap(at, 0) {
			r.cutAt.Store(down)
			r.cut(time.Duration(r.armedFor.Load()))
		}
		r.ln.WriteToUDPAddrPort(buf[:n], client)
	}
}
