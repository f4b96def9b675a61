package tcnat

import (
	"errors"
	"fmt"
	"slices"

	"github.com/outpost-mesh/outpost/netd/internal/lbplan"
	"github.com/outpost-mesh/outpost/netd/services"
)

// ErrTooLarge is returned, wrapped, by Sync when the frontends a Table
// has for this dataplane go beyond services.MaxFrontends, MaxBackends or
// MaxBackendsTotal; the maps are then left as they were.
var ErrTooLarge = errors.New("table beyond the dataplane's limits")

// ErrInvalid is returned, wrapped, by Sync when a Table holds a frontend
// the dataplane cannot route (a key that is not its map key, an address
// that is zero or 4-in-6 mapped, a backend of the other family); the maps
// are then left as they were.
var ErrInvalid = errors.New("invalid frontend")

// routed reports whether the dataplane routes f: NodePort and ExternalIP
// frontends of TCP and UDP. ClusterIPs are the socket hooks' (ebpflb);
// SCTP passes the programs untouched (nftables routes it, or nothing).
func routed(f *services.Frontend) bool {
	return (f.Kind == services.NodePort || f.Kind == services.ExternalIP) &&
		(f.Key.Proto == services.TCP || f.Key.Proto == services.UDP)
}

// feState is what the maps hold for one frontend.
type feState struct {
	id    uint32
	aff   uint32
	flags uint32
	// slots are the backends map's entries {id, 0..len(slots)-1}, and
	// len(slots) the frontends entry's Count. A slot found missing when
	// the maps were read is the zero beVal, which no backend equals.
	slots []beVal
	// stray are slots at or beyond Count found in the maps (only after
	// a Sync that failed half way).
	stray []uint32
	// dirty says the frontends entry must be rewritten even if nothing
	// else changed (its id was taken by another entry).
	dirty bool
}

// plan is a Sync's map operations, in the order netd/ebpflb's plan
// keeps, for the same reasons.
type plan = lbplan.Plan[feKey, feVal, slotKey, beVal, feState]

// validate checks the frontends of t this dataplane routes against the
// limits and for what cannot be routed.
func validate(t services.Table) error {
	n, total := 0, 0
	for k, f := range t {
		if f == nil {
			return fmt.Errorf("%s: nil frontend: %w", k, ErrInvalid)
		}
		if !routed(f) {
			continue
		}
		n++
		switch {
		case f.Key != k:
			return fmt.Errorf("%s: frontend keyed %s: %w", k, f.Key, ErrInvalid)
		case !k.Addr.IsValid() || k.Addr.IsUnspecified() || k.Addr.Is4In6() || k.Addr.Zone() != "":
			return fmt.Errorf("%s: address: %w", k, ErrInvalid)
		case len(f.ExternalBackends) > services.MaxBackends:
			return fmt.Errorf("%s: %d external backends, at most %d: %w", k, len(f.ExternalBackends), services.MaxBackends, ErrTooLarge)
		}
		for _, b := range f.ExternalBackends {
			if a := b.Addr.Addr(); !a.IsValid() || a.Is4In6() || a.Is4() != k.Addr.Is4() || a.Zone() != "" {
				return fmt.Errorf("%s: backend %s: %w", k, b.Addr, ErrInvalid)
			}
		}
		total += len(f.ExternalBackends)
	}
	if n > services.MaxFrontends {
		return fmt.Errorf("%d frontends, at most %d: %w", n, services.MaxFrontends, ErrTooLarge)
	}
	if total > services.MaxBackendsTotal {
		return fmt.Errorf("%d backends, at most %d: %w", total, services.MaxBackendsTotal, ErrTooLarge)
	}
	return nil
}

func flagsOf(f *services.Frontend) uint32 {
	if f.ExternalLocal {
		return flagLocal
	}
	return 0
}

// desired returns f's external backends as slot values, without
// repeats, in f's order.
func desired(f *services.Frontend) []beVal {
	return lbplan.Desired(nil, f.ExternalBackends, beOf)
}

// makePlan returns the operations that move the maps from cur to t, which
// must be valid. It does no I/O; a takes the new frontends' ids.
func makePlan(cur map[feKey]*feState, t services.Table, a *lbplan.IDs) *plan {
	p := &plan{Next: make(map[feKey]*feState, len(t)), Locked: true}
	for k, f := range t {
		if !routed(f) {
			continue
		}
		key := keyOf(k)
		want := desired(f)
		aff, flags := lbplan.AffinitySeconds(f.Affinity), flagsOf(f)
		n := uint32(len(want))
		old := cur[key]
		if old == nil {
			id := a.Get()
			for i, b := range want {
				p.Slots.Add(slotKey{id, uint32(i)}, b)
			}
			p.Fronts.Add(key, feVal{ID: id, Count: n, Affinity: aff, Flags: flags})
			p.Next[key] = &feState{id: id, aff: aff, flags: flags, slots: want}
			continue
		}
		slots := lbplan.Assign(old.slots, want)
		oldN := uint32(len(old.slots))
		writes := &p.Slots
		if n < oldN {
			writes = &p.Holes
		}
		for i, b := range slots {
			if i >= len(old.slots) || old.slots[i] != b {
				writes.Add(slotKey{old.id, uint32(i)}, b)
			}
		}
		val := feVal{ID: old.id, Count: n, Affinity: aff, Flags: flags}
		switch {
		case n < oldN:
			p.FrontShrink.Add(key, val)
			for i := n; i < oldN; i++ {
				p.SlotDel = append(p.SlotDel, slotKey{old.id, i})
			}
		case n > oldN || aff != old.aff || flags != old.flags || old.dirty:
			p.Fronts.Add(key, val)
		}
		for _, s := range old.stray {
			if s >= n {
				p.SlotDel = append(p.SlotDel, slotKey{old.id, s})
			}
		}
		p.Next[key] = &feState{id: old.id, aff: aff, flags: flags, slots: slots}
	}
	for key, old := range cur {
		if _, ok := p.Next[key]; ok {
			continue
		}
		p.FrontDel = append(p.FrontDel, key)
		for i := range old.slots {
			p.SlotDel = append(p.SlotDel, slotKey{old.id, uint32(i)})
		}
		for _, s := range old.stray {
			p.SlotDel = append(p.SlotDel, slotKey{old.id, s})
		}
		p.Freed = append(p.Freed, old.id)
	}
	return p
}

// stateFrom rebuilds the state from the maps' entries, as read when a
// dataplane adopts pinned maps: the frontends, the slots no frontend owns
// (to delete), and the ids allocator. Entries are trusted only as far as
// their sizes: a Count beyond services.MaxBackends or an id claimed twice
// makes the frontend be rewritten rather than believed.
func stateFrom(fes map[feKey]feVal, slots map[slotKey]beVal) (map[feKey]*feState, []slotKey, *lbplan.IDs) {
	state := make(map[feKey]*feState, len(fes))
	byID := make(map[uint32]*feState, len(fes))
	keys := make([]feKey, 0, len(fes))
	for k := range fes {
		keys = append(keys, k)
	}
	// A stable order, so that which of two frontends sharing an id
	// keeps it does not depend on map iteration.
	slices.SortFunc(keys, func(x, y feKey) int {
		return slices.Compare(append(x.Addr[:], x.Port[0], x.Port[1], x.Proto), append(y.Addr[:], y.Port[0], y.Port[1], y.Proto))
	})
	var redo []*feState
	for _, k := range keys {
		v := fes[k]
		s := &feState{id: v.ID, aff: v.Affinity, flags: v.Flags}
		state[k] = s
		if byID[v.ID] != nil || v.ID == 0 || v.ID > lbplan.MaxID || v.Count > services.MaxBackends {
			s.dirty = true
			redo = append(redo, s)
			continue
		}
		byID[v.ID] = s
		s.slots = make([]beVal, v.Count)
	}
	var orphans []slotKey
	for k, v := range slots {
		s := byID[k.ID]
		switch {
		case s == nil:
			orphans = append(orphans, k)
		case k.Slot < uint32(len(s.slots)):
			s.slots[k.Slot] = v
		default:
			s.stray = append(s.stray, k.Slot)
		}
	}
	a := lbplan.IDsFrom(byID)
	for _, s := range redo {
		s.id = a.Get()
	}
	return state, orphans, a
}
