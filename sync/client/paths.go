package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/quic-go/quic-go"
)

// maxRelayPaths bounds the relays one session keeps a way through. Each
// holds a UDP socket until the session ends (quic-go ends a connection
// whose transports close), and each probe takes one of the four
// connection IDs the hub lends the node; a site has a handful of nodes.
const maxRelayPaths = 4

// maxCandidates bounds the relays probed at once when the session's
// path turns suspect, so that the probes never want more connection IDs
// than the hub lends.
const maxCandidates = 2

// newPathway returns a way over conn, without a path yet; its release
// closes the transport, then conn.
func newPathway(conn net.PacketConn) *pathway {
	tr := &quic.Transport{Conn: conn}
	return &pathway{tr: tr, release: func() { tr.Close(); conn.Close() }}
}

// pathway is one way a session can take to the hub: a QUIC transport on
// a socket of its own, and the path through it once one was added. The
// session's first path, the one it was dialed on, has no Path: quic-go
// gives that one none, and a way back to it is added when needed.
type pathway struct {
	tr      *quic.Transport
	path    *quic.Path
	release func() // closes the transport and its socket
}

// paths moves one session between the ways it can take to the hub, with
// QUIC connection migration (RFC 9000, section 9): the node probes a way
// (a PATH_CHALLENGE the hub answers on it) and, once the hub answered,
// switches the connection to it. The connection, its streams and the
// hub's session stay as they were, authenticated as the node; only the
// packets take another way. A relay forwards them, encrypted, and reads
// none.
//
// Its methods are called from the session's liveness loop only, one at
// a time, except close.
type paths struct {
	c    *Client
	conn *quic.Conn
	hub  *net.UDPAddr // the hub's address, as the connection knows it

	mu     sync.Mutex // guards ways and cur against close
	cur    Route
	direct *pathway // nil until the session needs a way back to its own uplink
	relays map[netip.AddrPort]*pathway
	closed bool
}

// newPaths returns the paths of conn, dialed on route through first.
func newPaths(c *Client, conn *quic.Conn, route Route, first *pathway) *paths {
	p := &paths{c: c, conn: conn, cur: route, relays: map[netip.AddrPort]*pathway{}}
	p.hub, _ = conn.RemoteAddr().(*net.UDPAddr)
	if route.Direct() {
		p.direct = first
	} else {
		p.relays[route.Relay] = first
	}
	return p
}

// current returns the route the session is on.
func (p *paths) current() Route {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cur
}

// close releases every way, once the connection is closed: closing a
// transport ends every connection on it, so none is closed before.
func (p *paths) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	if p.direct != nil {
		p.direct.release()
	}
	for _, w := range p.relays {
		w.release()
	}
}

// way returns the pathway for route, opening its socket and transport
// if the session has none yet. A new way to the hub leads where the
// connection does, whatever address it was resolved to since.
func (p *paths) way(ctx context.Context, route Route, from netip.Addr) (*pathway, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errors.New("session ended")
	}
	if route.Direct() {
		if p.direct == nil {
			w, _, err := p.c.directWay(ctx)
			if err != nil {
				return nil, err
			}
			p.direct = w
		}
		return p.direct, nil
	}
	if w := p.relays[route.Relay]; w != nil {
		return w, nil
	}
	if len(p.relays) >= maxRelayPaths {
		return nil, fmt.Errorf("this session already keeps ways through %d relays", maxRelayPaths)
	}
	w, err := relayWay(route.Relay, from, p.hub)
	if err != nil {
		return nil, err
	}
	p.relays[route.Relay] = w
	return w, nil
}

// probe has the hub answer on route until ctx ends, adding a path to
// the route's transport if it has none.
func (p *paths) probe(ctx context.Context, route Route, from netip.Addr) (*pathway, error) {
	w, err := p.way(ctx, route, from)
	if err != nil {
		return nil, err
	}
	if w.path == nil {
		if w.path, err = p.conn.AddPath(w.tr); err != nil {
			return nil, err
		}
	}
	if err := w.path.Probe(ctx); err != nil {
		return nil, err
	}
	return w, nil
}

// move probes the candidates at once, for as long as ctx lasts, and
// switches the session to the first the hub answers on. It returns the
// route switched to, or the zero Route and why none.
func (p *paths) move(ctx context.Context, candidates []Route, from netip.Addr) (Route, error) {
	if len(candidates) == 0 {
		return Route{}, errors.New("no other way to the hub")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type answer struct {
		route Route
		w     *pathway
		err   error
	}
	answers := make(chan answer, len(candidates))
	for _, r := range candidates {
		go func() {
			w, err := p.probe(ctx, r, from)
			answers <- answer{r, w, err}
		}()
	}
	var (
		won  Route
		errs []error
		ok   bool
	)
	for range candidates {
		a := <-answers
		switch {
		case a.err == nil && !ok:
			if err := a.w.path.Switch(); err != nil {
				errs = append(errs, fmt.Errorf("%v: switch: %w", a.route, err))
				break
			}
			won, ok = a.route, true
			cancel() // the others stop probing
		case a.err != nil && !errors.Is(a.err, context.Canceled):
			errs = append(errs, fmt.Errorf("%v: %w", a.route, a.err))
		}
	}
	if !ok {
		return Route{}, errors.Join(errs...)
	}
	p.mu.Lock()
	prev := p.cur
	p.cur = won
	p.mu.Unlock()
	// The ways not taken give their connection IDs back to the hub; the
	// one left is no longer active, so it can go too. The way taken
	// keeps its path, the session's way back to it.
	for _, r := range append(candidates, prev) {
		if r != won {
			p.dropPath(r)
		}
	}
	return won, nil
}

// dropPath closes the path of route, if it has one and it is not the
// session's current one; the transport stays until the session ends.
func (p *paths) dropPath(r Route) {
	p.mu.Lock()
	defer p.mu.Unlock()
	w := p.direct
	if !r.Direct() {
		w = p.relays[r.Relay]
	}
	if w == nil || w.path == nil || r == p.cur {
		return
	}
	if err := w.path.Close(); err == nil {
		w.path = nil
	}
}

// candidates returns the ways to try when the session's current one
// turned suspect: its own uplink if it is on a relay, and the relays
// offered, best first, up to maxCandidates in all.
func (p *paths) candidates(relays []netip.AddrPort) []Route {
	cur := p.current()
	var out []Route
	if !cur.Direct() {
		out = append(out, Route{})
	}
	for _, r := range relays {
		if len(out) == maxCandidates {
			break
		}
		if r != cur.Relay && !slices.Contains(out, Route{Relay: r}) {
			out = append(out, Route{Relay: r})
		}
	}
	return out
}

// directWay opens a way to the hub over the node's own uplink: a UDP
// socket of its own (or Config.Dial's connection) and a transport on it,
// and returns it with the hub's address on it.
func (c *Client) directWay(ctx context.Context) (*pathway, net.Addr, error) {
	if c.cfg.Dial != nil {
		pc, hub, err := c.cfg.Dial(ctx)
		if err != nil {
			return nil, nil, err
		}
		return newPathway(pc), hub, nil
	}
	hub, err := c.resolveHub(ctx)
	if err != nil {
		return nil, nil, err
	}
	uc, err := net.ListenUDP("udp", nil)
	if err != nil {
		return nil, nil, fmt.Errorf("socket toward the hub: %w", err)
	}
	return newPathway(plainConn{uc}), hub, nil
}

// plainConn is a UDP socket without its batch and ancillary-data I/O;
// relayedConn is one too. quic-go (v0.65) fixes a connection's use of ECN and
// segmentation offload by the socket of its first path, and panics when
// it writes with them on a path whose socket has none: every way of a
// session is plain, so that it can move between them. A sync session
// needs neither. Both keep the socket's buffer sizes and the
// don't-fragment bit, which path MTU discovery needs.
type plainConn struct{ uc *net.UDPConn }

func (c plainConn) ReadFrom(p []byte) (int, net.Addr, error)  { return c.uc.ReadFrom(p) }
func (c plainConn) WriteTo(p []byte, a net.Addr) (int, error) { return c.uc.WriteTo(p, a) }
func (c plainConn) Close() error                              { return c.uc.Close() }
func (c plainConn) LocalAddr() net.Addr                       { return c.uc.LocalAddr() }
func (c plainConn) SetDeadline(t time.Time) error             { return c.uc.SetDeadline(t) }
func (c plainConn) SetReadDeadline(t time.Time) error         { return c.uc.SetReadDeadline(t) }
func (c plainConn) SetWriteDeadline(t time.Time) error        { return c.uc.SetWriteDeadline(t) }
func (c plainConn) SetReadBuffer(n int) error                 { return c.uc.SetReadBuffer(n) }
func (c plainConn) SetWriteBuffer(n int) error                { return c.uc.SetWriteBuffer(n) }
func (c plainConn) SyscallConn() (syscall.RawConn, error)     { return c.uc.SyscallConn() }

// relayWay opens a way to hub through the relay at relay, from a UDP
// socket of its own on from (any address if invalid).
func relayWay(relay netip.AddrPort, from netip.Addr, hub *net.UDPAddr) (*pathway, error) {
	var laddr *net.UDPAddr
	if from.IsValid() {
		laddr = &net.UDPAddr{IP: from.AsSlice()}
	}
	uc, err := net.ListenUDP("udp", laddr)
	if err != nil {
		return nil, fmt.Errorf("socket toward relay %v: %w", relay, err)
	}
	return newPathway(&relayedConn{plainConn: plainConn{uc}, relay: netip.AddrPortFrom(relay.Addr().Unmap(), relay.Port()), hub: hub}), nil
}
