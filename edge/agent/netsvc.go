package agent

import (
	"context"
	"net/netip"
	"path/filepath"

	"github.com/outpost-mesh/outpost/edge/cgroups"
	"github.com/outpost-mesh/outpost/edge/netsvc"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// buildNetServices builds the node's network services (service routing,
// its DNS server, the site overlay) for a node of real containers; it
// starts nothing.
func (a *Agent) buildNetServices(net *lazyNetwork) (*netsvc.Services, error) {
	pc := a.cfg.Pods
	bpffs := pc.BPFFS
	if bpffs == "" {
		bpffs = filepath.Join(a.cfg.DataDir, BPFDir)
	}
	cfg := netsvc.Config{
		NodeName: a.cfg.NodeName, Site: a.cfg.Site,
		HostNetNS: pc.HostNetNS, NetNSDir: filepath.Join(a.cfg.DataDir, NetNSDir), Bridge: pc.Bridge,
		Network: net, View: a.cp, Local: a.status, Peers: meshPeers{a},
		NodeAddrs: func() []netip.Addr {
			if ip, err := netip.ParseAddr(a.status.HostIP()); err == nil {
				return []netip.Addr{ip}
			}
			return nil
		},
		Routing:     pc.ServiceRouting,
		PinDir:      filepath.Join(bpffs, "outpost-"+a.cfg.NodeName),
		NftTable:    "outpost-svc-" + pc.Bridge,
		ClusterCIDR: pc.ClusterCIDR, ServiceCIDR: pc.ServiceCIDR,
		ClusterDNS: pc.ClusterDNS, Domain: pc.ClusterDomain, ResolvConf: pc.ResolvConf,
		Overlay: pc.SiteOverlay, OverlayDevice: overlayDevice(pc.Bridge),
		Event:  a.events.Node,
		Logger: a.log.With("component", "netsvc"),
	}
	if l, err := cgroups.DetectLayout(""); err == nil {
		cfg.Cgroup = l.Unified()
	}
	return netsvc.New(cfg)
}

// BPFDir is where, under the data dir, the node mounts the bpffs its eBPF
// service routing is pinned on, unless told another.
const BPFDir = "bpf"

// nodeAnnotations returns the annotations the agent sets on its Node: how
// it routes Services, once it chose, its site mesh's address and the
// peers it holds alive, while it runs, its time zone and its over-the-air
// update state.
func (a *Agent) nodeAnnotations() map[string]string {
	out := meshAnnotations(a.site.Load()) // a map of its own
	if a.cfg.TimeZone != "" {
		if out == nil {
			out = map[string]string{}
		}
		out[wire.AnnotationTimeZone] = a.cfg.TimeZone
	}
	if a.netsvc != nil {
		if m := a.netsvc.Mode(); m != "" {
			if out == nil {
				out = map[string]string{}
			}
			out[wire.AnnotationServiceRouting] = m
		}
	}
	return a.firmwareAnnotations(out)
}

// overlayDevice names the node's VXLAN device after its bridge, so that
// two agents on one machine have two: "vx-" and the bridge's name, within
// the kernel's 15 bytes.
func overlayDevice(bridge string) string {
	name := "vx-" + bridge
	if len(name) > 15 {
		name = name[:15]
	}
	return name
}

// Ready implements netsvc.Network: the bridge's address and the node's
// pod CIDR once the pod network is up.
func (l *lazyNetwork) Ready(ctx context.Context) (netip.Addr, netip.Prefix, error) {
	n, err := l.get(ctx)
	if err != nil {
		return netip.Addr{}, netip.Prefix{}, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return n.Gateway(), l.cidr, nil
}

// RouteServicesToBridge implements netsvc.Network.
func (l *lazyNetwork) RouteServicesToBridge() error {
	n, err := l.get(context.Background())
	if err != nil {
		return err
	}
	return n.RouteServicesToBridge()
}
