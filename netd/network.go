package netd

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/outpost-mesh/outpost/netd/ipam"
)

// Network is the node's pod network. Its methods may be called
// concurrently; they run one at a time. It holds no goroutines and no
// open handles between calls.
type Network struct {
	cfg Config
	log *slog.Logger

	mu   sync.Mutex
	pool *ipam.Pool // nil until the leases are loaded, at the first call
	// servicesToBridge: the service CIDR is routed into the bridge, not
	// unreachable (RouteServicesToBridge).
	servicesToBridge bool

	// failBeforeHostPorts, set by tests only, makes AddPod fail once the
	// pod's namespace, veth and address are made, to check it undoes them.
	failBeforeHostPorts error
}

// New returns a Network for cfg. It starts nothing and touches nothing.
func New(cfg Config) (*Network, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("netd config: %w", err)
	}
	return &Network{cfg: cfg, log: cfg.Logger.With("bridge", cfg.Bridge)}, nil
}

// Gateway returns the pods' gateway, the bridge's address.
func (n *Network) Gateway() netip.Addr { return ipam.Gateway(n.cfg.PodCIDR) }

// load reads the leases on first use, dropping from the store those the
// pod CIDR cannot hold (a new CIDR, a clash). n.mu must be held.
func (n *Network) load(ctx context.Context) error {
	if n.pool != nil {
		return nil
	}
	leases, err := n.cfg.Leases.LoadLeases(ctx)
	if err != nil {
		return fmt.Errorf("load leases: %w", err)
	}
	pool, dropped, err := ipam.New(n.cfg.PodCIDR, leases)
	if err != nil {
		return err
	}
	for _, l := range dropped {
		if _, kept := pool.Get(l.UID); kept {
			continue // a duplicate of a kept lease; the store holds one per UID
		}
		n.log.Warn("dropping pod IP lease", "uid", l.UID, "ip", l.IP, "pod_cidr", n.cfg.PodCIDR)
		if err := n.cfg.Leases.DeleteLease(ctx, l.UID); err != nil {
			return fmt.Errorf("drop lease of pod %s: %w", l.UID, err)
		}
	}
	n.pool = pool
	return nil
}

// node holds handles on the node's network namespace for one call.
type node struct {
	ns  netns.NsHandle
	nl  *netlink.Handle
	nft *nftables.Conn
}

func (n *Network) openNode() (*node, error) {
	path := n.cfg.HostNetNS
	if path == "" {
		// This thread's: every thread not locked into another namespace
		// for a moment is in the agent's.
		path = "/proc/thread-self/ns/net"
	}
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return nil, fmt.Errorf("open node netns %s: %w", path, err)
	}
	nl, err := netlink.NewHandleAt(ns)
	if err != nil {
		ns.Close()
		return nil, fmt.Errorf("netlink in node netns: %w", err)
	}
	nft, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		nl.Close()
		ns.Close()
		return nil, fmt.Errorf("nftables in node netns: %w", err)
	}
	return &node{ns: ns, nl: nl, nft: nft}, nil
}

func (x *node) close() {
	x.nl.Close()
	x.ns.Close()
}

// Setup creates or repairs the node's side of the pod network: the bridge
// with the gateway address, up; IPv4 forwarding; unreachable routes for
// the cluster and service CIDRs, so that other nodes' pods and service
// IPs fail fast on the node instead of leaving by its default route (the
// node's own pod CIDR, routed to the bridge, is more specific); and the
// nf_tables rules (masquerade, hostPorts). Running it again changes
// nothing that is already right.
func (n *Network) Setup(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := n.load(ctx); err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	x, err := n.openNode()
	if err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	defer x.close()
	if err := n.ensureBridge(x.nl); err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	// route_localnet lets DNAT send the node's own 127.0.0.1 connections
	// to a hostPort into the bridge; the input rule closes what it opens.
	if err := inNetNS(x.ns, func() error {
		if err := writeSysctl("/proc/sys/net/ipv4/ip_forward", "1"); err != nil {
			return err
		}
		return writeSysctl("/proc/sys/net/ipv4/conf/"+n.cfg.Bridge+"/route_localnet", "1")
	}); err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	if err := x.nl.RouteReplace(unreachableRoute(n.cfg.ClusterCIDR)); err != nil {
		return fmt.Errorf("setup: add unreachable route %s: %w", n.cfg.ClusterCIDR, err)
	}
	if err := n.routeServices(x.nl); err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	if err := n.setupRules(x.nft); err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	n.log.Info("pod network set up", "pod_cidr", n.cfg.PodCIDR, "gateway", n.Gateway())
	return nil
}

// RouteServicesToBridge routes the service CIDR into the pods' bridge in
// place of its unreachable route, now and at every later Setup. Service
// routing by nftables rules needs it: the kernel looks a local socket's
// destination up before the output hook's DNAT, so without a route the
// node's own processes get "network is unreachable" for every ClusterIP.
// A packet to a ClusterIP that no rule translates still dies on the node,
// unanswered on the bridge. eBPF socket load-balancing rewrites the
// address before the lookup and keeps the unreachable route.
func (n *Network) RouteServicesToBridge() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	x, err := n.openNode()
	if err != nil {
		return fmt.Errorf("route services to the bridge: %w", err)
	}
	defer x.close()
	n.servicesToBridge = true
	if err := n.routeServices(x.nl); err != nil {
		return err
	}
	n.log.Info("service CIDR routed into the bridge", "service_cidr", n.cfg.ServiceCIDR)
	return nil
}

// routeServices sets the service CIDR's route: unreachable, or into the
// bridge once RouteServicesToBridge asked. n.mu is held.
func (n *Network) routeServices(h *netlink.Handle) error {
	p := n.cfg.ServiceCIDR
	r := unreachableRoute(p)
	if n.servicesToBridge {
		br, err := h.LinkByName(n.cfg.Bridge)
		if err != nil {
			return fmt.Errorf("find bridge %s: %w", n.cfg.Bridge, err)
		}
		r = &netlink.Route{Dst: ipNet(p.Addr(), p.Bits()), LinkIndex: br.Attrs().Index,
			Scope: netlink.SCOPE_LINK, Table: unix.RT_TABLE_MAIN, Protocol: unix.RTPROT_STATIC}
	}
	if err := h.RouteReplace(r); err != nil {
		return fmt.Errorf("route service CIDR %s: %w", p, err)
	}
	return nil
}

// Teardown removes what Setup made: the nf_tables table with every pod's
// hostPort rules, the unreachable routes (unless another Network's table
// is still in the node netns: they are the same routes) and the bridge. It leaves pods'
// veths and namespaces (RemovePod's) and IPv4 forwarding, which other
// software on the node may rely on. Missing pieces are not an error.
func (n *Network) Teardown(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	x, err := n.openNode()
	if err != nil {
		return fmt.Errorf("teardown: %w", err)
	}
	defer x.close()
	var errs []error
	if err := n.deleteTable(x.nft); err != nil {
		errs = append(errs, err)
	}
	shared, err := n.otherNetworks(x.nft)
	if err != nil {
		errs = append(errs, err)
	}
	for _, p := range []netip.Prefix{n.cfg.ClusterCIDR, n.cfg.ServiceCIDR} {
		if shared || err != nil {
			break // another agent's network on this node needs the routes
		}
		if err := x.nl.RouteDel(unreachableRoute(p)); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("delete unreachable route %s: %w", p, err))
		}
	}
	if br, err := x.nl.LinkByName(n.cfg.Bridge); err == nil {
		if err := x.nl.LinkDel(br); err != nil {
			errs = append(errs, fmt.Errorf("delete bridge: %w", err))
		}
	} else if !isLinkNotFound(err) {
		errs = append(errs, fmt.Errorf("find bridge: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("teardown: %w", err)
	}
	return nil
}

// ensureBridge creates the bridge or repairs its MTU, MAC address, address
// and state.
func (n *Network) ensureBridge(h *netlink.Handle) error {
	mac := bridgeMAC(n.cfg.Bridge)
	link, err := h.LinkByName(n.cfg.Bridge)
	if isLinkNotFound(err) {
		attrs := netlink.NewLinkAttrs()
		attrs.Name, attrs.MTU, attrs.HardwareAddr = n.cfg.Bridge, n.cfg.MTU, mac
		if err := h.LinkAdd(&netlink.Bridge{LinkAttrs: attrs}); err != nil {
			return fmt.Errorf("create bridge %s: %w", n.cfg.Bridge, err)
		}
		link, err = h.LinkByName(n.cfg.Bridge)
	}
	if err != nil {
		return fmt.Errorf("find bridge %s: %w", n.cfg.Bridge, err)
	}
	if link.Type() != "bridge" {
		return fmt.Errorf("link %s is a %s, not a bridge: pick another bridge name or remove it", n.cfg.Bridge, link.Type())
	}
	if link.Attrs().MTU != n.cfg.MTU {
		if err := h.LinkSetMTU(link, n.cfg.MTU); err != nil {
			return fmt.Errorf("set bridge MTU: %w", err)
		}
	}
	// A fixed address: a bridge otherwise takes the lowest of its ports',
	// and pods would lose their gateway's neighbour entry whenever the pod
	// holding it went away.
	if !bytes.Equal(link.Attrs().HardwareAddr, mac) {
		if err := h.LinkSetHardwareAddr(link, mac); err != nil {
			return fmt.Errorf("set bridge address: %w", err)
		}
	}
	gw := &netlink.Addr{IPNet: ipNet(n.Gateway(), n.cfg.PodCIDR.Bits())}
	addrs, err := h.AddrList(link, netlink.FAMILY_V4)
	if err != nil {
		return fmt.Errorf("list bridge addresses: %w", err)
	}
	for _, a := range addrs {
		if a.IPNet.String() != gw.IPNet.String() {
			if err := h.AddrDel(link, &a); err != nil {
				return fmt.Errorf("delete stale bridge address %s: %w", a.IPNet, err)
			}
		}
	}
	if err := h.AddrReplace(link, gw); err != nil {
		return fmt.Errorf("set bridge address %s: %w", gw.IPNet, err)
	}
	if err := h.LinkSetUp(link); err != nil {
		return fmt.Errorf("set bridge up: %w", err)
	}
	return nil
}

// bridgeMAC derives a stable, locally administered unicast MAC address from
// the bridge's name.
func bridgeMAC(name string) net.HardwareAddr {
	sum := sha256.Sum256([]byte("netd bridge " + name))
	mac := net.HardwareAddr(sum[:6])
	mac[0] = mac[0]&0xfe | 0x02
	return mac
}

func unreachableRoute(p netip.Prefix) *netlink.Route {
	return &netlink.Route{
		Dst:      ipNet(p.Addr(), p.Bits()),
		Type:     unix.RTN_UNREACHABLE,
		Table:    unix.RT_TABLE_MAIN,
		Protocol: unix.RTPROT_STATIC,
	}
}

func ipNet(a netip.Addr, bits int) *net.IPNet {
	return &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(bits, a.BitLen())}
}

func isLinkNotFound(err error) bool {
	var nf netlink.LinkNotFoundError
	return errors.As(err, &nf)
}

func writeSysctl(path, value string) error {
	if err := os.WriteFile(path, []byte(value), 0o644); err != nil {
		return fmt.Errorf("set sysctl: %w", err)
	}
	return nil
}
