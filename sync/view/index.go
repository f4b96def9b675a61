// Package view indexes, for every edge node, the objects of its view (its
// Node, the Nodes of its site, its pods and what they reference, all
// services and endpoint slices, and the firmware trust set) and computes what to send the node, live
// and on resume; and it decides when the service account tokens of the
// node's pods, which the hub mints into the view, are minted again
// (Tokens). No I/O, no clock.
package view

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/outpost-mesh/outpost/sync/wire"
)

// Object is one object of the store at its revision. Raw is its stored
// form (Kubernetes protobuf, without resourceVersion); the index keeps Raw
// and forwards it unchanged, so the caller must not modify it afterwards.
// Raw may be nil for the resources of OnDemand, whose bytes the index
// holds only while a node needs them: Size is then the length of the
// stored form, which results are measured by. With Raw, Size is 0 or
// len(Raw).
type Object struct {
	Key      wire.Key
	Revision int64
	Raw      []byte
	Size     int
}

// Event is one change of the store. Raw is the new object (owned by the
// index from then on, as for Object), nil when Deleted; it may be nil, with
// Size set, as for Object.
type Event struct {
	Revision int64
	Key      wire.Key
	Deleted  bool
	Raw      []byte
	Size     int
}

// storedSize returns the length of the stored form of an object given as
// raw and size (Object's fields, and Event's), and false if they do not
// say it.
func storedSize(raw []byte, size int, onDemand bool) (int, bool) {
	switch {
	case raw == nil && onDemand:
		return size, size > 0
	case len(raw) == 0:
		return 0, false
	case size != 0 && size != len(raw):
		return 0, false
	}
	return len(raw), true
}

// OnDemand reports whether the index holds the bytes of objects of
// resource only while some node's pods reference them: configmaps,
// secrets and service accounts, which a hub may store many more of, and
// much larger, than its nodes need. Reset and Apply accept those without
// Raw. Session results put those whose bytes the index does not hold
// without them (see Change): the caller reads them from the store, and
// may hand them back with Fill.
func OnDemand(resource string) bool { return kindOfResource(resource) == kindRef }

// Shared reports whether key is in every node's view although its
// resource is OnDemand: the firmware trust set (wire.FirmwareTrustKey),
// which every node must hold to verify releases. Reset and Apply must be
// given its bytes.
func Shared(key wire.Key) bool { return key == wire.FirmwareTrustKey }

// Config tunes an Index.
type Config struct {
	// HistoryLimit is the number of changes kept to resume nodes by
	// revision and to feed sessions that have not caught up. A node that
	// fell further behind resumes from its inventory; a session that did
	// is sent the difference between what it holds and its view.
	HistoryLimit int
	// MaxBatchBytes is the size of object bytes a result of Next aims
	// for: it ends at the first store revision that reaches it. A result
	// over twice the size (one store revision brought many objects into
	// the view, or a whole difference) comes in parts of at most this
	// size, all but the last of revision 0 (see Session).
	MaxBatchBytes int
	// MaxBatchChanges is, likewise, the number of changes a result aims
	// for.
	MaxBatchChanges int
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		HistoryLimit:    100_000, // about 100 bytes a change with its place in its nodes' lists: 10 MiB, minutes of a busy hub
		MaxBatchBytes:   1 << 20, // results stay well under wire.DefaultMaxFrameSize
		MaxBatchChanges: 1000,
	}
}

// Validate reports whether c can be used.
func (c Config) Validate() error {
	switch {
	case c.HistoryLimit < 1:
		return fmt.Errorf("history limit %d: must be at least 1", c.HistoryLimit)
	case c.MaxBatchBytes < 1:
		return fmt.Errorf("max batch bytes %d: must be at least 1", c.MaxBatchBytes)
	case c.MaxBatchChanges < 1:
		return fmt.Errorf("max batch changes %d: must be at least 1", c.MaxBatchChanges)
	}
	return nil
}

// ErrNeedInventory is returned by Index.Resume when the node's revision is
// not within the retained history (or is newer than the index, as after a
// hub restore): the caller asks the node for its inventory and calls
// ResumeFromInventory. Session.Next returns it in a rarer case described
// there.
var ErrNeedInventory = errors.New("revision not in the retained history: inventory needed")

// ErrClosed is returned by Session.Next after Close.
var ErrClosed = errors.New("view session closed")

// ErrOutOfOrder is returned (wrapped) by Apply for events that do not
// follow the index's revision; the index is then unchanged and the caller
// lists the store again and calls Reset.
var ErrOutOfOrder = errors.New("events out of revision order")

// Index holds every object that can be part of a node's view, at the
// store's latest revision, and a bounded history of its changes; sessions
// read both to serve their nodes. It holds the bytes of every object but
// those of OnDemand resources that no node's pod references: of those it
// keeps the revision and size only.
//
// One goroutine feeds it from the hub's store: Reset with a list of the
// view's resources (nodes, pods, configmaps, secrets, serviceaccounts,
// services, endpointslices) at one revision, then Apply with the events of
// a watch from that revision, all the events of a revision in one call.
// When the watch ends (compaction, a slow watcher) or Apply fails, it
// lists and calls Reset again. Every other method (Fill included) may be
// called concurrently from any goroutine.
type Index struct {
	cfg Config

	mu      sync.RWMutex
	rev     int64
	epoch   uint64 // counts Resets: sessions older than one start over
	objs    map[wire.Key]*object
	shared  map[wire.Key]*object // services and endpoint slices: in every view
	nodes   map[string]*nodeState
	hist    history
	floor   int64 // the oldest revision a resume may replay from; never decreases
	changed chan struct{}

	undecodable      uint64       // pod versions that did not decode
	undecodableNodes uint64       // Node versions that did not decode, guarded by mu
	sessions         atomic.Int64 // sessions not closed
	bytes            int64        // the length of the raws of objs, guarded by mu
	unheld           int          // the objects of objs without their raw, guarded by mu

	// refNodes lists, for each configmap, secret and service account,
	// the nodes whose pods reference it: with nodes, it tells which
	// sessions a change concerns. Guarded by mu.
	refNodes map[wire.Key]map[string]struct{}
	// siteOf holds the site of each Node that has one (see site.go), and
	// sites the Nodes of each site: with nodes and refNodes, they tell
	// which sessions a change concerns. Guarded by mu.
	siteOf map[string]string
	sites  map[string]map[string]struct{}
	// concern lists, for each node, the records of the history that may
	// change its view: its Node's, those of the Nodes of its site then,
	// those of the pods that were or are bound to it, and those of the
	// objects its pods referenced then. allConcern lists the records that
	// may change every view: services, endpoint slices, and objects
	// referenced on more than maxRefConcern nodes, or Nodes of sites that
	// large. Sessions replay only these. Guarded by mu.
	concern    map[string]*seqs
	allConcern seqs
	refConcern int // maxRefConcern, but in tests
	// open holds the open sessions by node, for their wake-ups.
	openMu sync.Mutex
	open   map[string]map[*Session]struct{}
}

// object is one object of the index; immutable once stored in objs
// (sessions read it under the read lock), replaced rather than changed.
type object struct {
	rev  int64
	raw  []byte   // nil for an OnDemand object whose bytes are not held
	size int      // len of the stored form, held or not
	pod  *podInfo // pods only
}

// nodeState is what the index knows of one node: the pods bound to it and
// how many of them reference each configmap, secret and service account.
type nodeState struct {
	pods map[wire.Key]*podInfo
	refs map[wire.Key]int32
}

// NewIndex returns an empty index at revision 0. It panics if cfg does not
// Validate: the configuration is the program's, not input.
func NewIndex(cfg Config) *Index {
	if err := cfg.Validate(); err != nil {
		panic(fmt.Sprintf("view: invalid config: %v", err))
	}
	return &Index{
		cfg:     cfg,
		objs:    make(map[wire.Key]*object),
		shared:  make(map[wire.Key]*object),
		nodes:   make(map[string]*nodeState),
		hist:    newHistory(cfg.HistoryLimit, 0),
		changed: make(chan struct{}),

		refNodes:   make(map[wire.Key]map[string]struct{}),
		siteOf:     make(map[string]string),
		sites:      make(map[string]map[string]struct{}),
		concern:    make(map[string]*seqs),
		refConcern: maxRefConcern,
		open:       make(map[string]map[*Session]struct{}),
	}
}

// maxRefConcern is the number of nodes referencing an object (or in the
// sites of a Node) above which a change of it goes to allConcern rather
// than to each node's list: a configmap on every node of a large fleet
// would otherwise cost a number per node per change. Sessions check their
// references (and sites) anyway.
const maxRefConcern = 64

// addConcern lists the record of sequence number seq, r, for the sessions
// it may concern. x.mu is held, and x.refNodes is as of r.
func (x *Index) addConcern(seq uint64, r *record) {
	oldest := x.hist.oldest()
	if seq%uint64(x.cfg.HistoryLimit) == 0 {
		// Once per ring's worth of records, forget the lists of nodes
		// none of whose records the ring still holds.
		for n, l := range x.concern {
			if len(*l) == 0 || (*l)[len(*l)-1] < oldest {
				delete(x.concern, n)
			}
		}
	}
	add := func(node string) {
		l := x.concern[node]
		if l == nil {
			l = new(seqs)
			x.concern[node] = l
		}
		l.add(seq, oldest)
	}
	switch r.kind {
	case kindShared:
		x.allConcern.add(seq, oldest)
	case kindNode:
		if x.peers(r.site) > x.refConcern {
			x.allConcern.add(seq, oldest)
			return
		}
		add(r.key.Name)
		x.eachPeer(r.site, r.key.Name, add)
	case kindRef:
		nodes := x.refNodes[r.key]
		if len(nodes) > x.refConcern {
			x.allConcern.add(seq, oldest)
			return
		}
		for n := range nodes {
			add(n)
		}
	case kindPod:
		if r.prevPod != nil && r.prevPod.node != "" {
			add(r.prevPod.node)
		}
		if r.newPod != nil && r.newPod.node != "" && (r.prevPod == nil || r.newPod.node != r.prevPod.node) {
			add(r.newPod.node)
		}
	}
}

// kind tells how a resource takes part in views.
type kind uint8

const (
	kindNone   kind = iota // not part of any view
	kindNode               // a node's own Node, and those of its site
	kindPod                // pods bound to the node
	kindRef                // referenced by the node's pods
	kindShared             // in every view
)

func kindOf(key wire.Key) kind {
	if Shared(key) {
		return kindShared
	}
	return kindOfResource(key.Resource)
}

func kindOfResource(resource string) kind {
	switch resource {
	case wire.ResourceNodes:
		return kindNode
	case wire.ResourcePods:
		return kindPod
	case wire.ResourceConfigMaps, wire.ResourceSecrets, wire.ResourceServiceAccounts:
		return kindRef
	case wire.ResourceServices, wire.ResourceEndpointSlices:
		return kindShared
	}
	return kindNone
}

// Reset replaces the whole index with a snapshot of the store at rev (at
// hub start, or after the hub's store watch had to start over). Objects of
// resources that are in no view are ignored. The history restarts at rev;
// open sessions send their nodes the difference with what they hold.
// Reset must not run concurrently with Apply or another Reset.
func (x *Index) Reset(rev int64, objects []Object) error {
	if rev < 0 {
		return fmt.Errorf("reset to revision %d: negative", rev)
	}
	objs := make(map[wire.Key]*object, len(objects))
	siteOf := make(map[string]string)
	var undecodable, undecodableNodes uint64
	for _, o := range objects {
		k := kindOf(o.Key)
		if k == kindNone {
			continue
		}
		n, ok := storedSize(o.Raw, o.Size, k == kindRef)
		switch {
		case o.Revision < 1 || o.Revision > rev:
			return fmt.Errorf("reset to revision %d: %s at revision %d", rev, o.Key, o.Revision)
		case !ok:
			return fmt.Errorf("reset to revision %d: %s without an object (size %d, %d bytes)", rev, o.Key, o.Size, len(o.Raw))
		}
		if err := o.Key.Validate(); err != nil {
			return fmt.Errorf("reset to revision %d: %w", rev, err)
		}
		obj := &object{rev: o.Revision, raw: o.Raw, size: n}
		switch k {
		case kindPod:
			if old := x.lookup(o.Key); old != nil && old.rev == o.Revision && string(old.raw) == string(o.Raw) {
				obj.pod = old.pod
			} else {
				var ok bool
				if obj.pod, ok = decodePod(o.Key.Namespace, o.Raw); !ok {
					undecodable++
				}
			}
		case kindNode:
			site, same := x.lookupSite(o.Key, o.Revision, o.Raw)
			if !same {
				var ok bool
				if site, ok = decodeNode(o.Raw); !ok {
					undecodableNodes++
				}
			}
			if site != "" {
				siteOf[o.Key.Name] = site
			}
		}
		objs[o.Key] = obj
	}

	x.mu.Lock()
	defer x.mu.Unlock()
	x.objs = objs
	x.shared = make(map[wire.Key]*object)
	x.nodes = make(map[string]*nodeState)
	x.refNodes = make(map[wire.Key]map[string]struct{})
	x.siteOf = siteOf
	x.sites = make(map[string]map[string]struct{})
	for node, site := range siteOf {
		ns := x.sites[site]
		if ns == nil {
			ns = make(map[string]struct{})
			x.sites[site] = ns
		}
		ns[node] = struct{}{}
	}
	for key, o := range objs {
		switch kindOf(key) {
		case kindShared:
			x.shared[key] = o
		case kindPod:
			x.bind(key, o.pod)
		}
	}
	x.bytes, x.unheld = 0, 0
	for key, o := range objs {
		if o.raw != nil && kindOf(key) == kindRef && len(x.refNodes[key]) == 0 {
			// No node needs it: its bytes stay in the store.
			o = &object{rev: o.rev, size: o.size}
			objs[key] = o
		}
		x.count(o, 1)
	}
	x.rev = rev
	x.epoch++
	x.hist.reset(rev)
	x.concern, x.allConcern = make(map[string]*seqs), nil
	x.floor = max(x.floor, rev)
	x.undecodable += undecodable
	x.undecodableNodes += undecodableNodes
	x.wake()
	x.notify(true, nil)
	return nil
}

// lookup returns the object of key now, nil if none. Fill may change
// x.objs meanwhile: the feeding goroutine too reads it under the lock.
func (x *Index) lookup(key wire.Key) *object {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.objs[key]
}

// lookupSite returns the site of Node key now, and whether its object is
// at rev and raw now, so that the site holds for raw.
func (x *Index) lookupSite(key wire.Key, rev int64, raw []byte) (string, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	old := x.objs[key]
	if old == nil || old.rev != rev || string(old.raw) != string(raw) {
		return "", false
	}
	return x.siteOf[key.Name], true
}

// Apply applies changes of the store, in revision order, all after the
// index's revision; the events of one store revision (one transaction may
// change several keys) must come in one call. Events of resources that are
// in no view only move the revision on. On error nothing is applied. Apply
// wakes the waiters of Changed. It must not run concurrently with Reset or
// another Apply.
func (x *Index) Apply(events []Event) error {
	if len(events) == 0 {
		return nil
	}
	// Check and decode before taking the lock: sessions keep reading
	// meanwhile. Only this goroutine writes x.rev.
	pods := make([]*podInfo, len(events))
	sites := make([]string, len(events)) // of Nodes
	sizes := make([]int, len(events))
	last := x.rev
	var undecodable, undecodableNodes uint64
	for i, ev := range events {
		switch {
		case ev.Revision <= x.rev:
			return fmt.Errorf("%w: %s at revision %d, index at %d", ErrOutOfOrder, ev.Key, ev.Revision, x.rev)
		case ev.Revision < last:
			return fmt.Errorf("%w: %s at revision %d after revision %d", ErrOutOfOrder, ev.Key, ev.Revision, last)
		}
		last = ev.Revision
		k := kindOf(ev.Key)
		if k == kindNone {
			continue
		}
		if err := ev.Key.Validate(); err != nil {
			return fmt.Errorf("apply revision %d: %w", ev.Revision, err)
		}
		if ev.Deleted {
			continue
		}
		n, ok := storedSize(ev.Raw, ev.Size, k == kindRef)
		if !ok {
			return fmt.Errorf("apply revision %d: put of %s without an object (size %d, %d bytes)", ev.Revision, ev.Key, ev.Size, len(ev.Raw))
		}
		sizes[i] = n
		switch k {
		case kindPod:
			pi, ok := decodePod(ev.Key.Namespace, ev.Raw)
			if !ok {
				undecodable++
			}
			pods[i] = pi
		case kindNode:
			site, ok := decodeNode(ev.Raw)
			if !ok {
				undecodableNodes++
			}
			sites[i] = site
		}
	}

	x.mu.Lock()
	defer x.mu.Unlock()
	all, touched := false, map[string]struct{}{}
	var unheld []int // events of objects whose bytes were not kept
	for i, ev := range events {
		k := kindOf(ev.Key)
		if k == kindNone {
			continue
		}
		switch k {
		case kindShared:
			all = true
		case kindNode:
			touched[ev.Key.Name] = struct{}{}
		case kindRef:
			for n := range x.refNodes[ev.Key] {
				touched[n] = struct{}{}
			}
		}
		old := x.objs[ev.Key]
		if ev.Deleted && old == nil {
			continue // nothing to delete: the view did not change
		}
		r := record{rev: ev.Revision, key: ev.Key, kind: k, deleted: ev.Deleted}
		if old != nil {
			r.prevRev, r.prevPod = old.rev, old.pod
		}
		var obj *object
		if !ev.Deleted {
			obj = &object{rev: ev.Revision, raw: ev.Raw, size: sizes[i]}
			if k == kindRef && len(x.refNodes[ev.Key]) == 0 {
				// No node needs it now; a pod of this revision may.
				obj.raw = nil
				if ev.Raw != nil {
					unheld = append(unheld, i)
				}
			}
			if k == kindPod {
				obj.pod = pods[i]
				if old != nil && samePod(old.pod, obj.pod) {
					obj.pod = old.pod // share, and let sessions skip the references
				}
				r.newPod = obj.pod
			}
		}
		if k == kindNode {
			r.site = x.placeNode(ev.Key.Name, sites[i]) // "" when deleted
			x.eachPeer(r.site, ev.Key.Name, func(n string) { touched[n] = struct{}{} })
		}
		if k == kindPod {
			for _, pi := range []*podInfo{r.prevPod, r.newPod} {
				if pi != nil && pi.node != "" {
					touched[pi.node] = struct{}{}
				}
			}
			x.unbind(ev.Key, r.prevPod)
			x.bind(ev.Key, r.newPod)
		}
		x.set(ev.Key, k, obj)
		x.addConcern(x.hist.push(r), &r)
		x.floor = max(x.floor, x.hist.start)
	}
	for _, i := range unheld {
		// Referenced by a pod that came after it in this revision.
		ev := &events[i]
		if o := x.objs[ev.Key]; o != nil && o.rev == ev.Revision && o.raw == nil && len(x.refNodes[ev.Key]) > 0 {
			x.set(ev.Key, kindRef, &object{rev: o.rev, raw: ev.Raw, size: o.size})
		}
	}
	x.rev = last
	x.undecodable += undecodable
	x.undecodableNodes += undecodableNodes
	x.wake()
	x.notify(all, touched)
	return nil
}

// set makes obj (nil: none) the object of key, of kind k. x.mu is held.
func (x *Index) set(key wire.Key, k kind, obj *object) {
	if old := x.objs[key]; old != nil {
		x.count(old, -1)
	}
	if obj == nil {
		delete(x.objs, key)
		delete(x.shared, key)
		return
	}
	x.objs[key] = obj
	x.count(obj, 1)
	if k == kindShared {
		x.shared[key] = obj
	}
}

// count adds o, n times (1 or -1), to the figures of x.objs. x.mu is held.
func (x *Index) count(o *object, n int) {
	if o.raw == nil {
		x.unheld += n
	}
	x.bytes += int64(n * len(o.raw))
}

// Fill hands the index raw, the stored form of key at revision rev, read
// from the store for a change that came without it. The index keeps it if
// key is still at rev, its bytes not held, and some node's pods reference
// it, so that the sessions that send it next need not read it again; it
// reports whether it did. The index owns raw from then on, as for Object.
func (x *Index) Fill(key wire.Key, rev int64, raw []byte) bool {
	if kindOf(key) != kindRef || len(raw) == 0 {
		return false
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	o := x.objs[key]
	if o == nil || o.rev != rev || o.raw != nil || o.size != len(raw) || len(x.refNodes[key]) == 0 {
		return false
	}
	x.set(key, kindRef, &object{rev: rev, raw: raw, size: o.size})
	return true
}

// Raw returns the stored form of key at revision rev if the index holds
// it: a change that came without it may find it there since, when another
// session's Fill brought it. The caller must not modify it.
func (x *Index) Raw(key wire.Key, rev int64) ([]byte, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if o := x.objs[key]; o != nil && o.rev == rev && o.raw != nil {
		return o.raw, true
	}
	return nil, false
}

// bind adds pod key with pi (nil for none) to its node.
func (x *Index) bind(key wire.Key, pi *podInfo) {
	if pi == nil || pi.node == "" {
		return
	}
	n := x.nodes[pi.node]
	if n == nil {
		n = &nodeState{pods: make(map[wire.Key]*podInfo), refs: make(map[wire.Key]int32)}
		x.nodes[pi.node] = n
	}
	n.pods[key] = pi
	for _, ref := range pi.refs {
		if n.refs[ref]++; n.refs[ref] == 1 {
			ns := x.refNodes[ref]
			if ns == nil {
				ns = make(map[string]struct{})
				x.refNodes[ref] = ns
			}
			ns[pi.node] = struct{}{}
		}
	}
}

// unbind removes pod key with pi (nil for none) from its node.
func (x *Index) unbind(key wire.Key, pi *podInfo) {
	if pi == nil || pi.node == "" {
		return
	}
	n := x.nodes[pi.node]
	if n == nil {
		return
	}
	delete(n.pods, key)
	for _, ref := range pi.refs {
		if n.refs[ref]--; n.refs[ref] <= 0 {
			delete(n.refs, ref)
			if ns := x.refNodes[ref]; ns != nil {
				delete(ns, pi.node)
				if len(ns) == 0 {
					delete(x.refNodes, ref)
					if o := x.objs[ref]; o != nil && o.raw != nil {
						// No node needs it any more.
						x.set(ref, kindRef, &object{rev: o.rev, size: o.size})
					}
				}
			}
		}
	}
	if len(n.pods) == 0 {
		delete(x.nodes, pi.node)
	}
}

// wake closes the channel Changed returned and makes the next one. x.mu is
// held.
func (x *Index) wake() {
	close(x.changed)
	x.changed = make(chan struct{})
}

// notify wakes the sessions a change concerns: those of the touched
// nodes, or all of them. Waking every session for every change would cost
// a hub with a thousand nodes a thousand wake-ups per pod status.
func (x *Index) notify(all bool, touched map[string]struct{}) {
	x.openMu.Lock()
	defer x.openMu.Unlock()
	if all {
		for _, ss := range x.open {
			for s := range ss {
				s.signal()
			}
		}
		return
	}
	for n := range touched {
		for s := range x.open[n] {
			s.signal()
		}
	}
}

// register and unregister keep x.open.
func (x *Index) register(s *Session) {
	x.openMu.Lock()
	defer x.openMu.Unlock()
	ss := x.open[s.node]
	if ss == nil {
		ss = make(map[*Session]struct{})
		x.open[s.node] = ss
	}
	ss[s] = struct{}{}
}

func (x *Index) unregister(s *Session) {
	x.openMu.Lock()
	defer x.openMu.Unlock()
	if ss := x.open[s.node]; ss != nil {
		delete(ss, s)
		if len(ss) == 0 {
			delete(x.open, s.node)
		}
	}
}

// Revision returns the store revision the index is at.
func (x *Index) Revision() int64 {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.rev
}

// Changed returns a channel closed by the next Apply or Reset. Take it
// before calling Session.Next, so that a change between the two is not
// missed.
func (x *Index) Changed() <-chan struct{} {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.changed
}

// View returns the node's view now: its objects and their revisions,
// sorted by resource, namespace and name. The caller owns the slice.
// The view holds the node's Node, the Nodes of its site (see
// wire.SiteLabel), its pods, the configmaps, secrets and service accounts
// they reference, and all services and endpoint slices.
func (x *Index) View(node string) []wire.InventoryEntry {
	x.mu.RLock()
	defer x.mu.RUnlock()
	var out []wire.InventoryEntry
	x.eachInView(node, func(key wire.Key, o *object) {
		out = append(out, wire.InventoryEntry{Key: key, Revision: o.rev})
	})
	slices.SortFunc(out, func(a, b wire.InventoryEntry) int { return compareKeys(a.Key, b.Key) })
	return out
}

// eachInView calls f for every object of the node's view now (see View),
// in no particular order. x.mu is held.
func (x *Index) eachInView(node string, f func(wire.Key, *object)) {
	own := nodeKey(node)
	if o := x.objs[own]; o != nil {
		f(own, o)
	}
	if site := x.siteOf[node]; site != "" {
		for n := range x.sites[site] {
			if n != node {
				k := nodeKey(n)
				f(k, x.objs[k])
			}
		}
	}
	if n := x.nodes[node]; n != nil {
		for key := range n.pods {
			f(key, x.objs[key])
		}
		for key := range n.refs {
			if o := x.objs[key]; o != nil {
				f(key, o)
			}
		}
	}
	for key, o := range x.shared {
		f(key, o)
	}
}

// Stats describes an index.
type Stats struct {
	Revision int64
	// ResumeFrom is the oldest revision Resume can replay from.
	ResumeFrom int64
	// History is the number of changes retained.
	History int
	// Objects is the number of objects indexed; ObjectBytes the length
	// of the stored forms held, and Unheld the number of objects of
	// OnDemand resources held without theirs.
	Objects     int
	ObjectBytes int64
	Unheld      int
	// Nodes is the number of nodes with pods bound to them.
	Nodes int
	// Sites is the number of sites with Nodes in them, SiteNodes the
	// number of Nodes in a site.
	Sites     int
	SiteNodes int
	// Sessions is the number of sessions not yet closed.
	Sessions int
	// UndecodablePods counts the pod versions, since NewIndex, that did
	// not decode; each was taken as bound to no node.
	UndecodablePods uint64
	// UndecodableNodes counts the Node versions, since NewIndex, that did
	// not decode; each was taken as in no site.
	UndecodableNodes uint64
}

// Stats returns the index's figures now.
func (x *Index) Stats() Stats {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return Stats{
		Revision:         x.rev,
		ResumeFrom:       x.floor,
		History:          x.hist.n,
		Objects:          len(x.objs),
		ObjectBytes:      x.bytes,
		Unheld:           x.unheld,
		Nodes:            len(x.nodes),
		Sessions:         int(x.sessions.Load()),
		UndecodablePods:  x.undecodable,
		UndecodableNodes: x.undecodableNodes,
		Sites:            len(x.sites),
		SiteNodes:        len(x.siteOf),
	}
}
