package servicesbench

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/outpost-mesh/outpost/netd/ebpflb"
)

// netNS is a network namespace the benchmark made. It is held by an open
// file only, never bind-mounted: it goes when the benchmark closes it or
// exits, however it exits.
type netNS struct {
	f *os.File
}

// newNetNS makes a network namespace with its loopback up.
func newNetNS() (*netNS, error) {
	type made struct {
		f   *os.File
		err error
	}
	c := make(chan made, 1)
	go func() {
		// A thread that cannot go back to its namespace stays locked,
		// and Go ends it with the goroutine.
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			c <- made{err: err}
			return
		}
		defer orig.Close()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			c <- made{err: fmt.Errorf("unshare: %w", err)}
			return
		}
		f, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		}
		c <- made{f, err}
	}()
	m := <-c
	if m.err != nil {
		return nil, fmt.Errorf("new netns: %w", m.err)
	}
	ns := &netNS{f: m.f}
	if err := ns.link(func(h *netlink.Handle) error {
		lo, err := h.LinkByName("lo")
		if err != nil {
			return err
		}
		return h.LinkSetUp(lo)
	}); err != nil {
		ns.close()
		return nil, fmt.Errorf("new netns: lo up: %w", err)
	}
	return ns, nil
}

// path names the namespace for those that open it by path (nftlb).
func (ns *netNS) path() string { return fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), ns.f.Fd()) }

// close lets the namespace go once nothing else holds it.
func (ns *netNS) close() {
	if ns != nil && ns.f != nil {
		ns.f.Close()
		ns.f = nil
	}
}

// do runs fn on a thread in the namespace: sockets fn makes are the
// namespace's.
func (ns *netNS) do(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		if err := netns.Set(netns.NsHandle(ns.f.Fd())); err != nil {
			errc <- fmt.Errorf("enter netns: %w", err)
			return
		}
		err = fn()
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

// link runs fn with a netlink handle in the namespace.
func (ns *netNS) link(fn func(h *netlink.Handle) error) error {
	h, err := netlink.NewHandleAt(netns.NsHandle(ns.f.Fd()))
	if err != nil {
		return fmt.Errorf("netlink: %w", err)
	}
	defer h.Close()
	return fn(h)
}

// cookie returns the namespace's cookie, which the eBPF dataplane is
// scoped by.
func (ns *netNS) cookie() (uint64, error) {
	var c uint64
	err := ns.do(func() (err error) {
		c, err = ebpflb.NetnsCookie()
		return err
	})
	return c, err
}

// addLoopback adds addrs (host prefixes) to the namespace's loopback.
func (ns *netNS) addLoopback(addrs ...netip.Addr) error {
	return ns.link(func(h *netlink.Handle) error {
		lo, err := h.LinkByName("lo")
		if err != nil {
			return err
		}
		for _, a := range addrs {
			if err := h.AddrAdd(lo, &netlink.Addr{IPNet: ipNet(netip.PrefixFrom(a, 32))}); err != nil {
				return fmt.Errorf("address %s: %w", a, err)
			}
		}
		return nil
	})
}

// veth joins ns (address a) and peer (address b), both in prefix p's
// network, with a veth pair named name and name+"p".
func (ns *netNS) veth(name string, a netip.Addr, peer *netNS, b netip.Addr, bits int) error {
	return ns.link(func(h *netlink.Handle) error {
		v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: name + "p",
			PeerNamespace: netlink.NsFd(int(peer.f.Fd()))}
		if err := h.LinkAdd(v); err != nil {
			return fmt.Errorf("add veth %s: %w", name, err)
		}
		if err := h.AddrAdd(v, &netlink.Addr{IPNet: ipNet(netip.PrefixFrom(a, bits))}); err != nil {
			return fmt.Errorf("address %s: %w", a, err)
		}
		if err := h.LinkSetUp(v); err != nil {
			return err
		}
		return peer.link(func(ph *netlink.Handle) error {
			p, err := ph.LinkByName(name + "p")
			if err != nil {
				return err
			}
			if err := ph.AddrAdd(p, &netlink.Addr{IPNet: ipNet(netip.PrefixFrom(b, bits))}); err != nil {
				return fmt.Errorf("address %s: %w", b, err)
			}
			return ph.LinkSetUp(p)
		})
	})
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// ownCgroup returns the cgroup2 directory of this process, on the
// cgroup2 mount at /sys/fs/cgroup/unified (a machine with both
// hierarchies) or /sys/fs/cgroup (a unified-only machine).
func ownCgroup() (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	var rel string
	found := false
	for _, line := range strings.Split(string(b), "\n") {
		if r, ok := strings.CutPrefix(line, "0::"); ok {
			rel, found = r, true
		}
	}
	if !found {
		return "", errors.New("no cgroup2 hierarchy holds this process: eBPF service routing needs one")
	}
	for _, root := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
		var st unix.Statfs_t
		if unix.Statfs(root, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
			return filepath.Join(root, rel), nil
		}
	}
	return "", errors.New("no cgroup2 mount: eBPF service routing needs one")
}
