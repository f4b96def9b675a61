package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/outpost-mesh/outpost/sync/session"
	"github.com/outpost-mesh/outpost/sync/stream"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// Store is the edge's checkpoint of its view.
type Store interface {
	// LastRevision is the hub revision the view is complete through, 0
	// before the first sync.
	LastRevision() int64
	Inventory() ([]wire.InventoryEntry, error)
	// ApplyBatch makes changes durable and records revision, atomically.
	ApplyBatch(changes []wire.Change, revision int64) error
	// Rewind sets the revision to 0, keeping the objects: the hub's
	// revisions went back (it was restored from a backup) and the node
	// resumes from its inventory at the hub's lower revision.
	Rewind() error
}

// Outbox is the edge's durable queue of status for the hub.
type Outbox interface {
	// Pending returns up to max entries in order.
	Pending(max int) ([]wire.StatusItem, error)
	// Ack removes the entries of these sequence numbers.
	Ack(seqs ...uint64) error
}

// TunnelHandler answers a tunnel the hub opened: it checks open and
// returns what serves the stream, or an error that the hub gets instead
// of the stream (a *wire.Error chooses the code; any other error is
// CodeInternal). serve owns the stream and closes it; it runs until it is
// done or ctx ends with the connection.
type TunnelHandler func(ctx context.Context, open *wire.TunnelOpen) (serve func(wire.TunnelStream), err error)

// Config configures a Client.
type Config struct {
	HubAddr    string // host:port of the hub's sync endpoint; required
	ServerName string // checked against the hub's certificate; "" means the host of HubAddr
	NodeName   string // required
	// AgentVersion is reported in Hello.
	AgentVersion string
	// Certificate returns the node's current certificate and key; it is
	// called for every connection, so a renewed one is used from the next.
	Certificate func() (*tls.Certificate, error)
	RootCAs     *x509.CertPool // the hub CA; required

	Store  Store  // required
	Outbox Outbox // required
	// Applied, if set, is called after every batch was made durable, with
	// its changes; the agent reconciles on it. It must not block long.
	Applied func(changes []wire.Change)
	// HeldTokens, if set, lists the objects of wire.ResourcePodTokens and
	// wire.ResourceMeshKeys the store holds, at their revisions: the
	// Hello tells the hub, which then mints again only the tokens that
	// are due, and sends the site's mesh keys only when they rotated.
	HeldTokens func() ([]wire.InventoryEntry, error)
	// Connected, if set, is called each time a session with the hub
	// begins, before its first status is pushed: the agent reports its
	// node's status on it, which the hub may have set Unknown while the
	// node was away. It must not block long.
	Connected func()
	// Renew, if set, is called once two thirds of the certificate's life
	// have passed: it returns a CSR for a new key and a commit function
	// that stores the certificate the hub signs for it.
	Renew func() (csr []byte, commit func(cert []byte) error, err error)
	// Usage, if set, returns the node's resource usage to report to a hub
	// that speaks wire.UsageVersion, given the last report sent on the
	// session (nil before its first, which must be a full report): the
	// latest measured, or nil when there is nothing new worth sending. It is called at most every UsageInterval
	// while connected, more often only while it returns nil; it must not
	// block. Nothing is queued while the hub is away: the first report of
	// a session is the latest.
	Usage func(last *wire.Usage) *wire.Usage
	// UsageInterval is the least time between two usage reports: 15s.
	UsageInterval time.Duration
	// Tunnels serve the streams the hub opens, by kind.
	Tunnels map[string]TunnelHandler
	Logger  *slog.Logger
	// Dial, if set, returns the packet connection of one attempt to reach
	// the hub and the hub's address on it; the client closes the
	// connection when the attempt ends. nil, the default, dials HubAddr
	// from a UDP socket of its own each time. Tests set it to reach a hub
	// over sync/memnet.
	Dial func(ctx context.Context) (net.PacketConn, net.Addr, error)
	// Relays, if set, returns the site peers that would relay the node's
	// datagrams to the hub now (edge/relay), best first, and the address
	// to send to them from (any address if invalid). It must not block;
	// relays are reached over UDP, whatever Dial does. When the hub goes
	// silent on the session's path, the session moves through one of
	// them, and back once the node's own uplink works again, by QUIC
	// connection migration: the same connection and session, its
	// packets going another way (see livenessLoop). A node that has no
	// session reconnects through one (see Failover).
	Relays func() (from netip.Addr, relays []netip.AddrPort)
	// FailoverAfter is how many direct attempts in a row must fail
	// before a relay is tried for a new session: 1. A session fails only
	// when nothing came from the hub for IdleTimeout, not on one lost
	// packet.
	FailoverAfter int
	// DirectProbe is how often a session on a relay probes the node's
	// own uplink: 15s. A probe is a few padded packets, 1200 bytes each,
	// on what may be a metered link.
	DirectProbe time.Duration

	// Back-off between connection attempts: from MinBackoff doubling to
	// MaxBackoff, with jitter: 500ms and 30s.
	MinBackoff, MaxBackoff time.Duration
	// IdleTimeout and KeepAlive: the node sends a keep-alive after
	// KeepAlive without traffic, which the hub answers; a link that
	// brought nothing from the hub for IdleTimeout is dead, and the node
	// reconnects: 15s and 10s. An idle node so costs two small packets
	// every KeepAlive.
	IdleTimeout, KeepAlive time.Duration
	// StatusBatch bounds the items of one StatusPush: 100.
	StatusBatch int
}

// DefaultConfig returns the defaults above.
func DefaultConfig() Config {
	return Config{
		MinBackoff:    500 * time.Millisecond,
		MaxBackoff:    30 * time.Second,
		IdleTimeout:   15 * time.Second,
		KeepAlive:     10 * time.Second,
		StatusBatch:   100,
		UsageInterval: 15 * time.Second,
		FailoverAfter: 1,
		DirectProbe:   15 * time.Second,
	}
}

// Validate reports the first invalid field.
func (c *Config) Validate() error {
	switch {
	case c.HubAddr == "" || c.NodeName == "":
		return errors.New("hub address and node name are required")
	case c.Certificate == nil || c.RootCAs == nil:
		return errors.New("certificate and root CAs are required")
	case c.Store == nil || c.Outbox == nil:
		return errors.New("store and outbox are required")
	case c.MinBackoff <= 0 || c.MaxBackoff < c.MinBackoff:
		return fmt.Errorf("back-off %v..%v is not a range", c.MinBackoff, c.MaxBackoff)
	case c.KeepAlive <= 0 || c.KeepAlive >= c.IdleTimeout:
		return fmt.Errorf("keep-alive %v must be positive and under the idle timeout %v", c.KeepAlive, c.IdleTimeout)
	case c.StatusBatch < 1:
		return fmt.Errorf("status batch %d is under 1", c.StatusBatch)
	case c.Relays != nil && (c.FailoverAfter < 1 || c.DirectProbe <= 0):
		return fmt.Errorf("failover after %d attempts and direct probes every %v: need at least 1 and a positive interval", c.FailoverAfter, c.DirectProbe)
	case c.Usage != nil && c.UsageInterval <= 0:
		return fmt.Errorf("usage interval %v is not positive", c.UsageInterval)
	}
	return nil
}

// Client keeps a node's connection to its hub. Its methods are safe for
// concurrent use.
type Client struct {
	cfg     Config
	log     *slog.Logger
	tickets tls.ClientSessionCache
	outbox  chan struct{} // a wake-up for the status sender

	connected atomic.Bool
	current   atomic.Pointer[liveConn] // the session's, for OpenArtifactStream
	relayed   atomic.Bool              // the session is through a relay
	stats     Stats

	// The last usage report sent and when, across sessions; usageLoop's
	// own (one session runs at a time).
	usageLast   *wire.Usage
	usageSentAt time.Time
}

// Stats counts the client's traffic.
type Stats struct {
	Connects       atomic.Int64 // connections that reached a session
	Inventories    atomic.Int64 // sessions resumed from an inventory
	BytesReceived  atomic.Int64 // frame bytes received on session streams
	ResumeBytes    atomic.Int64 // frame bytes of the resume step of the last session
	BatchesApplied atomic.Int64
	StatusSent     atomic.Int64 // status items acknowledged by the hub
	StatusRefused  atomic.Int64 // of which refused
	Probes         atomic.Int64 // liveness probes sent to a silent hub
	UsageSent      atomic.Int64 // usage reports sent
	Relayed        atomic.Int64 // sessions that began on a relay or moved to one
	Moves          atomic.Int64 // sessions moved from one path to another
}

// New checks cfg and returns a client; Run connects.
func New(cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("sync client config: %w", err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.ServerName == "" {
		host, _, err := net.SplitHostPort(cfg.HubAddr)
		if err != nil {
			return nil, fmt.Errorf("hub address %q: %w", cfg.HubAddr, err)
		}
		cfg.ServerName = host
	}
	return &Client{
		cfg:     cfg,
		log:     cfg.Logger,
		tickets: tls.NewLRUClientSessionCache(4),
		outbox:  make(chan struct{}, 1),
	}, nil
}

// Stats returns the client's counters.
func (c *Client) Stats() *Stats { return &c.stats }

// Connected reports whether a session with the hub is up.
func (c *Client) Connected() bool { return c.connected.Load() }

// Relayed reports whether a session with the hub is up through a site
// peer's relay rather than the node's own uplink.
func (c *Client) Relayed() bool { return c.connected.Load() && c.relayed.Load() }

// NotifyOutbox tells the client the outbox has new entries. It never
// blocks.
func (c *Client) NotifyOutbox() {
	select {
	case c.outbox <- struct{}{}:
	default:
	}
}

// Run keeps a connection to the hub until ctx ends, reconnecting with
// back-off and jitter. It returns nil when ctx ends.
func (c *Client) Run(ctx context.Context) error {
	// A connection that was up longer than the longest wait starts the
	// back-off over.
	backoff := session.Backoff{Min: c.cfg.MinBackoff, Max: c.cfg.MaxBackoff, Reset: c.cfg.MaxBackoff}
	fo := Failover{FailAfter: c.cfg.FailoverAfter}
	for {
		start := time.Now()
		from, relays := c.relays()
		route := fo.Next(relays)
		last, reached, err := c.connectOnce(ctx, route, from)
		if ctx.Err() != nil {
			return nil
		}
		fo.Done(last, outcome(reached, err))
		wait := backoff.Next(time.Since(start))
		var we *wire.Error
		switch {
		case errors.As(err, &we) && (we.Code == wire.CodeUnauthorized || we.Code == wire.CodeForbidden):
			c.log.Error("hub refused this node; check its certificate", "err", err)
		default:
			c.log.Info("hub connection ended", "route", last, "err", err, "retry_in", wait.Round(time.Millisecond))
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

func (c *Client) tlsConfig() (*tls.Config, *x509.Certificate, error) {
	cert, err := c.cfg.Certificate()
	if err != nil {
		return nil, nil, fmt.Errorf("node certificate: %w", err)
	}
	leaf := cert.Leaf
	if leaf == nil && len(cert.Certificate) > 0 {
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, nil, fmt.Errorf("parse node certificate: %w", err)
		}
	}
	return &tls.Config{
		Certificates:       []tls.Certificate{*cert},
		RootCAs:            c.cfg.RootCAs,
		ServerName:         c.cfg.ServerName,
		NextProtos:         []string{wire.ALPN},
		MinVersion:         tls.VersionTLS13,
		ClientSessionCache: c.tickets,
	}, leaf, nil
}

// connectOnce dials by route, sending from from if it goes through a
// relay, runs one session until it ends, and returns the route it ended
// on (a session moves between routes as it runs), whether a session
// began and why it ended.
func (c *Client) connectOnce(ctx context.Context, route Route, from netip.Addr) (last Route, reached bool, err error) {
	tlsConf, leaf, err := c.tlsConfig()
	if err != nil {
		return route, false, err
	}
	qconf := &quic.Config{
		// QUIC's own idle timeout is a backstop at twice ours, so that
		// its cap on keep-alives (half the idle timeout) leaves ours be;
		// livenessLoop ends a silent link at IdleTimeout.
		MaxIdleTimeout:       2 * c.cfg.IdleTimeout,
		KeepAlivePeriod:      c.cfg.KeepAlive,
		HandshakeIdleTimeout: 10 * time.Second,
		MaxIncomingStreams:   16,
		// Datagrams carry the liveness probes of probeLoop.
		EnableDatagrams: true,
	}
	// The dial waits for the handshake: no 0-RTT. quic-go (v0.65) applies
	// the hub's transport parameters in its own goroutine while a stream
	// opened on an early connection reads them, a data race
	// (quic-go/quic-go#4303). A reconnect still resumes the TLS session
	// from its ticket, which spares both ends the certificates; it costs
	// one round trip more than early data would.
	dialCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
	var (
		conn  *quic.Conn
		first *pathway
	)
	if route.Direct() {
		conn, first, err = c.dial(dialCtx, tlsConf, qconf)
	} else {
		conn, first, err = c.dialRelay(dialCtx, route.Relay, from, tlsConf, qconf)
	}
	cancel()
	if err != nil {
		return route, false, fmt.Errorf("dial hub %s (%v): %w", c.cfg.HubAddr, route, err)
	}
	ways := newPaths(c, conn, route, first)
	defer func() { last = ways.current() }()
	defer ways.close()
	defer func() { closeSession(conn, err) }()

	st, resume, err := c.hello(ctx, conn)
	if err != nil {
		return route, false, err
	}
	c.stats.Connects.Add(1)
	if !route.Direct() {
		c.stats.Relayed.Add(1)
	}
	c.relayed.Store(!route.Direct())
	c.connected.Store(true)
	defer c.connected.Store(false)
	c.current.Store(&liveConn{conn: conn, version: resume.Version})
	defer c.current.Store(nil)
	if c.cfg.Connected != nil {
		c.cfg.Connected()
	}
	c.log.Info("connected to hub", "hub", c.cfg.HubAddr, "route", route, "revision", resume.HubRevision, "inventory", resume.SendInventory, "resumed", conn.ConnectionState().TLS.DidResume)

	// The session lasts until any of its parts ends: the view stream, the
	// status sender, the tunnel acceptor or the renewer.
	sessCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop()
	errs := make(chan error, 7)
	wg.Go(func() { errs <- c.receive(st, resume) })
	wg.Go(func() { errs <- c.statusLoop(sessCtx, conn) })
	wg.Go(func() { errs <- c.tunnels(sessCtx, conn) })
	wg.Go(func() { errs <- c.livenessLoop(sessCtx, conn, ways) })
	if c.cfg.Renew != nil && leaf != nil {
		wg.Go(func() { errs <- c.renewLoop(sessCtx, conn, leaf) })
	}
	if c.cfg.Usage != nil && resume.Version >= wire.UsageVersion {
		wg.Go(func() { errs <- c.usageLoop(sessCtx, conn) })
	}
	wg.Go(func() {
		<-sessCtx.Done()
		st.Abort(0)
	})
	select {
	case err = <-errs:
	case <-ctx.Done():
	}
	stop()
	closeSession(conn, err)
	return route, true, err
}

// sessionError ends a session for a reason the hub should hear of: a
// failure of the node's own, or the hub breaking the protocol. The
// connection is closed with its code and message.
type sessionError struct {
	code wire.CloseCode
	err  error
}

func (e *sessionError) Error() string { return e.err.Error() }
func (e *sessionError) Unwrap() error { return e.err }

// nodeFailure marks err as a failure of the node's own, such as its
// checkpoint refusing a write.
func nodeFailure(err error) error { return &sessionError{wire.CloseNodeError, err} }

// hubBrokeProtocol marks err as the hub's breach of the protocol.
func hubBrokeProtocol(err error) error { return &sessionError{wire.CloseProtocol, err} }

// closeSession closes conn, saying why if the session ended with a
// sessionError. Closing it again does nothing.
func closeSession(conn *quic.Conn, err error) {
	code, reason := wire.CloseDone, "session ended"
	if se, ok := errors.AsType[*sessionError](err); ok {
		code, reason = se.code, wire.CloseReason(se.Error())
	}
	conn.CloseWithError(quic.ApplicationErrorCode(code), reason)
}

// dial connects to the hub over the node's own uplink, and returns the
// connection and the way it took.
func (c *Client) dial(ctx context.Context, tlsConf *tls.Config, qconf *quic.Config) (*quic.Conn, *pathway, error) {
	w, hub, err := c.directWay(ctx)
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

// hello opens the session stream and reads the hub's Welcome.
func (c *Client) hello(ctx context.Context, conn *quic.Conn) (*stream.Stream, session.Resume, error) {
	qs, err := conn.OpenStreamSync(ctx)
	if err != nil {
		return nil, session.Resume{}, fmt.Errorf("open session stream: %w", err)
	}
	st := stream.NewLean(qs)
	// A hub that stops answering after the handshake would otherwise hold
	// the wait for the Welcome until the idle timeout, however long after
	// ctx.
	stop := st.AbortWhenDone(ctx)
	defer stop()
	hello := &wire.Hello{CapabilityVersion: wire.CapabilityVersion, NodeName: c.cfg.NodeName, LastRevision: c.cfg.Store.LastRevision(), AgentVersion: c.cfg.AgentVersion}
	if c.cfg.HeldTokens != nil {
		held, err := c.cfg.HeldTokens()
		if err != nil {
			// The hub mints them again: a cost, not a failure.
			c.log.Warn("cannot list the pod tokens held; the hub will mint them all again", "err", err)
		}
		hello.Tokens = held
	}
	if err := st.Write(hello); err != nil {
		return nil, session.Resume{}, fmt.Errorf("send hello: %w", err)
	}
	m, err := st.Read()
	if err != nil {
		return nil, session.Resume{}, fmt.Errorf("read welcome: %w", err)
	}
	switch m := m.(type) {
	case *wire.Welcome:
		res, err := session.Welcome(hello.LastRevision, m)
		if err != nil {
			st.Fail(wire.CodeVersion, fmt.Sprintf("capability version %d is not spoken here", m.CapabilityVersion))
			return nil, session.Resume{}, err
		}
		return st, res, nil
	case *wire.Error:
		return nil, session.Resume{}, m
	default:
		st.Fail(wire.CodeBadRequest, fmt.Sprintf("expected Welcome, got %v", m.Type()))
		return nil, session.Resume{}, hubBrokeProtocol(fmt.Errorf("expected Welcome, got %v", m.Type()))
	}
}

// inventoryChunk bounds the entries of one Inventory frame.
const inventoryChunk = 5000

// receive sends the inventory if asked, then applies batches and
// acknowledges them until the stream ends.
func (c *Client) receive(st *stream.Stream, resume session.Resume) error {
	if resume.SendInventory {
		c.stats.Inventories.Add(1)
		if resume.Rewind {
			c.log.Warn("the hub's revision went back: was it restored from a backup? resyncing from the inventory", "hub_revision", resume.HubRevision, "last_revision", c.cfg.Store.LastRevision())
			if err := c.cfg.Store.Rewind(); err != nil {
				st.Fail(wire.CodeInternal, "checkpoint write failed")
				return nodeFailure(fmt.Errorf("rewind checkpoint: %w", err))
			}
		}
		inv, err := c.cfg.Store.Inventory()
		if err != nil {
			st.Fail(wire.CodeInternal, "read inventory")
			return nodeFailure(fmt.Errorf("read inventory: %w", err))
		}
		for {
			n := min(len(inv), inventoryChunk)
			if err := st.Write(&wire.Inventory{Entries: inv[:n], More: n < len(inv)}); err != nil {
				return fmt.Errorf("send inventory: %w", err)
			}
			inv = inv[n:]
			if len(inv) == 0 {
				break
			}
		}
	}
	var recv session.Receiver
	for {
		before := st.BytesRead()
		m, err := st.Read()
		if err != nil {
			return fmt.Errorf("session: %w", err)
		}
		n := st.BytesRead() - before
		c.stats.BytesReceived.Add(n)
		switch m := m.(type) {
		case *wire.Batch:
			a := recv.Batch(c.cfg.Store.LastRevision(), m, n)
			if err := c.cfg.Store.ApplyBatch(m.Changes, a.Revision); err != nil {
				st.Fail(wire.CodeInternal, "checkpoint write failed")
				return nodeFailure(fmt.Errorf("apply batch: %w", err))
			}
			c.stats.BatchesApplied.Add(1)
			if c.cfg.Applied != nil && len(m.Changes) > 0 {
				c.cfg.Applied(m.Changes)
			}
			if a.Ack {
				if err := st.Write(&wire.Ack{Revision: a.Revision}); err != nil {
					return fmt.Errorf("send ack: %w", err)
				}
			}
			if a.Resumed {
				c.stats.ResumeBytes.Store(a.ResumeBytes)
			}
		case *wire.Error:
			return m
		default:
			st.Fail(wire.CodeBadRequest, fmt.Sprintf("unexpected %v on the session stream", m.Type()))
			return hubBrokeProtocol(fmt.Errorf("unexpected %v on the session stream", m.Type()))
		}
	}
}

// statusLoop drains the outbox to the hub: it pushes pending entries on a
// status stream, waits for the acknowledgement and drops what the hub
// answered, until ctx ends.
func (c *Client) statusLoop(ctx context.Context, conn *quic.Conn) error {
	var st *stream.Stream
	defer func() {
		if st != nil {
			st.Close()
		}
	}()
	for {
		items, err := c.cfg.Outbox.Pending(c.cfg.StatusBatch)
		if err != nil {
			return nodeFailure(fmt.Errorf("read outbox: %w", err))
		}
		if len(items) == 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-c.outbox:
				continue
			}
		}
		if st == nil {
			qs, err := conn.OpenStreamSync(ctx)
			if err != nil {
				return fmt.Errorf("open status stream: %w", err)
			}
			st = stream.NewLean(qs)
		}
		if err := st.Write(&wire.StatusPush{Items: items}); err != nil {
			return fmt.Errorf("push status: %w", err)
		}
		m, err := st.Read()
		if err != nil {
			return fmt.Errorf("read status ack: %w", err)
		}
		ack, ok := m.(*wire.StatusAck)
		if !ok {
			if e, isErr := m.(*wire.Error); isErr {
				return e
			}
			return hubBrokeProtocol(fmt.Errorf("expected StatusAck, got %v", m.Type()))
		}
		seqs := make([]uint64, 0, len(ack.Results))
		for _, r := range ack.Results {
			seqs = append(seqs, r.Seq)
			if r.Code != wire.CodeOK {
				c.stats.StatusRefused.Add(1)
				c.log.Warn("hub refused a status update", "seq", r.Seq, "code", r.Code, "err", r.Message)
			}
		}
		if err := c.cfg.Outbox.Ack(seqs...); err != nil {
			return nodeFailure(fmt.Errorf("ack outbox: %w", err))
		}
		c.stats.StatusSent.Add(int64(len(seqs)))
		if len(ack.Results) < len(items) {
			// Some were left for later by the hub: do not spin on them.
			t := time.NewTimer(c.cfg.MinBackoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			}
		}
	}
}

// tunnels accepts the streams the hub opens and hands them to their
// handlers, until the connection or ctx ends.
func (c *Client) tunnels(ctx context.Context, conn *quic.Conn) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		qs, err := conn.AcceptStream(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("accept tunnel: %w", err)
		}
		wg.Go(func() { c.serveTunnel(ctx, qs) })
	}
}

func (c *Client) serveTunnel(ctx context.Context, qs *quic.Stream) {
	st := stream.NewLean(qs)
	m, err := st.Read()
	if err != nil {
		st.Abort(wire.CodeBadRequest)
		return
	}
	open, ok := m.(*wire.TunnelOpen)
	if !ok {
		st.Fail(wire.CodeBadRequest, fmt.Sprintf("a tunnel starts with TunnelOpen, not %v", m.Type()))
		return
	}
	h := c.cfg.Tunnels[open.Kind]
	if h == nil {
		st.Fail(wire.CodeNotFound, fmt.Sprintf("this agent serves no %q tunnels", open.Kind))
		return
	}
	serve, err := h(ctx, open)
	if err != nil {
		var we *wire.Error
		if !errors.As(err, &we) {
			we = &wire.Error{Code: wire.CodeInternal, Message: err.Error()}
		}
		st.Fail(we.Code, we.Message)
		return
	}
	if err := st.Write(&wire.TunnelReply{}); err != nil {
		st.CancelRead(0)
		return
	}
	serve(st.Tunnel())
}

// renewLoop renews the node certificate each time two thirds of its life
// have passed, for as long as the connection lasts: a connection may
// outlive several certificates. A renewal that fails is tried again with
// back-off; it does not end the session, which needs no new certificate
// until the next connection.
func (c *Client) renewLoop(ctx context.Context, conn *quic.Conn, leaf *x509.Certificate) error {
	for {
		life := leaf.NotAfter.Sub(leaf.NotBefore)
		t := time.NewTimer(time.Until(leaf.NotBefore.Add(life * 2 / 3)))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		backoff := session.Backoff{Min: c.cfg.MinBackoff, Max: c.cfg.MaxBackoff}
		for {
			next, err := c.renew(ctx, conn)
			if ctx.Err() != nil {
				return nil
			}
			if err == nil {
				leaf = next
				break
			}
			wait := backoff.Next(0)
			c.log.Warn("node certificate not renewed; trying again", "err", err, "retry_in", wait.Round(time.Millisecond), "expires", leaf.NotAfter)
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			}
		}
	}
}

// renew asks the hub for a new certificate on a stream of conn, commits
// it, and returns it.
func (c *Client) renew(ctx context.Context, conn *quic.Conn) (*x509.Certificate, error) {
	csr, commit, err := c.cfg.Renew()
	if err != nil {
		return nil, fmt.Errorf("renewal CSR: %w", err)
	}
	qs, err := conn.OpenStreamSync(ctx)
	if err != nil {
		return nil, fmt.Errorf("open renew stream: %w", err)
	}
	st := stream.NewLean(qs)
	defer st.CancelRead(0)
	stop := st.AbortWhenDone(ctx)
	defer stop()
	if err := st.Write(&wire.RenewRequest{CSR: csr}); err != nil {
		return nil, fmt.Errorf("send renew request: %w", err)
	}
	st.CloseWrite()
	m, err := st.Read()
	if err != nil {
		return nil, fmt.Errorf("read renew response: %w", err)
	}
	switch m := m.(type) {
	case *wire.RenewResponse:
		leaf, err := x509.ParseCertificate(m.Certificate)
		if err != nil {
			return nil, fmt.Errorf("renewed certificate: %w", err)
		}
		if err := commit(m.Certificate); err != nil {
			return nil, fmt.Errorf("store renewed certificate: %w", err)
		}
		// The new certificate is used from the next connection; this one
		// stays up.
		c.log.Info("node certificate renewed", "expires", leaf.NotAfter)
		return leaf, nil
	case *wire.Error:
		return nil, fmt.Errorf("renew certificate: %w", m)
	default:
		return nil, fmt.Errorf("renew: unexpected %v", m.Type())
	}
}

// probeSize is the size of a liveness probe: over the 42 bytes under
// which quic-go answers no packet with a stateless reset.
const probeSize = 48

// livenessTick is how often livenessLoop looks at the link; probeEvery
// how often it probes a silent hub, so that a hub back from a restart
// resets the node within that.
const (
	livenessTick = time.Second
	probeEvery   = 2 * time.Second
)

// heartbeat and answerWithin watch the link closer while the session has
// another way to the hub (session.Liveness): an idle session is probed
// after heartbeat of silence, and a probe unanswered for answerWithin
// moves it. A cut uplink so moves the session within about five seconds;
// an idle node with a relay to fall back on pays a probe of probeSize
// and its acknowledgement every two seconds, about 400 bits a second.
const (
	heartbeat    = 2 * time.Second
	answerWithin = 2 * time.Second
)

// moveTimeout bounds the probes of one move of the session to another
// path, directProbeTimeout one probe of the direct path from a relay.
// quic-go probes again at twice the last wait, from 200ms: a few
// PATH_CHALLENGEs each.
const (
	moveTimeout        = 2 * time.Second
	directProbeTimeout = 3 * time.Second
)

// ErrLinkDead is returned (wrapped) when nothing came from the hub for
// IdleTimeout.
var ErrLinkDead = errors.New("link to the hub is dead")

// livenessLoop watches what comes from the hub until ctx ends, as
// session.Liveness judges it, and moves the session between the ways in
// ways. Its probe is one padded datagram, because QUIC's keep-alives
// (PINGs of about 25 bytes) are too small for a restarted hub to answer
// with a stateless reset, and a 48-byte probe is not. A dead link ends
// the session with ErrLinkDead.
//
// While a site peer would relay the node's packets (Config.Relays), the
// loop watches closer, and a suspect path moves the session to the
// node's own uplink or a relay, whichever the hub answers on first. A
// session on a relay tries the node's own uplink every DirectProbe, and
// moves back as soon as the hub answers there.
func (c *Client) livenessLoop(ctx context.Context, conn *quic.Conn, ways *paths) error {
	t := time.NewTicker(livenessTick)
	defer t.Stop()
	probe := make([]byte, probeSize)
	// Read once: quic-go (v0.65) writes what ConnectionState reads as
	// the session moves, without a lock.
	canProbe := conn.ConnectionState().SupportsDatagrams.Remote
	live := session.Liveness{
		IdleTimeout: c.cfg.IdleTimeout, KeepAlive: c.cfg.KeepAlive, Tick: livenessTick, ProbeEvery: probeEvery,
		CanProbe: canProbe,
	}
	live.Start(time.Now(), conn.ConnectionStats().PacketsReceived)
	lastDirect := time.Now() // the last probe of the direct path from a relay
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		from, relays := c.relays()
		cur := ways.current()
		live.Heartbeat, live.AnswerWithin = 0, 0
		if c.cfg.Relays != nil && (len(relays) > 0 || !cur.Direct()) {
			live.Heartbeat, live.AnswerWithin = heartbeat, answerWithin
		}
		v, silent := live.Look(time.Now(), conn.ConnectionStats().PacketsReceived)
		switch v {
		case session.Dead:
			// connectOnce closes the connection on this error: closing
			// it here would have the session's other parts fail on the
			// closed connection and race this error to say why the
			// session ended, which decides the failover.
			return fmt.Errorf("%w: nothing heard for %v", ErrLinkDead, silent.Round(time.Second))
		case session.Probe:
			c.stats.Probes.Add(1)
			conn.SendDatagram(probe) // best effort: a lost probe is sent again
		case session.Suspect:
			mctx, cancel := context.WithTimeout(ctx, moveTimeout)
			to, err := ways.move(mctx, ways.candidates(relays), from)
			cancel()
			if err != nil {
				c.log.Info("the hub went silent on this path; no other way answered", "route", cur, "silent", silent.Round(time.Millisecond), "err", err)
				continue
			}
			c.moved(conn, to, canProbe, probe)
			c.log.Info("the hub went silent on this path; the session moved", "from", cur, "to", to, "silent", silent.Round(time.Millisecond))
			lastDirect = time.Now()
		case session.Alive:
			if cur.Direct() || time.Since(lastDirect) < c.cfg.DirectProbe {
				continue
			}
			lastDirect = time.Now()
			pctx, cancel := context.WithTimeout(ctx, directProbeTimeout)
			_, err := ways.move(pctx, []Route{{}}, from)
			cancel()
			if err != nil {
				c.log.Debug("direct path to the hub still down", "err", err)
				continue
			}
			c.moved(conn, Route{}, canProbe, probe)
			c.log.Info("the direct path to the hub works again; the session moved back", "relay", cur.Relay)
		}
	}
}

// moved records that the session moved to route to, and
// sends a probe on the new one at once: the hub moves its side of the
// connection when a packet other than a probe reaches it there, and the
// acknowledgement has both ends resend what the old path lost.
func (c *Client) moved(conn *quic.Conn, to Route, canProbe bool, probe []byte) {
	c.stats.Moves.Add(1)
	if !to.Direct() {
		c.stats.Relayed.Add(1)
	}
	c.relayed.Store(!to.Direct())
	if canProbe {
		conn.SendDatagram(probe)
	}
}
