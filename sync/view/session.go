package view

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/outpost-mesh/outpost/sync/wire"
)

// Change is one change of a result of Session: a wire.Change for the
// node, and the length of its object. A put of an object of an OnDemand
// resource whose bytes the index does not hold comes without Object: the
// caller reads the object at Revision from the store (Index.Raw first, in
// case another session's Index.Fill brought it since) before sending it.
// If the store no longer has that version (the object changed or was
// deleted since, and the old version compacted away), the caller drops
// the change: the index is bound to receive the newer change, and a later
// result sends it, since the session takes the node to hold the version
// dropped.
type Change struct {
	wire.Change
	// Size is the length of the object's stored form for a put, with
	// Object or without; 0 for a delete. Results are measured by it
	// (Config.MaxBatchBytes).
	Size int
}

// Session tracks what one connected node holds and turns the index's
// changes into the Changes that keep it equal to the node's view.
//
// Each result (of Resume, ResumeFromInventory, then Next) comes with the
// revision the node is at once it has applied it, which the caller sends
// with it as a wire.Batch. The session assumes that every result reaches
// the node in order: when a send fails, Close the session and let the node
// resume.
//
// A result brings the node to its view at the result's revision: the keys
// of the view then, each at its revision then, but for objects that
// changed again since, which later results (or a resume from that
// revision) send again. A result over twice Config.MaxBatchBytes or
// MaxBatchChanges comes in parts; all but the last carry revision 0, which
// wire.Batch defines as "more of this step follows": the node applies them
// and keeps its revision. A node interrupted within a step (or within the
// frames of one batch) therefore holds its view at its revision plus part
// of a step. Resume allows for that: until it has caught up with the index
// as it was when the node resumed, it sends every object that changed
// since the node's revision as it is, whatever the node was thought to
// hold.
//
// Next and Close may be called from different goroutines.
//
// The hub's session code, once the Hello is read:
//
//	s, changes, rev, err := x.Resume(node, hello.LastRevision)
//	if errors.Is(err, view.ErrNeedInventory) {
//		// Welcome with SendInventory, read the Inventory frames, then:
//		s, changes, rev = x.ResumeFromInventory(node, entries)
//	} else if err != nil { ... }
//	defer s.Close()
//	for {
//		// send wire.Batch{Changes: changes, Revision: rev}, in frames
//		// of revision 0 but the last if it is large, reading the
//		// objects of puts that came without them (see Change); bound
//		// the batches not yet acknowledged as flow control wants
//		ch := x.Changed()
//		prev := rev
//		if changes, rev, err = s.Next(); err != nil { ... }
//		for len(changes) == 0 && rev == prev {
//			select { case <-ch: case <-ctx.Done(): ... }
//			ch = x.Changed()
//			if changes, rev, err = s.Next(); err != nil { ... }
//		}
//	}
//
// A result without changes only moves the node's revision on. The caller
// may hold such results back (say, send one every few minutes): the
// node's view is the same at both revisions, and an older revision only
// makes a resume replay more.
type Session struct {
	x       *Index
	node    string
	nodeKey wire.Key

	mu     sync.Mutex
	closed bool
	epoch  uint64 // the index's at rev
	// rev is the revision of site, pods, refs and held: the node is at
	// rev once pending is sent.
	rev     int64
	site    string                // the site of the node's Node at rev, "" for none
	pods    map[wire.Key]*podInfo // the node's pods at rev
	refs    map[wire.Key]int32    // how many of pods reference each key
	held    map[wire.Key]int64    // what the node holds: key -> revision, or unknownRev
	pending []Change              // the rest of a result sent in parts
	scratch []holding             // reused by replay
	// unsureUntil is the index's revision when a node resumed by
	// revision: it may hold more than held says of any key changed after
	// its revision, so the changes through unsureUntil are sent whatever
	// held says.
	unsureUntil int64
	gone        map[wire.Key]bool // configmaps, secrets and service accounts deleted since
	// podsGen counts the changes of pods (see TokenPods).
	podsGen uint64

	wakeup chan struct{} // holds a token once a change concerns the node
}

// Changed returns the session's wake-up channel: it receives once a change
// that may concern the node (or a Reset) has come since it was last
// drained. Unlike Index.Changed, changes of other nodes do not wake it.
// Call Next after each receive, and until it returns no changes.
func (s *Session) Changed() <-chan struct{} { return s.wakeup }

// signal leaves a token in the session's wake-up channel.
func (s *Session) signal() {
	select {
	case s.wakeup <- struct{}{}:
	default:
	}
}

// unknownRev in Session.held: the node may hold any version of the key,
// or none.
const unknownRev = -1

// Resume opens a session for a node that applied its view through lastRev
// (0: it never completed a sync) and may hold part of a later step. If
// lastRev is within the retained history, the first result is what
// changed in the node's view since: puts of the objects in the view now
// that changed or joined it, deletes of those that left it (and, for
// objects that changed since lastRev, their state now even where the node
// should already have it: it may have been interrupted in the middle of a
// step). Otherwise, lastRev being older than the history (0 included,
// once the history no longer reaches back to the store's start) or newer
// than the index (a hub restored from a backup), it returns
// ErrNeedInventory: the node sends its inventory (empty if it holds
// nothing) for ResumeFromInventory. The caller owns the returned slice but
// not the objects in it, which it must not modify.
func (x *Index) Resume(node string, lastRev int64) (*Session, []Change, int64, error) {
	if err := nodeKey(node).Validate(); err != nil {
		return nil, nil, 0, fmt.Errorf("resume node %q: %w", node, err)
	}
	x.mu.RLock()
	defer x.mu.RUnlock()
	if lastRev < x.floor || lastRev > x.rev {
		return nil, nil, 0, ErrNeedInventory
	}
	s := x.newSession(node)
	s.startAt(lastRev)
	x.sessions.Add(1)
	changes, rev, _ := s.next() // no error: s is at the index's epoch, in its history
	return s, changes, rev, nil
}

// ResumeFromInventory opens a session for a node that holds the objects of
// inv, at the revisions listed. Its first result puts the objects of the
// view that are missing from inv or listed at another revision, and
// deletes the keys of inv that are not in the view; it brings the node to
// the index's revision. Entries with an invalid key are ignored. The
// caller checks node (Resume does). Ownership of the result is as for
// Resume.
func (x *Index) ResumeFromInventory(node string, inv []wire.InventoryEntry) (*Session, []Change, int64) {
	have := make(map[wire.Key]int64, len(inv))
	for _, e := range inv {
		if e.Key.Validate() == nil {
			have[e.Key] = e.Revision
		}
	}
	x.mu.RLock()
	defer x.mu.RUnlock()
	s := x.newSession(node)
	s.resync(have)
	x.sessions.Add(1)
	changes, rev, _ := s.next() // no error: nothing left to replay
	return s, changes, rev
}

func (x *Index) newSession(node string) *Session {
	s := &Session{x: x, node: node, nodeKey: nodeKey(node), wakeup: make(chan struct{}, 1)}
	x.register(s)
	return s
}

// Next returns the changes to the node's view after the previous result
// (of Resume, ResumeFromInventory or Next), in revision order, and the
// revision they bring the node to: the index's, even when none concerned
// the node, unless the result was cut short by Config.MaxBatchBytes or
// MaxBatchChanges; 0 for a part of a result that more parts follow. It
// does not block. When it returns no changes and the previous result's
// revision, the node is up to date: wait for the channel of Index.Changed
// taken before the call, then call again; otherwise call again at once.
//
// A session that fell behind the history, or across an Index.Reset, is
// sent the difference between what it holds and the view now, so no change
// is lost. But if that happens to a resumed session before it caught up
// (see Session), Next returns ErrNeedInventory: the node may hold objects
// the session cannot know of; close the session, and the node's next
// Resume will ask for its inventory. Next returns ErrClosed after Close.
// The caller owns the returned slice but not the objects in it.
func (s *Session) Next() ([]Change, int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, 0, ErrClosed
	}
	s.x.mu.RLock()
	defer s.x.mu.RUnlock()
	return s.next()
}

// Close releases the session. It may be called more than once, and
// concurrently with Next.
func (s *Session) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	s.x.unregister(s)
	s.pods, s.refs, s.held, s.pending, s.scratch, s.gone = nil, nil, nil, nil, nil, nil
	s.x.sessions.Add(-1)
}

// next is Next with s.mu (where shared) and s.x.mu held.
func (s *Session) next() ([]Change, int64, error) {
	x := s.x
	if len(s.pending) == 0 {
		switch {
		case s.epoch != x.epoch || s.rev < x.hist.start || s.rev > x.rev:
			if s.rev < s.unsureUntil {
				// The changes that could tell what else the node holds
				// are gone. Its revision is older than the history now:
				// it will resume from its inventory.
				return nil, 0, ErrNeedInventory
			}
			s.resync(s.held)
		case s.rev == x.rev:
			return nil, s.rev, nil
		default:
			s.replay()
		}
	}
	changes, rev := s.part()
	return changes, rev, nil
}

// part returns the next part of s.pending and the revision it brings the
// node to: 0 if more parts follow.
func (s *Session) part() ([]Change, int64) {
	all := s.pending
	if len(all) == 0 {
		return nil, s.rev
	}
	cfg := &s.x.cfg
	// n is the length of the first part: as many changes as the limits
	// allow, at least one.
	size, n := 0, 0
	for i, c := range all {
		if n == 0 && i > 0 && (i >= cfg.MaxBatchChanges || size+c.Size > cfg.MaxBatchBytes) {
			n = i
		}
		size += c.Size
	}
	if n == 0 || len(all) <= 2*cfg.MaxBatchChanges && size <= 2*cfg.MaxBatchBytes {
		s.pending = nil
		return all, s.rev
	}
	s.pending = all[n:]
	return all[:n:n], 0
}

// replay brings s from s.rev through the history, up to the first store
// revision at which the result reaches the limits of the config, and
// leaves the result in s.pending.
//
// It applies only the records that may concern the node (Index.concern and
// allConcern), in order: the others would change nothing, and on a hub of
// many nodes they are nearly all of them.
func (s *Session) replay() {
	x := s.x
	h := &x.hist
	b := builder{prev: s.scratch[:0]}
	var mine seqs
	if l := x.concern[s.node]; l != nil {
		mine = *l
	}
	it := newMerged(mine, x.allConcern, h.oldest()+uint64(h.after(s.rev)))
	for seq, ok := it.peek(); ok; seq, ok = it.peek() {
		rev := h.bySeq(seq).rev
		for ; ok && h.bySeq(seq).rev == rev; seq, ok = it.peek() {
			s.apply(h.bySeq(seq), &b)
			it.pop()
		}
		s.rev = rev
		if len(b.out) >= x.cfg.MaxBatchChanges || b.bytes >= x.cfg.MaxBatchBytes {
			break
		}
	}
	if _, ok := it.peek(); !ok {
		s.rev = x.rev
	}
	s.pending = b.finish()
	if cap(b.prev) <= 1024 {
		s.scratch = b.prev[:0]
	}
}

// apply brings s over one change of the index.
func (s *Session) apply(r *record, b *builder) {
	switch r.kind {
	case kindNode:
		s.applyNode(r, b)
	case kindShared:
		s.sync(r.key, r.rev, !r.deleted, b)
	case kindRef:
		if s.refs[r.key] > 0 {
			s.sync(r.key, r.rev, !r.deleted, b)
		}
	case kindPod:
		s.applyPod(r, b)
	}
}

// applyNode brings s over a change of a Node: the node's own, which may
// move it to another site (or to none), or another's, which may join,
// stay in or leave its site.
func (s *Session) applyNode(r *record, b *builder) {
	c := r.site
	if r.key == s.nodeKey {
		s.sync(r.key, r.rev, !r.deleted, b)
		if c != nil && c.prev != c.next {
			for _, n := range c.left {
				s.sync(nodeKey(n), r.rev, false, b)
			}
			for _, n := range c.joined {
				s.sync(nodeKey(n), r.rev, true, b)
			}
		}
		s.site = ""
		if c != nil {
			s.site = c.next
		}
		return
	}
	if c == nil || s.site == "" {
		return
	}
	if was, is := c.prev == s.site, c.next == s.site; was || is {
		s.sync(r.key, r.rev, is, b)
	}
}

// applyPod brings s over a change of a pod: the pod joins, stays in or
// leaves the node's view, and so may the objects it references.
func (s *Session) applyPod(r *record, b *builder) {
	is := onNode(r.newPod, s.node)
	if !is && !onNode(r.prevPod, s.node) {
		return // another node's pod: the common case
	}
	old, was := s.pods[r.key]
	if !was || !is || old != r.newPod {
		s.podsGen++
	}
	var oldRefs, newRefs []wire.Key
	if was {
		oldRefs = old.refs
	}
	if is {
		s.pods[r.key] = r.newPod
		newRefs = r.newPod.refs
	} else {
		delete(s.pods, r.key)
	}
	s.sync(r.key, r.rev, is, b)
	if was && is && old == r.newPod {
		return // same references
	}
	// Both are sorted: walk them together, and sync the keys whose count
	// leaves or reaches zero.
	i, j := 0, 0
	for i < len(oldRefs) || j < len(newRefs) {
		c := 0
		switch {
		case i == len(oldRefs):
			c = 1
		case j == len(newRefs):
			c = -1
		default:
			c = compareKeys(oldRefs[i], newRefs[j])
		}
		switch {
		case c < 0:
			key := oldRefs[i]
			i++
			if s.refs[key]--; s.refs[key] <= 0 {
				delete(s.refs, key)
				s.sync(key, r.rev, false, b)
			}
		case c > 0:
			key := newRefs[j]
			j++
			if s.refs[key]++; s.refs[key] == 1 {
				s.sync(key, r.rev, true, b)
			}
		default:
			i++
			j++
		}
	}
}

// onNode reports whether a pod of podInfo pi (nil: no pod) is bound to
// node.
func onNode(pi *podInfo, node string) bool {
	return pi != nil && pi.node == node
}

// sync brings what the node holds of key to the view at rev, where key is
// in the view if member. An object in the view that changed after rev, or
// is gone, is left alone: a later change of the history settles it.
// Through s.unsureUntil, what the node holds is not known for sure: the
// state of key is sent whatever held says.
func (s *Session) sync(key wire.Key, rev int64, member bool, b *builder) {
	had, ok := s.held[key]
	unsure := rev <= s.unsureUntil
	if member {
		o := s.x.objs[key]
		if o == nil || o.rev > rev {
			// A later change settles it, and a change through
			// unsureUntil does so whatever held says. Only one after
			// (o is newer, or gone since) needs held to say the node
			// may hold key.
			if unsure && (o == nil && s.x.rev > s.unsureUntil || o != nil && o.rev > s.unsureUntil) {
				s.held[key] = unknownRev
			}
			return
		}
		if ok && had == o.rev && !unsure {
			return
		}
		b.add(o.put(key), had, ok, unsure)
		s.held[key] = o.rev
		return
	}
	if ok || unsure && s.mayHold(key) {
		b.add(Change{Change: wire.Change{Op: wire.OpDelete, Key: key, Revision: rev}}, had, ok, unsure)
		delete(s.held, key)
	}
}

// mayHold reports whether the node, resumed by revision, may hold key
// although held does not say so: unless key is a configmap, secret or
// service account that has not existed since the node's revision (a
// pod's reference to nothing).
func (s *Session) mayHold(key wire.Key) bool {
	return kindOf(key) != kindRef || s.x.objs[key] != nil || s.x.rev > s.unsureUntil || s.gone[key]
}

// resync makes s.pending the difference between have, what the node holds,
// and its view now, and brings s to the index's revision.
func (s *Session) resync(have map[wire.Key]int64) {
	x := s.x
	held := make(map[wire.Key]int64, max(len(have), len(s.held)))
	var puts, dels []Change
	x.eachInView(s.node, func(key wire.Key, o *object) {
		held[key] = o.rev
		if rev, ok := have[key]; !ok || rev != o.rev {
			puts = append(puts, o.put(key))
		}
	})
	for key := range have {
		if _, ok := held[key]; !ok {
			dels = append(dels, Change{Change: wire.Change{Op: wire.OpDelete, Key: key, Revision: x.rev}})
		}
	}
	slices.SortFunc(dels, func(a, b Change) int { return compareKeys(a.Key, b.Key) })
	slices.SortFunc(puts, func(a, b Change) int {
		return cmp.Or(cmp.Compare(a.Revision, b.Revision), compareKeys(a.Key, b.Key))
	})
	s.pending = append(dels, puts...)
	s.held = held
	s.site = x.siteOf[s.node]
	s.podsGen++
	if n := x.nodes[s.node]; n != nil {
		s.pods, s.refs = maps.Clone(n.pods), maps.Clone(n.refs)
	} else {
		s.pods, s.refs = make(map[wire.Key]*podInfo), make(map[wire.Key]int32)
	}
	s.rev, s.epoch = x.rev, x.epoch
}

// startAt brings s to the node's view at rev, a revision within the
// history: what the node holds after applying its view through rev. The
// state at rev of a key changed since is its state before its first change
// after rev; that of any other key is its state now.
func (s *Session) startAt(rev int64) {
	x := s.x
	h := &x.hist
	from := h.after(rev)
	cur := x.nodes[s.node]
	// first holds the first change after rev of every Node (the node's
	// own, and those that may have been of its site), of the services and
	// slices, and of the pods that were, are or have been on the node. For
	// a pod, the first change that involves the node will do: if an
	// earlier one exists, the pod was elsewhere before both.
	first := make(map[wire.Key]*record)
	for i := from; i < h.n; i++ {
		r := h.at(i)
		switch r.kind {
		case kindPod:
			if !onNode(r.prevPod, s.node) && !onNode(r.newPod, s.node) && (cur == nil || cur.pods[r.key] == nil) {
				continue
			}
		case kindShared, kindNode:
		default:
			continue
		}
		if _, ok := first[r.key]; !ok {
			first[r.key] = r
		}
	}
	// The node's site at rev: that of its Node then.
	s.site = x.siteOf[s.node]
	if r := first[s.nodeKey]; r != nil {
		s.site = ""
		if r.site != nil {
			s.site = r.site.prev
		}
	}
	s.pods = make(map[wire.Key]*podInfo)
	s.refs = make(map[wire.Key]int32)
	s.held = make(map[wire.Key]int64)
	s.podsGen++
	bind := func(key wire.Key, pi *podInfo, rev int64) {
		s.pods[key] = pi
		s.held[key] = rev
		for _, ref := range pi.refs {
			s.refs[ref]++
		}
	}
	if cur != nil {
		for key, pi := range cur.pods {
			if first[key] == nil {
				bind(key, pi, x.objs[key].rev)
			}
		}
	}
	for key, o := range x.shared {
		if first[key] == nil {
			s.held[key] = o.rev
		}
	}
	if o := x.objs[s.nodeKey]; o != nil && first[s.nodeKey] == nil {
		s.held[s.nodeKey] = o.rev
	}
	if s.site != "" {
		// The Nodes of the site now that have not changed since.
		for n := range x.sites[s.site] {
			if k := nodeKey(n); k != s.nodeKey && first[k] == nil {
				s.held[k] = x.objs[k].rev
			}
		}
	}
	for key, r := range first {
		switch {
		case r.prevRev == 0:
			// did not exist at rev
		case r.kind == kindPod:
			if onNode(r.prevPod, s.node) {
				bind(key, r.prevPod, r.prevRev)
			}
		case r.kind == kindNode && key != s.nodeKey:
			if s.site != "" && r.site != nil && r.site.prev == s.site {
				s.held[key] = r.prevRev // of the site then
			}
		default:
			s.held[key] = r.prevRev
		}
	}
	// The referenced objects, now that the references at rev are known.
	firstRef := make(map[wire.Key]int64)
	s.gone = nil
	for i := from; i < h.n; i++ {
		r := h.at(i)
		if r.kind != kindRef {
			continue
		}
		if s.refs[r.key] > 0 {
			if _, ok := firstRef[r.key]; !ok {
				firstRef[r.key] = r.prevRev
			}
		}
		if r.deleted {
			if s.gone == nil {
				s.gone = make(map[wire.Key]bool)
			}
			s.gone[r.key] = true
		}
	}
	for key := range s.refs {
		if prev, ok := firstRef[key]; ok {
			if prev > 0 {
				s.held[key] = prev
			}
		} else if o := x.objs[key]; o != nil {
			s.held[key] = o.rev
		}
	}
	s.rev, s.epoch, s.unsureUntil = rev, x.epoch, x.rev
}

// builder collects the changes of one result. A key that changes more than
// once in a result is sent once, as it ends up.
type builder struct {
	out   []Change
	prev  []holding // what the node held of each change's key before it
	bytes int
}

// holding is what the node holds of a key: a revision if ok. With unsure,
// that may not be so.
type holding struct {
	rev    int64
	ok     bool
	unsure bool
}

func (b *builder) add(c Change, rev int64, ok, unsure bool) {
	b.out = append(b.out, c)
	b.prev = append(b.prev, holding{rev, ok, unsure})
	b.bytes += c.Size
}

// put returns the change that puts o, key's object: without its bytes if
// the index does not hold them.
func (o *object) put(key wire.Key) Change {
	return Change{Change: wire.Change{Op: wire.OpPut, Key: key, Revision: o.rev, Object: o.raw}, Size: o.size}
}

// finish returns the changes, each key's last one only, without those
// that leave the node as it surely was.
func (b *builder) finish() []Change {
	if len(b.out) < 2 {
		return b.out
	}
	last := make(map[wire.Key]int, len(b.out))
	for i, c := range b.out {
		last[c.Key] = i
	}
	if len(last) == len(b.out) {
		return b.out
	}
	first := make(map[wire.Key]int, len(last))
	for i := len(b.out) - 1; i >= 0; i-- {
		first[b.out[i].Key] = i
	}
	out := b.out[:0]
	for i, c := range b.out {
		if last[c.Key] != i {
			continue
		}
		before := b.prev[first[c.Key]]
		if !before.unsure && (c.Op == wire.OpPut && before.ok && before.rev == c.Revision || c.Op == wire.OpDelete && !before.ok) {
			continue
		}
		out = append(out, c)
	}
	return out
}
