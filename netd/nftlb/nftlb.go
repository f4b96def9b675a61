// Package nftlb is the nftables dataplane of the node's service routing,
// modelled on kube-proxy's nftables mode. With Mode All it routes every
// frontend of a services.Table (the fallback for kernels without cgroup
// BPF); with Mode External only the NodePort and ExternalIP traffic that
// arrives from outside the node, which the eBPF socket hooks never see.
// It owns one table per IP family, named by Config.Table, in the node's
// network namespace:
//
//	table ip|ip6 <Table>
//	  map service-ips      daddr . l4proto . dport : goto F<id>, every frontend
//	  map noep-int         the same key : goto reject | drop, frontends with no
//	  map noep-ext         backend for the node's own (int) or outside (ext) clients
//	  chain nat-prerouting nat dstnat:   [External: from a local address or the
//	                                     cluster CIDR: return] jump services
//	  chain nat-output     nat dstnat:   jump services (All)
//	  chain services                     daddr . l4proto . dport vmap @service-ips
//	  chain nat-postrouting nat srcnat:  masquerade what was marked for it
//	  chain filter-input, filter-forward, filter-output (All), filter at dstnat-10:
//	                                     ct state new jump noep-check
//	  chain noep-check                   inside: vmap @noep-int; outside: vmap @noep-ext
//	  chain reject                       tcp reset, else ICMP port unreachable
//	  chain F<id>                        a frontend: the masquerade mark where
//	                                     kube-proxy sets it; then, when Backends and
//	                                     ExternalBackends differ, inside clients
//	                                     goto I<id>; then a pick: affinity, then
//	                                     numgen random mod N == 0 goto E<id><b1>,
//	                                     numgen random mod N-1 == 0 goto E<id><b2>,
//	                                     ..., goto E<id><bN>
//	  chain I<id>                        the same pick, among Backends
//	                                     (affinity: ip saddr @A<id><b> goto E<id><b>)
//	  chain E<id><b>                     one backend: masquerade a pod of this
//	                                     node reaching it (hairpin included),
//	                                     update @A<id><b>, dnat
//	  set A<id><b>                       clients stuck to backend b, with timeouts
//
// A frontend's id comes from its key; the service-ips element of a
// frontend carries, as its comment, a hash of the frontend and of the
// Config, so that after an agent restart the first Sync reads the table
// back and rewrites only the frontends whose hash differs. Every Sync is
// one nf_tables transaction (and a second one that deletes the chains and
// sets the first left unreferenced): connections in flight keep their
// conntrack entries and their backends, except UDP flows to a backend a
// frontend lost, whose entries are cleared as kube-proxy does.
//
// Names are at most 31 bytes, for kernels before 4.14; rejects sit in
// filter chains at input, forward and output, where every kernel allows
// them; each family has a table of its own, as inet nat needs 5.2.
package nftlb

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"sync"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"golang.org/x/sys/unix"

	"github.com/outpost-mesh/outpost/netd/services"
)

// ErrClosed is returned by the methods of a closed Dataplane.
var ErrClosed = errors.New("nftlb: dataplane closed")

var _ services.Dataplane = (*Dataplane)(nil)

// Names of the base objects of a table.
const (
	mapServices = "service-ips"
	mapNoepInt  = "noep-int"
	mapNoepExt  = "noep-ext"

	chainServices   = "services"
	chainNoepCheck  = "noep-check"
	chainReject     = "reject"
	chainPrerouting = "nat-prerouting"
	chainOutput     = "nat-output"
	chainPost       = "nat-postrouting"
	chainFInput     = "filter-input"
	chainFForward   = "filter-forward"
	chainFOutput    = "filter-output"

	basePrefix = "base "
)

// elementBatch is how many set elements go in one netlink message: a
// message's element list is one attribute, at most 64 KiB long.
const elementBatch = 256

// Dataplane routes a node's services with nftables. Its methods may be
// called concurrently; they run one at a time.
type Dataplane struct {
	cfg Config

	mu     sync.Mutex
	ns     *os.File // the node's netns
	tables [2]*tableState
}

// tableState is what the dataplane knows one family's table to hold.
type tableState struct {
	p planner
	// known: read back from the kernel or written by this Dataplane;
	// the rest of the fields are valid only when known.
	known  bool
	exists bool
	baseOK bool
	// checked: every installed frontend's chains and sets were compared
	// with its plan since the table was read back.
	checked     bool
	fronts      map[string]*installed
	staleChains map[string]bool
	staleSets   map[string]bool
	// flows are the UDP conntrack entries to clear once the transaction
	// that made this state is committed.
	flows staleFlows
	// ids caches the ids of the installed frontends' keys.
	ids map[services.Key]string
	// staleNoep are no-endpoint map elements of no known frontend.
	staleNoep map[string][]services.Key
}

// installed is a frontend as the table holds it.
type installed struct {
	key      services.Key
	hash     string
	chains   []string
	sets     []string
	int, ext bool // has an element in noep-int, noep-ext
	// spec is a copy of the frontend it was written from, or nil when
	// read back: comparing with it is cheaper than hashing.
	spec *services.Frontend
}

func cloneFrontend(f *services.Frontend) *services.Frontend {
	g := *f
	g.Backends = slices.Clone(f.Backends)
	g.ExternalBackends = slices.Clone(f.ExternalBackends)
	return &g
}

// New returns a Dataplane for the node's namespace. It opens the
// namespace and nothing else: the first Sync reads back what an earlier
// agent left there.
func New(cfg Config) (*Dataplane, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("nftlb config: %w", err)
	}
	path := cfg.HostNetNS
	if path == "" {
		// This thread's: every thread not locked into another namespace
		// for a moment is in the agent's.
		path = "/proc/thread-self/ns/net"
	}
	ns, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open node netns: %w", err)
	}
	d := &Dataplane{cfg: cfg, ns: ns}
	for i, v4 := range []bool{true, false} {
		fam := newFamily(cfg, v4)
		d.tables[i] = &tableState{p: planner{cfg: cfg, fam: fam, base: baseHash(cfg, fam)}}
	}
	return d, nil
}

// Close releases the dataplane's handles, leaving the routing in place.
// It is safe to call twice.
func (d *Dataplane) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ns == nil {
		return nil
	}
	err := d.ns.Close()
	d.ns = nil
	return err
}

func (d *Dataplane) nsfd() int { return int(d.ns.Fd()) }

func (d *Dataplane) table(st *tableState) *nftables.Table {
	return &nftables.Table{Name: d.cfg.Table, Family: st.p.fam.tf}
}

// Remove deletes the dataplane's tables, and with them all its routing.
// Connections already translated keep their conntrack entries.
func (d *Dataplane) Remove(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ns == nil {
		return ErrClosed
	}
	for _, st := range d.tables {
		c := newTxn(ctx, d.nsfd())
		c.DelTable(d.table(st))
		if err := c.commit(); err != nil && !errors.Is(err, unix.ENOENT) {
			st.known = false
			return fmt.Errorf("delete nftables table %s %s: %w", st.p.fam, d.cfg.Table, err)
		}
		*st = tableState{p: st.p, known: true}
	}
	return nil
}

// Sync makes the node route as t says, in one nf_tables transaction, then
// clears the conntrack entries of UDP flows to backends that frontends
// lost. A table beyond the limits of services is refused whole. An error
// after the transaction (clearing conntrack) leaves the routing done.
func (d *Dataplane) Sync(ctx context.Context, t services.Table) error {
	if err := checkTable(t); err != nil {
		return fmt.Errorf("nftlb: %w", err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ns == nil {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	for _, st := range d.tables {
		if !st.known {
			if err := d.readBack(st); err != nil {
				return err
			}
		}
	}
	c := newTxn(ctx, d.nsfd())
	var next [2]*tableState
	for i, st := range d.tables {
		want := map[string]*services.Frontend{}
		for k, f := range t {
			if k.Addr.Is4() != st.p.fam.v4 || !st.p.routed(f) {
				continue
			}
			id, ok := st.ids[k]
			if !ok {
				id = frontendID(k)
			}
			if g := want[id]; g != nil {
				return fmt.Errorf("nftlb: frontends %v and %v have the same id %s", g.Key, k, id)
			}
			want[id] = f
		}
		n, err := d.syncTable(c, st, want)
		if err != nil {
			return err
		}
		next[i] = n
	}
	if err := c.commit(); err != nil {
		for _, st := range d.tables {
			st.known = false // read back next time: the outcome may be unknown
		}
		return fmt.Errorf("nftables transaction: %w", err)
	}
	d.tables = next
	for _, st := range d.tables {
		st.ids = make(map[services.Key]string, len(st.fronts))
		for id, f := range st.fronts {
			st.ids[f.key] = id
		}
	}
	// Chains and sets no longer referenced go in a transaction of their
	// own: before 6.2 the kernel may still count a reference from a map
	// element deleted in the same transaction. What fails is tried again
	// at the next Sync.
	c = newTxn(ctx, d.nsfd())
	for _, st := range d.tables {
		tbl := d.table(st)
		for name := range st.staleChains {
			c.DelChain(&nftables.Chain{Table: tbl, Name: name})
		}
		for name := range st.staleSets {
			c.DelSet(&nftables.Set{Table: tbl, Name: name})
		}
	}
	if err := c.commit(); err == nil {
		for _, st := range d.tables {
			st.staleChains, st.staleSets = nil, nil
		}
	}
	for _, st := range d.tables {
		flows := st.flows
		st.flows = nil
		if err := d.clearFlows(st.p.fam.v4, flows); err != nil {
			return err
		}
	}
	return nil
}

// syncTable queues in c what moves st's table to want (by frontend id),
// and returns the state the table has once c is committed.
func (d *Dataplane) syncTable(c *txn, st *tableState, want map[string]*services.Frontend) (*tableState, error) {
	tbl := d.table(st)
	fam := st.p.fam
	next := &tableState{
		p: st.p, known: true, exists: true, baseOK: true, checked: true,
		fronts:      make(map[string]*installed, len(want)),
		staleChains: map[string]bool{},
		staleSets:   map[string]bool{},
	}
	old := st.fronts
	if !st.baseOK {
		if st.exists {
			c.DelTable(tbl)
		}
		old = nil
		d.addBase(c, st)
	} else {
		for k, v := range st.staleChains {
			next.staleChains[k] = v
		}
		for k, v := range st.staleSets {
			next.staleSets[k] = v
		}
	}
	svcMap := &nftables.Set{Table: tbl, Name: mapServices, IsMap: true, KeyType: fam.keyType, DataType: nftables.TypeVerdict, Concatenation: true}
	intMap := &nftables.Set{Table: tbl, Name: mapNoepInt, IsMap: true, KeyType: fam.keyType, DataType: nftables.TypeVerdict, Concatenation: true}
	extMap := &nftables.Set{Table: tbl, Name: mapNoepExt, IsMap: true, KeyType: fam.keyType, DataType: nftables.TypeVerdict, Concatenation: true}
	var (
		svcAdd, svcDel, intAdd, intDel, extAdd, extDel []nftables.SetElement
		flushes                                        []string
	)
	noepElem := func(k services.Key, v noep) nftables.SetElement {
		e := nftables.SetElement{Key: keyBytes(k), VerdictData: goTo(chainReject)}
		if v == noepDrop {
			e.VerdictData = verdict(expr.VerdictDrop)
		}
		return e
	}
	if st.baseOK {
		// Leftovers of no known frontend.
		for _, k := range st.staleNoep[mapNoepInt] {
			intDel = append(intDel, nftables.SetElement{Key: keyBytes(k)})
		}
		for _, k := range st.staleNoep[mapNoepExt] {
			extDel = append(extDel, nftables.SetElement{Key: keyBytes(k)})
		}
	}

	// New and changed frontends.
	var rules []*nftables.Rule
	for id, f := range want {
		o := old[id]
		if o != nil && o.key != f.Key {
			return nil, fmt.Errorf("nftlb: frontends %v and %v have the same id %s", o.key, f.Key, id)
		}
		if o != nil && st.checked && o.spec.Equal(f) {
			next.fronts[id] = o
			continue
		}
		h := st.p.frontendHash(f)
		if o != nil && o.hash == h && st.checked {
			next.fronts[id] = &installed{key: o.key, hash: h, spec: cloneFrontend(f), chains: o.chains, sets: o.sets, int: o.int, ext: o.ext}
			continue
		}
		s := st.p.plan(f)
		in := &installed{key: f.Key, hash: h, spec: cloneFrontend(f)}
		next.fronts[id] = in
		if o != nil && o.hash == h {
			// Read back and unchanged: keep it, drop what it has
			// beyond its plan.
			*in = *o
			in.spec = cloneFrontend(f)
			d.dropExtra(next, s, o)
			continue
		}
		have := map[string]bool{}
		if o != nil {
			for _, n := range o.chains {
				have[n] = true
			}
		}
		for _, ch := range s.chains {
			in.chains = append(in.chains, ch.name)
			chain := &nftables.Chain{Table: tbl, Name: ch.name}
			if have[ch.name] || next.staleChains[ch.name] {
				flushes = append(flushes, ch.name)
				delete(next.staleChains, ch.name)
			} else {
				c.AddChain(chain)
			}
			for _, r := range ch.rules {
				rules = append(rules, &nftables.Rule{Table: tbl, Chain: chain, Exprs: r.exprs})
			}
		}
		haveSet := map[string]bool{}
		if o != nil {
			for _, n := range o.sets {
				haveSet[n] = true
			}
		}
		for _, set := range s.sets {
			in.sets = append(in.sets, set.name)
			delete(next.staleSets, set.name)
			if haveSet[set.name] {
				continue
			}
			if err := c.AddSet(&nftables.Set{Table: tbl, Name: set.name, KeyType: fam.addrType, HasTimeout: true, Dynamic: true, Timeout: set.timeout}, nil); err != nil {
				return nil, fmt.Errorf("nftlb: affinity set: %w", err)
			}
		}
		if o != nil {
			if f.Key.Proto == services.UDP {
				keep := map[netip.AddrPort]bool{}
				for _, b := range slices.Concat(f.Backends, f.ExternalBackends) {
					keep[b.Addr] = true
				}
				next.addFlows(f.Key, keep)
			}
			d.dropExtra(next, s, o)
			svcDel = append(svcDel, nftables.SetElement{Key: keyBytes(f.Key)})
			if o.int {
				intDel = append(intDel, nftables.SetElement{Key: keyBytes(f.Key)})
			}
			if o.ext {
				extDel = append(extDel, nftables.SetElement{Key: keyBytes(f.Key)})
			}
		}
		svcAdd = append(svcAdd, nftables.SetElement{Key: keyBytes(f.Key), VerdictData: goTo(s.chains[0].name), Comment: s.comment})
		if s.int != noepNone {
			in.int = true
			intAdd = append(intAdd, noepElem(f.Key, s.int))
		}
		if s.ext != noepNone {
			in.ext = true
			extAdd = append(extAdd, noepElem(f.Key, s.ext))
		}
	}
	// Removed frontends.
	for id, o := range old {
		if _, ok := want[id]; ok {
			continue
		}
		svcDel = append(svcDel, nftables.SetElement{Key: keyBytes(o.key)})
		if o.key.Proto == services.UDP {
			next.addFlows(o.key, nil)
		}
		if o.int {
			intDel = append(intDel, nftables.SetElement{Key: keyBytes(o.key)})
		}
		if o.ext {
			extDel = append(extDel, nftables.SetElement{Key: keyBytes(o.key)})
		}
		for _, n := range o.chains {
			next.staleChains[n] = true
		}
		for _, n := range o.sets {
			next.staleSets[n] = true
		}
	}

	// Order: elements go before the chains they no longer point to are
	// flushed, new chains exist before rules jump to them, and sets
	// before rules look into them.
	for _, op := range []struct {
		set  *nftables.Set
		el   []nftables.SetElement
		add  bool
		what string
	}{
		{svcMap, svcDel, false, "delete service"},
		{intMap, intDel, false, "delete no-endpoint"},
		{extMap, extDel, false, "delete no-endpoint"},
	} {
		if err := elements(c, op.set, op.el, op.add); err != nil {
			return nil, fmt.Errorf("nftlb: %s elements: %w", op.what, err)
		}
	}
	for _, n := range flushes {
		c.FlushChain(&nftables.Chain{Table: tbl, Name: n})
	}
	for n := range next.staleChains {
		c.FlushChain(&nftables.Chain{Table: tbl, Name: n})
	}
	for _, r := range rules {
		c.AddRule(r)
	}
	for _, op := range []struct {
		set *nftables.Set
		el  []nftables.SetElement
	}{{svcMap, svcAdd}, {intMap, intAdd}, {extMap, extAdd}} {
		if err := elements(c, op.set, op.el, true); err != nil {
			return nil, fmt.Errorf("nftlb: add elements: %w", err)
		}
	}
	return next, nil
}

func (st *tableState) addFlows(k services.Key, keep map[netip.AddrPort]bool) {
	if st.flows == nil {
		st.flows = staleFlows{}
	}
	st.flows[netip.AddrPortFrom(k.Addr, k.Port)] = keep
}

// dropExtra marks the chains and sets o has and s does not as stale.
func (d *Dataplane) dropExtra(next *tableState, s *frontendSpec, o *installed) {
	keep := map[string]bool{}
	for _, ch := range s.chains {
		keep[ch.name] = true
	}
	for _, set := range s.sets {
		keep[set.name] = true
	}
	for _, n := range o.chains {
		if !keep[n] {
			next.staleChains[n] = true
		}
	}
	for _, n := range o.sets {
		if !keep[n] {
			next.staleSets[n] = true
		}
	}
}

// elements queues adding or deleting els of set, in messages of at most
// elementBatch elements.
func elements(c *txn, set *nftables.Set, els []nftables.SetElement, add bool) error {
	for len(els) > 0 {
		n := min(len(els), elementBatch)
		var err error
		if add {
			err = c.SetAddElements(set, els[:n])
		} else {
			err = c.SetDeleteElements(set, els[:n])
		}
		if err != nil {
			return err
		}
		els = els[n:]
	}
	return nil
}

// addBase queues the table, its maps and base chains.
func (d *Dataplane) addBase(c *txn, st *tableState) {
	tbl := c.AddTable(d.table(st))
	fam := st.p.fam
	cfg := d.cfg
	maps := map[string]*nftables.Set{}
	for _, name := range []string{mapServices, mapNoepInt, mapNoepExt} {
		m := &nftables.Set{Table: tbl, Name: name, IsMap: true, KeyType: fam.keyType, DataType: nftables.TypeVerdict, Concatenation: true}
		// Cannot fail: named, not anonymous.
		_ = c.AddSet(m, nil)
		maps[name] = m
	}
	regular := func(name string) *nftables.Chain { return c.AddChain(&nftables.Chain{Table: tbl, Name: name}) }
	base := func(name string, typ nftables.ChainType, hook *nftables.ChainHook, prio int32) *nftables.Chain {
		accept := nftables.ChainPolicyAccept
		return c.AddChain(&nftables.Chain{Table: tbl, Name: name, Type: typ, Hooknum: hook, Priority: nftables.ChainPriorityRef(nftables.ChainPriority(prio)), Policy: &accept})
	}
	rule := func(ch *nftables.Chain, e ...[]expr.Any) {
		c.AddRule(&nftables.Rule{Table: tbl, Chain: ch, Exprs: cat(e...)})
	}
	ret := []expr.Any{verdict(expr.VerdictReturn)}
	inside := func(ch *nftables.Chain, then []expr.Any) {
		rule(ch, fromLocal(), then)
		if fam.cluster.IsValid() {
			rule(ch, fam.saddrIn(fam.cluster, true), then)
		}
	}

	reject := regular(chainReject)
	rule(reject, []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{unix.IPPROTO_TCP}},
		&expr.Reject{Type: unix.NFT_REJECT_TCP_RST},
	})
	rule(reject, []expr.Any{&expr.Reject{Type: unix.NFT_REJECT_ICMP_UNREACH, Code: fam.portUnr}})

	svc := regular(chainServices)
	c.AddRule(&nftables.Rule{Table: tbl, Chain: svc, Exprs: cat(fam.keyLoad(), []expr.Any{lookupVmap(maps[mapServices])}),
		UserData: userdata.AppendString(nil, userdata.TypeComment, basePrefix+st.p.base)})

	check := regular(chainNoepCheck)
	if cfg.Mode == All {
		inside(check, cat(fam.keyLoad(), []expr.Any{lookupVmap(maps[mapNoepInt])}))
	}
	inside(check, ret)
	rule(check, fam.keyLoad(), []expr.Any{lookupVmap(maps[mapNoepExt])})

	const dstnat, srcnat = -100, 100
	pre := base(chainPrerouting, nftables.ChainTypeNAT, nftables.ChainHookPrerouting, dstnat)
	if cfg.Mode == External {
		inside(pre, ret)
	}
	rule(pre, []expr.Any{jump(chainServices)})
	if cfg.Mode == All {
		out := base(chainOutput, nftables.ChainTypeNAT, nftables.ChainHookOutput, dstnat)
		rule(out, []expr.Any{jump(chainServices)})
	}
	post := base(chainPost, nftables.ChainTypeNAT, nftables.ChainHookPostrouting, srcnat)
	m := cfg.MasqueradeMark
	rule(post, []expr.Any{
		&expr.Meta{Key: expr.MetaKeyMARK, Register: reg1},
		&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: binaryutil.NativeEndian.PutUint32(m), Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: make([]byte, 4)},
		verdict(expr.VerdictReturn),
	})
	rule(post, []expr.Any{
		&expr.Meta{Key: expr.MetaKeyMARK, Register: reg1},
		&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: binaryutil.NativeEndian.PutUint32(^m), Xor: make([]byte, 4)},
		&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: reg1},
		&expr.Masq{FullyRandom: true},
	})
	hooks := []struct {
		name string
		hook *nftables.ChainHook
	}{{chainFInput, nftables.ChainHookInput}, {chainFForward, nftables.ChainHookForward}}
	if cfg.Mode == All {
		hooks = append(hooks, struct {
			name string
			hook *nftables.ChainHook
		}{chainFOutput, nftables.ChainHookOutput})
	}
	for _, h := range hooks {
		// Before dstnat, as kube-proxy's: rejects are only valid in
		// input, forward and output on older kernels.
		ch := base(h.name, nftables.ChainTypeFilter, h.hook, dstnat-10)
		rule(ch, ctNew(), []expr.Any{jump(chainNoepCheck)})
	}
}
