// Package netem is a UDP relay that stands between edge agents and a hub in
// tests: it forwards datagrams both ways and can drop a share of them,
// delay them, black-hole a link, or flap it, counting the bytes it carries.
// It is test equipment, used only on loopback.
package netem

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Conditions are what a relay does to the datagrams it forwards.
type Conditions struct {
	// Drop is the share of datagrams dropped, each way: 0 to 1.
	Drop float64
	// Delay is added to every datagram, each way.
	Delay time.Duration
	// Blackhole drops everything.
	Blackhole bool
}

// Relay forwards UDP datagrams between the clients that send to its
// address and one target. Each client gets its own socket toward the
// target, as a NAT would. Its methods are safe for concurrent use.
type Relay struct {
	target *net.UDPAddr
	ln     *net.UDPConn

	mu    sync.Mutex
	cond  Conditions
	peers map[string]*peer

	up, down atomic.Int64 // bytes forwarded client->target, target->client
	dropped  atomic.Int64

	wg     sync.WaitGroup
	closed chan struct{}
	once   sync.Once
}

type peer struct {
	client *net.UDPAddr
	conn   *net.UDPConn // toward the target
}

// Listen starts a relay on a free loopback port toward target. Close stops
// it.
func Listen(target string) (*Relay, error) {
	taddr, err := net.ResolveUDPAddr("udp", target)
	if err != nil {
		return nil, fmt.Errorf("relay target: %w", err)
	}
	ln, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, fmt.Errorf("relay listen: %w", err)
	}
	r := &Relay{target: taddr, ln: ln, peers: map[string]*peer{}, closed: make(chan struct{})}
	r.wg.Go(r.fromClients)
	return r, nil
}

// Addr returns the address clients send to.
func (r *Relay) Addr() string { return r.ln.LocalAddr().String() }

// Set replaces the conditions.
func (r *Relay) Set(c Conditions) {
	r.mu.Lock()
	r.cond = c
	r.mu.Unlock()
}

// Bytes returns the bytes forwarded toward the target and back.
func (r *Relay) Bytes() (up, down int64) { return r.up.Load(), r.down.Load() }

// Dropped returns the datagrams dropped.
func (r *Relay) Dropped() int64 { return r.dropped.Load() }

// Flap alternates the link between black-holed for down and open for up
// until ctx ends, then leaves it open.
func (r *Relay) Flap(ctx context.Context, down, up time.Duration) {
	for {
		r.setBlackhole(true)
		if !sleep(ctx, down) {
			break
		}
		r.setBlackhole(false)
		if !sleep(ctx, up) {
			break
		}
	}
	r.setBlackhole(false)
}

func (r *Relay) setBlackhole(on bool) {
	r.mu.Lock()
	r.cond.Blackhole = on
	r.mu.Unlock()
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Close stops the relay and waits for its goroutines.
func (r *Relay) Close() error {
	r.once.Do(func() {
		close(r.closed)
		r.ln.Close()
		r.mu.Lock()
		for _, p := range r.peers {
			p.conn.Close()
		}
		r.mu.Unlock()
	})
	r.wg.Wait()
	return nil
}

// pass decides the fate of one datagram: whether to forward it, and after
// what delay.
func (r *Relay) pass() (bool, time.Duration) {
	r.mu.Lock()
	c := r.cond
	r.mu.Unlock()
	if c.Blackhole || (c.Drop > 0 && rand.Float64() < c.Drop) {
		r.dropped.Add(1)
		return false, 0
	}
	return true, c.Delay
}

func (r *Relay) fromClients() {
	buf := make([]byte, 64<<10)
	for {
		n, from, err := r.ln.ReadFromUDP(buf)
		if err != nil {
			return // closed
		}
		p, err := r.peerFor(from)
		if err != nil {
			continue
		}
		ok, delay := r.pass()
		if !ok {
			continue
		}
		r.up.Add(int64(n))
		r.send(p.conn, nil, append([]byte(nil), buf[:n]...), delay)
	}
}

// peerFor returns the socket toward the target for a client, opening one
// for a new client.
func (r *Relay) peerFor(client *net.UDPAddr) (*peer, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	select {
	case <-r.closed:
		return nil, errors.New("relay closed")
	default:
	}
	if p := r.peers[client.String()]; p != nil {
		return p, nil
	}
	conn, err := net.DialUDP("udp", nil, r.target)
	if err != nil {
		return nil, err
	}
	p := &peer{client: client, conn: conn}
	r.peers[client.String()] = p
	r.wg.Go(func() { r.fromTarget(p) })
	return p, nil
}

func (r *Relay) fromTarget(p *peer) {
	buf := make([]byte, 64<<10)
	for {
		n, err := p.conn.Read(buf)
		if err != nil {
			if errors.Is(err, syscall.ECONNREFUSED) {
				continue // an ICMP error: the target was down, not the end
			}
			return // closed
		}
		ok, delay := r.pass()
		if !ok {
			continue
		}
		r.down.Add(int64(n))
		r.send(nil, p.client, append([]byte(nil), buf[:n]...), delay)
	}
}

// send writes b on conn (toward the target) or to client (from the
// listening socket), now or after delay.
func (r *Relay) send(conn *net.UDPConn, client *net.UDPAddr, b []byte, delay time.Duration) {
	write := func() {
		if conn != nil {
			conn.Write(b)
		} else {
			r.ln.WriteToUDP(b, client)
		}
	}
	if delay <= 0 {
		write()
		return
	}
	time.AfterFunc(delay, func() {
		select {
		case <-r.closed:
		default:
			write()
		}
	})
}
