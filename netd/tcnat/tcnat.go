// Package tcnat is the eBPF dataplane for Service traffic that arrives
// from outside the node: a client on the site LAN connecting to a
// NodePort (a node address and a Service's nodePort) or an external IP.
// netd/ebpflb balances the node's own sockets at connect time; a packet
// from another machine has no socket on the node to hook, so it is
// translated per packet, by programs on the traffic control hooks (tcx)
// of the node's LAN interfaces. nftables DNAT (netd/nftlb in External
// mode) does the same job where tcx is missing (Supported says so).
//
// The ingress program looks a TCP or UDP packet's destination up in the
// frontends map. A packet of a known flow (the conntrack map, an LRU
// hash keyed by client address and port, frontend address and port and
// protocol) goes to the flow's backend; the first packet of a flow
// picks one of the frontend's external backends: the client's while its
// ClientIP affinity lasts (the affinity map), else a random one. The destination address and port are
// rewritten, checksums fixed by difference, and the reverse map (an LRU
// hash keyed by backend and client address and port and protocol)
// remembers the frontend. The egress program, on the same interfaces,
// rewrites the source of a packet found in the reverse map back to the
// frontend, so the client sees its reply come from where it connected;
// a packet not in that map is never touched, so the node's own traffic
// and its pods' pass as they are.
//
// What is left to the kernel: routing the translated packet (to a local
// pod over its veth, or to another node), and, for flows not of an
// externalTrafficPolicy Local frontend, masquerading them. The ingress
// program sets Config.MasqueradeMark on such packets, and a table of the
// dataplane's own holds one postrouting rule that masquerades marked
// packets: conntrack then brings the backend's replies back through this
// node, undoes the masquerade and routes them out of the LAN interface,
// where the egress program translates them. Local frontends keep the
// client's address and need no conntrack at all.
//
// The masquerade picks source ports in a range that holds no NodePort
// (Config.MasqueradePortMin): the ingress program runs before conntrack,
// so a backend's reply to node:port must never look like a new flow to
// a NodePort.
//
// A TCP connection keeps its backend to its end, even once Sync removed
// that backend (as kube-proxy keeps conntrack entries); a SYN, and a UDP
// packet, keep the flow's backend only while it is still one of the
// frontend's (in its slot), and pick again once it went (as kube-proxy
// clears UDP conntrack entries), so a retransmitted SYN goes where the
// first one went and a new connection never to a removed backend. A frontend
// without external backends drops new flows: a tc program could answer
// with a TCP RST or ICMP unreachable as kube-proxy's reject rules do, but
// only by building packets; the client times out instead. IPv4
// fragments, IPv6 packets with extension headers, SCTP, ICMP errors about
// a flow and non-Ethernet interfaces pass untranslated. Every packet
// that arrives on the LAN interfaces counts as external, whatever its
// source (nftlb's External mode sends traffic from the cluster CIDR to
// Backends instead).
//
// The programs are built in Go with cilium/ebpf's asm package (no C
// compiler needed). Maps and links are pinned on bpffs: the routing
// outlives the agent, and a new agent adopts it without a gap.
package tcnat

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netns"

	"github.com/outpost-mesh/outpost/netd/internal/bpfpin"
	"github.com/outpost-mesh/outpost/netd/internal/lbplan"
	"github.com/outpost-mesh/outpost/netd/services"
)

// ErrClosed is returned by the methods of a Dataplane after Close or
// Remove.
var ErrClosed = errors.New("dataplane closed")

// Dataplane is one node's translation of traffic from outside. Its
// methods may be called concurrently.
type Dataplane struct {
	cfg Config

	mu     sync.Mutex
	closed bool
	ns     *os.File // the node's network namespace
	objs   *bpfpin.Objects
	maps   map[string]*ebpf.Map // objs.Maps
	// state is what the maps hold, nil when it must be read from them
	// (after a Sync that failed part way). orphans are backend slots
	// of no frontend, found when reading them.
	state   map[feKey]*feState
	orphans []slotKey
	ids     *lbplan.IDs
	// lastOps is how many map entries the last Sync wrote or deleted.
	lastOps int
}

var _ services.Dataplane = (*Dataplane)(nil)

// linkPin is the name of the pin of the link of dir on interface name.
func linkPin(name string, dir direction) string { return "link_" + name + "_" + dir.name }

// New opens the node's dataplane. What is pinned under cfg.PinDir is
// adopted as it is: maps keep their entries and attached programs keep
// running, so flows see no gap across an agent restart; a program of
// another version is replaced in its link atomically (BPF_LINK_UPDATE),
// once the entries of an older agent's map of another layout are
// carried over into today's (see migrate). What is missing is made,
// pinned and attached; the links of interfaces no longer in
// cfg.Interfaces, and of interfaces made anew since (their links died
// with the old ones), are taken away. New also makes (or repairs) the
// masquerade table. New starts no goroutine.
func New(cfg Config) (*Dataplane, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("tcnat config: %w", err)
	}
	ns, err := openNetns(cfg.HostNetNS)
	if err != nil {
		return nil, err
	}
	if err := bpfpin.MakeDir(cfg.PinDir); err != nil {
		ns.Close()
		return nil, err
	}
	objs := bpfpin.NewObjects(cfg.PinDir)
	d := &Dataplane{cfg: cfg, ns: ns, objs: objs, maps: objs.Maps}
	if err := d.open(); err != nil {
		// Take back what this call pinned, so that a failed first New
		// leaves nothing attached while the agent falls back to
		// nftables; what was adopted stays.
		objs.Abandon()
		ns.Close()
		return nil, err
	}
	return d, nil
}

// openNetns opens the network namespace at path, "" for the calling
// thread's.
func openNetns(path string) (*os.File, error) {
	if path == "" {
		path = "/proc/thread-self/ns/net"
	}
	ns, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open node netns: %w", err)
	}
	return ns, nil
}

func (d *Dataplane) open() error {
	for name, spec := range mapSpecs(&d.cfg) {
		if err := d.objs.OpenMap(name, spec); err != nil {
			return err
		}
	}
	older, err := d.migrate()
	if err != nil {
		return err
	}
	err = inNetns(d.ns, func() error {
		want := map[string]bool{}
		for _, name := range d.cfg.Interfaces {
			ifi, err := net.InterfaceByName(name)
			if err != nil {
				return fmt.Errorf("interface %s: %w", name, err)
			}
			if len(ifi.HardwareAddr) != 6 {
				// The programs read the IP header after an Ethernet
				// header; a tunnel or other layer 3 device has none.
				return fmt.Errorf("interface %s: not Ethernet", name)
			}
			for _, dir := range directions {
				pin := linkPin(name, dir)
				want[pin] = true
				l, pinned, err := d.openLink(filepath.Join(d.cfg.PinDir, pin), ifi.Index, dir)
				if err != nil {
					return fmt.Errorf("interface %s %s: %w", name, dir.name, err)
				}
				d.objs.AddLink(pin, l, pinned)
			}
		}
		return removeStale(d.cfg.PinDir, want)
	})
	if err != nil {
		return err
	}
	if err := ensureNFT(int(d.ns.Fd()), &d.cfg); err != nil {
		return err
	}
	if err := d.readState(); err != nil {
		return err
	}
	// No program reads the older agent's frontends map any more.
	if older != "" {
		if err := os.Remove(older); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove the older frontends map: %w", err)
		}
	}
	return nil
}

// migrate carries the entries of the frontends map an older agent pinned
// (locklessFrontends) into the frontends map, before the links' programs
// are replaced by ones that read the new map, so that flows see no gap
// across the upgrade. The other maps keep their names and layouts, and
// the new programs read them as they are. It returns the older pin's
// path, to remove once every link runs the new programs, or "" if there
// is none.
//
// The older pin is removed only once New has done everything else:
// while it is there, it is what the links may still read (a New that
// failed or was killed part way may have left the frontends map half
// written, or unpinned it again), so it is carried over again, whatever
// the frontends map holds.
func (d *Dataplane) migrate() (string, error) {
	path := filepath.Join(d.cfg.PinDir, locklessFrontends)
	old, err := ebpf.LoadPinnedMap(path, nil)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("load the older frontends map: %w", err)
	}
	defer old.Close()
	if old.KeySize() != uint32(binary.Size(feKey{})) || old.ValueSize() != uint32(binary.Size(locklessVal{})) {
		// Not a layout this agent knows: translation restarts with
		// the first Sync.
		return path, nil
	}
	entries, err := bpfpin.Entries[feKey, locklessVal](old)
	if err != nil {
		return "", fmt.Errorf("read the older frontends map: %w", err)
	}
	var b bpfpin.Batch[feKey, feVal]
	for k, v := range entries {
		b.Add(k, feVal{ID: v.ID, Count: v.Count, Affinity: v.Affinity, Flags: v.Flags})
	}
	if err := bpfpin.PutLocked(d.maps[mapFrontends], b); err != nil {
		return "", fmt.Errorf("write frontends: %w", err)
	}
	return path, nil
}

// removeStale removes the link pins under dir that are not in want: the
// links of interfaces taken out of the Config.
func removeStale(dir string, want map[string]bool) error {
	names, err := bpfpin.Names(dir, "link_")
	if err != nil {
		return err
	}
	for _, name := range names {
		if !want[name] {
			if err := os.Remove(filepath.Join(dir, name)); err != nil {
				return fmt.Errorf("remove stale link: %w", err)
			}
		}
	}
	return nil
}

// inNetns runs fn on a thread in the network namespace ns: the tcx
// links' interface indexes are looked up and resolved there.
func inNetns(ns *os.File, fn func() error) error {
	return onThread(func() error {
		if err := netns.Set(netns.NsHandle(ns.Fd())); err != nil {
			return fmt.Errorf("enter node netns: %w", err)
		}
		return nil
	}, fn)
}

// onThread runs fn on a thread of its own that enter moved to another
// network namespace, then moves the thread back. A thread that enter
// failed to move, or that cannot go back, stays locked, and Go ends it
// with its goroutine.
func onThread(enter, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		if err := enter(); err != nil {
			errc <- err
			return
		}
		err = fn()
		// A thread that cannot go back stays locked, and Go ends it
		// with the goroutine.
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

// openLink adopts the link pinned at path if it is still attached to
// ifindex, replacing its program if it is not this version's, or
// attaches and pins a new one (pinned true). It runs in the node's
// network namespace.
func (d *Dataplane) openLink(path string, ifindex int, dir direction) (l link.Link, pinned bool, err error) {
	l, err = link.LoadPinnedLink(path, nil)
	if err == nil {
		info, err := l.Info()
		if err != nil {
			l.Close()
			return nil, false, fmt.Errorf("link info: %w", err)
		}
		if tcx := info.TCX(); tcx == nil || int(tcx.Ifindex) != ifindex || ebpf.AttachType(tcx.AttachType) != dir.attach {
			// The interface went (and its link with it) and may have
			// come back under another index: attach afresh.
			l.Close()
			if err := os.Remove(path); err != nil {
				return nil, false, fmt.Errorf("remove dead link: %w", err)
			}
		} else {
			// A program's tag leaves out which maps it reads: a link may
			// run this version's program on maps no longer pinned, after
			// a New that failed part way, say.
			same, err := bpfpin.UsesOnly(info, d.maps)
			if err == nil && same {
				same, err = bpfpin.Runs(info, programSpec(dir, d.cfg.MasqueradeMark).Instructions)
			}
			if err == nil && !same {
				err = d.replace(l, dir)
			}
			if err != nil {
				l.Close()
				return nil, false, err
			}
			return l, false, nil
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, false, fmt.Errorf("load pinned link: %w", err)
	}
	prog, err := load(dir, d.cfg.MasqueradeMark, d.maps)
	if err != nil {
		return nil, false, err
	}
	defer prog.Close() // the link holds the program
	l, err = link.AttachTCX(link.TCXOptions{Interface: ifindex, Program: prog, Attach: dir.attach})
	if err != nil {
		return nil, false, fmt.Errorf("attach: %w", err)
	}
	if err := l.Pin(path); err != nil {
		l.Close()
		return nil, false, fmt.Errorf("pin link: %w", err)
	}
	return l, true, nil
}

// replace loads this version's program for dir and swaps it into l in
// one step: the interface never passes a packet without a program.
func (d *Dataplane) replace(l link.Link, dir direction) error {
	prog, err := load(dir, d.cfg.MasqueradeMark, d.maps)
	if err != nil {
		return err
	}
	defer prog.Close()
	if err := l.Update(prog); err != nil {
		return fmt.Errorf("update link: %w", err)
	}
	return nil
}

// readState reads what the frontend and backend maps hold.
func (d *Dataplane) readState() error {
	fes, err := bpfpin.Entries[feKey, feVal](d.maps[mapFrontends])
	if err != nil {
		return fmt.Errorf("read frontends: %w", err)
	}
	slots, err := bpfpin.Entries[slotKey, beVal](d.maps[mapBackends])
	if err != nil {
		return fmt.Errorf("read backends: %w", err)
	}
	d.state, d.orphans, d.ids = stateFrom(fes, slots)
	return nil
}

// Sync makes the node translate exactly the NodePort and ExternalIP
// frontends of t (TCP and UDP) to their ExternalBackends; other
// frontends are ignored. Only the entries that differ from what the maps
// hold are written, in an order that never lets a new flow see a
// frontend with fewer backends filled in than its count. A t beyond the
// limits or with a frontend that cannot be routed changes nothing and
// returns an error wrapping ErrTooLarge or ErrInvalid.
func (d *Dataplane) Sync(ctx context.Context, t services.Table) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := validate(t); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return ErrClosed
	}
	if d.state == nil {
		if err := d.readState(); err != nil {
			return err
		}
	}
	p := makePlan(d.state, t, d.ids)
	p.SlotDel = append(p.SlotDel, d.orphans...)
	if err := p.Apply(d.maps[mapFrontends], d.maps[mapBackends], "frontends"); err != nil {
		d.state = nil
		return err
	}
	d.state, d.orphans = p.Next, nil
	d.ids.Free = append(d.ids.Free, p.Freed...)
	d.lastOps = p.Ops()
	return nil
}

// Close releases the dataplane's handles. The pinned maps and links stay,
// and so do the translation and the masquerade table; a later New adopts
// them. Close may be called more than once.
func (d *Dataplane) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	return d.closeHandles()
}

func (d *Dataplane) closeHandles() error {
	errs := []error{d.objs.Close()}
	if d.ns != nil {
		errs = append(errs, d.ns.Close())
		d.ns = nil
	}
	return errors.Join(errs...)
}

// Remove takes the translation away: it detaches the programs, unpins
// and frees the maps, removes PinDir and deletes the masquerade table.
// Flows already masqueraded keep their conntrack entries (their packets
// from the client are no longer translated, so they end). The Dataplane
// is closed after.
func (d *Dataplane) Remove(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return ErrClosed
	}
	d.closed = true
	errs := []error{d.objs.Unpin()}
	if err := removeNFT(int(d.ns.Fd()), d.cfg.Table); err != nil {
		errs = append(errs, err)
	}
	// Closing the last handle of an unpinned link detaches it.
	errs = append(errs, d.closeHandles())
	if err := os.Remove(d.cfg.PinDir); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, fmt.Errorf("pin dir: %w", err))
	}
	return errors.Join(errs...)
}

// Uninstall takes away the translation of a node whose dataplane is not
// open (the agent gave up eBPF, say): it removes the pins New makes
// under cfg.PinDir (and an older agent's frontends map), links first,
// then PinDir if that leaves it empty, and deletes the masquerade table
// in cfg.HostNetNS. With no handle left open, the links detach and the
// maps are freed. What is already gone is not an error.
func Uninstall(ctx context.Context, cfg Config) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	cfg.setDefaults()
	var errs []error
	// Links first, then maps.
	names, err := bpfpin.Names(cfg.PinDir, "link_")
	if err == nil {
		for name := range mapSpecs(&cfg) {
			names = append(names, name)
		}
		names = append(names, locklessFrontends)
		err = bpfpin.RemovePins(cfg.PinDir, names)
	}
	errs = append(errs, err)
	ns, err := openNetns(cfg.HostNetNS)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	defer ns.Close()
	return errors.Join(append(errs, removeNFT(int(ns.Fd()), cfg.Table))...)
}

// MountBPFFS mounts a bpffs at path, made if missing, unless one is
// there already.
func MountBPFFS(path string) error { return bpfpin.MountBPFFS(path) }
