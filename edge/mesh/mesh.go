// Package mesh is the site mesh of an edge node: the nodes of one site (the
// topology.outpost.dev/site label) on one LAN gossip with
// github.com/hashicorp/memberlist, so that each knows which of its peers
// are alive when the hub cannot say. Gossip is encrypted with the site's
// keys (memberlist's keyring: one primary, older ones still accepted while
// a new key rolls out) and carries the site's name as its label, which
// memberlist authenticates with the key: a node of another site, even one
// holding the same key, or a node without the key, cannot join.
//
// Liveness is memberlist's SWIM with Lifeguard: a peer that misses its
// probes, direct and through others, is suspected, and declared dead when
// the suspicion times out without it refuting; the timeout shortens as
// other peers confirm the suspicion. Config's defaults tune memberlist's
// LAN configuration for sites of a handful of gateways on weak LANs.
//
// Over the same gossip each node tells its peers the readiness of its own
// pods (SetPods, PodStates; see pods.go and, for the messages,
// podwire.go), so that routing can narrow the hub's EndpointSlices while
// the hub is away.
package mesh

import (
	"errors"
	"fmt"
	"log"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// DefaultPort is the port the mesh listens on, over UDP and TCP, as
// memberlist's.
const DefaultPort = 7946

// Config configures a Mesh.
type Config struct {
	// NodeName is the node's name, unique in the site; required.
	NodeName string
	// Site is the node's site; required. Gossip is labelled with it.
	Site string
	// Bind is the node's LAN address and port to listen on, over UDP
	// and TCP; port 0 picks a free one (tests). Required.
	Bind netip.AddrPort
	// Advertise is the address peers reach the node at; zero for Bind.
	Advertise netip.AddrPort
	// Keys are the site's gossip keys, of 16, 24 or 32 bytes (AES-128,
	// -192, -256): the first encrypts what the node sends, all are tried
	// on what it receives. At least one is required.
	Keys [][]byte
	// Logger receives memberlist's messages, each once a minute at most;
	// nil discards them.
	Logger *slog.Logger
	// Transport, if not nil, carries the gossip in place of memberlist's
	// own UDP and TCP transport on Bind, whose port must then be the one
	// it listens on (benchmarks count the bytes with it).
	Transport memberlist.NodeAwareTransport

	// ProbeInterval is how often the node probes a peer: 900ms, against
	// memberlist's LAN 1s. Each node probes its peers round-robin in a
	// shuffled order, so a crashed peer is first probed by someone only
	// when some peer's round reaches it: in a site of 10, one interval
	// in three nobody does, and that wait is the tail of the time to
	// find a node dead. Probes and their acks are most of an idle site's
	// traffic (5.2 of 6.3 kB a node per 30s at 1s, in `outpost bench
	// mesh` at 10 nodes), so the interval is bound by the 2 kbit/s a node
	// the mesh may spend: at 500ms five crashes were all found within
	// 2.2s, but the bytes would nearly double. A probe not answered within ProbeTimeout (300ms,
	// against memberlist's 500ms: gateways of a site share a LAN) is
	// retried through IndirectChecks (3) other peers and over TCP until
	// the interval ends, before the peer is suspected; Lifeguard
	// stretches both up to AwarenessMaxMultiplier (8) times while the
	// node itself is slow.
	ProbeInterval, ProbeTimeout time.Duration
	IndirectChecks              int
	AwarenessMaxMultiplier      int
	// SuspicionMult sets how long a suspected peer has to refute before
	// it is declared dead: SuspicionMult times the probe interval, times
	// log10 of the site's size when over 10 nodes. 1, against
	// memberlist's 4: a dead node's endpoints should leave routing within
	// 5 seconds, and a crash costs a wait for the first probe, a probe
	// interval, the suspicion and the gossip of the death. A peer that
	// is alive refutes as soon as the suspicion's gossip reaches it
	// (within 100 to 300ms on a LAN); one silent for about two seconds
	// (the failed probe's interval and the suspicion) is declared dead,
	// and comes back alive, refuting, once it answers again.
	// memberlist awaits SuspicionMult-2 confirmations from other peers,
	// stretching the timeout up to SuspicionMaxTimeoutMult (3) times
	// until they come; under 3 it awaits none, and the indirect probes
	// alone keep a peer that only this node cannot reach from being
	// suspected. `outpost bench mesh`, a crashed node of a site of 10
	// dropped from every peer's routing: with 1s probes and 2 (200ms
	// gossip, 15s push/pull) median 4.19s, max 6.2s; with these
	// defaults, over 31 crashes, median 2.48s, p95 4.99s, max 5.89s,
	// idle 1.72 kbit/s a node, 1.83 to 1.93 at most.
	SuspicionMult, SuspicionMaxTimeoutMult int
	// GossipInterval is how often the node gossips to GossipNodes random
	// peers: 100ms and 3, against memberlist's LAN 200ms, so that a
	// death reaches every peer a round or two sooner. It costs no byte in
	// an idle site: memberlist gossips only what is queued.
	GossipInterval time.Duration
	GossipNodes    int
	// PushPullInterval is how often the node syncs its whole state with
	// a random peer over TCP: 20s, against memberlist's 30s, for a site's
	// state is small, and it heals what lost gossip left behind: at 30s,
	// a site of 50 nodes that had just grown took over a minute to
	// converge in `outpost bench mesh`, at 15s under one. 20s, not 15s,
	// pays for the faster probes within the 2 kbit/s a node.
	PushPullInterval time.Duration
	// TCPTimeout bounds a TCP exchange with a peer (a join, a push-pull,
	// a probe's fallback): 3s, against memberlist's 10s, for the site's
	// state is small and its nodes share a LAN, and a rejoin dialling a
	// dead peer should give up soon.
	TCPTimeout time.Duration
	// DeadNodeReclaimTime is how long after a node is declared dead a
	// node of its name may come back from another address: 10s, so that
	// a gateway that reboots onto a new DHCP lease rejoins at once.
	DeadNodeReclaimTime time.Duration
}

// DefaultConfig returns the defaults above; NodeName, Site, Bind and Keys
// are the caller's.
func DefaultConfig() Config {
	return Config{
		ProbeInterval:           900 * time.Millisecond,
		ProbeTimeout:            300 * time.Millisecond,
		IndirectChecks:          3,
		AwarenessMaxMultiplier:  8,
		SuspicionMult:           1,
		SuspicionMaxTimeoutMult: 3,
		GossipInterval:          100 * time.Millisecond,
		GossipNodes:             3,
		PushPullInterval:        20 * time.Second,
		TCPTimeout:              3 * time.Second,
		DeadNodeReclaimTime:     10 * time.Second,
	}
}

// maxSiteLen bounds a site's name, which labels every packet (memberlist
// takes labels of up to 255 bytes).
const maxSiteLen = 200

// labelPrefix makes the site's name a label of the mesh's own. The label
// travels in every packet, so it is short: the site's name is most of it.
const labelPrefix = "op/"

// Validate reports the first invalid field.
func (c Config) Validate() error {
	switch {
	case c.NodeName == "":
		return errors.New("mesh: no node name")
	case c.Site == "" || len(c.Site) > maxSiteLen:
		return fmt.Errorf("mesh: site %q must have 1 to %d bytes", c.Site, maxSiteLen)
	case !c.Bind.IsValid():
		return errors.New("mesh: no address to listen on")
	case len(c.Keys) == 0:
		return errors.New("mesh: no gossip key: the site's gossip is always encrypted")
	case c.ProbeInterval <= 0 || c.ProbeTimeout <= 0 || c.ProbeTimeout >= c.ProbeInterval:
		return fmt.Errorf("mesh: probe timeout %v must be positive and under the probe interval %v", c.ProbeTimeout, c.ProbeInterval)
	case c.IndirectChecks < 0 || c.AwarenessMaxMultiplier < 1:
		return errors.New("mesh: indirect checks must not be negative nor the awareness multiplier under 1")
	case c.SuspicionMult < 1 || c.SuspicionMaxTimeoutMult < 1:
		return errors.New("mesh: suspicion multipliers must be at least 1")
	case c.GossipInterval <= 0 || c.GossipNodes < 1 || c.PushPullInterval <= 0 || c.TCPTimeout <= 0 || c.DeadNodeReclaimTime < 0:
		return errors.New("mesh: gossip interval, gossip nodes, push-pull interval and TCP timeout must be positive")
	}
	for i, k := range c.Keys {
		if err := checkKey(k); err != nil {
			return fmt.Errorf("mesh: key %d: %w", i, err)
		}
	}
	return nil
}

func checkKey(k []byte) error {
	switch len(k) {
	case 16, 24, 32:
		return nil
	}
	return fmt.Errorf("a key has 16, 24 or 32 bytes, not %d", len(k))
}

// Mesh is the node's membership of its site's mesh.
type Mesh struct {
	ml      *memberlist.Memberlist
	keyring *memberlist.Keyring
	name    string
	site    string
	addr    netip.AddrPort
	changes chan struct{}
	log     *logWriter

	// pods is the readiness of the node's pods and its peers'; queue
	// holds the deltas of the node's own to gossip.
	pods  *podTable
	queue *memberlist.TransmitLimitedQueue

	// members mirrors memberlist's alive members (the node itself
	// included), kept by its events: the delegate's callbacks read it,
	// and must not call memberlist, whose locks some of them run under.
	membersMu sync.Mutex
	members   map[string]member
	// gone holds the peers the node saw go (die or leave) that have not
	// come back, under membersMu.
	gone map[string]bool

	// meta is the node's own Meta, encoded, under metaMu.
	metaMu sync.Mutex
	meta   []byte

	closeOnce sync.Once
	closeErr  error
}

// New starts the node's membership: it listens on cfg.Bind and answers
// peers, but joins none until Join.
func New(cfg Config) (*Mesh, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	keyring, err := memberlist.NewKeyring(cfg.Keys, cfg.Keys[0])
	if err != nil {
		return nil, fmt.Errorf("mesh: keyring: %w", err)
	}
	m := &Mesh{
		keyring: keyring, name: cfg.NodeName, site: cfg.Site, changes: make(chan struct{}, 1),
		log:     newLogWriter(cfg.Logger, time.Minute),
		pods:    newPodTable(cfg.NodeName),
		members: map[string]member{}, gone: map[string]bool{},
	}
	m.queue = &memberlist.TransmitLimitedQueue{NumNodes: m.numMembers, RetransmitMult: retransmitMult}

	mc := memberlist.DefaultLANConfig()
	mc.Name = cfg.NodeName
	mc.Label = labelPrefix + cfg.Site
	mc.BindAddr = cfg.Bind.Addr().String()
	mc.BindPort = int(cfg.Bind.Port())
	mc.AdvertiseAddr, mc.AdvertisePort = mc.BindAddr, mc.BindPort
	if cfg.Advertise.IsValid() {
		mc.AdvertiseAddr, mc.AdvertisePort = cfg.Advertise.Addr().String(), int(cfg.Advertise.Port())
	}
	if cfg.Transport != nil {
		mc.Transport = cfg.Transport
	}
	mc.Keyring = keyring
	mc.GossipVerifyIncoming, mc.GossipVerifyOutgoing = true, true
	mc.ProbeInterval, mc.ProbeTimeout = cfg.ProbeInterval, cfg.ProbeTimeout
	mc.IndirectChecks, mc.AwarenessMaxMultiplier = cfg.IndirectChecks, cfg.AwarenessMaxMultiplier
	mc.SuspicionMult, mc.SuspicionMaxTimeoutMult = cfg.SuspicionMult, cfg.SuspicionMaxTimeoutMult
	mc.GossipInterval, mc.GossipNodes = cfg.GossipInterval, cfg.GossipNodes
	mc.PushPullInterval, mc.GossipToTheDeadTime = cfg.PushPullInterval, cfg.PushPullInterval
	mc.DeadNodeReclaimTime, mc.TCPTimeout = cfg.DeadNodeReclaimTime, cfg.TCPTimeout
	mc.DNSConfigPath = "" // peers are addresses, never names to resolve
	mc.Events = &events{m: m}
	mc.Delegate = &delegate{m: m}
	mc.Logger = log.New(m.log, "", 0)
	ml, err := memberlist.Create(mc)
	if err != nil {
		return nil, fmt.Errorf("mesh: start on %v: %w", cfg.Bind, err)
	}
	m.ml = ml
	m.addr = nodeAddr(ml.LocalNode()) // fixed at creation
	return m, nil
}

// Addr returns the address the node advertises to its peers, with the
// port it listens on.
func (m *Mesh) Addr() netip.AddrPort { return m.addr }

// Join contacts peers and merges their view of the site with the node's.
// It returns how many it reached; an error only if it reached none.
func (m *Mesh) Join(peers []netip.AddrPort) (int, error) {
	addrs := make([]string, 0, len(peers))
	for _, p := range peers {
		if p.IsValid() {
			addrs = append(addrs, p.String())
		}
	}
	if len(addrs) == 0 {
		return 0, errors.New("mesh: join: no peer address")
	}
	n, err := m.ml.Join(addrs)
	if err != nil {
		return n, fmt.Errorf("mesh: join: %w", err)
	}
	return n, nil
}

// Peer is a peer the node holds alive.
type Peer struct {
	Name string
	Addr netip.AddrPort
	// Meta is what the peer last said of itself (SetMeta); zero if it
	// said nothing, or nothing that decoded.
	Meta Meta
}

// member is a peer as memberlist's events last told it.
type member struct {
	addr netip.AddrPort
	meta Meta
}

// Peers returns the peers the node holds alive (suspects included, as
// SWIM does until they are declared dead), itself left out, by name.
// They come from memberlist's events: its Members returns nodes that it
// goes on changing, which cannot be read without a race.
func (m *Mesh) Peers() []Peer {
	m.membersMu.Lock()
	out := make([]Peer, 0, len(m.members))
	for name, mb := range m.members {
		if name != m.name {
			out = append(out, Peer{Name: name, Addr: mb.addr, Meta: mb.meta})
		}
	}
	m.membersMu.Unlock()
	slices.SortFunc(out, func(a, b Peer) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Alive returns the names of the peers Peers returns.
func (m *Mesh) Alive() []string {
	peers := m.Peers()
	out := make([]string, len(peers))
	for i, p := range peers {
		out[i] = p.Name
	}
	return out
}

// Gone returns the peers the node saw go, dead or left, that have not come
// back since, by name. Only what the node saw counts: a peer it never
// held alive (one that was dead before the node started) is not among
// them, so that nothing is taken for dead without a sign of it.
func (m *Mesh) Gone() []string {
	m.membersMu.Lock()
	defer m.membersMu.Unlock()
	out := slices.Collect(maps.Keys(m.gone))
	slices.Sort(out)
	return out
}

// ForgetGone forgets the gone peers for which keep returns false: those
// no longer of the site.
func (m *Mesh) ForgetGone(keep func(name string) bool) {
	m.membersMu.Lock()
	defer m.membersMu.Unlock()
	maps.DeleteFunc(m.gone, func(name string, _ bool) bool { return !keep(name) })
}

// Changes returns a channel that receives when a peer has joined, left,
// died or changed since the last receive (several changes may come as
// one).
func (m *Mesh) Changes() <-chan struct{} { return m.changes }

// SetKeys makes keys the node's gossip keys, the first one encrypting
// what it sends: new ones are added, the first is made primary, and
// those not given are dropped. A site rotates its key in three steps,
// each on every node before the next: add the new key, make it primary,
// drop the old one.
func (m *Mesh) SetKeys(keys [][]byte) error {
	if len(keys) == 0 {
		return errors.New("mesh: set keys: none given")
	}
	for i, k := range keys {
		if err := checkKey(k); err != nil {
			return fmt.Errorf("mesh: set keys: key %d: %w", i, err)
		}
	}
	for _, k := range keys {
		if err := m.keyring.AddKey(k); err != nil {
			return fmt.Errorf("mesh: add key: %w", err)
		}
	}
	if err := m.keyring.UseKey(keys[0]); err != nil {
		return fmt.Errorf("mesh: use key: %w", err)
	}
	for _, k := range m.keyring.GetKeys() {
		if !slices.ContainsFunc(keys, func(w []byte) bool { return string(w) == string(k) }) {
			if err := m.keyring.RemoveKey(k); err != nil {
				return fmt.Errorf("mesh: remove key: %w", err)
			}
		}
	}
	return nil
}

// Leave tells the peers the node is leaving, waiting up to timeout for
// the message to go out; they then hold it as left, not dead.
func (m *Mesh) Leave(timeout time.Duration) error {
	if err := m.ml.Leave(timeout); err != nil {
		return fmt.Errorf("mesh: leave: %w", err)
	}
	return nil
}

// Close stops the node's membership at once, without telling the peers:
// they will find it dead. Leave first for a clean exit.
func (m *Mesh) Close() error {
	m.closeOnce.Do(func() { m.closeErr = m.ml.Shutdown() })
	return m.closeErr
}

// SetMeta tells the site m about the node: its peers see it in
// Peer.Meta within a few gossip rounds. It waits up to a second for the
// news to be sent (it goes later if not).
func (m *Mesh) SetMeta(meta Meta) error {
	b, err := encodeMeta(meta)
	if err != nil {
		return err
	}
	m.metaMu.Lock()
	same := string(b) == string(m.meta)
	m.meta = b
	m.metaMu.Unlock()
	if same {
		return nil
	}
	_ = m.ml.UpdateNode(time.Second) // a timeout leaves it queued
	return nil
}

// retransmitMult is how many times, times log10 of the site's size plus
// one, a delta of the node's pods is gossiped: 4, as memberlist's own
// messages.
const retransmitMult = 4

// SetPods tells the site the node's own pods and their readiness, as its
// runtime and probes see them now: what changed since the last call is
// gossiped at once (and the whole in every push-pull). Pods whose UID is
// empty or over 128 bytes are left out.
func (m *Mesh) SetPods(pods []PodReady) {
	for _, d := range m.pods.setOwn(pods) {
		m.queue.QueueBroadcast(broadcast(d))
	}
}

// PodStates returns what each node of the site, the node itself
// included, last said of its pods, by node. A node that left or died is
// forgotten. Whether a node may speak for a pod (the pod's endpoints name
// it) is for the caller to check.
func (m *Mesh) PodStates() []NodePods { return m.pods.snapshot() }

// Health returns what the mesh says of the site's other nodes: those the
// node saw go and that have not come back (gone), and the pods their own
// nodes say are not ready, by UID, each with the node that said so
// (unready). The caller owns the maps.
func (m *Mesh) Health() (gone map[string]bool, unready map[string]string) {
	gone = map[string]bool{}
	for _, n := range m.Gone() {
		gone[n] = true
	}
	unready = map[string]string{}
	for _, np := range m.PodStates() {
		if np.Node == m.name || gone[np.Node] {
			continue
		}
		for _, p := range np.Pods {
			if !p.Ready {
				unready[p.UID] = np.Node
			}
		}
	}
	return gone, unready
}

// refused logs a message from a peer that did not decode, once a minute
// at most for the same error.
func (m *Mesh) refused(err error) {
	m.log.once(slog.LevelWarn, "mesh: refused a peer's pod readiness: "+err.Error())
}

func (m *Mesh) isMember(name string) bool {
	m.membersMu.Lock()
	defer m.membersMu.Unlock()
	_, ok := m.members[name]
	return ok
}

func (m *Mesh) numMembers() int {
	m.membersMu.Lock()
	defer m.membersMu.Unlock()
	return len(m.members)
}

// events keeps members, forgets the pods of peers that go, and signals
// Changes.
type events struct{ m *Mesh }

func (e *events) NotifyJoin(n *memberlist.Node) {
	e.m.membersMu.Lock()
	e.m.members[n.Name] = e.m.member(n)
	delete(e.m.gone, n.Name)
	e.m.membersMu.Unlock()
	e.m.changed()
}

// member returns n as the node keeps it. Events run under memberlist's
// lock of n, so n may be read then. Meta that does not decode is logged
// (once a minute) and taken as none.
func (m *Mesh) member(n *memberlist.Node) member {
	meta, err := decodeMeta(n.Meta)
	if err != nil {
		m.log.once(slog.LevelWarn, fmt.Sprintf("mesh: refused the meta of peer %q: %v", n.Name, err))
	}
	return member{addr: nodeAddr(n), meta: meta}
}

// nodeAddr returns where n is reached.
func nodeAddr(n *memberlist.Node) netip.AddrPort {
	a, _ := netip.AddrFromSlice(n.Addr)
	return netip.AddrPortFrom(a.Unmap(), n.Port)
}

func (e *events) NotifyLeave(n *memberlist.Node) {
	e.m.membersMu.Lock()
	delete(e.m.members, n.Name)
	if n.Name != e.m.name {
		e.m.gone[n.Name] = true
	}
	e.m.membersMu.Unlock()
	e.m.pods.forget(n.Name)
	e.m.changed()
}

func (e *events) NotifyUpdate(n *memberlist.Node) {
	e.m.membersMu.Lock()
	if _, ok := e.m.members[n.Name]; ok {
		e.m.members[n.Name] = e.m.member(n)
	}
	e.m.membersMu.Unlock()
	e.m.changed()
}

func (m *Mesh) changed() {
	select {
	case m.changes <- struct{}{}:
	default:
	}
}
