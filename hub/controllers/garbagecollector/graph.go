package garbagecollector

import (
	"fmt"
	"slices"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/lru"
)

// objectRef names one object: its coordinates as an ownerReference gives
// them, and its namespace ("" for a cluster-scoped object). It is
// comparable.
type objectRef struct {
	APIVersion string
	Kind       string
	Namespace  string
	Name       string
	UID        types.UID
}

func (r objectRef) String() string {
	return fmt.Sprintf("[%s/%s, namespace: %s, name: %s, uid: %s]", r.APIVersion, r.Kind, r.Namespace, r.Name, r.UID)
}

// refOf is the identity an ownerReference in namespace ns names.
func refOf(o metav1.OwnerReference, ns string) objectRef {
	return objectRef{APIVersion: o.APIVersion, Kind: o.Kind, Namespace: ns, Name: o.Name, UID: o.UID}
}

// matches reports whether ownerReference o names r exactly.
func (r objectRef) matches(o metav1.OwnerReference) bool {
	return o.UID == r.UID && o.Name == r.Name && o.Kind == r.Kind && o.APIVersion == r.APIVersion
}

// node is one object in the graph: observed through a watch, or virtual,
// known only from a dependent's reference until a watch shows it or the
// API says it is absent.
type node struct {
	ref        objectRef
	owners     []metav1.OwnerReference
	dependents map[*node]struct{}
	virtual    bool
	// As last observed.
	beingDeleted       bool
	deletingDependents bool // being deleted with the foregroundDeletion finalizer
	orphaning          bool // being deleted with the orphan finalizer
}

// event is a change the watches (or the collector itself, for a virtual
// node found absent) report.
type event struct {
	deleted bool
	// virtual marks a deletion the collector inferred from the API's
	// answer, not one a watch showed.
	virtual    bool
	ref        objectRef
	owners     []metav1.OwnerReference
	deleting   bool // deletionTimestamp set
	finalizers []string
}

// invalidRef is a reference from dependent to owner that cannot hold: a
// namespaced owner in another namespace.
type invalidRef struct {
	dependent objectRef
	owner     objectRef
}

// invalid returns the invalidRef of d's reference to uid.
func invalid(d *node, uid types.UID) invalidRef {
	r := invalidRef{dependent: d.ref, owner: objectRef{UID: uid, Namespace: d.ref.Namespace}}
	for _, o := range d.owners {
		if o.UID == uid {
			r.owner = refOf(o, d.ref.Namespace)
		}
	}
	return r
}

// work is what an event asks of the collector's workers. Each list holds
// uids of nodes in the graph.
type work struct {
	attemptToDelete []types.UID
	attemptToOrphan []types.UID
	invalid         []invalidRef
}

// graph is the collector's picture of who owns whom, as upstream's
// GraphBuilder keeps it: uid -> node, each node with its owners and
// dependents. It is pure bookkeeping, no I/O; all methods are safe for
// concurrent use.
type graph struct {
	mu    sync.Mutex
	nodes map[types.UID]*node
	// absent remembers owners the API said were gone, so that their
	// other dependents need not ask again.
	absent *lru.Cache
}

func newGraph() *graph {
	return &graph{nodes: map[types.UID]*node{}, absent: lru.New(500)}
}

// isAbsent reports whether r is known to be gone.
func (g *graph) isAbsent(r objectRef) bool {
	_, ok := g.absent.Get(r)
	return ok
}

func (g *graph) markAbsent(r objectRef) { g.absent.Add(r, struct{}{}) }

// process applies ev to the graph and returns the work it calls for.
func (g *graph) process(ev event) work {
	g.mu.Lock()
	defer g.mu.Unlock()
	var w work
	n, found := g.nodes[ev.ref.UID]
	if found && !ev.deleted && n.virtual {
		// First observation of a node that was virtual: a watch saw it.
		if n.ref != ev.ref {
			// Dependents that named it otherwise may refer to something
			// else; have them checked (a no-op if their owners hold).
			_, odd := partitionDependents(n, ev.ref)
			for _, d := range odd {
				if ev.ref.Namespace != "" && d.ref.Namespace != ev.ref.Namespace {
					w.invalid = append(w.invalid, invalid(d, ev.ref.UID))
				}
				w.attemptToDelete = append(w.attemptToDelete, d.ref.UID)
			}
			n.ref = ev.ref
		}
		n.virtual = false
	}
	switch {
	case !ev.deleted && !found:
		n = &node{ref: ev.ref, owners: ev.owners, dependents: map[*node]struct{}{}}
		g.nodes[ev.ref.UID] = n
		g.addToOwners(n, ev.owners, &w)
		g.transitions(n, ev, &w)
	case !ev.deleted:
		added, removed, changed := diffOwners(n.owners, ev.owners)
		if len(added)+len(removed)+len(changed) > 0 {
			// A reference that no longer blocks may free an owner
			// waiting for its dependents.
			for _, r := range removed {
				if blocks(r) {
					g.attemptIfPresent(r.UID, &w)
				}
			}
			for _, c := range changed {
				if blocks(c[0]) && !blocks(c[1]) {
					g.attemptIfPresent(c[1].UID, &w)
				}
			}
			n.owners = ev.owners
			g.addToOwners(n, added, &w)
			g.removeFromOwners(n, removed)
		}
		g.transitions(n, ev, &w)
	case found:
		g.processDelete(n, ev, &w)
	}
	return w
}

func (g *graph) attemptIfPresent(uid types.UID, w *work) {
	if _, ok := g.nodes[uid]; ok {
		w.attemptToDelete = append(w.attemptToDelete, uid)
	}
}

// transitions records n's deletion state from ev, and starts orphaning or
// foreground deletion when the object has just begun either.
func (g *graph) transitions(n *node, ev event, w *work) {
	orphaning := ev.deleting && slices.Contains(ev.finalizers, metav1.FinalizerOrphanDependents)
	foreground := ev.deleting && slices.Contains(ev.finalizers, metav1.FinalizerDeleteDependents)
	wasOrphaning, wasForeground := n.orphaning, n.deletingDependents
	n.beingDeleted = n.beingDeleted || ev.deleting
	n.orphaning = orphaning
	n.deletingDependents = foreground
	switch {
	case orphaning && !wasOrphaning:
		w.attemptToOrphan = append(w.attemptToOrphan, n.ref.UID)
	case foreground && !wasForeground:
		for d := range n.dependents {
			w.attemptToDelete = append(w.attemptToDelete, d.ref.UID)
		}
		w.attemptToDelete = append(w.attemptToDelete, n.ref.UID)
	}
}

// addToOwners adds n to the dependents of owners, making virtual nodes
// for owners not seen yet (and asking to verify them), and asks to verify
// n itself when one of its references looks wrong.
func (g *graph) addToOwners(n *node, owners []metav1.OwnerReference, w *work) {
	suspect := false
	for _, o := range owners {
		on, ok := g.nodes[o.UID]
		if !ok {
			on = &node{ref: refOf(o, n.ref.Namespace), dependents: map[*node]struct{}{}, virtual: true}
			g.nodes[o.UID] = on
			w.attemptToDelete = append(w.attemptToDelete, o.UID)
		}
		on.dependents[n] = struct{}{}
		if !ok || suspect {
			continue
		}
		namespaced := on.ref.Namespace != ""
		switch {
		case namespaced && on.ref.Namespace != n.ref.Namespace:
			if !on.virtual {
				w.invalid = append(w.invalid, invalid(n, o.UID))
			}
			suspect = true
		case !on.ref.matches(o):
			suspect = true
		case !namespaced && on.ref.Namespace != n.ref.Namespace && on.virtual:
			// A virtual cluster-scoped owner of a namespaced object
			// (or the reverse) may be a namespaced owner named wrongly.
			suspect = true
		}
	}
	if suspect {
		w.attemptToDelete = append(w.attemptToDelete, n.ref.UID)
	}
}

func (g *graph) removeFromOwners(n *node, owners []metav1.OwnerReference) {
	for _, o := range owners {
		if on, ok := g.nodes[o.UID]; ok {
			delete(on.dependents, n)
		}
	}
}

// processDelete handles the deletion of n, observed or inferred.
func (g *graph) processDelete(n *node, ev event, w *work) {
	if ev.virtual {
		// The API said ev.ref is absent. Dependents that named it so
		// are checked; the node stays while others name it otherwise
		// (under another identity for the same uid).
		matching, odd := partitionDependents(n, ev.ref)
		if n.virtual && len(odd) > 0 || !n.virtual && n.ref != ev.ref {
			if len(matching) > 0 {
				g.markAbsent(ev.ref)
				for _, d := range matching {
					w.attemptToDelete = append(w.attemptToDelete, d.ref.UID)
				}
			}
			if n.virtual && n.ref == ev.ref {
				// Try the identity the others use next.
				for _, d := range odd {
					for _, o := range d.owners {
						if o.UID == ev.ref.UID && !ev.ref.matches(o) {
							n.ref = refOf(o, d.ref.Namespace)
							w.attemptToDelete = append(w.attemptToDelete, n.ref.UID)
							return
						}
					}
				}
			}
			return
		}
	}
	delete(g.nodes, n.ref.UID)
	g.removeFromOwners(n, n.owners)
	if len(n.dependents) > 0 {
		g.markAbsent(ev.ref)
	}
	for d := range n.dependents {
		w.attemptToDelete = append(w.attemptToDelete, d.ref.UID)
	}
	for _, o := range n.owners {
		if on, ok := g.nodes[o.UID]; ok && on.deletingDependents {
			// Its owner may have been waiting for it alone.
			w.attemptToDelete = append(w.attemptToDelete, o.UID)
		}
	}
}

// partitionDependents splits n's dependents into those whose references
// to n's uid all name ref, and the others.
func partitionDependents(n *node, ref objectRef) (matching, odd []*node) {
	for d := range n.dependents {
		match, mismatch := false, false
		if ref.Namespace != "" && ref.Namespace != d.ref.Namespace {
			mismatch = true
		} else {
			for _, o := range d.owners {
				if o.UID != ref.UID {
					continue
				}
				if ref.matches(o) {
					match = true
				} else {
					mismatch = true
				}
			}
		}
		if match && !mismatch {
			matching = append(matching, d)
		}
		if mismatch {
			odd = append(odd, d)
		}
	}
	return matching, odd
}

func blocks(o metav1.OwnerReference) bool {
	return o.BlockOwnerDeletion != nil && *o.BlockOwnerDeletion
}

// diffOwners returns the references in new and not old, in old and not
// new (by uid), and those in both that changed, as [old, new] pairs.
func diffOwners(old, new []metav1.OwnerReference) (added, removed []metav1.OwnerReference, changed [][2]metav1.OwnerReference) {
	byUID := map[types.UID]metav1.OwnerReference{}
	for _, o := range old {
		byUID[o.UID] = o
	}
	seen := map[types.UID]bool{}
	for _, o := range new {
		seen[o.UID] = true
		prev, ok := byUID[o.UID]
		switch {
		case !ok:
			added = append(added, o)
		case !refEqual(prev, o):
			changed = append(changed, [2]metav1.OwnerReference{prev, o})
		}
	}
	for _, o := range old {
		if !seen[o.UID] {
			removed = append(removed, o)
		}
	}
	return added, removed, changed
}

func refEqual(a, b metav1.OwnerReference) bool {
	return a.APIVersion == b.APIVersion && a.Kind == b.Kind && a.Name == b.Name && a.UID == b.UID &&
		boolEq(a.Controller, b.Controller) && boolEq(a.BlockOwnerDeletion, b.BlockOwnerDeletion)
}

func boolEq(a, b *bool) bool {
	return a == nil && b == nil || a != nil && b != nil && *a == *b
}

// view is a copy of what the workers need of one node.
type view struct {
	ref                objectRef
	virtual            bool
	beingDeleted       bool
	deletingDependents bool
	dependents         []Dependent
	dependentRefs      []objectRef
}

// view returns a copy of the node of uid, or false if the graph has none.
func (g *graph) view(uid types.UID) (view, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	n, ok := g.nodes[uid]
	if !ok {
		return view{}, false
	}
	v := view{ref: n.ref, virtual: n.virtual, beingDeleted: n.beingDeleted, deletingDependents: n.deletingDependents}
	for d := range n.dependents {
		dep := Dependent{UID: d.ref.UID, Waiting: d.deletingDependents}
		for _, o := range d.owners {
			if o.UID == uid && blocks(o) {
				dep.Blocks = true
			}
		}
		v.dependents = append(v.dependents, dep)
		v.dependentRefs = append(v.dependentRefs, d.ref)
	}
	return v, true
}
