package netd

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/outpost-mesh/outpost/netd/ipam"
)

// podIfname is the pod's side of its veth.
const podIfname = "eth0"

// Attachment is where a pod's network is: the namespace its containers
// join, and its address.
type Attachment struct {
	NetNSPath string
	IP        netip.Addr
	Gateway   netip.Addr
	PrefixLen int
}

// vethName is the node's side of uid's veth: "veth" and 8 hex digits of a
// hash of the bridge and the UID, fitting the kernel's 15 bytes.
func (n *Network) vethName(uid string) string {
	sum := sha256.Sum256([]byte(n.cfg.Bridge + "/" + uid))
	return "veth" + hex.EncodeToString(sum[:4])
}

// vethAlias labels the node's side of uid's veth, for Sweep to find the
// pod a veth belongs to.
func (n *Network) vethAlias(uid string) string { return "netd:" + n.cfg.Bridge + ":" + uid }

func (n *Network) aliasUID(alias string) (string, bool) {
	uid, ok := strings.CutPrefix(alias, "netd:"+n.cfg.Bridge+":")
	return uid, ok && checkUID(uid) == nil
}

func (n *Network) nsPath(uid string) string { return filepath.Join(n.cfg.NetNSDir, uid) }

// AddPod gives the pod its network: a namespace at NetNSDir/<uid>, a veth
// from the bridge to its eth0 with the pod's leased address and a default
// route through the gateway, and its hostPorts. Called again for the same
// UID, after an agent restart or a crash, it returns the same namespace
// and address and repairs what is missing; the hostPorts are replaced by
// spec's. On error it removes what the call made. It returns an error
// wrapping ipam.ErrExhausted when no address is free, and
// ErrHostPortConflict when a hostPort is held by another pod.
func (n *Network) AddPod(ctx context.Context, spec PodSpec) (Attachment, error) {
	a, err := n.addPod(ctx, spec)
	if err != nil {
		return Attachment{}, fmt.Errorf("add pod %s/%s (%s): %w", spec.Namespace, spec.Name, spec.UID, err)
	}
	return a, nil
}

func (n *Network) addPod(ctx context.Context, spec PodSpec) (_ Attachment, err error) {
	if err := checkSpec(spec); err != nil {
		return Attachment{}, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return Attachment{}, err
	}
	if err := n.load(ctx); err != nil {
		return Attachment{}, err
	}
	x, err := n.openNode()
	if err != nil {
		return Attachment{}, err
	}
	defer x.close()

	var undo []func() error
	defer func() {
		if err == nil {
			return
		}
		for i := len(undo) - 1; i >= 0; i-- {
			if uerr := undo[i](); uerr != nil {
				n.log.Error("undo a failed pod network setup", "uid", spec.UID, "err", uerr)
			}
		}
	}()

	br, err := x.nl.LinkByName(n.cfg.Bridge)
	if err != nil {
		return Attachment{}, fmt.Errorf("find bridge %s (is the network set up?): %w", n.cfg.Bridge, err)
	}
	if err := x.nl.LinkSetUp(br); err != nil {
		return Attachment{}, fmt.Errorf("set bridge up: %w", err)
	}
	rules, err := n.listHostPorts(x.nft)
	if err != nil {
		return Attachment{}, fmt.Errorf("%w (is the network set up?)", err)
	}
	for _, h := range spec.HostPorts {
		for _, r := range rules {
			if r.uid != spec.UID && conflicts(h, r.hp) {
				return Attachment{}, fmt.Errorf("hostPort %v: %w by pod %s", h, ErrHostPortConflict, r.uid)
			}
		}
	}

	lease, created, err := n.pool.Allocate(spec.UID)
	if err != nil {
		return Attachment{}, err
	}
	if created {
		if err := n.cfg.Leases.SaveLease(ctx, lease); err != nil {
			n.pool.Release(spec.UID)
			return Attachment{}, fmt.Errorf("save lease: %w", err)
		}
		undo = append(undo, func() error {
			n.pool.Release(spec.UID)
			return n.cfg.Leases.DeleteLease(context.WithoutCancel(ctx), spec.UID)
		})
	}

	path := n.nsPath(spec.UID)
	ok, err := isNetNS(path)
	if err != nil {
		return Attachment{}, err
	}
	if !ok {
		if err := os.MkdirAll(n.cfg.NetNSDir, 0o755); err != nil {
			return Attachment{}, fmt.Errorf("create netns directory: %w", err)
		}
		// An empty file here is what a reboot or a crash mid-creation leaves.
		if err := removeNetNS(path); err != nil {
			return Attachment{}, err
		}
		if err := newNetNS(path); err != nil {
			return Attachment{}, err
		}
		undo = append(undo, func() error { return removeNetNS(path) })
	}
	podNS, err := netns.GetFromPath(path)
	if err != nil {
		return Attachment{}, fmt.Errorf("open pod netns: %w", err)
	}
	defer podNS.Close()
	podNL, err := netlink.NewHandleAt(podNS)
	if err != nil {
		return Attachment{}, fmt.Errorf("netlink in pod netns: %w", err)
	}
	defer podNL.Close()

	host, made, err := n.ensureVeth(x.nl, podNL, podNS, spec.UID)
	if err != nil {
		return Attachment{}, err
	}
	if made {
		undo = append(undo, func() error { return x.nl.LinkDel(host) })
	}
	if host.Attrs().MasterIndex != br.Attrs().Index {
		if err := x.nl.LinkSetMasterByIndex(host, br.Attrs().Index); err != nil {
			return Attachment{}, fmt.Errorf("attach veth to bridge: %w", err)
		}
	}
	// Hairpin lets a pod reach its own hostPort: with br_netfilter, the
	// DNATed packet is bridged back out of the port it came in by.
	if err := x.nl.LinkSetHairpin(host, true); err != nil {
		return Attachment{}, fmt.Errorf("set veth hairpin: %w", err)
	}
	if err := x.nl.LinkSetUp(host); err != nil {
		return Attachment{}, fmt.Errorf("set veth up: %w", err)
	}
	if err := n.configurePod(podNL, lease.IP); err != nil {
		return Attachment{}, err
	}
	// Until the kernel has seen the carrier (its link watcher runs
	// asynchronously), a link drops what is sent through it; a container
	// started right away would lose its first packets, ARP included, and
	// wait a second for a retry.
	if err := waitOperUp(ctx, podNL, podIfname); err != nil {
		return Attachment{}, err
	}
	if err := waitOperUp(ctx, x.nl, host.Attrs().Name); err != nil {
		return Attachment{}, err
	}
	if err := waitOperUp(ctx, x.nl, n.cfg.Bridge); err != nil {
		return Attachment{}, err
	}
	if n.failBeforeHostPorts != nil {
		return Attachment{}, n.failBeforeHostPorts
	}
	if err := n.setHostPorts(x.nft, rules, spec.UID, lease.IP, spec.HostPorts); err != nil {
		return Attachment{}, err
	}
	n.forgetUDP(x, spec.HostPorts)
	n.log.Info("pod network added", "pod", spec.Namespace+"/"+spec.Name, "uid", spec.UID, "ip", lease.IP, "veth", host.Attrs().Name, "host_ports", len(spec.HostPorts))
	return Attachment{NetNSPath: path, IP: lease.IP, Gateway: n.Gateway(), PrefixLen: n.cfg.PodCIDR.Bits()}, nil
}

// ensureVeth returns the node's side of uid's veth, creating the pair when
// it is missing or not paired with the pod's eth0 (made reports that).
func (n *Network) ensureVeth(nodeNL, podNL *netlink.Handle, podNS netns.NsHandle, uid string) (host netlink.Link, made bool, err error) {
	name := n.vethName(uid)
	hostLink, herr := nodeNL.LinkByName(name)
	podLink, perr := podNL.LinkByName(podIfname)
	for _, e := range []error{herr, perr} {
		if e != nil && !isLinkNotFound(e) {
			return nil, false, fmt.Errorf("find veth: %w", e)
		}
	}
	if herr == nil && perr == nil && paired(hostLink, podLink) {
		if hostLink.Attrs().Alias != n.vethAlias(uid) {
			if err := nodeNL.LinkSetAlias(hostLink, n.vethAlias(uid)); err != nil {
				return nil, false, fmt.Errorf("label veth: %w", err)
			}
		}
		return hostLink, false, nil
	}
	if herr == nil {
		if err := nodeNL.LinkDel(hostLink); err != nil {
			return nil, false, fmt.Errorf("delete unpaired veth %s: %w", name, err)
		}
	}
	if perr == nil {
		if err := podNL.LinkDel(podLink); err != nil {
			return nil, false, fmt.Errorf("delete unpaired pod %s: %w", podIfname, err)
		}
	}
	attrs := netlink.NewLinkAttrs()
	attrs.Name, attrs.MTU, attrs.Alias = name, n.cfg.MTU, n.vethAlias(uid)
	veth := &netlink.Veth{LinkAttrs: attrs, PeerName: podIfname, PeerNamespace: netlink.NsFd(podNS), PeerTxQLen: -1}
	if err := nodeNL.LinkAdd(veth); err != nil {
		return nil, false, fmt.Errorf("create veth %s: %w", name, err)
	}
	hostLink, err = nodeNL.LinkByName(name)
	if err != nil {
		nodeNL.LinkDel(veth)
		return nil, false, fmt.Errorf("find new veth %s: %w", name, err)
	}
	return hostLink, true, nil
}

// paired reports whether host and pod are the two ends of one veth. Each
// end's IFLA_LINK is the other's index in the other's namespace.
func paired(host, pod netlink.Link) bool {
	return host.Type() == "veth" && pod.Type() == "veth" &&
		host.Attrs().ParentIndex == pod.Attrs().Index && pod.Attrs().ParentIndex == host.Attrs().Index
}

// configurePod brings up lo and eth0 in the pod's namespace with ip and a
// default route through the gateway, replacing any other IPv4 address.
func (n *Network) configurePod(h *netlink.Handle, ip netip.Addr) error {
	lo, err := h.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("find pod lo: %w", err)
	}
	if err := h.LinkSetUp(lo); err != nil {
		return fmt.Errorf("set pod lo up: %w", err)
	}
	eth, err := h.LinkByName(podIfname)
	if err != nil {
		return fmt.Errorf("find pod %s: %w", podIfname, err)
	}
	want := &netlink.Addr{IPNet: ipNet(ip, n.cfg.PodCIDR.Bits())}
	addrs, err := h.AddrList(eth, netlink.FAMILY_V4)
	if err != nil {
		return fmt.Errorf("list pod addresses: %w", err)
	}
	for _, a := range addrs {
		if a.IPNet.String() != want.IPNet.String() {
			if err := h.AddrDel(eth, &a); err != nil {
				return fmt.Errorf("delete stale pod address %s: %w", a.IPNet, err)
			}
		}
	}
	if err := h.AddrReplace(eth, want); err != nil {
		return fmt.Errorf("set pod address %s: %w", want.IPNet, err)
	}
	if err := h.LinkSetUp(eth); err != nil {
		return fmt.Errorf("set pod %s up: %w", podIfname, err)
	}
	def := &netlink.Route{LinkIndex: eth.Attrs().Index, Dst: ipNet(netip.IPv4Unspecified(), 0), Gw: net.IP(n.Gateway().AsSlice())}
	if err := h.RouteReplace(def); err != nil {
		return fmt.Errorf("set pod default route: %w", err)
	}
	return nil
}

// RemovePod removes the pod's network: its hostPort rules, veth and
// namespace file, and releases its lease. Processes still in the namespace
// keep it alive, without a link. Removing a pod that has no network is
// not an error.
func (n *Network) RemovePod(ctx context.Context, uid string) error {
	if err := checkUID(uid); err != nil {
		return fmt.Errorf("remove pod: %w", err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := n.load(ctx); err != nil {
		return fmt.Errorf("remove pod %s: %w", uid, err)
	}
	x, err := n.openNode()
	if err != nil {
		return fmt.Errorf("remove pod %s: %w", uid, err)
	}
	defer x.close()
	rules, err := n.hostPortsIfAny(x)
	if err != nil {
		return fmt.Errorf("remove pod %s: %w", uid, err)
	}
	return n.remove(ctx, x, rules, uid)
}

// hostPortsIfAny is listHostPorts, with no rules when the table is gone
// (after Teardown), rather than an error.
func (n *Network) hostPortsIfAny(x *node) ([]hostPortRule, error) {
	rules, err := n.listHostPorts(x.nft)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	return rules, err
}

// remove does RemovePod's work, going on past errors. n.mu must be held.
func (n *Network) remove(ctx context.Context, x *node, rules []hostPortRule, uid string) error {
	var errs []error
	var held []HostPort
	for _, r := range rules {
		if r.uid == uid {
			held = append(held, r.hp)
		}
	}
	if len(held) > 0 {
		if err := n.setHostPorts(x.nft, rules, uid, netip.Addr{}, nil); err != nil {
			errs = append(errs, err)
		}
		n.forgetUDP(x, held)
	}
	if link, err := x.nl.LinkByName(n.vethName(uid)); err == nil {
		if err := x.nl.LinkDel(link); err != nil {
			errs = append(errs, fmt.Errorf("delete veth: %w", err))
		}
	} else if !isLinkNotFound(err) {
		errs = append(errs, fmt.Errorf("find veth: %w", err))
	}
	if err := removeNetNS(n.nsPath(uid)); err != nil {
		errs = append(errs, err)
	}
	if _, ok := n.pool.Get(uid); ok {
		if err := n.cfg.Leases.DeleteLease(ctx, uid); err != nil {
			errs = append(errs, fmt.Errorf("delete lease: %w", err))
		} else {
			n.pool.Release(uid)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("remove pod %s: %w", uid, err)
	}
	n.log.Info("pod network removed", "uid", uid)
	return nil
}

// Sweep removes the network of every pod that keep rejects: namespace
// files in NetNSDir, veths labelled for this bridge, hostPort rules and
// leases, as a crash or a pod deleted while the agent was down leaves
// them. The agent calls it at start-up with the pods it knows. keep is
// called with n's lock held and must not call n.
func (n *Network) Sweep(ctx context.Context, keep func(uid string) bool) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := n.load(ctx); err != nil {
		return fmt.Errorf("sweep: %w", err)
	}
	x, err := n.openNode()
	if err != nil {
		return fmt.Errorf("sweep: %w", err)
	}
	defer x.close()

	found := map[string]bool{}
	entries, err := os.ReadDir(n.cfg.NetNSDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("sweep: %w", err)
	}
	for _, e := range entries {
		if checkUID(e.Name()) == nil {
			found[e.Name()] = true
		}
	}
	links, err := x.nl.LinkList()
	if err != nil {
		return fmt.Errorf("sweep: list links: %w", err)
	}
	for _, l := range links {
		if uid, ok := n.aliasUID(l.Attrs().Alias); ok {
			found[uid] = true
		}
	}
	rules, err := n.hostPortsIfAny(x)
	if err != nil {
		return fmt.Errorf("sweep: %w", err)
	}
	for _, r := range rules {
		found[r.uid] = true
	}
	for _, l := range n.pool.Leases() {
		found[l.UID] = true
	}

	var errs []error
	for _, uid := range slices.Sorted(maps.Keys(found)) {
		if keep(uid) {
			continue
		}
		n.log.Info("sweeping the network of an unknown pod", "uid", uid)
		if err := n.remove(ctx, x, rules, uid); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("sweep: %w", err)
	}
	return nil
}

// Leases returns the pods' leases, ordered by address, loading them on
// first use. The caller owns the slice.
func (n *Network) Leases(ctx context.Context) ([]ipam.Lease, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.load(ctx); err != nil {
		return nil, err
	}
	return n.pool.Leases(), nil
}

// operUpTimeout bounds how long waitOperUp waits for a link.
const operUpTimeout = 5 * time.Second

// waitOperUp polls until the link name is operationally up.
func waitOperUp(ctx context.Context, h *netlink.Handle, name string) error {
	ctx, cancel := context.WithTimeout(ctx, operUpTimeout)
	defer cancel()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		link, err := h.LinkByName(name)
		if err != nil {
			return fmt.Errorf("wait for %s up: %w", name, err)
		}
		if link.Attrs().OperState == netlink.OperUp {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s up (operstate %s): %w", name, link.Attrs().OperState, ctx.Err())
		case <-tick.C:
		}
	}
}

// forgetUDP deletes the node's conntrack entries for the UDP hostPorts in
// hps, as the CNI portmap plugin does: a client that keeps sending from one
// port would otherwise stay bound to the pod the port led to before. It is
// best effort; a failure is logged.
func (n *Network) forgetUDP(x *node, hps []HostPort) {
	var filters []netlink.CustomConntrackFilter
	for _, h := range hps {
		if h.key().Protocol != UDP {
			continue
		}
		f := &netlink.ConntrackFilter{}
		if err := f.AddProtocol(unix.IPPROTO_UDP); err != nil {
			n.log.Warn("forget UDP hostPort connections", "err", err)
			return
		}
		if err := f.AddPort(netlink.ConntrackOrigDstPort, h.HostPort); err != nil {
			n.log.Warn("forget UDP hostPort connections", "err", err)
			return
		}
		filters = append(filters, f)
	}
	if len(filters) == 0 {
		return
	}
	if _, err := x.nl.ConntrackDeleteFilters(netlink.ConntrackTable, unix.AF_INET, filters...); err != nil {
		n.log.Warn("forget UDP hostPort connections", "err", err)
	}
}
