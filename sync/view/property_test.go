package view

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/outpost-mesh/outpost/sync/wire"
)

// gen makes random writes over a few nodes, pods and referenced objects,
// so that pods move, references come and go, objects are created before
// and after the pods that reference them, and Nodes join, leave and move
// between sites, are deleted and created again.
type gen struct {
	rng *rand.Rand
	w   *world
}

var (
	genNodes   = []string{"n1", "n2", "n3", "n4"}
	genSites   = []string{"", "east", "west"}
	genPods    = []string{"p1", "p2", "p3", "p4", "p5", "p6"}
	genSecrets = []string{"s1", "s2", "s3", "s4"}
	genCMs     = []string{"c1", "c2", "c3"}
	genSAs     = []string{"default", "build"}
)

func (g *gen) pick(l []string) string { return l[g.rng.IntN(len(l))] }

// some returns none or one of l, mostly.
func (g *gen) some(l []string) []string {
	switch g.rng.IntN(4) {
	case 0:
		return []string{g.pick(l)}
	case 1:
		return []string{g.pick(l), g.pick(l)}
	}
	return nil
}

func (g *gen) change() change {
	ns := "default"
	if g.rng.IntN(8) == 0 {
		ns = "other"
	}
	k := func(res, name string) wire.Key { return wire.Key{Resource: res, Namespace: ns, Name: name} }
	del := g.rng.IntN(4) == 0
	switch g.rng.IntN(13) {
	case 0, 1, 2, 3, 4:
		key := k(wire.ResourcePods, g.pick(genPods))
		if g.rng.IntN(5) == 0 {
			return change{key: key, deleted: true}
		}
		p := &podSpec{
			node: g.pick(append([]string{""}, genNodes...)), secrets: g.some(genSecrets),
			configMaps: g.some(genCMs), envSecrets: g.some(genSecrets), fromConfigMaps: g.some(genCMs),
			projSecrets: g.some(genSecrets), pull: g.some(genSecrets),
		}
		if g.rng.IntN(3) == 0 {
			p.sa = "build"
		}
		p.garbage = g.rng.IntN(25) == 0
		return change{key: key, spec: p}
	case 5, 6:
		return change{key: k(wire.ResourceSecrets, g.pick(genSecrets)), deleted: del}
	case 7:
		return change{key: k(wire.ResourceConfigMaps, g.pick(genCMs)), deleted: del}
	case 8:
		return change{key: k(wire.ResourceServiceAccounts, g.pick(genSAs)), deleted: del}
	case 9:
		return change{key: k(wire.ResourceServices, g.pick([]string{"a", "b"})), deleted: del}
	case 10:
		return change{key: k(wire.ResourceEndpointSlices, g.pick([]string{"a-1", "b-1"})), deleted: del}
	case 11:
		if g.rng.IntN(3) == 0 {
			return change{key: k(wire.ResourceEvents, "e")}
		}
	}
	node := &nodeSpec{site: g.pick(genSites), garbage: g.rng.IntN(25) == 0}
	return change{key: wire.Key{Resource: wire.ResourceNodes, Name: g.pick(genNodes)}, node: node, deleted: del}
}

// step writes one revision: one change, sometimes a few.
func (g *gen) step() {
	n := 1
	if g.rng.IntN(5) == 0 {
		n = 2 + g.rng.IntN(3)
	}
	var changes []change
	seen := map[wire.Key]bool{}
	for range n {
		c := g.change()
		if !seen[c.key] {
			seen[c.key] = true
			changes = append(changes, c)
		}
	}
	g.w.commit(changes...)
}

// checkCut checks what e holds after a result that brought it to rev: the
// objects of its view at rev and nothing else, those unchanged since at
// their revision (one that changed again may be at any version: a resume
// from rev sends it again, and so do later results). It does not apply to
// a part of a result (revision 0), nor to a node that was interrupted in a
// step and has not caught up since.
func checkCut(t *testing.T, w *world, e *edge, rev int64, what string) {
	t.Helper()
	if rev == w.rev {
		e.dirty = false
	}
	if rev == 0 || e.dirty {
		return
	}
	then := w.viewAt(rev, e.node)
	for k, r := range e.holds {
		if _, ok := then[k]; !ok {
			t.Fatalf("%s: node %s at %d holds %s@%d, not in its view then", what, e.node, rev, k, r)
		}
	}
	for k, tr := range then {
		if o, ok := w.objs[k]; ok && o.rev == tr && e.holds[k] != tr {
			t.Fatalf("%s: node %s at %d holds %s@%d, want @%d", what, e.node, rev, k, e.holds[k], tr)
		}
	}
}

// drain calls Next until the node is up to date, or returns
// ErrNeedInventory.
func drain(t *testing.T, w *world, e *edge) error {
	t.Helper()
	for {
		prev := e.rev
		changes, rev, err := e.s.Next()
		if errors.Is(err, ErrNeedInventory) {
			return err
		} else if err != nil {
			t.Fatalf("Next() = %v", err)
		}
		if len(changes) == 0 && rev == prev {
			return nil
		}
		e.apply(changes, rev)
		checkCut(t, w, e, rev, "Next")
	}
}

// TestResumeByRevision resumes nodes from random revisions of a random
// history: applying the results to the view at that revision, rebuilt from
// scratch, must give the view now. In one result, the changes are the
// difference of the two views, and besides only the state now of objects
// that left the view and came back, or came and left, in between (a
// resumed node may hold part of a step it was sent); in several, every
// result leaves the node with its view at the revision it claims.
func TestResumeByRevision(t *testing.T) {
	extra, needed := 0, 0
	for seed := range uint64(150) {
		rng := rand.New(rand.NewPCG(seed, 1))
		cfg := DefaultConfig()
		small := seed%2 == 1
		if small {
			cfg.MaxBatchChanges = 1 + rng.IntN(3)
		}
		w := newWorld(t, cfg)
		g := &gen{rng: rng, w: w}
		for range 30 + rng.IntN(40) {
			g.step()
		}
		for range 10 {
			node := g.pick(genNodes)
			lastRev := rng.Int64N(w.rev + 1)
			what := fmt.Sprintf("seed %d: Resume(%s, %d) at %d", seed, node, lastRev, w.rev)
			then, now := w.viewAt(lastRev, node), w.viewAt(w.rev, node)
			e := w.newEdge(node)
			e.holds, e.rev = w.viewAt(lastRev, node), lastRev
			s, changes, rev, err := w.x.Resume(node, lastRev)
			if err != nil {
				t.Fatalf("%s = %v", what, err)
			}
			e.s = s
			if !small {
				if rev != w.rev {
					t.Fatalf("%s revision = %d, want %d", what, rev, w.rev)
				}
				want := diffSet(then, now)
				needed += len(want)
				for _, c := range changeSet(changes) {
					if i, ok := slices.BinarySearch(want, c); ok {
						want = slices.Delete(want, i, i+1)
						continue
					}
					extra++
					if !inBetween(w, node, c) {
						t.Fatalf("%s = %v, want %v and changes of objects that came or went in between: not %s", what, changeSet(changes), diffSet(then, now), c)
					}
				}
				if len(want) > 0 {
					t.Fatalf("%s = %v, misses %v", what, changeSet(changes), want)
				}
			}
			e.apply(changes, rev)
			checkCut(t, w, e, rev, what)
			if err := drain(t, w, e); err != nil {
				t.Fatalf("%s: Next() = %v", what, err)
			}
			if d := diffViews(e.holds, now); d != "" {
				t.Fatalf("%s, applied to the view then, differs from the view now:%s", what, d)
			}
			s.Close()
		}
	}
	t.Logf("%d changes beyond the %d of the differences of views", extra, needed)
}

// inBetween reports whether c, a change of a resume from lastRev that the
// difference of views does not call for, is a put of an object in the
// view now, as it is, or a delete of a key that is not in the view now (a
// no-op for a node that does not hold it). Resume sends those for objects
// that joined or left the view since lastRev, if only within a revision.
func inBetween(w *world, node string, c string) bool {
	op, rest, _ := strings.Cut(c, " ")
	ks, revs, _ := strings.Cut(rest, "@")
	k := key(ks)
	now := w.viewAt(w.rev, node)
	r, in := now[k]
	if op == "del" {
		return !in
	}
	return in && revs == strconv.FormatInt(r, 10)
}

// changeSet and diffSet describe changes as sorted strings, to compare a
// result with a difference of views (delete revisions aside).
func changeSet(changes []Change) []string {
	var out []string
	for _, c := range changes {
		if c.Op == wire.OpPut {
			out = append(out, fmt.Sprintf("put %s@%d", c.Key, c.Revision))
		} else {
			out = append(out, fmt.Sprintf("del %s", c.Key))
		}
	}
	slices.Sort(out)
	return out
}

func diffSet(then, now map[wire.Key]int64) []string {
	var out []string
	for k, r := range now {
		if tr, ok := then[k]; !ok || tr != r {
			out = append(out, fmt.Sprintf("put %s@%d", k, r))
		}
	}
	for k := range then {
		if _, ok := now[k]; !ok {
			out = append(out, fmt.Sprintf("del %s", k))
		}
	}
	slices.Sort(out)
	return out
}

// TestResumeFromInventory resumes from inventories that hold part of the
// view, stale revisions, and objects the node must drop: the result is
// exactly what differs.
func TestResumeFromInventory(t *testing.T) {
	for seed := range uint64(100) {
		rng := rand.New(rand.NewPCG(seed, 2))
		w := newWorld(t, DefaultConfig())
		g := &gen{rng: rng, w: w}
		for range 40 {
			g.step()
		}
		node := g.pick(genNodes)
		now := w.viewAt(w.rev, node)
		inv := map[wire.Key]int64{}
		for k, r := range now {
			switch rng.IntN(3) {
			case 0: // missing
			case 1:
				inv[k] = r
			case 2:
				inv[k] = r - 1 // stale
			}
		}
		for k, o := range w.objs { // others' objects, and deleted ones
			if _, ok := now[k]; !ok && rng.IntN(2) == 0 {
				inv[k] = o.rev
			}
		}
		inv[wire.Key{Resource: wire.ResourceSecrets, Namespace: "default", Name: "long-gone"}] = 1
		e := w.newEdge(node)
		e.holds = inv
		want := diffSet(inv, now)
		s, changes, rev := w.x.ResumeFromInventory(node, e.inventory())
		if got := changeSet(changes); !slices.Equal(got, want) || rev != w.rev {
			t.Fatalf("seed %d: ResumeFromInventory() = %v, %d, want %v, %d", seed, got, rev, want, w.rev)
		}
		e.apply(changes, rev)
		if d := diffViews(e.holds, now); d != "" {
			t.Fatalf("seed %d: after ResumeFromInventory, node %s:%s", seed, node, d)
		}
		s.Close()
	}
}

// TestFleet plays nodes that read at their own pace, disconnect (between
// results, between the parts of one, in the middle of one) and resume,
// against a small history and small results, with resets of the index:
// every result leaves a node that was not interrupted with its view at the
// revision it claims, and all converge.
func TestFleet(t *testing.T) {
	var parts, interrupted, inventories, resets, lost int // the paths taken, over all seeds
	var loads, founds, drops int64                        // of the puts without their objects
	moves := map[string]int{}                             // of Nodes between sites
	var nodeless int                                      // sessions opened before the node's Node exists
	for seed := range uint64(100) {
		rng := rand.New(rand.NewPCG(seed, 3))
		cfg := Config{
			HistoryLimit:    1 + rng.IntN(16),
			MaxBatchBytes:   []int{300, 3000, 1 << 20}[rng.IntN(3)],
			MaxBatchChanges: 1 + rng.IntN(4),
		}
		w := newWorld(t, cfg)
		w.resetRaw = seed%2 == 0 // or as the hub does
		// References on more nodes than this replay for every session.
		w.x.refConcern = rng.IntN(3)
		g := &gen{rng: rng, w: w}
		edges := map[string]*edge{}
		for _, n := range genNodes {
			edges[n] = w.newEdge(n)
		}
		connect := func(e *edge) {
			if _, ok := w.objs[nodeKey(e.node)]; !ok {
				nodeless++
			}
			what := fmt.Sprintf("seed %d: Resume(%s, %d)", seed, e.node, e.rev)
			s, changes, rev, err := w.x.Resume(e.node, e.rev)
			if errors.Is(err, ErrNeedInventory) {
				inventories++
				what = fmt.Sprintf("seed %d: ResumeFromInventory(%s)", seed, e.node)
				s, changes, rev = w.x.ResumeFromInventory(e.node, e.inventory())
			} else if err != nil {
				t.Fatalf("%s = %v", what, err)
			}
			e.s = s
			e.apply(changes, rev)
			checkCut(t, w, e, rev, what)
		}
		disconnect := func(e *edge) {
			e.s.Close()
			e.s = nil
			e.dirty = e.dirty || e.midStep
		}
		for range 250 {
			e := edges[g.pick(genNodes)]
			switch rng.IntN(14) {
			case 0, 1, 2, 3, 4, 5:
				g.step()
			case 6, 7, 8, 9:
				if e.s == nil {
					connect(e)
					continue
				}
				changes, rev, err := e.s.Next()
				if errors.Is(err, ErrNeedInventory) {
					lost++
					disconnect(e)
					continue
				} else if err != nil {
					t.Fatalf("seed %d: Next() = %v", seed, err)
				}
				if rev == 0 {
					parts++
				}
				if len(changes) > 1 && rng.IntN(5) == 0 {
					// The connection breaks in the middle of the batch.
					e.applyPrefix(changes, rng.IntN(len(changes)))
					e.dirty = true
					interrupted++
					disconnect(e)
					continue
				}
				e.apply(changes, rev)
				checkCut(t, w, e, rev, fmt.Sprintf("seed %d: Next()", seed))
			case 10:
				if e.s != nil {
					disconnect(e)
				}
			case 11:
				if e.s != nil && drain(t, w, e) != nil {
					lost++
					disconnect(e)
				}
			case 12:
				w.reset()
				resets++
			case 13:
				if rng.IntN(4) == 0 {
					if e.s != nil {
						e.s.Close()
					}
					*e = *w.newEdge(e.node) // a node that lost its disk
				}
			}
		}
		open := 0
		for _, n := range genNodes {
			e := edges[n]
			for {
				if e.s == nil {
					connect(e)
				}
				prev := e.rev
				changes, rev, err := e.s.Next()
				for ; err == nil && (len(changes) > 0 || rev != prev); changes, rev, err = e.s.Next() {
					e.apply(changes, rev)
					checkCut(t, w, e, rev, fmt.Sprintf("seed %d: Next()", seed))
					prev = e.rev
				}
				if err == nil {
					break
				}
				if !errors.Is(err, ErrNeedInventory) {
					t.Fatalf("seed %d: Next() = %v", seed, err)
				}
				disconnect(e)
			}
			open++
			if d := diffViews(e.holds, inventoryMap(w.x.View(n))); d != "" {
				t.Fatalf("seed %d: node %s differs from View():%s", seed, n, d)
			}
			if d := diffViews(e.holds, w.viewAt(w.rev, n)); d != "" {
				t.Fatalf("seed %d: node %s differs from its view:%s", seed, n, d)
			}
		}
		if got := w.x.Stats().Sessions; got != open {
			t.Errorf("seed %d: Stats().Sessions = %d, want %d", seed, got, open)
		}
		loads, founds, drops = loads+w.loads.Load(), founds+w.founds.Load(), drops+w.drops.Load()
		for m, n := range w.moves {
			moves[m] += n
		}
	}
	for _, m := range []string{"create in a site", "re-create in a site", "join a site", "leave a site", "move between sites", "delete from a site"} {
		if moves[m] == 0 {
			t.Errorf("no Node did %s: want each path taken", m)
		}
	}
	if nodeless == 0 {
		t.Errorf("no session opened before its node's Node existed: want each path taken")
	}
	t.Logf("Nodes' moves %v; sessions opened before their Node %d", moves, nodeless)
	if parts == 0 || interrupted == 0 || inventories == 0 || resets == 0 || lost == 0 || loads == 0 || founds == 0 || drops == 0 {
		t.Errorf("parts %d, interrupted batches %d, resumes from inventory %d, resets %d, sessions lost %d, objects loaded %d, found %d, dropped %d: want each path taken",
			parts, interrupted, inventories, resets, lost, loads, founds, drops)
	}
	t.Logf("parts %d, interrupted batches %d, resumes from inventory %d, resets %d, sessions lost %d, objects loaded %d, found %d, dropped %d",
		parts, interrupted, inventories, resets, lost, loads, founds, drops)
}

// TestResumeAfterInterruptedStep: a node at its view at some revision
// applies part of what its session sends (a prefix of a batch, or the
// parts of a result but the last), loses the connection and resumes from
// the same revision later: it ends with its view, stale objects gone.
func TestResumeAfterInterruptedStep(t *testing.T) {
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 4))
		cfg := DefaultConfig()
		cfg.MaxBatchChanges = 1 + rng.IntN(3)
		w := newWorld(t, cfg)
		g := &gen{rng: rng, w: w}
		for range 10 + rng.IntN(30) {
			g.step()
		}
		node := g.pick(genNodes)
		e := w.newEdge(node)
		e.holds, e.rev = w.viewAt(w.rev, node), w.rev
		s, _, _, err := w.x.Resume(node, w.rev)
		if err != nil {
			t.Fatal(err)
		}
		for range 1 + rng.IntN(30) {
			g.step()
		}
		// Parts with revision 0, then a prefix of the next result.
		for {
			changes, rev, err := s.Next()
			if err != nil {
				t.Fatal(err)
			}
			if rev == 0 && rng.IntN(3) > 0 {
				e.apply(changes, rev)
				continue
			}
			e.applyPrefix(changes, rng.IntN(len(changes)+1))
			e.dirty = true
			break
		}
		s.Close()
		for range rng.IntN(30) {
			g.step()
		}
		what := fmt.Sprintf("seed %d: Resume(%s, %d) at %d", seed, node, e.rev, w.rev)
		if e.s, _, _, err = w.x.Resume(node, e.rev); err != nil {
			t.Fatalf("%s = %v", what, err)
		}
		e.s.Close()
		// Again, with the result applied this time.
		s, changes, rev, err := w.x.Resume(node, e.rev)
		if err != nil {
			t.Fatalf("%s = %v", what, err)
		}
		e.s = s
		e.apply(changes, rev)
		if err := drain(t, w, e); err != nil {
			t.Fatalf("%s: Next() = %v", what, err)
		}
		if d := diffViews(e.holds, w.viewAt(w.rev, node)); d != "" {
			t.Fatalf("%s, after an interrupted step, differs from the view:%s", what, d)
		}
		s.Close()
	}
}

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0)) }
