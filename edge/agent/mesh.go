package agent

import (
	"context"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/outpost-mesh/outpost/edge/checkpoint"
	"github.com/outpost-mesh/outpost/edge/mesh"
	"github.com/outpost-mesh/outpost/edge/objects"
	"github.com/outpost-mesh/outpost/edge/proxy"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// MeshConfig configures the node's membership of its site's mesh
// (edge/mesh): the site's keys and peers come from the node's view, as
// the hub sent them and the checkpoint keeps them.
type MeshConfig struct {
	// Addr is where the mesh listens, over UDP and TCP, and what the
	// node tells its peers: an invalid one is the node's InternalIP at
	// mesh.DefaultPort; port 0 picks a free one (tests, several agents
	// on one machine).
	Addr netip.AddrPort
	// Site tunes the mesh; the agent fills in the node, site, address,
	// source, pods, logger and clock.
	Site mesh.SiteConfig
	// Relay has the node relay its site peers' sync sessions to the hub
	// while their uplink is down, and move its own through a peer's
	// while its uplink is (edge/relay, sync/client's Failover): true.
	Relay bool
}

// DefaultMeshConfig returns the defaults: the node's InternalIP, port
// 7946, edge/mesh's tuning, and relaying on.
func DefaultMeshConfig() MeshConfig {
	return MeshConfig{Site: mesh.DefaultSiteConfig(), Relay: true}
}

// runMesh runs the node's site mesh until ctx ends, once the node knows
// the address to listen on; it is up while the node is in a site and
// holds the site's keys.
func (a *Agent) runMesh(ctx context.Context) {
	addr, ok := a.meshAddr(ctx)
	if !ok {
		return
	}
	sc := a.cfg.Mesh.Site
	sc.Mesh.NodeName, sc.Mesh.Bind = a.cfg.NodeName, addr
	sc.Mesh.Logger = a.log.With("component", "mesh")
	sc.Source = &meshSource{cp: a.cp, node: a.cfg.NodeName, site: a.cfg.Site}
	sc.Pods = a.ownPods
	sc.Changed = a.meshChanged
	sc.Logger, sc.Clock = a.log.With("component", "mesh"), a.now
	s, err := mesh.NewSite(sc)
	if err != nil {
		a.log.Warn("site mesh not started", "err", err)
		return
	}
	a.metaMu.Lock()
	_ = s.SetMeta(a.meta) // checked by sayMeta
	a.site.Store(s)
	a.metaMu.Unlock()
	defer a.site.Store(nil)
	_ = s.Run(ctx)
}

// sayMeta changes with fn what the node says of itself to its site
// (mesh.Meta): the ports of what it serves its peers, whether its uplink
// works, the blobs it is pulling. It may be called before the mesh is up,
// and from any goroutine; it may wait up to a second for the news to go
// out.
func (a *Agent) sayMeta(fn func(*mesh.Meta)) error {
	a.metaMu.Lock()
	defer a.metaMu.Unlock()
	meta := a.meta
	meta.Pulling = slices.Clone(meta.Pulling)
	fn(&meta)
	if err := meta.Validate(); err != nil {
		return err
	}
	if s := a.site.Load(); s != nil {
		if err := s.SetMeta(meta); err != nil {
			return err
		}
	}
	a.meta = meta
	return nil
}

// meshAddr returns the address the mesh listens on: the configured one,
// or the node's InternalIP once it has one.
func (a *Agent) meshAddr(ctx context.Context) (netip.AddrPort, bool) {
	if a.cfg.Mesh.Addr.IsValid() {
		return a.cfg.Mesh.Addr, true
	}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	logged := false
	for {
		if ip, err := netip.ParseAddr(a.status.HostIP()); err == nil {
			return netip.AddrPortFrom(ip, mesh.DefaultPort), true
		}
		if !logged {
			a.log.Info("site mesh waits for the node's InternalIP to listen on")
			logged = true
		}
		select {
		case <-ctx.Done():
			return netip.AddrPort{}, false
		case <-t.C:
		}
	}
}

// ownPods returns the node's pods and their readiness, for its peers.
func (a *Agent) ownPods() ([]mesh.PodReady, bool) {
	ready, ok := a.status.PodsReady()
	if !ok {
		return nil, false
	}
	out := make([]mesh.PodReady, 0, len(ready))
	for uid, r := range ready {
		out = append(out, mesh.PodReady{UID: uid, Ready: r})
	}
	return out, true
}

// meshChanged hears from the mesh that its peers or their pods may have
// changed: the proxy looks again, and the node reports its status when
// the peers it holds alive changed (the hub reads them from its Node).
func (a *Agent) meshChanged() {
	if a.netsvc != nil {
		a.netsvc.Kick()
	}
	said := meshAnnotations(a.site.Load())
	a.meshMu.Lock()
	changed := !maps.Equal(said, a.meshSaid)
	a.meshSaid = said
	a.meshMu.Unlock()
	if changed {
		a.status.NodeDue()
	}
}

// meshAnnotations returns the Node annotations of the node's mesh: where
// it listens and the peers it holds alive; none while it is not up.
func meshAnnotations(s *mesh.Site) map[string]string {
	if s == nil {
		return nil
	}
	addr, ok := s.Addr()
	if !ok {
		return nil
	}
	alive, ok := s.Alive()
	if !ok {
		return nil
	}
	return map[string]string{
		wire.AnnotationMeshAddr:  addr.String(),
		wire.AnnotationMeshAlive: strings.Join(alive, ","),
	}
}

// meshSource is the node's site as its checkpoint holds it: the site of
// the node's own Node (its label wire.SiteLabel, or the agent's --site
// while the hub has not sent the Node), the site's keys (wire.MeshKeys)
// and the site's other Nodes with the address each said its mesh listens
// on. It decodes them again only when the view's Nodes or keys changed.
// Its methods are called from the Site's goroutine only.
type meshSource struct {
	cp         *checkpoint.Store
	node, site string // site is the agent's --site

	read bool
	gen  uint64
	name string         // the site's
	keys *wire.MeshKeys // nil for none
	peer []mesh.SitePeer
}

var _ mesh.Source = (*meshSource)(nil)

func (s *meshSource) Site(now time.Time) (mesh.SiteView, error) {
	gen := s.cp.ResourceGeneration(wire.ResourceNodes, wire.ResourceMeshKeys)
	if !s.read || gen != s.gen {
		if err := s.load(); err != nil {
			return mesh.SiteView{}, err
		}
		s.read, s.gen = true, gen
	}
	v := mesh.SiteView{Name: s.name, Peers: s.peer}
	if s.keys != nil {
		v.Keys = s.keys.Ring(now)
	}
	return v, nil
}

// load reads the node's site, its keys and its peers from the
// checkpoint. Keys that do not decode, or are another site's, count as
// none; a Node that does not decode is left out.
func (s *meshSource) load() error {
	name := s.site
	o, ok, err := s.cp.Get(wire.Key{Resource: wire.ResourceNodes, Name: s.node})
	if err != nil {
		return err
	}
	var self corev1.Node
	if ok && objects.Decode(o.Raw, o.Revision, &self) == nil {
		name = self.Labels[wire.SiteLabel]
	}
	var keys *wire.MeshKeys
	var peers []mesh.SitePeer
	if name != "" {
		o, ok, err := s.cp.Get(wire.MeshKeysKey(name))
		if err != nil {
			return err
		}
		if ok {
			if k, err := wire.UnmarshalMeshKeys(o.Raw); err == nil && k.Site == name {
				keys = k
			}
		}
		err = s.cp.Scan(wire.ResourceNodes, func(o checkpoint.Object) {
			var n corev1.Node
			if objects.Decode(o.Raw, o.Revision, &n) != nil || n.Name == s.node || n.Labels[wire.SiteLabel] != name {
				return
			}
			p := mesh.SitePeer{Name: n.Name}
			if ap, err := netip.ParseAddrPort(n.Annotations[wire.AnnotationMeshAddr]); err == nil {
				p.Addr = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
			}
			peers = append(peers, p)
		})
		if err != nil {
			return err
		}
		slices.SortFunc(peers, func(a, b mesh.SitePeer) int { return strings.Compare(a.Name, b.Name) })
	}
	s.name, s.keys, s.peer = name, keys, peers
	return nil
}

// meshPeers is the site mesh as the service proxy reads it (proxy.Peers).
// The agent runs one Site at most, so its generations, one up, never
// repeat; 0 is no mesh.
type meshPeers struct{ a *Agent }

var _ proxy.Peers = meshPeers{}

func (p meshPeers) PeerGeneration() uint64 {
	if s := p.a.site.Load(); s != nil {
		return s.Generation() + 1
	}
	return 0
}

func (p meshPeers) PeerHealth() (map[string]bool, map[string]string) {
	if s := p.a.site.Load(); s != nil {
		return s.Health()
	}
	return nil, nil
}
