// Package memnet is an in-memory packet network for tests, as memberlist's
// MockNetwork: its connections are net.PacketConns, so that quic-go runs
// over them without UDP sockets, between hosts whose links a test
// black-holes and heals at a moment of its choosing, and may slow down.
// Only tests import it.
package memnet

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// queueLen is how many packets a connection holds unread; more are
// dropped, as a full UDP socket buffer drops them.
const queueLen = 1024

// Network is a set of hosts and their connections. Every host reaches
// every other; a cut host reaches none. All the methods are safe for
// concurrent use.
type Network struct {
	mu       sync.Mutex
	conns    map[netip.AddrPort]*Conn
	lastPort map[netip.Addr]uint16
	cut      map[netip.Addr]bool
	delay    time.Duration

	delivered, dropped atomic.Int64
}

// New returns an empty network.
func New() *Network {
	return &Network{
		conns:    map[netip.AddrPort]*Conn{},
		lastPort: map[netip.Addr]uint16{},
		cut:      map[netip.Addr]bool{},
	}
}

// Listen opens a connection at addr, an IP address and port; port 0
// picks one not in use at that address. The host needs no declaring: any
// IP address is one.
func (n *Network) Listen(addr string) (*Conn, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, fmt.Errorf("memnet listen: %w", err)
	}
	ip := ap.Addr().Unmap()
	n.mu.Lock()
	defer n.mu.Unlock()
	port := ap.Port()
	for port == 0 {
		n.lastPort[ip]++
		if p := n.lastPort[ip]; p != 0 && n.conns[netip.AddrPortFrom(ip, p)] == nil {
			port = p
		}
	}
	at := netip.AddrPortFrom(ip, port)
	if n.conns[at] != nil {
		return nil, fmt.Errorf("memnet listen %v: address in use", at)
	}
	c := &Conn{
		net:    n,
		addr:   at,
		in:     make(chan packet, queueLen),
		closed: make(chan struct{}),
		wake:   make(chan struct{}),
	}
	n.conns[at] = c
	return c, nil
}

// Cut black-holes host ip: from now on every packet to or from it is
// dropped without a word, both ways, until Heal. Packets already on
// their way (see SetDelay) still arrive.
func (n *Network) Cut(ip string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cut[mustIP(ip)] = true
}

// Heal undoes Cut.
func (n *Network) Heal(ip string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.cut, mustIP(ip))
}

// SetDelay makes every packet sent from now take d to arrive; 0, the
// default, delivers at once. Packets delayed alike may arrive in any
// order, as UDP allows.
func (n *Network) SetDelay(d time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.delay = d
}

// Delivered is how many packets have reached a connection's queue.
func (n *Network) Delivered() int64 { return n.delivered.Load() }

// Dropped is how many packets were lost: to or from a cut host, to an
// address nobody listens on, or to a full queue.
func (n *Network) Dropped() int64 { return n.dropped.Load() }

func mustIP(s string) netip.Addr {
	ip, err := netip.ParseAddr(s)
	if err != nil {
		panic(fmt.Sprintf("memnet: %v", err))
	}
	return ip.Unmap()
}

// send routes p from one address to another.
func (n *Network) send(from, to netip.AddrPort, p []byte) {
	n.mu.Lock()
	dst := n.conns[to]
	lost := dst == nil || n.cut[from.Addr()] || n.cut[to.Addr()]
	delay := n.delay
	n.mu.Unlock()
	if lost {
		n.dropped.Add(1)
		return
	}
	pk := packet{from: from, data: append([]byte(nil), p...)}
	if delay <= 0 {
		n.deliver(dst, pk)
		return
	}
	time.AfterFunc(delay, func() { n.deliver(dst, pk) })
}

func (n *Network) deliver(dst *Conn, pk packet) {
	select {
	case <-dst.closed:
		n.dropped.Add(1)
	case dst.in <- pk:
		n.delivered.Add(1)
	default:
		n.dropped.Add(1)
	}
}

type packet struct {
	from netip.AddrPort
	data []byte
}

// Conn is one end of a network's links: a net.PacketConn whose addresses
// are *net.UDPAddr. Writes never block; reads block until a packet, the
// read deadline or Close.
type Conn struct {
	net    *Network
	addr   netip.AddrPort
	in     chan packet
	closed chan struct{}

	mu           sync.Mutex
	closing      bool
	readDeadline time.Time
	wake         chan struct{} // closed and replaced when the deadline changes
}

var _ net.PacketConn = (*Conn)(nil)

// ReadFrom reads the next packet into p; a packet longer than p is cut
// short, as UDP does.
func (c *Conn) ReadFrom(p []byte) (int, net.Addr, error) {
	for {
		n, from, again, err := c.readOnce(p)
		if !again {
			return n, from, err
		}
	}
}

// readOnce waits for a packet until the read deadline, and asks for
// another try when the deadline changed meanwhile.
func (c *Conn) readOnce(p []byte) (n int, from net.Addr, again bool, err error) {
	c.mu.Lock()
	deadline, wake := c.readDeadline, c.wake
	c.mu.Unlock()
	select {
	case <-c.closed:
		return 0, nil, false, c.opError("read", net.ErrClosed)
	default:
	}
	var timeout <-chan time.Time
	if !deadline.IsZero() {
		d := time.Until(deadline)
		if d <= 0 {
			return 0, nil, false, c.opError("read", os.ErrDeadlineExceeded)
		}
		t := time.NewTimer(d)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case pk := <-c.in:
		return copy(p, pk.data), net.UDPAddrFromAddrPort(pk.from), false, nil
	case <-c.closed:
		return 0, nil, false, c.opError("read", net.ErrClosed)
	case <-timeout:
		return 0, nil, false, c.opError("read", os.ErrDeadlineExceeded)
	case <-wake:
		return 0, nil, true, nil
	}
}

// WriteTo sends p to addr, a *net.UDPAddr or anything whose String is
// ip:port. A packet that is lost is not an error, as with UDP.
func (c *Conn) WriteTo(p []byte, addr net.Addr) (int, error) {
	select {
	case <-c.closed:
		return 0, c.opError("write", net.ErrClosed)
	default:
	}
	var to netip.AddrPort
	if u, ok := addr.(*net.UDPAddr); ok {
		to = u.AddrPort()
	} else {
		var err error
		if to, err = netip.ParseAddrPort(addr.String()); err != nil {
			return 0, c.opError("write", err)
		}
	}
	to = netip.AddrPortFrom(to.Addr().Unmap(), to.Port())
	c.net.send(c.addr, to, p)
	return len(p), nil
}

// Close frees the connection's address; a blocked ReadFrom returns
// net.ErrClosed. Closing again does nothing.
func (c *Conn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return nil
	}
	c.closing = true
	close(c.closed)
	c.net.mu.Lock()
	delete(c.net.conns, c.addr)
	c.net.mu.Unlock()
	return nil
}

// LocalAddr returns the connection's *net.UDPAddr.
func (c *Conn) LocalAddr() net.Addr { return net.UDPAddrFromAddrPort(c.addr) }

// SetDeadline sets the read deadline; writes never block.
func (c *Conn) SetDeadline(t time.Time) error { return c.SetReadDeadline(t) }

// SetReadDeadline makes ReadFrom fail with os.ErrDeadlineExceeded from
// t on, including a ReadFrom already blocked; the zero t means none.
func (c *Conn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.readDeadline = t
	close(c.wake)
	c.wake = make(chan struct{})
	return nil
}

// SetWriteDeadline does nothing: writes never block.
func (c *Conn) SetWriteDeadline(time.Time) error { return nil }

// SetReadBuffer and SetWriteBuffer do nothing (the queue has a fixed
// length); they spare quic-go's warning about buffer sizes it cannot set.
func (c *Conn) SetReadBuffer(int) error  { return nil }
func (c *Conn) SetWriteBuffer(int) error { return nil }

func (c *Conn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: "memnet", Addr: c.LocalAddr(), Err: err}
}
