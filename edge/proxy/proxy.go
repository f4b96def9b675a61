// Package proxy is the edge agent's service proxy: it keeps the node's
// service routing (netd's dataplanes: eBPF socket load-balancing, or
// nftables where the kernel lacks cgroup BPF) and its DNS server's zone in
// step with the Services and EndpointSlices of the checkpoint, with the
// node's own pods as the runtime sees them, and with other nodes' pods as
// the site mesh says they are, with the hub or without it.
package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"time"

	"github.com/outpost-mesh/outpost/edge/checkpoint"
	"github.com/outpost-mesh/outpost/netd/dns"
	"github.com/outpost-mesh/outpost/netd/services"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// View is the checkpoint as the proxy reads it.
type View interface {
	// ResourceGeneration changes whenever objects of resources may have.
	ResourceGeneration(resources ...string) uint64
	// Scan calls fn with each of the view's objects of resource; o.Raw
	// is valid only during the call.
	Scan(resource string, fn func(o checkpoint.Object)) error
}

var _ View = (*checkpoint.Store)(nil)

// LocalPods tells the proxy how the node's own pods are, as its runtime
// and probes see them now.
type LocalPods interface {
	// PodAddrs returns whether each pod IP of the node's pods serves
	// (running and ready), and ok false while the node does not know
	// yet (before its first look at the runtime).
	PodAddrs() (ready map[netip.Addr]bool, ok bool)
}

// Peers tells the proxy what the site mesh says of other nodes' pods.
type Peers interface {
	// PeerGeneration changes whenever what PeerHealth returns may have;
	// 0 while there is nothing to say. It is read at every look, and
	// must be cheap.
	PeerGeneration() uint64
	// PeerHealth returns what the site mesh says now: the site peers
	// the node saw die or leave and that have not come back (gone), and
	// the pods that their own node says are not ready, by UID as the API
	// writes it, each with the name of that node (unready). It is called
	// when the generation moved, after reading it. The maps are the
	// proxy's to read, not modify.
	PeerHealth() (gone map[string]bool, unready map[string]string)
}

// Zones takes the DNS zones the proxy builds: the node's DNS server.
type Zones interface {
	SetZone(*dns.Zone)
}

// Config configures a Proxy.
type Config struct {
	// NodeName is the node's name; Zone its topology.kubernetes.io/zone
	// label, "" for none.
	NodeName, Zone string
	// NodeAddrs returns the node's addresses, which NodePorts are
	// reached on; nil for none.
	NodeAddrs func() []netip.Addr
	// View is the checkpoint; required.
	View View
	// Local, if not nil, says which of the node's pods serve, so that
	// the node drops its dead pods from routing and DNS at once, even
	// while the hub (whose EndpointSlices still list them) is away.
	Local LocalPods
	// Peers, if not nil, says which of other nodes' pods the site mesh
	// knows not to serve: those of nodes it saw die or leave, and those
	// their own node says are not ready. They leave routing and DNS
	// even while the site is cut off from the hub; the hub's
	// EndpointSlices stay the source of truth, which the mesh only
	// narrows. The agent calls Kick when the mesh's view changes.
	Peers Peers
	// Dataplanes route as the table says; each gets every table.
	Dataplanes []services.Dataplane
	// DNS, if not nil, gets the cluster zone; Domain is the cluster
	// domain (cluster.local).
	DNS    Zones
	Domain string
	// ClusterDNS is the address pods' resolv.conf names, the cluster DNS
	// Service's ClusterIP (kube-system/kube-dns, DNSService): each node
	// routes its port 53, over UDP and TCP, to DNSAddr, the node's own
	// DNS server, whether the hub has sent that Service or not. Not
	// valid: no cluster DNS.
	ClusterDNS netip.Addr
	DNSService string
	DNSAddr    netip.Addr
	// Poll is how often the proxy looks for changes it was not kicked
	// about (the node's pods' readiness); 500ms.
	Poll time.Duration
	// MinSync is the least time between two rebuilds, as kube-proxy's
	// --min-sync-period: 500ms. Changes that come meanwhile (the
	// thousands of a bulk create, in many batches) are applied together.
	// A pod killed on the node, or one the mesh says is down, leaves
	// routing within Poll plus MinSync.
	MinSync time.Duration
	// Clock is the time; nil for the wall clock.
	Clock func() time.Time
	// Logger is non-nil.
	Logger *slog.Logger
}

// DefaultConfig returns the defaults; NodeName, View, Dataplanes and
// Logger are the caller's.
func DefaultConfig() Config {
	return Config{
		Domain:     "cluster.local",
		DNSService: "kube-system/kube-dns",
		Poll:       500 * time.Millisecond,
		MinSync:    500 * time.Millisecond,
	}
}

// Proxy keeps the dataplanes and the DNS zone in step with the view.
type Proxy struct {
	cfg  Config
	kick chan struct{}

	// Owned by Run.
	gen      uint64
	local    map[netip.Addr]bool
	peerGen  uint64     // Peers' generation of the last rebuild
	peers    peerHealth // what Peers said last, read when its generation moves
	synced   bool
	applied  time.Time // when the last rebuild was made
	problems map[services.Problem]bool
	failing  string
	objs     objectCache
	zone     *dns.Zone // the last one built, which the next is sized after
}

// New returns a Proxy of cfg; Run starts it.
func New(cfg Config) (*Proxy, error) {
	switch {
	case cfg.View == nil:
		return nil, errors.New("proxy: no view")
	case cfg.Logger == nil:
		return nil, errors.New("proxy: no logger")
	case cfg.Poll <= 0 || cfg.MinSync < 0:
		return nil, errors.New("proxy: poll must be positive and min sync not negative")
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	return &Proxy{cfg: cfg, kick: make(chan struct{}, 1), problems: map[services.Problem]bool{}}, nil
}

// Kick makes Run look at the view and the mesh now: the hub sent
// changes, or the mesh's view of the site's peers changed. A change
// within MinSync of the last rebuild waits for the next poll.
func (p *Proxy) Kick() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// Run keeps routing and DNS in step until ctx ends. Failures are logged
// and retried at the next look; the routing in place stays.
func (p *Proxy) Run(ctx context.Context) error {
	t := time.NewTicker(p.cfg.Poll)
	defer t.Stop()
	for {
		p.step(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-p.kick:
		case <-t.C:
		}
	}
}

// step rebuilds and applies the table if the view or the node's pods
// changed since the last applied one, or the last one failed.
func (p *Proxy) step(ctx context.Context) {
	gen := p.cfg.View.ResourceGeneration(wire.ResourceServices, wire.ResourceEndpointSlices)
	var local map[netip.Addr]bool
	if p.cfg.Local != nil {
		if l, ok := p.cfg.Local.PodAddrs(); ok {
			local = l
		}
	}
	if p.cfg.Peers != nil {
		if g := p.cfg.Peers.PeerGeneration(); g != p.peers.gen {
			gone, unready := p.cfg.Peers.PeerHealth()
			p.peers = newPeerHealth(g, gone, unready)
		}
	}
	h := p.peers
	if p.synced && gen == p.gen && mapsEqual(local, p.local) && h.gen == p.peerGen {
		return
	}
	now := p.cfg.Clock()
	if !p.applied.IsZero() && now.Sub(p.applied) < p.cfg.MinSync {
		return // the next look after MinSync applies it, with what came meanwhile
	}
	p.applied = now
	if err := p.apply(ctx, local, h); err != nil {
		if msg := err.Error(); msg != p.failing {
			p.cfg.Logger.Warn("service routing not updated; retrying", "err", err)
			p.failing = msg
		}
		p.synced = false
		return
	}
	if p.failing != "" {
		p.cfg.Logger.Info("service routing updated again")
		p.failing = ""
	}
	p.synced, p.gen, p.local, p.peerGen = true, gen, local, h.gen
}

// peerHealth is what Peers.PeerHealth returned at a generation, with the
// pods' UIDs parsed as endpoints hold them; zero without a mesh.
type peerHealth struct {
	gen     uint64
	gone    map[string]bool
	unready map[[16]byte]string
}

// newPeerHealth returns what Peers said at gen. A UID that does not
// parse names no endpoint's pod, and is left out.
func newPeerHealth(gen uint64, gone map[string]bool, unready map[string]string) peerHealth {
	h := peerHealth{gen: gen, gone: gone, unready: make(map[[16]byte]string, len(unready))}
	for uid, node := range unready {
		if u, ok := services.ParseUID(uid); ok {
			h.unready[u] = node
		}
	}
	return h
}

func mapsEqual(a, b map[netip.Addr]bool) bool {
	if len(a) != len(b) || (a == nil) != (b == nil) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// apply reads the view, builds the table and the zone and hands them on.
func (p *Proxy) apply(ctx context.Context, local map[netip.Addr]bool, h peerHealth) error {
	svcs, slices, undecodable, err := p.read()
	if err != nil {
		return err
	}
	slices = p.narrow(slices, local, h)
	in := services.Input{Node: p.cfg.NodeName, Zone: p.cfg.Zone, Services: svcs, Slices: slices}
	if p.cfg.NodeAddrs != nil {
		in.NodeAddrs = p.cfg.NodeAddrs()
	}
	table, problems := services.Build(in)
	problems = append(problems, p.routeDNS(table)...)
	p.report(append(undecodable, problems...))
	var errs []error
	for _, d := range p.cfg.Dataplanes {
		if err := d.Sync(ctx, table); err != nil {
			errs = append(errs, err)
		}
	}
	if p.cfg.DNS != nil {
		p.zone = dns.NewZoneLike(p.zone, p.cfg.Domain, svcs, slices)
		p.cfg.DNS.SetZone(p.zone)
	}
	return errors.Join(errs...)
}

// read returns the view's Services and EndpointSlices, decoding only
// those that changed since the last read. Objects that do not decode are
// left out and returned as problems.
func (p *Proxy) read() (svcs []*services.Service, eps []*services.Slice, problems []services.Problem, err error) {
	svcs, eps, problems, err = p.objs.update(p.cfg.View)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("read services and endpoint slices: %w", err)
	}
	return svcs, eps, problems, nil
}

// narrow returns slices with the endpoints the node knows not to serve
// marked not ready and not serving (terminating left as it is), so that
// routing and DNS leave them out: the hub's view of them may be old, and
// is while it is away. Those are the node's own endpoints that the
// runtime says do not serve (local; nil while it is not known), and
// other nodes' endpoints that the mesh says are down (h): those of a
// node gone, and those of a pod whose own node says it is not ready. A
// node's claim about another node's pod is ignored, and so is what the
// mesh says of this node's own. Nothing is added or made ready. The
// slices given are not modified.
func (p *Proxy) narrow(in []*services.Slice, local map[netip.Addr]bool, h peerHealth) []*services.Slice {
	if local == nil && len(h.gone) == 0 && len(h.unready) == 0 {
		return in
	}
	out := in[:0:0]
	for _, s := range in {
		var copied *services.Slice
		for i := range s.Endpoints {
			ep := &s.Endpoints[i]
			if !ep.Ready && !ep.Serving || !p.down(ep, local, h) {
				continue
			}
			if copied == nil {
				c := *s
				c.Endpoints = slices.Clone(s.Endpoints)
				copied = &c
			}
			copied.Endpoints[i].Ready, copied.Endpoints[i].Serving = false, false
		}
		if copied != nil {
			s = copied
		}
		out = append(out, s)
	}
	return out
}

// down reports whether the node knows ep not to serve, as narrow says.
func (p *Proxy) down(ep *services.Endpoint, local map[netip.Addr]bool, h peerHealth) bool {
	switch {
	case ep.NodeName == "":
		return false // no node to ask
	case ep.NodeName == p.cfg.NodeName:
		if local == nil || len(ep.Addresses) == 0 {
			return false
		}
		a, err := netip.ParseAddr(ep.Addresses[0])
		return err == nil && !local[a]
	case h.gone[ep.NodeName]:
		return true
	case ep.PodUID != [16]byte{}:
		node, ok := h.unready[ep.PodUID]
		return ok && node == ep.NodeName
	}
	return false
}

// routeDNS sends port 53 of the cluster DNS address to the node's own
// DNS server. Another Service holding that address and port keeps it,
// as a problem.
func (p *Proxy) routeDNS(t services.Table) []services.Problem {
	if !p.cfg.ClusterDNS.IsValid() || !p.cfg.DNSAddr.IsValid() {
		return nil
	}
	var problems []services.Problem
	for _, proto := range []services.Proto{services.UDP, services.TCP} {
		k := services.Key{Addr: p.cfg.ClusterDNS, Port: 53, Proto: proto}
		if f, ok := t[k]; ok && f.Service != p.cfg.DNSService {
			problems = append(problems, services.Problem{Service: f.Service,
				Reason: fmt.Sprintf("holds the cluster DNS address %s: pods' names do not resolve through the node", k)})
			continue
		}
		t[k] = &services.Frontend{Key: k, Kind: services.ClusterIP, Service: p.cfg.DNSService, PortName: "dns",
			Backends: []services.Backend{{Addr: netip.AddrPortFrom(p.cfg.DNSAddr, 53), Local: true}}}
	}
	return problems
}

// report logs each problem once, while it lasts: one that goes away and
// comes back is logged again.
func (p *Proxy) report(problems []services.Problem) {
	now := make(map[services.Problem]bool, len(problems))
	for _, pr := range problems {
		if !p.problems[pr] && !now[pr] {
			p.cfg.Logger.Warn("service left out of routing", "service", pr.Service, "reason", pr.Reason)
		}
		now[pr] = true
	}
	p.problems = now
}
