// Package netsvc runs the edge node's network services once its pod
// network is up: the DNS server on the pods' bridge address, service
// routing (eBPF socket load-balancing with nftables for NodePorts reached
// from outside, or nftables alone where the kernel lacks cgroup BPF) that
// edge/proxy keeps in step with the view, and the site overlay to the
// other nodes of its site. Only edge/agent builds it.
package netsvc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"

	"github.com/outpost-mesh/outpost/edge/checkpoint"
	"github.com/outpost-mesh/outpost/edge/objects"
	"github.com/outpost-mesh/outpost/edge/proxy"
	"github.com/outpost-mesh/outpost/netd"
	"github.com/outpost-mesh/outpost/netd/dns"
	"github.com/outpost-mesh/outpost/netd/ebpflb"
	"github.com/outpost-mesh/outpost/netd/nftlb"
	"github.com/outpost-mesh/outpost/netd/overlay"
	"github.com/outpost-mesh/outpost/netd/services"
	"github.com/outpost-mesh/outpost/netd/tcnat"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// The service routing modes of Config.Routing.
const (
	// RoutingAuto is eBPF where the kernel runs it, else nftables.
	RoutingAuto = "auto"
	// RoutingEBPF is eBPF socket load-balancing for the node's pods and
	// host processes, with nftables for NodePorts and external IPs
	// reached from outside the node.
	RoutingEBPF = "ebpf"
	// RoutingNftables is nftables rules alone: the fallback.
	RoutingNftables = "nftables"
	// RoutingNone routes no Service.
	RoutingNone = "none"
)

// Network is the node's pod network as netsvc needs it.
type Network interface {
	// Ready returns the pods' bridge address (their gateway) and the
	// node's pod CIDR once the pod network is up, or an error until then.
	Ready(ctx context.Context) (gateway netip.Addr, podCIDR netip.Prefix, err error)
	// RouteServicesToBridge routes the service CIDR into the pods'
	// bridge, in place of its unreachable route, from now on: nftables
	// service routing needs a route for the node's own processes to
	// reach a ClusterIP (netd.Network.RouteServicesToBridge).
	RouteServicesToBridge() error
}

// Config configures the node's network services.
type Config struct {
	// NodeName and Site are the node's name and site
	// (topology.outpost.dev/site); Zone its topology.kubernetes.io/zone.
	NodeName, Site, Zone string
	// HostNetNS is the network namespace that plays the node, "" for the
	// agent's own; NetNSDir holds the pods' network namespaces, each
	// bind-mounted under its pod's UID.
	HostNetNS, NetNSDir string
	// Bridge is the pods' bridge, netd's.
	Bridge string
	// Network is the pod network; View the checkpoint; Local the node's
	// pods as the agent sees them; NodeAddrs the node's addresses
	// (NodePorts, and the overlay's underlay: the first IPv4 one).
	Network Network
	View    proxy.View
	Local   proxy.LocalPods
	// Peers, if not nil, says what the site mesh knows of other nodes'
	// pods, which narrows routing and DNS.
	Peers     proxy.Peers
	NodeAddrs func() []netip.Addr
	// Routing is RoutingAuto, RoutingEBPF, RoutingNftables or
	// RoutingNone.
	Routing string
	// PinDir is the node's directory on a bpffs, where the eBPF
	// dataplane pins its maps and links; a bpffs is mounted at its
	// parent if none is. Cgroup is the cgroup v2 directory its programs
	// attach to, "" where there is none (no eBPF routing then).
	PinDir, Cgroup string
	// NftTable names the node's nftables tables of service routing.
	NftTable string
	// ClusterCIDR and ServiceCIDR are the cluster's.
	ClusterCIDR, ServiceCIDR netip.Prefix
	// ClusterDNS is the cluster DNS address pods' resolv.conf names; not
	// valid: no DNS server. Domain is the cluster domain. ResolvConf is
	// the node's resolver file, whose nameservers names outside the
	// cluster are forwarded to.
	ClusterDNS netip.Addr
	Domain     string
	ResolvConf string
	// Overlay runs the site overlay, on the device OverlayDevice, when
	// the node has a site.
	Overlay       bool
	OverlayDevice string
	// Event records an Event on the node; nil for none.
	Event func(typ, reason, msg string)
	// Logger is non-nil.
	Logger *slog.Logger
}

// Services runs the node's network services.
type Services struct {
	cfg  Config
	log  *slog.Logger
	kick chan struct{}
	mode atomic.Value // string: the routing mode in use, "" until chosen

	mu      sync.Mutex
	ebpf    *ebpflb.Dataplane // nil unless routing with eBPF
	cookies map[string]uint64 // pod netns file -> cookie included
}

// New checks cfg and returns the services; Run starts them.
func New(cfg Config) (*Services, error) {
	switch cfg.Routing {
	case RoutingAuto, RoutingEBPF, RoutingNftables, RoutingNone:
	default:
		return nil, fmt.Errorf("service routing %q: want auto, ebpf, nftables or none", cfg.Routing)
	}
	switch {
	case cfg.Network == nil || cfg.View == nil || cfg.Logger == nil:
		return nil, errors.New("netsvc: network, view and logger are required")
	case cfg.NetNSDir == "" || cfg.PinDir == "" || cfg.NftTable == "":
		return nil, errors.New("netsvc: netns dir, pin dir and nftables table are required")
	}
	if cfg.Event == nil {
		cfg.Event = func(string, string, string) {}
	}
	if cfg.NodeAddrs == nil {
		cfg.NodeAddrs = func() []netip.Addr { return nil }
	}
	s := &Services{cfg: cfg, log: cfg.Logger, kick: make(chan struct{}, 1), cookies: map[string]uint64{}}
	s.mode.Store("")
	return s, nil
}

// Mode returns the service routing in use: RoutingEBPF, RoutingNftables
// or RoutingNone, "" until Run chose it.
func (s *Services) Mode() string { return s.mode.Load().(string) }

// Kick says the view changed.
func (s *Services) Kick() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// look is how often Run looks for the pod network, new pods' network
// namespaces and the site's peers without being kicked.
const look = 2 * time.Second

// Run waits for the pod network, starts the services and keeps them until
// ctx ends. What it cannot start is logged and, for service routing, said
// in an Event; the rest runs. Routing and the overlay stay in place after
// it returns: they outlive the agent, as the pods do.
func (s *Services) Run(ctx context.Context) error {
	gw, podCIDR, err := s.waitNetwork(ctx)
	if err != nil {
		return nil // ctx ended
	}
	// The dataplanes close last, once the proxy that syncs them stopped.
	dataplanes, closeDP := s.dataplanes(podCIDR)
	defer closeDP()
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	pcfg := proxy.DefaultConfig()
	pcfg.NodeName, pcfg.Zone, pcfg.View, pcfg.Local, pcfg.NodeAddrs = s.cfg.NodeName, s.cfg.Zone, s.cfg.View, s.cfg.Local, s.cfg.NodeAddrs
	pcfg.Peers = s.cfg.Peers
	pcfg.Logger = s.log.With("component", "proxy")
	pcfg.Dataplanes = dataplanes

	if s.cfg.ClusterDNS.IsValid() {
		srv, err := s.dnsServer(gw)
		if err != nil {
			s.log.Warn("node DNS server not started: pods resolve no cluster names", "address", gw, "err", err)
		} else {
			pcfg.DNS, pcfg.Domain, pcfg.ClusterDNS, pcfg.DNSAddr = zoneSetter{srv, s.log}, s.cfg.Domain, s.cfg.ClusterDNS, gw
			wg.Go(func() {
				if err := srv.Run(ctx); err != nil {
					s.log.Warn("node DNS server stopped", "err", err)
				}
			})
			s.log.Info("node DNS server up", "address", netip.AddrPortFrom(gw, 53), "cluster_dns", s.cfg.ClusterDNS)
		}
	}
	p, err := proxy.New(pcfg)
	if err != nil {
		return err
	}
	wg.Go(func() { _ = p.Run(ctx) })

	ov := s.overlay(ctx, podCIDR)
	t := time.NewTicker(look)
	defer t.Stop()
	var nodesGen uint64
	for {
		s.scanPods()
		if ov != nil {
			if g := s.cfg.View.ResourceGeneration(wire.ResourceNodes); g != nodesGen {
				if err := ov.Sync(ctx, s.peers()); err != nil {
					s.log.Warn("site overlay: some peers not routed", "err", err)
				}
				nodesGen = g
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-s.kick:
			p.Kick()
		case <-t.C:
		}
	}
}

// waitNetwork waits until the pod network is up.
func (s *Services) waitNetwork(ctx context.Context) (netip.Addr, netip.Prefix, error) {
	t := time.NewTicker(look)
	defer t.Stop()
	for {
		gw, cidr, err := s.cfg.Network.Ready(ctx)
		if err == nil {
			return gw, cidr, nil
		}
		select {
		case <-ctx.Done():
			return netip.Addr{}, netip.Prefix{}, ctx.Err()
		case <-s.kick:
		case <-t.C:
		}
	}
}

// dataplanes opens the routing Config.Routing asks for, falling back
// from eBPF to nftables where the kernel lacks it, and returns them with
// the func that closes them (their routing stays).
func (s *Services) dataplanes(podCIDR netip.Prefix) ([]services.Dataplane, func()) {
	mode := s.cfg.Routing
	if mode == RoutingNone {
		s.mode.Store(RoutingNone)
		s.log.Info("service routing off")
		return nil, func() {}
	}
	var why error
	if mode == RoutingAuto || mode == RoutingEBPF {
		if s.cfg.Cgroup == "" {
			why = errors.New("no cgroup v2 tree to attach programs to")
		} else {
			why = ebpflb.Supported()
		}
		mode = RoutingEBPF
		if why != nil {
			mode = RoutingNftables
		}
	}
	var out []services.Dataplane
	var closers []func() error
	if mode == RoutingEBPF {
		dp, err := s.openEBPF()
		if err != nil {
			why, mode = err, RoutingNftables
		} else {
			out, closers = append(out, dp), append(closers, dp.Close)
		}
	}
	// Traffic from outside the node to NodePorts and external IPs: tc
	// programs beside the socket hooks, else nftables rules, which route
	// everything where there is no eBPF.
	outside := "nftables"
	if mode == RoutingEBPF {
		tc, err := s.openTC()
		if err != nil {
			s.log.Warn("NodePorts and external IPs reached from outside: tc programs not opened; nftables rules translate them instead", "err", err)
			s.uninstallTC()
		} else {
			out, closers = append(out, tc), append(closers, tc.Close)
			outside = "tc"
		}
	} else {
		s.uninstallTC()
	}
	ncfg := s.nftConfig(podCIDR, mode)
	if outside == "tc" {
		s.removeNft(ncfg) // what nftables translated before, if anything
	} else if nft, err := nftlb.New(ncfg); err != nil {
		// eBPF routes the node's own connections still; with nftables
		// alone nothing routes.
		s.log.Warn("nftables service routing not opened", "mode", ncfg.Mode, "err", err)
		s.cfg.Event(corev1.EventTypeWarning, "ServiceRoutingFailed", fmt.Sprintf("nftables service routing (%s) not opened: %v", ncfg.Mode, err))
	} else {
		out, closers = append(out, nft), append(closers, nft.Close)
	}
	s.mode.Store(mode)
	if mode == RoutingNftables {
		if err := s.cfg.Network.RouteServicesToBridge(); err != nil {
			s.log.Warn("the node's own processes reach no Service: the service CIDR's route not set", "err", err)
		}
	}
	switch {
	case mode == RoutingEBPF:
		s.log.Info("services routed with eBPF socket load-balancing", "outside", outside, "pin_dir", s.cfg.PinDir, "cgroup", s.cfg.Cgroup)
		how := "eBPF tc programs"
		if outside != "tc" {
			how = "nftables rules"
		}
		s.cfg.Event(corev1.EventTypeNormal, "ServiceRouting", "Services are routed with eBPF socket load-balancing, NodePorts and external IPs reached from outside with "+how)
	case why != nil:
		s.log.Warn("services routed with nftables: eBPF socket load-balancing is not available", "err", why)
		s.cfg.Event(corev1.EventTypeWarning, "ServiceRoutingFallback", fmt.Sprintf("Services are routed with nftables rules: eBPF socket load-balancing is not available: %v", why))
	default:
		s.log.Info("services routed with nftables, as asked")
		s.cfg.Event(corev1.EventTypeNormal, "ServiceRouting", "Services are routed with nftables rules, as asked")
	}
	return out, func() {
		for _, c := range closers {
			_ = c()
		}
		s.mu.Lock()
		s.ebpf = nil
		s.mu.Unlock()
	}
}

// nftConfig returns the nftables dataplane's configuration: mode All
// routes everything, External only what arrives from outside.
func (s *Services) nftConfig(podCIDR netip.Prefix, mode string) nftlb.Config {
	ncfg := nftlb.DefaultConfig()
	ncfg.Table, ncfg.HostNetNS, ncfg.Mode = s.cfg.NftTable, s.cfg.HostNetNS, nftlb.All
	ncfg.PodCIDRs = []netip.Prefix{podCIDR}
	if s.cfg.ClusterCIDR.IsValid() {
		ncfg.ClusterCIDRs = []netip.Prefix{s.cfg.ClusterCIDR}
	}
	if mode == RoutingEBPF {
		ncfg.Mode = nftlb.External
	}
	return ncfg
}

// removeNft takes away the nftables routing of an earlier run, which the
// tc programs replace: both would translate the same packets.
func (s *Services) removeNft(cfg nftlb.Config) {
	nft, err := nftlb.New(cfg)
	if err == nil {
		err = nft.Remove(context.Background())
		nft.Close()
	}
	if err != nil {
		s.log.Warn("nftables service routing of an earlier run not removed", "table", cfg.Table, "err", err)
	}
}

// tcConfig returns the tc dataplane's configuration, without its
// interfaces: pinned beside the socket hooks' PinDir (never inside it:
// each removes its own directory), with a masquerade table of its own.
func (s *Services) tcConfig() tcnat.Config {
	cfg := tcnat.DefaultConfig()
	cfg.PinDir, cfg.HostNetNS, cfg.Table = s.cfg.PinDir+"-tc", s.cfg.HostNetNS, s.cfg.NftTable+"-tc"
	return cfg
}

// openTC opens (or adopts) the tc programs that translate traffic from
// outside, on the Ethernet interfaces that hold the node's addresses.
func (s *Services) openTC() (*tcnat.Dataplane, error) {
	if err := tcnat.Supported(); err != nil {
		return nil, err
	}
	cfg := s.tcConfig()
	var addrs []netip.Addr
	if s.cfg.NodeAddrs != nil {
		addrs = s.cfg.NodeAddrs()
	}
	ifs, err := lanInterfaces(s.cfg.HostNetNS, addrs, s.cfg.Bridge, s.cfg.OverlayDevice)
	if err != nil {
		return nil, err
	}
	if len(ifs) == 0 {
		return nil, fmt.Errorf("no Ethernet interface holds the node's addresses %v", addrs)
	}
	cfg.Interfaces = ifs
	return tcnat.New(cfg)
}

// uninstallTC takes away the tc programs of an earlier run where this
// one translates with nftables, so that stale maps translate nothing.
func (s *Services) uninstallTC() {
	cfg := s.tcConfig()
	if err := tcnat.Uninstall(context.Background(), cfg); err != nil {
		s.log.Warn("tc programs of an earlier run not removed", "pin_dir", cfg.PinDir, "err", err)
	}
}

// lanInterfaces returns the names of the Ethernet interfaces in the
// network namespace at hostNetNS ("" for the agent's own) that hold one
// of addrs, leaving out the pods' bridge and the overlay device.
func lanInterfaces(hostNetNS string, addrs []netip.Addr, bridge, overlay string) ([]string, error) {
	var names []string
	err := netd.InNetNS(hostNetNS, func() error {
		list, err := netlink.AddrList(nil, netlink.FAMILY_ALL)
		if err != nil {
			return fmt.Errorf("list addresses: %w", err)
		}
		for _, a := range list {
			ip, ok := netip.AddrFromSlice(a.IP)
			if !ok || !slices.Contains(addrs, ip.Unmap()) {
				continue
			}
			l, err := netlink.LinkByIndex(a.LinkIndex)
			if err != nil {
				return fmt.Errorf("link of %s: %w", ip, err)
			}
			at := l.Attrs()
			if at.Name == bridge || at.Name == overlay || at.Flags&net.FlagLoopback != 0 || len(at.HardwareAddr) != 6 {
				continue
			}
			if !slices.Contains(names, at.Name) {
				names = append(names, at.Name)
			}
		}
		return nil
	})
	slices.Sort(names)
	return names, err
}

// openEBPF mounts the bpffs if needed and opens (or adopts) the node's
// eBPF dataplane, scoped to the node's network namespace and its pods'.
func (s *Services) openEBPF() (*ebpflb.Dataplane, error) {
	if err := ebpflb.MountBPFFS(filepath.Dir(s.cfg.PinDir)); err != nil {
		return nil, fmt.Errorf("bpffs: %w", err)
	}
	cookie, err := cookieOf(s.cfg.HostNetNS)
	if err != nil {
		return nil, fmt.Errorf("the node's network namespace: %w", err)
	}
	ecfg := ebpflb.DefaultConfig()
	ecfg.PinDir, ecfg.NetnsCookie, ecfg.Cgroup = s.cfg.PinDir, cookie, s.cfg.Cgroup
	dp, err := ebpflb.New(ecfg)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.ebpf = dp
	s.mu.Unlock()
	return dp, nil
}

// PodNetwork includes the sockets of a pod's network namespace, at path,
// in eBPF service routing: the agent calls it once it made the namespace,
// before the pod's containers start, so that their first connection to a
// Service is routed. Run finds namespaces it was not told of too, later.
func (s *Services) PodNetwork(path string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.includeLocked(path)
}

// includeLocked includes the namespace at path if it is not yet. s.mu is
// held.
func (s *Services) includeLocked(path string) {
	if s.ebpf == nil {
		return
	}
	if _, ok := s.cookies[path]; ok {
		return
	}
	c, err := cookieOf(path)
	if err != nil {
		s.log.Debug("pod network namespace not included in service routing", "netns", path, "err", err)
		return
	}
	if err := s.ebpf.Include(c); err != nil {
		s.log.Warn("pod network namespace not included in service routing", "netns", path, "err", err)
		return
	}
	s.cookies[path] = c
}

// scanPods includes the pods' network namespaces not yet included and
// excludes those that are gone.
func (s *Services) scanPods() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ebpf == nil {
		return
	}
	ents, err := os.ReadDir(s.cfg.NetNSDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		s.log.Debug("read pods' network namespaces", "err", err)
		return
	}
	seen := make(map[string]bool, len(ents))
	for _, e := range ents {
		p := filepath.Join(s.cfg.NetNSDir, e.Name())
		seen[p] = true
		s.includeLocked(p)
	}
	for p, c := range s.cookies {
		if seen[p] {
			continue
		}
		if err := s.ebpf.Exclude(c); err != nil {
			s.log.Debug("pod network namespace not excluded from service routing", "netns", p, "err", err)
			continue
		}
		delete(s.cookies, p)
	}
}

// cookieOf returns the cookie of the network namespace at path ("" for
// this process's).
func cookieOf(path string) (uint64, error) {
	var c uint64
	err := netd.InNetNS(path, func() (err error) {
		c, err = ebpflb.NetnsCookie()
		return err
	})
	return c, err
}

// dnsServer makes the node's DNS server, listening on gw:53 over UDP and
// TCP in the node's network namespace.
func (s *Services) dnsServer(gw netip.Addr) (*dns.Server, error) {
	addr := netip.AddrPortFrom(gw, 53).String()
	var pc net.PacketConn
	var ln net.Listener
	listen := func() (err error) {
		if pc, err = net.ListenPacket("udp", addr); err != nil {
			return err
		}
		if ln, err = net.Listen("tcp", addr); err != nil {
			pc.Close()
		}
		return err
	}
	if err := netd.InNetNS(s.cfg.HostNetNS, listen); err != nil {
		return nil, err
	}
	cfg := dns.DefaultConfig()
	cfg.Domain, cfg.PacketConn, cfg.Listener, cfg.Addr = s.cfg.Domain, pc, ln, addr
	if s.cfg.ClusterCIDR.IsValid() {
		cfg.ClusterCIDRs = []netip.Prefix{s.cfg.ClusterCIDR}
	}
	if s.cfg.ServiceCIDR.IsValid() {
		cfg.ServiceCIDRs = []netip.Prefix{s.cfg.ServiceCIDR}
	}
	if s.cfg.ResolvConf != "" {
		ups, err := dns.ReadResolvConf(s.cfg.ResolvConf, gw)
		if err != nil {
			s.log.Warn("node resolvers not read: names outside the cluster do not resolve", "file", s.cfg.ResolvConf, "err", err)
		}
		cfg.Upstreams = ups
	}
	cfg.Logger = s.log.With("component", "dns")
	srv, err := dns.New(cfg)
	if err != nil {
		pc.Close()
		ln.Close()
		return nil, err
	}
	return srv, nil
}

// zoneSetter gives the proxy's zones to the DNS server.
type zoneSetter struct {
	srv *dns.Server
	log *slog.Logger
}

func (z zoneSetter) SetZone(zone *dns.Zone) {
	if err := z.srv.SetZone(zone); err != nil {
		z.log.Warn("DNS zone not taken", "err", err)
	}
}

// overlay sets up the site overlay, or returns nil when the node has no
// site, no IPv4 address to carry it, or the overlay could not be set up
// (logged).
func (s *Services) overlay(ctx context.Context, podCIDR netip.Prefix) *overlay.Overlay {
	if !s.cfg.Overlay || s.cfg.Site == "" {
		return nil
	}
	var under netip.Addr
	for _, a := range s.cfg.NodeAddrs() {
		if a.Is4() && !a.IsLoopback() {
			under = a
			break
		}
	}
	if !under.IsValid() {
		s.log.Warn("site overlay not set up: the node has no IPv4 address to carry it", "site", s.cfg.Site)
		return nil
	}
	ocfg := overlay.DefaultConfig()
	if s.cfg.OverlayDevice != "" {
		ocfg.Device = s.cfg.OverlayDevice
	}
	ocfg.Underlay, ocfg.PodCIDR, ocfg.HostNetNS, ocfg.Logger = under, podCIDR, s.cfg.HostNetNS, s.log.With("component", "overlay")
	ov, err := overlay.New(ocfg)
	if err == nil {
		err = ov.Setup(ctx)
	}
	if err != nil {
		s.log.Warn("site overlay not set up: pods of the site's other nodes are not reached", "site", s.cfg.Site, "err", err)
		return nil
	}
	s.log.Info("site overlay up", "site", s.cfg.Site, "device", ocfg.Device, "underlay", under)
	return ov
}

// peers returns the site's other nodes from the view.
func (s *Services) peers() []overlay.Peer {
	var nodes []*corev1.Node
	err := s.cfg.View.Scan(wire.ResourceNodes, func(o checkpoint.Object) {
		var n corev1.Node
		if err := objects.Decode(o.Raw, o.Revision, &n); err == nil {
			nodes = append(nodes, &n)
		}
	})
	if err != nil {
		s.log.Warn("site peers not read", "err", err)
		return nil
	}
	return sitePeers(s.cfg.NodeName, s.cfg.Site, nodes)
}
