package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/outpost-mesh/outpost/sync/stream"
	"github.com/outpost-mesh/outpost/sync/view"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// Authority admits nodes and renews their certificates.
type Authority interface {
	// Join checks req's bootstrap token and signs its CSR, registering the
	// node; it returns the node's certificate and the CA's, both DER. from
	// is the address the request came from, with which the Authority may
	// slow down a source of failed joins. A refusal is, or wraps, a
	// *wire.Error (CodeUnauthorized for a bad, expired or deleted token,
	// CodeBadRequest for a bad CSR, CodeUnavailable with a RetryAfter for
	// too many failed joins): the node is told only the *wire.Error, and
	// the whole error goes to the hub's log.
	Join(ctx context.Context, from netip.Addr, req *wire.JoinRequest) (cert, ca []byte, err error)
	// Renew signs csr for node, which proved its identity with its
	// current certificate.
	Renew(ctx context.Context, node string, csr []byte) (cert []byte, err error)
}

// Sink applies what a node sends up, as that node: it refuses what the
// node may not write with a *wire.Error of CodeForbidden.
type Sink interface {
	ApplyStatus(ctx context.Context, node string, item wire.StatusItem) error
}

// UsageSink keeps the resource usage nodes report (wire.Usage), the
// latest of each node. It must be safe for concurrent use and must not
// block long: the node's next report waits for it.
type UsageSink interface {
	PutUsage(node string, u *wire.Usage)
}

// Objects reads objects of the hub's store: those of the changes of Views
// that come without their bytes (see view.Change). It must be safe for
// concurrent use.
type Objects interface {
	// Object returns the stored form of key at revision rev; the caller
	// owns it. When key is no longer at rev (it changed or was deleted
	// since: a change Views is bound to receive), Object may instead
	// return an error that is or wraps ErrObjectGone, as it must once that
	// version is compacted away.
	Object(ctx context.Context, key wire.Key, rev int64) ([]byte, error)
}

// ErrObjectGone is returned (wrapped) by Objects.Object for a version
// that is no longer the object's. The server then drops the change: the
// node is sent the newer one.
var ErrObjectGone = errors.New("object version no longer stored")

// TokenMinter mints the service account tokens of the pods of nodes'
// views (see wire.PodTokens), through the hub's token issuer. It must be
// safe for concurrent use.
type TokenMinter interface {
	// MintPodTokens mints, at now, one token for each source of pod,
	// bound to the pod and to node, and returns them in the order of
	// pod.Sources. It leaves out the tokens the pod's service account
	// declines (view.TokenSource.Declined), so it may return none. A
	// token is minted only for the node the pod is bound to: for a pod
	// that no longer exists with pod.UID, or is not bound to node, it
	// returns an error wrapping ErrPodGone.
	MintPodTokens(ctx context.Context, node string, pod view.TokenPod, now time.Time) ([]wire.PodToken, error)
}

// ErrPodGone is returned (wrapped) by TokenMinter.MintPodTokens for a pod
// that is not, or no longer, the node's. The session tries again later;
// the view is bound to drop the pod meanwhile.
var ErrPodGone = errors.New("pod is not bound to the node")

// Presence hears of sessions: the hub renews a node's Lease while it is
// connected and marks the node when it is not. For each node the calls
// alternate, Connected when its first session starts and Disconnected
// when its last one ends, however its sessions overlap (a new connection
// replacing an old one). They are made with the server's lock held: they
// must not block, nor call the Server.
type Presence interface {
	Connected(node string)
	Disconnected(node string)
}

// Config configures a Server.
type Config struct {
	// Certificate is the hub's serving certificate; its chain must include
	// the CA, which joining nodes pin by hash. Required.
	Certificate tls.Certificate
	// ClientCAs verifies node certificates. Required.
	ClientCAs *x509.CertPool
	// SessionTicketKeys, when set, encrypt TLS session tickets; kept
	// across restarts they let nodes resume their TLS sessions after the
	// hub restarts.
	SessionTicketKeys [][32]byte
	// StatelessResetKey, kept across restarts, lets a restarted hub tell
	// nodes at once that their old connections are gone, instead of their
	// noticing only at the idle timeout.
	StatelessResetKey *quic.StatelessResetKey

	Views     *view.Index    // non-nil
	Objects   Objects        // non-nil: reads what Views holds without its bytes
	Authority Authority      // non-nil
	Sink      Sink           // non-nil
	Presence  Presence       // or nil
	Usage     UsageSink      // or nil: reports are read and dropped
	Artifacts ArtifactServer // or nil: artifact requests are refused
	Logger    *slog.Logger

	// Tokens mints the service account tokens of the pods of the views
	// of nodes that speak wire.TokensVersion; nil sends none.
	// TokenPolicy says when they are minted again:
	// view.DefaultTokenPolicy.
	Tokens      TokenMinter
	TokenPolicy view.TokenPolicy

	// MeshKeys derives the key of a site's mesh for an epoch
	// (wire.MeshKeySize bytes, the same for the same arguments, as
	// hub/pki's PKI.MeshKey), which the views of nodes that speak
	// wire.MeshKeysVersion carry; nil sends none. MeshKeyPolicy says
	// which epochs a node holds: view.DefaultMeshKeyPolicy.
	MeshKeys      func(site string, epoch int64) []byte
	MeshKeyPolicy view.MeshKeyPolicy

	// IdleTimeout ends a node's connection that brought nothing for this
	// long: 15s. Nodes send the keep-alives (sync/client's KeepAlive, 10s)
	// and the hub answers them, so a dead link is noticed within 15s on
	// both ends. KeepAlive, if set, makes the hub send keep-alives too:
	// 0 by default, as they would only double an idle node's traffic.
	IdleTimeout time.Duration
	KeepAlive   time.Duration
	// MaxBatchBytes bounds the objects of one Batch frame: 512 KiB.
	MaxBatchBytes int
	// MaxStatusItems bounds the items of one StatusPush: 1,000.
	MaxStatusItems int
	// MaxInventory bounds the entries of an edge's inventory: 200,000.
	MaxInventory int
}

// DefaultConfig returns the defaults above; the required fields are left
// empty.
func DefaultConfig() Config {
	return Config{
		IdleTimeout:    15 * time.Second,
		MaxBatchBytes:  512 << 10,
		MaxStatusItems: 1000,
		MaxInventory:   200_000,
		TokenPolicy:    view.DefaultTokenPolicy(),
		MeshKeyPolicy:  view.DefaultMeshKeyPolicy(),
	}
}

// Validate reports the first invalid field.
func (c *Config) Validate() error {
	switch {
	case len(c.Certificate.Certificate) == 0:
		return errors.New("no serving certificate")
	case c.ClientCAs == nil:
		return errors.New("no client CA pool")
	case c.Views == nil || c.Objects == nil || c.Authority == nil || c.Sink == nil:
		return errors.New("views, objects, authority and sink are required")
	case c.IdleTimeout <= 0 || c.KeepAlive < 0 || c.KeepAlive >= c.IdleTimeout:
		return fmt.Errorf("idle timeout %v must be positive and keep-alive %v under it", c.IdleTimeout, c.KeepAlive)
	case c.MaxBatchBytes < 1<<10 || c.MaxBatchBytes > wire.DefaultMaxFrameSize/2:
		return fmt.Errorf("max batch bytes %d out of range", c.MaxBatchBytes)
	case c.MaxStatusItems < 1 || c.MaxInventory < 1:
		return errors.New("max status items and max inventory must be positive")
	case c.Tokens != nil && (c.TokenPolicy.MaxAge < 0 || c.TokenPolicy.MinRetry <= 0 || c.TokenPolicy.MaxRetry < c.TokenPolicy.MinRetry || c.TokenPolicy.MaxMints < 1):
		return fmt.Errorf("token policy %+v: want a max age of 0 or more, a retry range and at least one mint a round", c.TokenPolicy)
	case c.MeshKeys != nil && (c.MeshKeyPolicy.Period < time.Second || c.MeshKeyPolicy.Period%time.Second != 0 ||
		c.MeshKeyPolicy.Ahead < 1 || c.MeshKeyPolicy.Ahead > wire.MaxMeshKeys-2):
		return fmt.Errorf("mesh key policy %+v: want a period of whole seconds and 1 to %d keys ahead", c.MeshKeyPolicy, wire.MaxMeshKeys-2)
	}
	return nil
}

// Server serves the sync protocol. Its methods are safe for concurrent use.
type Server struct {
	cfg Config
	log *slog.Logger

	mu       sync.Mutex
	conns    map[string]*nodeConn // the live connection of each node
	sessions map[string]int       // the sessions of each node, for Presence

	stats Stats
}

// Stats counts the server's traffic in frames; read with Snapshot.
type Stats struct {
	Sessions      atomic.Int64 // sessions started
	Resumes       atomic.Int64 // sessions resumed from a revision
	Inventories   atomic.Int64 // sessions resumed from an inventory
	BatchBytes    atomic.Int64 // bytes of Batch frames sent
	ResumeBytes   atomic.Int64 // of which in the first step of a session
	ObjectReads   atomic.Int64 // objects read through Objects for changes without them
	ObjectsGone   atomic.Int64 // of which no longer stored: changes dropped
	StatusItems   atomic.Int64 // status items applied or refused
	UsageReports  atomic.Int64 // usage reports received
	TokenMints    atomic.Int64 // pods whose tokens were minted and sent
	TokenFailures atomic.Int64 // pods whose tokens could not be minted
	Joins         atomic.Int64
	JoinsRefused  atomic.Int64
	ConnsAccepted atomic.Int64
}

// New checks cfg and returns a server; it starts nothing.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("sync server config: %w", err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Server{cfg: cfg, log: cfg.Logger, conns: map[string]*nodeConn{}, sessions: map[string]int{}}, nil
}

// Stats returns the server's counters.
func (s *Server) Stats() *Stats { return &s.stats }

func (s *Server) tlsConfig() *tls.Config {
	c := &tls.Config{
		Certificates: []tls.Certificate{s.cfg.Certificate},
		ClientCAs:    s.cfg.ClientCAs,
		// A joining node has no certificate yet; every stream but join
		// needs one, checked per stream.
		ClientAuth: tls.VerifyClientCertIfGiven,
		NextProtos: []string{wire.ALPN},
		MinVersion: tls.VersionTLS13,
	}
	if len(s.cfg.SessionTicketKeys) > 0 {
		c.SetSessionTicketKeys(s.cfg.SessionTicketKeys)
	}
	return c
}

func (s *Server) quicConfig() *quic.Config {
	return &quic.Config{
		// QUIC's own idle timeout is a backstop at twice ours; sweep ends
		// a node's silent connection at IdleTimeout.
		MaxIdleTimeout:        2 * s.cfg.IdleTimeout,
		KeepAlivePeriod:       s.cfg.KeepAlive,
		HandshakeIdleTimeout:  5 * time.Second,
		MaxIncomingStreams:    64,
		MaxIncomingUniStreams: -1,
		// No 0-RTT: nodes do not send early data, since opening a stream
		// on an early connection races in quic-go (see the client's
		// connectOnce). Resumed sessions still skip the certificates.
		Allow0RTT: false,
		// Nodes probe a silent link with a datagram (see the client's
		// probeLoop); probes are left unread.
		EnableDatagrams: true,
	}
}

// Serve accepts connections on pc until ctx ends, then closes every
// connection and returns once all of them have ended. It owns pc.
func (s *Server) Serve(ctx context.Context, pc net.PacketConn) error {
	// quic.Transport.Close leaves a PacketConn it did not create open; a
	// hub restarting in the same process needs the port again.
	defer pc.Close()
	tr := &quic.Transport{Conn: pc, StatelessResetKey: s.cfg.StatelessResetKey}
	defer tr.Close()
	ln, err := tr.ListenEarly(s.tlsConfig(), s.quicConfig())
	if err != nil {
		return fmt.Errorf("listen for sync: %w", err)
	}
	defer ln.Close()
	var wg sync.WaitGroup
	defer wg.Wait()
	sweepCtx, stopSweep := context.WithCancel(ctx)
	defer stopSweep()
	wg.Go(func() { s.sweep(sweepCtx) })
	for {
		conn, err := ln.Accept(ctx)
		if err != nil {
			if ctx.Err() != nil {
				s.closeAll("hub shutting down")
				return nil
			}
			return fmt.Errorf("accept sync connection: %w", err)
		}
		s.stats.ConnsAccepted.Add(1)
		wg.Go(func() { s.serveConn(ctx, conn) })
	}
}

func (s *Server) closeAll(why string) {
	s.mu.Lock()
	conns := make([]*nodeConn, 0, len(s.conns))
	for _, c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.conn.CloseWithError(appErrShutdown, why)
	}
}

// Application error codes of the hub's closes.
const (
	appErrReplaced = quic.ApplicationErrorCode(wire.CloseReplaced)
	appErrShutdown = quic.ApplicationErrorCode(wire.CloseShutdown)
	appErrAuth     = quic.ApplicationErrorCode(wire.CloseAuth)
)

// nodeConn is the connection of an authenticated node.
type nodeConn struct {
	node string
	conn *quic.Conn

	// What sweep last saw: the packets received, and when they changed.
	// sweep's own.
	packets uint64
	heard   time.Time
}

// sweepEvery is how often sweep looks at the nodes' connections.
const sweepEvery = time.Second

// sweep ends, every sweepEvery until ctx ends, the node connections that
// brought nothing for IdleTimeout: a node keeps its link alive with
// keep-alives every few seconds, so silence means the link or the node is
// gone, and the node's presence ends with it.
func (s *Server) sweep(ctx context.Context) {
	t := time.NewTicker(sweepEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		s.mu.Lock()
		conns := make([]*nodeConn, 0, len(s.conns))
		for _, c := range s.conns {
			conns = append(conns, c)
		}
		s.mu.Unlock()
		for _, c := range conns {
			got := c.conn.ConnectionStats().PacketsReceived
			if got != c.packets || c.heard.IsZero() {
				c.packets, c.heard = got, now
				continue
			}
			if now.Sub(c.heard) >= s.cfg.IdleTimeout {
				s.log.Info("node link silent; closing it", "node", c.node, "silent", now.Sub(c.heard).Round(time.Second))
				c.conn.CloseWithError(appErrShutdown, "no packet from the node")
			}
		}
	}
}

// identity returns the node a connection's verified client certificate
// names, or "" for a connection without one.
func identity(conn *quic.Conn) (string, error) {
	st := conn.ConnectionState().TLS
	if len(st.VerifiedChains) == 0 || len(st.PeerCertificates) == 0 {
		return "", nil
	}
	leaf := st.PeerCertificates[0]
	name, ok := strings.CutPrefix(leaf.Subject.CommonName, wire.NodeUserPrefix)
	if !ok || name == "" || !slices.Contains(leaf.Subject.Organization, wire.NodesGroup) {
		return "", fmt.Errorf("certificate of %q is not a node's", leaf.Subject.CommonName)
	}
	return name, nil
}

// serveConn serves one connection's streams until it ends.
func (s *Server) serveConn(ctx context.Context, conn *quic.Conn) {
	// An early connection is accepted before the client's certificate has
	// arrived, unless it resumed a session, whose ticket carries it; wait
	// for the handshake in the first case.
	if !conn.ConnectionState().TLS.DidResume {
		select {
		case <-conn.HandshakeComplete():
		case <-conn.Context().Done():
			return
		case <-ctx.Done():
			conn.CloseWithError(appErrShutdown, "hub shutting down")
			return
		}
	}
	node, err := identity(conn)
	if err != nil {
		conn.CloseWithError(appErrAuth, err.Error())
		return
	}
	log := s.log.With("remote", conn.RemoteAddr().String())
	peer := peerAddr(conn.RemoteAddr())
	var nc *nodeConn
	if node != "" {
		log = log.With("node", node)
		nc = &nodeConn{node: node, conn: conn}
		s.register(nc)
		defer s.unregister(nc)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	// Streams run on the connection's context: once no more are accepted
	// (the hub shuts down, or the connection ended), close it, so that
	// they end too before serveConn returns. closeAll reaches only the
	// registered connections, not those of joining nodes or one that
	// registers after it ran.
	defer conn.CloseWithError(appErrShutdown, "hub shutting down")
	for {
		st, err := conn.AcceptStream(ctx)
		if err != nil {
			logNodeClose(log, context.Cause(conn.Context()))
			return // the connection ended
		}
		wg.Go(func() { s.serveStream(conn.Context(), log, peer, node, st) })
	}
}

// logNodeClose tells the operator why a node closed its connection, when
// the node said it was for a failure of its own or of the hub's.
func logNodeClose(log *slog.Logger, err error) {
	var ae *quic.ApplicationError
	if !errors.As(err, &ae) || !ae.Remote {
		return
	}
	switch wire.CloseCode(ae.ErrorCode) {
	case wire.CloseNodeError:
		log.Warn("node ended its connection on a failure of its own", "err", ae.ErrorMessage)
	case wire.CloseProtocol:
		log.Warn("node ended its connection: the hub broke the protocol", "err", ae.ErrorMessage)
	}
}

// register makes nc its node's connection, closing one it replaces.
func (s *Server) register(nc *nodeConn) {
	s.mu.Lock()
	old := s.conns[nc.node]
	s.conns[nc.node] = nc
	s.mu.Unlock()
	if old != nil {
		old.conn.CloseWithError(appErrReplaced, "replaced by a newer connection of the node")
	}
}

func (s *Server) unregister(nc *nodeConn) {
	s.mu.Lock()
	if s.conns[nc.node] == nc {
		delete(s.conns, nc.node)
	}
	s.mu.Unlock()
}

// sessionStarted tells Presence that node is connected when its first
// session starts. A node may briefly have two (a new connection replaces
// an old one whose session has not ended yet): Presence hears only the
// first start and the last end, in that order.
func (s *Server) sessionStarted(node string) {
	if s.cfg.Presence == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sessions[node]++
	if s.sessions[node] == 1 {
		s.cfg.Presence.Connected(node)
	}
}

// sessionEnded tells Presence that node is gone when its last session
// ends.
func (s *Server) sessionEnded(node string) {
	if s.cfg.Presence == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sessions[node]--; s.sessions[node] <= 0 {
		delete(s.sessions, node)
		s.cfg.Presence.Disconnected(node)
	}
}

// peerAddr returns the IP address of a peer's UDP address, the zero Addr
// if it has none.
func peerAddr(a net.Addr) netip.Addr {
	if u, ok := a.(*net.UDPAddr); ok {
		return u.AddrPort().Addr().Unmap()
	}
	ap, _ := netip.ParseAddrPort(a.String())
	return ap.Addr().Unmap()
}

// serveStream dispatches a stream by its first frame; peer is the
// connection's remote address.
func (s *Server) serveStream(ctx context.Context, log *slog.Logger, peer netip.Addr, node string, qs *quic.Stream) {
	st := stream.New(qs)
	m, err := st.Read()
	if err != nil {
		st.ReadFailed(err)
		return
	}
	if j, ok := m.(*wire.JoinRequest); ok {
		s.join(ctx, log, peer, st, j)
		return
	}
	if node == "" {
		st.Fail(wire.CodeUnauthorized, fmt.Sprintf("a %v needs a node certificate; join first", m.Type()))
		return
	}
	switch m := m.(type) {
	case *wire.Hello:
		s.session(ctx, log, node, st, m)
	case *wire.StatusPush:
		s.status(ctx, log, node, st, m)
	case *wire.RenewRequest:
		s.renew(ctx, log, node, st, m)
	case *wire.Usage:
		s.usage(node, st, m)
	case *wire.ArtifactRequest:
		s.artifact(ctx, log, node, st, m)
	default:
		st.Fail(wire.CodeBadRequest, fmt.Sprintf("a stream cannot start with %v", m.Type()))
	}
}

func (s *Server) join(ctx context.Context, log *slog.Logger, peer netip.Addr, st *stream.Stream, req *wire.JoinRequest) {
	s.stats.Joins.Add(1)
	if _, ok := wire.Negotiate(req.CapabilityVersion); !ok {
		s.stats.JoinsRefused.Add(1)
		st.Fail(wire.CodeVersion, fmt.Sprintf("capability version %d is not spoken here (%d..%d)", req.CapabilityVersion, wire.MinCapabilityVersion, wire.CapabilityVersion))
		return
	}
	cert, ca, err := s.cfg.Authority.Join(ctx, peer, req)
	if err != nil {
		s.stats.JoinsRefused.Add(1)
		we := toWire(err)
		log.Info("join refused", "node", req.NodeName, "code", we.Code, "err", err)
		st.FailWith(we)
		return
	}
	log.Info("node joined", "node", req.NodeName, "site", req.Site)
	if err := st.Write(&wire.JoinResponse{Certificate: cert, CA: ca}); err != nil {
		return
	}
	st.CloseWrite()
}

func (s *Server) renew(ctx context.Context, log *slog.Logger, node string, st *stream.Stream, req *wire.RenewRequest) {
	cert, err := s.cfg.Authority.Renew(ctx, node, req.CSR)
	if err != nil {
		we := toWire(err)
		log.Warn("certificate renewal refused", "code", we.Code, "err", err)
		st.FailWith(we)
		return
	}
	log.Info("node certificate renewed")
	if st.Write(&wire.RenewResponse{Certificate: cert}) == nil {
		st.CloseWrite()
	}
}

// toWire returns what the peer is told of err: the *wire.Error it is or
// wraps, anything else as an internal error with its text.
func toWire(err error) *wire.Error {
	var we *wire.Error
	if errors.As(err, &we) {
		return we
	}
	return &wire.Error{Code: wire.CodeInternal, Message: err.Error()}
}

// errorCode is toWire's code and message.
func errorCode(err error) (wire.ErrorCode, string) {
	we := toWire(err)
	return we.Code, we.Message
}

// status applies StatusPush frames until the stream ends.
func (s *Server) status(ctx context.Context, log *slog.Logger, node string, st *stream.Stream, first *wire.StatusPush) {
	m := wire.Message(first)
	for {
		push, ok := m.(*wire.StatusPush)
		if !ok {
			st.Fail(wire.CodeBadRequest, fmt.Sprintf("unexpected %v on the status stream", m.Type()))
			return
		}
		if len(push.Items) > s.cfg.MaxStatusItems {
			st.Fail(wire.CodeTooLarge, fmt.Sprintf("%d status items in one push; at most %d", len(push.Items), s.cfg.MaxStatusItems))
			return
		}
		ack := &wire.StatusAck{Results: make([]wire.StatusResult, 0, len(push.Items))}
		for _, it := range push.Items {
			r := wire.StatusResult{Seq: it.Seq}
			if err := s.cfg.Sink.ApplyStatus(ctx, node, it); err != nil {
				r.Code, r.Message = errorCode(err)
				if r.Code == wire.CodeUnavailable || r.Code == wire.CodeInternal {
					// The hub could not take it now: leave it in the
					// outbox by not answering it; the edge resends.
					log.Warn("status not applied", "key", it.Key.String(), "err", r.Message)
					continue
				}
				log.Info("status refused", "key", it.Key.String(), "code", r.Code, "err", r.Message)
			}
			ack.Results = append(ack.Results, r)
		}
		s.stats.StatusItems.Add(int64(len(push.Items)))
		if err := st.Write(ack); err != nil {
			return
		}
		var err error
		if m, err = st.Read(); err != nil {
			st.ReadFailed(err)
			return
		}
	}
}
