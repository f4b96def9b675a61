package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/quic-go/quic-go"
)

// Route is the way one connection attempt takes to the hub: direct, the
// zero Route, or through the site peer relaying at Relay (edge/relay).
// Through a relay the session is still the node's own: the peer forwards
// its encrypted packets and reads none of them.
type Route struct {
	Relay netip.AddrPort
}

// Direct reports whether r goes to the hub without a relay.
func (r Route) Direct() bool { return !r.Relay.IsValid() }

func (r Route) String() string {
	if r.Direct() {
		return "direct"
	}
	return "relay " + r.Relay.String()
}

// Outcome is how an attempt on a Route ended, as Failover judges routes.
type Outcome int

const (
	// Failed: no session, or one whose link went dead (nothing heard
	// from the hub for the idle timeout, not one lost packet).
	Failed Outcome = iota
	// Ended: a session that ended for another reason: the hub restarted
	// or closed it, the node stopped it. The route worked.
	Ended
)

// Failover chooses the route of each connection attempt. It does no I/O
// and keeps no clock: the client tells it how each attempt ended. The
// zero Failover with FailAfter set is ready; it is not safe for
// concurrent use.
//
// The node goes direct while that works. After FailAfter attempts in a
// row failed direct, it tries the relays it is given, in their order,
// keeping the one that last carried a session while it is offered and
// works; once each offered failed, it tries direct once more, then the
// relays again. A session that ended on a relay was there because the
// direct path failed (a session moves between paths as it runs; see
// paths), so the next attempt goes through a relay too. A session moves
// back to the direct path once that works, and one that ended there
// starts the count over.
type Failover struct {
	// FailAfter is how many failed direct attempts in a row move the
	// node to a relay: at least 1.
	FailAfter int

	directFailures int              // direct attempts failed in a row
	failed         []netip.AddrPort // relays failed since the last direct attempt
	stick          netip.AddrPort   // the relay that last carried a session
}

// Next returns the route of the next attempt, given the relays offered
// now, best first.
func (f *Failover) Next(relays []netip.AddrPort) Route {
	if len(relays) == 0 || f.directFailures < max(f.FailAfter, 1) {
		return Route{}
	}
	if f.stick.IsValid() && slices.Contains(relays, f.stick) {
		return Route{Relay: f.stick}
	}
	for _, r := range relays {
		if !slices.Contains(f.failed, r) {
			return Route{Relay: r}
		}
	}
	f.failed = f.failed[:0]
	return Route{}
}

// Done records how the attempt ended, on r, the route its session was on
// at the end (the one it was dialed on if none began).
func (f *Failover) Done(r Route, o Outcome) {
	if !r.Direct() {
		f.directFailures = max(f.directFailures, f.FailAfter, 1)
	}
	switch {
	case r.Direct() && o == Failed:
		f.directFailures++
	case r.Direct():
		f.directFailures, f.failed, f.stick = 0, f.failed[:0], netip.AddrPort{}
	case o == Failed:
		if f.stick == r.Relay {
			f.stick = netip.AddrPort{}
		}
		// Bounded: Next clears the list once every relay offered is in it.
		if !slices.Contains(f.failed, r.Relay) {
			f.failed = append(f.failed, r.Relay)
		}
	default:
		f.stick = r.Relay
		f.failed = slices.DeleteFunc(f.failed, func(a netip.AddrPort) bool { return a == r.Relay })
	}
}

// outcome judges how an attempt that reached a session or not ended.
func outcome(reached bool, err error) Outcome {
	switch {
	case !reached || errors.Is(err, ErrLinkDead):
		return Failed
	default:
		return Ended
	}
}

// relays returns the relays offered now and the address to send to them
// from, none if Config.Relays is nil.
func (c *Client) relays() (netip.Addr, []netip.AddrPort) {
	if c.cfg.Relays == nil {
		return netip.Addr{}, nil
	}
	return c.cfg.Relays()
}

// dialRelay connects to the hub through the relay at relay, from a UDP
// socket of its own on from (any address if invalid), and returns the
// connection and the way it took.
func (c *Client) dialRelay(ctx context.Context, relay netip.AddrPort, from netip.Addr, tlsConf *tls.Config, qconf *quic.Config) (*quic.Conn, *pathway, error) {
	hub, err := c.resolveHub(ctx)
	if err != nil {
		return nil, nil, err
	}
	w, err := relayWay(relay, from, hub)
	if err != nil {
		return nil, nil, err
	}
	conn, err := w.tr.Dial(ctx, hub, tlsConf, qconf)
	if err != nil {
		w.release()
		return nil, nil, err
	}
	return conn, w, nil
}

// resolveHub returns the UDP address of Config.HubAddr.
func (c *Client) resolveHub(ctx context.Context) (*net.UDPAddr, error) {
	host, port, err := net.SplitHostPort(c.cfg.HubAddr)
	if err != nil {
		return nil, fmt.Errorf("hub address: %w", err)
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil || len(ips) == 0 {
		return nil, fmt.Errorf("resolve hub %s: %w", host, err)
	}
	hub, err := net.ResolveUDPAddr("udp", net.JoinHostPort(ips[0].Unmap().String(), port))
	if err != nil {
		return nil, fmt.Errorf("hub address: %w", err)
	}
	return hub, nil
}

// relayedConn is a packet connection to the hub through a relay: it sends
// everything to the relay, and presents what the relay sends back as
// coming from the hub, so that QUIC sees the hub's address on both ends.
// Datagrams from any other address are dropped.
//
// The rest of a socket's methods are plainConn's.
type relayedConn struct {
	plainConn
	relay netip.AddrPort
	hub   *net.UDPAddr
}

func (r *relayedConn) ReadFrom(p []byte) (int, net.Addr, error) {
	for {
		n, from, err := r.uc.ReadFromUDPAddrPort(p)
		if err != nil {
			return n, nil, err
		}
		if netip.AddrPortFrom(from.Addr().Unmap(), from.Port()) == r.relay {
			return n, r.hub, nil
		}
	}
}

func (r *relayedConn) WriteTo(p []byte, _ net.Addr) (int, error) {
	return r.uc.WriteToUDPAddrPort(p, r.relay)
}
