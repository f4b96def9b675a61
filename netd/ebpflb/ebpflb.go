// Package ebpflb is the eBPF dataplane of the node's service routing: it
// load-balances at the socket, as Cilium's socket LB does. Programs on
// the cgroup v2 sock_addr hooks (connect, sendmsg, recvmsg and getpeername,
// IPv4 and IPv6) send a connect or datagram to a Service's frontend
// straight to one of its backends, so no packet ever carries the
// ClusterIP, and show the frontend in its place to the socket's owner
// (replies, peer name). It serves the sockets of the node's own processes
// and of the pod namespaces added to it; connections arriving from outside
// the node (NodePort, ExternalIP) are the nftables dataplane's.
//
// The programs are built in Go with cilium/ebpf's asm package (no C
// compiler needed) and act only on sockets of the network namespaces in
// their scope map, so several nodes can share a machine and its cgroup.
// Maps and links are pinned on bpffs: the routing outlives the agent, and
// a new agent adopts it without a gap. The edge agent drives a Dataplane
// through services.Dataplane and falls back to nftables when Supported
// says no.
package ebpflb

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/outpost-mesh/outpost/netd/internal/bpfpin"
	"github.com/outpost-mesh/outpost/netd/internal/lbplan"
	"github.com/outpost-mesh/outpost/netd/services"
)

// ErrClosed is returned by the methods of a Dataplane after Close or
// Remove.
var ErrClosed = errors.New("dataplane closed")

// Config says where a node's dataplane lives.
type Config struct {
	// PinDir is a directory on a bpffs mount, one per node, holding the
	// node's maps and links, e.g. /sys/fs/bpf/outpost/<node>. Required.
	// It is made if missing (MountBPFFS mounts a bpffs).
	PinDir string
	// Cgroup is the cgroup v2 directory the programs are attached to:
	// they see the sockets of its processes and its descendants'.
	// Default /sys/fs/cgroup/unified, the cgroup2 root on machines with
	// both hierarchies, under which runc puts containers.
	Cgroup string
	// NetnsCookie is the cookie of the node's network namespace (see
	// NetnsCookie): only sockets made there, or in namespaces added with
	// Include, are load-balanced. Zero means the namespace of the thread
	// that calls New.
	NetnsCookie uint64
	// RevNATEntries is how many (socket, backend) pairs are remembered to
	// show replies and peer names as the frontend; the least recently
	// used are forgotten first (a UDP socket that sends again is
	// remembered again). Default 32768, some 3.75 MiB of kernel memory
	// (120 bytes each, allocated up front).
	RevNATEntries int
	// AffinityEntries is how many (client, Service) ClientIP affinities
	// are remembered; the least recently used are forgotten first.
	// Default 16384, some 1.75 MiB (112 bytes each, up front).
	AffinityEntries int
}

// DefaultConfig returns the defaults, PinDir left for the caller.
func DefaultConfig() Config {
	return Config{
		Cgroup:          "/sys/fs/cgroup/unified",
		RevNATEntries:   32768,
		AffinityEntries: 16384,
	}
}

// Validate reports what is wrong with c.
func (c *Config) Validate() error {
	switch {
	case c.PinDir == "" || !filepath.IsAbs(c.PinDir):
		return fmt.Errorf("pin dir %q: not an absolute path", c.PinDir)
	case c.Cgroup == "" || !filepath.IsAbs(c.Cgroup):
		return fmt.Errorf("cgroup %q: not an absolute path", c.Cgroup)
	case c.RevNATEntries < 1 || c.AffinityEntries < 1:
		return errors.New("revnat and affinity entries must be positive")
	}
	return nil
}

func (c *Config) setDefaults() {
	d := DefaultConfig()
	if c.Cgroup == "" {
		c.Cgroup = d.Cgroup
	}
	if c.RevNATEntries == 0 {
		c.RevNATEntries = d.RevNATEntries
	}
	if c.AffinityEntries == 0 {
		c.AffinityEntries = d.AffinityEntries
	}
}

// Dataplane is one node's socket load-balancer. Its methods may be called
// concurrently.
type Dataplane struct {
	cfg Config

	mu     sync.Mutex
	closed bool
	objs   *bpfpin.Objects
	maps   map[string]*ebpf.Map // objs.Maps
	// state is what the maps hold, nil when it must be read from them
	// (after a Sync that failed part way). orphans are backend slots
	// of no frontend, found when reading them.
	state   map[svcKey]*svcState
	orphans []slotKey
	ids     *lbplan.IDs
	// lastOps is how many map entries the last Sync wrote or deleted.
	lastOps int
}

var _ services.Dataplane = (*Dataplane)(nil)

// New opens the node's dataplane. What is pinned under cfg.PinDir is
// adopted as it is: maps keep their entries and attached programs keep
// running, so connections see no gap across an agent restart; a program
// of another version is replaced in its link atomically (BPF_LINK_UPDATE).
// What is missing is made, pinned and attached. New starts no goroutine.
func New(cfg Config) (*Dataplane, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.NetnsCookie == 0 {
		c, err := NetnsCookie()
		if err != nil {
			return nil, err
		}
		cfg.NetnsCookie = c
	}
	if err := bpfpin.MakeDir(cfg.PinDir); err != nil {
		return nil, err
	}
	objs := bpfpin.NewObjects(cfg.PinDir)
	d := &Dataplane{cfg: cfg, objs: objs, maps: objs.Maps}
	if err := d.open(); err != nil {
		// Take back what this call pinned, so that a failed first New
		// (a kernel without one of the hooks, say) leaves no program
		// attached while the agent falls back to nftables; what was
		// adopted stays.
		objs.Abandon()
		return nil, err
	}
	return d, nil
}

// open opens or makes the maps and links.
func (d *Dataplane) open() error {
	for name, spec := range mapSpecs(&d.cfg) {
		if err := d.objs.OpenMap(name, spec); err != nil {
			return err
		}
	}
	if err := d.maps[mapScope].Put(d.cfg.NetnsCookie, uint32(1)); err != nil {
		return fmt.Errorf("scope: %w", err)
	}
	old, err := d.migrate()
	if err != nil {
		return err
	}
	for _, h := range hooks {
		l, pinned, err := d.openLink(h)
		if err != nil {
			return fmt.Errorf("hook %s: %w", h.name, err)
		}
		d.objs.AddLink(h.name, l, pinned)
	}
	// No program reads the older agents' services maps any more.
	for _, path := range old {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove an older services map: %w", err)
		}
	}
	return d.readState()
}

// migrate carries the entries of a services map pinned by an older agent
// (legacyServices or lockless) into the services map, before the links'
// programs are replaced by ones that read the new map, so that connects
// see no gap across the upgrade. The backends map is shared: its slots
// below inlineSlots, which the programs of today do not read, are
// deleted by the first Sync after an upgrade from legacyServices. It
// returns the older pins' paths, to remove once the links run the new
// programs.
//
// The older pins are removed only after every link is replaced: while
// one is there, it and the backends map are what the node routes by (a
// New that failed or was killed part way may have left the services map
// half written), so it is carried over again, whatever the services map
// holds. An agent that upgraded from legacyServices to lockless removed
// the legacy pin only after its links read lockless, so where both are
// pinned, the legacy one is what the links read.
func (d *Dataplane) migrate() ([]string, error) {
	var paths []string
	var entries map[svcKey]svcVal
	for _, name := range []string{lockless, legacyServices} {
		path := filepath.Join(d.cfg.PinDir, name)
		m, err := ebpf.LoadPinnedMap(path, nil)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("load older services map %s: %w", name, err)
		}
		paths = append(paths, path)
		e, err := d.olderEntries(name, m)
		m.Close()
		if err != nil {
			return nil, err
		}
		if e != nil {
			entries = e
		}
	}
	if entries == nil {
		return paths, nil
	}
	var b bpfpin.Batch[svcKey, svcVal]
	for k, v := range entries {
		b.Add(k, v)
	}
	if err := bpfpin.PutLocked(d.maps[mapServices], b); err != nil {
		return nil, fmt.Errorf("write services: %w", err)
	}
	return paths, nil
}

// olderEntries returns the frontends that m, the older agents' services
// map name, holds as entries of the services map; nil if m's layout is
// not one this agent knows (routing then restarts with the first Sync).
func (d *Dataplane) olderEntries(name string, m *ebpf.Map) (map[svcKey]svcVal, error) {
	switch {
	case name == lockless && m.KeySize() == 20 && m.ValueSize() == svcValSize:
		e, err := bpfpin.Entries[svcKey, svcVal](m)
		if err != nil {
			return nil, fmt.Errorf("read older services map %s: %w", name, err)
		}
		for k, v := range e {
			v.Lock = 0
			e[k] = v
		}
		return e, nil
	case name == legacyServices && m.KeySize() == 20 && m.ValueSize() == 16:
		legacy, err := bpfpin.Entries[svcKey, legacyVal](m)
		if err != nil {
			return nil, fmt.Errorf("read older services map %s: %w", name, err)
		}
		slots, err := readSlots(d.maps[mapBackends])
		if err != nil {
			return nil, err
		}
		return migrate(legacy, slots), nil
	}
	return nil, nil
}

// openLink adopts h's pinned link, replacing its program if it is not
// this version's, or attaches and pins a new one (pinned true).
func (d *Dataplane) openLink(h hook) (l link.Link, pinned bool, err error) {
	path := filepath.Join(d.cfg.PinDir, "link_"+h.name)
	l, err = link.LoadPinnedLink(path, nil)
	if err == nil {
		if err := d.onCgroup(l); err != nil {
			l.Close()
			return nil, false, err
		}
		same, err := d.runs(l, programSpec(h).Instructions)
		if err == nil && !same {
			err = d.replace(l, h)
		}
		if err != nil {
			l.Close()
			return nil, false, err
		}
		return l, false, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, false, fmt.Errorf("load pinned link: %w", err)
	}
	prog, err := load(h, d.maps)
	if err != nil {
		return nil, false, err
	}
	defer prog.Close() // the link holds the program
	cg, err := os.Open(d.cfg.Cgroup)
	if err != nil {
		return nil, false, fmt.Errorf("cgroup: %w", err)
	}
	defer cg.Close()
	// A bpf_link (BPF_LINK_CREATE), not link.AttachCgroup's fallback
	// to BPF_PROG_ATTACH: cgroup links are always in multi mode, so
	// other nodes' programs and anyone else's on the cgroup stay as
	// they are, and only a link can be pinned to outlive the agent.
	l, err = link.AttachRawLink(link.RawLinkOptions{Target: int(cg.Fd()), Program: prog, Attach: h.attach})
	if err != nil {
		return nil, false, fmt.Errorf("attach to %s: %w", d.cfg.Cgroup, err)
	}
	if err := l.Pin(path); err != nil {
		l.Close()
		return nil, false, fmt.Errorf("pin link: %w", err)
	}
	return l, true, nil
}

// onCgroup checks that the pinned link l is attached to the configured
// cgroup: a dataplane moves to another cgroup only through Remove.
func (d *Dataplane) onCgroup(l link.Link) error {
	info, err := l.Info()
	if err != nil {
		return fmt.Errorf("link info: %w", err)
	}
	cg := info.Cgroup()
	var st unix.Stat_t
	if err := unix.Stat(d.cfg.Cgroup, &st); err != nil {
		return fmt.Errorf("cgroup: %w", err)
	}
	// A cgroup's id is its directory's inode number (on 32-bit
	// machines, with a generation above the low 32 bits).
	if cg == nil || uint32(cg.CgroupId) != uint32(st.Ino) {
		return fmt.Errorf("pinned link is attached to another cgroup than %s (Remove the dataplane to move it)", d.cfg.Cgroup)
	}
	return nil
}

// runs reports whether l runs the program insns on d's maps. (A
// program's tag leaves out which maps it reads: a link may run this
// version's program on maps that are no longer pinned, after a New that
// failed part way, say.)
func (d *Dataplane) runs(l link.Link, insns asm.Instructions) (bool, error) {
	info, err := l.Info()
	if err != nil {
		return false, fmt.Errorf("link info: %w", err)
	}
	if ours, err := bpfpin.UsesOnly(info, d.maps); err != nil || !ours {
		return false, err
	}
	return bpfpin.Runs(info, insns)
}

// replace loads this version's program for h and swaps it into l in one
// step: the hook never runs without a program.
func (d *Dataplane) replace(l link.Link, h hook) error {
	prog, err := load(h, d.maps)
	if err != nil {
		return err
	}
	defer prog.Close()
	if err := l.Update(prog); err != nil {
		return fmt.Errorf("update link: %w", err)
	}
	return nil
}

// readState reads what the service and backend maps hold.
func (d *Dataplane) readState() error {
	svcs, err := bpfpin.Entries[svcKey, svcVal](d.maps[mapServices])
	if err != nil {
		return fmt.Errorf("read services: %w", err)
	}
	slots, err := readSlots(d.maps[mapBackends])
	if err != nil {
		return err
	}
	d.state, d.orphans, d.ids = stateFrom(svcs, slots)
	return nil
}

// readSlots reads the backends map m.
func readSlots(m *ebpf.Map) (map[slotKey]beVal, error) {
	slots, err := bpfpin.Entries[slotKey, beVal](m)
	if err != nil {
		return nil, fmt.Errorf("read backends: %w", err)
	}
	return slots, nil
}

// Sync makes the node route exactly t. Only the entries that differ from
// what the maps hold are written, in an order that never lets a connect
// see a frontend with fewer backends filled in than its count. A t beyond
// the limits or with a frontend that cannot be routed changes nothing and
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
	if err := p.Apply(d.maps[mapServices], d.maps[mapBackends], "services"); err != nil {
		// What the maps hold now is in between: read it again next time.
		d.state = nil
		return err
	}
	d.state, d.orphans = p.Next, nil
	d.ids.Free = append(d.ids.Free, p.Freed...)
	d.lastOps = p.Ops()
	return nil
}

// Include adds the network namespace with the given cookie (a pod's, say)
// to those whose sockets are load-balanced.
func (d *Dataplane) Include(cookie uint64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return ErrClosed
	}
	if err := d.maps[mapScope].Put(cookie, uint32(1)); err != nil {
		return fmt.Errorf("scope: %w", err)
	}
	return nil
}

// Exclude takes the network namespace with the given cookie out of those
// whose sockets are load-balanced.
func (d *Dataplane) Exclude(cookie uint64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return ErrClosed
	}
	if err := d.maps[mapScope].Delete(cookie); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("scope: %w", err)
	}
	return nil
}

// Close releases the dataplane's handles. The pinned maps and links stay,
// and so does the routing; a later New adopts them. Close may be called
// more than once.
func (d *Dataplane) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	return d.objs.Close()
}

// Remove takes the node's service routing away: it detaches the programs
// and unpins and frees the maps, and removes PinDir. The Dataplane is
// closed after.
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
	return d.objs.Remove()
}

// RemovePins takes away the routing of a node whose dataplane is not
// open (the agent gave up eBPF, say): it removes the pins New makes under
// pinDir, links first, then pinDir if that leaves it empty. With no
// handle left open, the links detach and the maps are freed.
func RemovePins(ctx context.Context, pinDir string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var names []string
	for _, h := range hooks {
		names = append(names, "link_"+h.name)
	}
	for name := range mapSpecs(&Config{}) {
		names = append(names, name)
	}
	names = append(names, legacyServices, lockless)
	return bpfpin.RemovePins(pinDir, names)
}

// Supported returns nil if the kernel can run the dataplane, or an error
// wrapping ebpf.ErrNotSupported naming what it lacks (the agent then
// routes Services with nftables); other errors say the probe itself
// failed (not root, say).
func Supported() error {
	if err := features.HaveProgramType(ebpf.CGroupSockAddr); err != nil {
		return fmt.Errorf("cgroup sock_addr programs: %w", err)
	}
	for _, fn := range []asm.BuiltinFunc{asm.FnGetNetnsCookie, asm.FnGetSocketCookie, asm.FnGetPrandomU32, asm.FnKtimeGetNs,
		asm.FnSpinLock, asm.FnSpinUnlock} {
		if err := features.HaveProgramHelper(ebpf.CGroupSockAddr, fn); err != nil {
			return fmt.Errorf("helper %s in cgroup sock_addr programs: %w", fn, err)
		}
	}
	if err := features.HaveMapType(ebpf.LRUHash); err != nil {
		return fmt.Errorf("LRU hash maps: %w", err)
	}
	// The getpeername hooks (5.8) are the newest the dataplane uses.
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:         ebpf.CGroupSockAddr,
		AttachType:   ebpf.AttachCgroupInet4GetPeername,
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 1), asm.Return()},
		License:      "Dual BSD/GPL",
	})
	if errors.Is(err, unix.EINVAL) {
		err = fmt.Errorf("%w: %w", err, ebpf.ErrNotSupported)
	}
	if err != nil {
		return fmt.Errorf("getpeername hooks: %w", err)
	}
	p.Close()
	if _, err := NetnsCookie(); err != nil {
		return err
	}
	return nil
}

// NetnsCookie returns the cookie of the calling thread's network
// namespace (SO_NETNS_COOKIE, Linux 5.14): lock the OS thread to ask about
// another namespace than the process's.
func NetnsCookie() (uint64, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("netns cookie: %w", err)
	}
	defer unix.Close(fd)
	c, err := unix.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_NETNS_COOKIE)
	if err != nil {
		if errors.Is(err, unix.ENOPROTOOPT) {
			err = fmt.Errorf("%w: %w", err, ebpf.ErrNotSupported)
		}
		return 0, fmt.Errorf("netns cookie: %w", err)
	}
	return c, nil
}

// MountBPFFS mounts a bpffs at path, made if missing, unless one is
// there already.
func MountBPFFS(path string) error { return bpfpin.MountBPFFS(path) }
