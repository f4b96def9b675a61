package agent

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/outpost-mesh/outpost/edge/mesh"
	"github.com/outpost-mesh/outpost/edge/relay"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// relayLogEvery is how often the relay's counters are logged, when they
// changed.
const relayLogEvery = 10 * time.Second

// uplinkPoll is how often the node tells its site whether its own uplink
// carries its sync session.
const uplinkPoll = time.Second

// runRelay relays the sync datagrams of the node's site peers whose
// uplink is down to the hub, through the node's own (edge/relay), until
// ctx ends: when the node runs its site's mesh with MeshConfig.Relay. It
// listens on the mesh's IP, at the mesh's port + 1, and tells the site
// so, and whether the node's own uplink works, in the node's mesh.Meta.
func (a *Agent) runRelay(ctx context.Context) {
	if a.cfg.Mesh == nil || !a.cfg.Mesh.Relay {
		return
	}
	addr, ok := a.meshAddr(ctx)
	if !ok {
		return
	}
	bind := netip.AddrPortFrom(addr.Addr(), 0)
	if addr.Port() != 0 {
		bind = netip.AddrPortFrom(addr.Addr(), addr.Port()+1)
	}
	cfg := relay.DefaultConfig()
	cfg.Bind = bind
	cfg.Target = a.hubUDPAddr
	cfg.Allowed = a.sitePeerIP
	cfg.Logger = a.log.With("component", "relay")
	r, err := relay.Listen(cfg)
	if err != nil {
		a.log.Warn("relay for site peers not started; the node relays none", "err", err)
		return
	}
	a.relay.Store(r)
	defer a.relay.Store(nil)
	port := r.Addr().Port()
	if err := a.sayMeta(func(m *mesh.Meta) { m.RelayPort = port }); err != nil {
		a.log.Warn("cannot tell the site of the relay", "err", err)
	}
	a.log.Info("relaying site peers' sync sessions when their uplink is down", "addr", r.Addr())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = r.Run(ctx)
	}()
	defer func() { <-done }()

	poll := time.NewTicker(uplinkPoll)
	defer poll.Stop()
	logTick := time.NewTicker(relayLogEvery)
	defer logTick.Stop()
	uplink, said := false, false
	logged := relay.Stats{Peers: map[netip.Addr]relay.PeerStats{}}
	for {
		if up := a.directUplink(); up != uplink || !said {
			if err := a.sayMeta(func(m *mesh.Meta) { m.Uplink = up }); err == nil {
				uplink, said = up, true
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-poll.C:
		case <-logTick.C:
			if s := r.Stats(); !reflect.DeepEqual(s.Peers, logged.Peers) || s.Refused != logged.Refused {
				a.log.Info("relay counters", "peers", strings.Join(s.Summary(), " "), "clients", s.Clients, "refused", s.Refused)
				logged = s
			}
		}
	}
}

// relayUsage returns the counters of the site peers' relay while it
// serves, none otherwise: edge/usage's Config.Relayed, so that they go
// to the hub's metrics in the node's usage report.
func (a *Agent) relayUsage() []wire.RelayUsage {
	r := a.relay.Load()
	if r == nil {
		return nil
	}
	return relayCounters(r.Stats())
}

// relayCounters returns the relay's counters as the usage report carries
// them, by peer. No I/O.
func relayCounters(s relay.Stats) []wire.RelayUsage {
	out := make([]wire.RelayUsage, 0, len(s.Peers))
	for ip, p := range s.Peers {
		out = append(out, wire.RelayUsage{Peer: ip, Up: uint64(max(p.Up, 0)), Down: uint64(max(p.Down, 0)),
			Dropped: uint64(max(p.Dropped, 0)), Capped: uint64(max(p.Capped, 0))})
	}
	slices.SortFunc(out, func(x, y wire.RelayUsage) int { return x.Peer.Compare(y.Peer) })
	return out
}

// directUplink reports whether the node's sync session is up over its
// own uplink, not through a peer's relay.
func (a *Agent) directUplink() bool {
	a.clientMu.Lock()
	c := a.client
	a.clientMu.Unlock()
	return c != nil && c.Connected() && !c.Relayed()
}

// hubUDPAddr resolves the hub's sync address, for the relay.
func (a *Agent) hubUDPAddr() (netip.AddrPort, error) {
	host, port, err := net.SplitHostPort(a.cfg.HubAddr)
	if err != nil {
		return netip.AddrPort{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ap, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return netip.AddrPort{}, err
	}
	if len(ap) == 0 {
		return netip.AddrPort{}, fmt.Errorf("hub host %s has no address", host)
	}
	var p uint16
	if _, err := fmt.Sscanf(port, "%d", &p); err != nil {
		return netip.AddrPort{}, fmt.Errorf("hub port %q: %w", port, err)
	}
	return netip.AddrPortFrom(ap[0].Unmap(), p), nil
}

// sitePeerIP reports whether ip is the mesh address of a site peer the
// node holds alive: only they may use its relay.
func (a *Agent) sitePeerIP(ip netip.Addr) bool {
	s := a.site.Load()
	if s == nil {
		return false
	}
	for _, p := range s.Peers() {
		if p.Addr.Addr().Unmap() == ip {
			return true
		}
	}
	return false
}

// peerRelays returns, for the sync client, the relays of the site peers
// the node holds alive whose own uplink works, by name, and the node's
// mesh IP to send to them from; none when the node relays through no
// peer (no mesh, or MeshConfig.Relay off).
func (a *Agent) peerRelays() (netip.Addr, []netip.AddrPort) {
	s := a.site.Load()
	if s == nil || a.cfg.Mesh == nil || !a.cfg.Mesh.Relay {
		return netip.Addr{}, nil
	}
	peers := s.Peers()
	slices.SortFunc(peers, func(x, y mesh.Peer) int { return strings.Compare(x.Name, y.Name) })
	var out []netip.AddrPort
	for _, p := range peers {
		if p.Meta.Uplink && p.Meta.RelayPort != 0 {
			out = append(out, netip.AddrPortFrom(p.Addr.Addr(), p.Meta.RelayPort))
		}
	}
	from := a.cfg.Mesh.Addr.Addr()
	if !from.IsValid() {
		from, _ = netip.ParseAddr(a.status.HostIP())
	}
	return from, out
}
