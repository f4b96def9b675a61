package ebpflb

import (
	"errors"
	"fmt"
	"slices"

	"github.com/outpost-mesh/outpost/netd/internal/lbplan"
	"github.com/outpost-mesh/outpost/netd/services"
)

// ErrTooLarge is returned, wrapped, by Sync when a Table goes beyond
// services.MaxFrontends, MaxBackends or MaxBackendsTotal; the maps are
// then left as they were.
var ErrTooLarge = errors.New("table beyond the dataplane's limits")

// ErrInvalid is returned, wrapped, by Sync when a Table holds a frontend
// the dataplane cannot route (a key that is not its map key, an address
// that is zero or 4-in-6 mapped, a backend of the other family); the maps
// are then left as they were.
var ErrInvalid = errors.New("invalid frontend")

// svcState is what the maps hold for one frontend.
type svcState struct {
	id  uint32
	aff uint32
	// slots are the frontend's backends, len(slots) the services
	// entry's Count: the first inlineSlots in the entry itself, the
	// others the backends map's entries {id, inlineSlots..}. A slot
	// found missing when the maps were read is the zero beVal, which no
	// backend equals.
	slots []beVal
	// stray are backends map entries of the frontend that are not its
	// slots, found in the maps: at or beyond Count (after a Sync that
	// failed half way), or below inlineSlots (left by an older agent).
	stray []uint32
	// dirty says the services entry must be rewritten even if nothing
	// else changed (its id was taken by another entry).
	dirty bool
}

// plan is a Sync's map operations. Inline slots change with the
// services entry that holds them, in one update; the plan's steps about
// slots are about the backends map's.
type plan = lbplan.Plan[svcKey, svcVal, slotKey, beVal, svcState]

// validate checks t against the limits and for frontends that cannot be
// routed.
func validate(t services.Table) error {
	if len(t) > services.MaxFrontends {
		return fmt.Errorf("%d frontends, at most %d: %w", len(t), services.MaxFrontends, ErrTooLarge)
	}
	total := 0
	for k, f := range t {
		switch {
		case f == nil:
			return fmt.Errorf("%s: nil frontend: %w", k, ErrInvalid)
		case f.Key != k:
			return fmt.Errorf("%s: frontend keyed %s: %w", k, f.Key, ErrInvalid)
		case !k.Addr.IsValid() || k.Addr.IsUnspecified() || k.Addr.Is4In6() || k.Addr.Zone() != "":
			return fmt.Errorf("%s: address: %w", k, ErrInvalid)
		case len(f.Backends) > services.MaxBackends:
			return fmt.Errorf("%s: %d backends, at most %d: %w", k, len(f.Backends), services.MaxBackends, ErrTooLarge)
		}
		for _, b := range f.Backends {
			if a := b.Addr.Addr().Unmap(); !a.IsValid() || a.Is4() != k.Addr.Is4() || a.Zone() != "" {
				return fmt.Errorf("%s: backend %s: %w", k, b.Addr, ErrInvalid)
			}
		}
		total += len(f.Backends)
	}
	if total > services.MaxBackendsTotal {
		return fmt.Errorf("%d backends, at most %d: %w", total, services.MaxBackendsTotal, ErrTooLarge)
	}
	return nil
}

// desired returns f's backends as slot values, without repeats, in f's
// order.
func desired(f *services.Frontend) []beVal {
	return lbplan.Desired(nil, f.Backends, beOf)
}

// holds reports whether slots are bs, in their order.
func holds(slots []beVal, bs []services.Backend) bool {
	if len(slots) != len(bs) {
		return false
	}
	for i, b := range bs {
		if beOf(b) != slots[i] {
			return false
		}
	}
	return true
}

// makePlan returns the operations that move the maps from cur to t, which
// must be valid. It does no I/O; a takes the new frontends' ids.
func makePlan(cur map[svcKey]*svcState, t services.Table, a *lbplan.IDs) *plan {
	p := &plan{Next: make(map[svcKey]*svcState, len(t)), Locked: true}
	// Most Syncs write a few entries; a first one writes them all.
	if len(cur) == 0 {
		p.Fronts.Keys = make([]svcKey, 0, len(t))
		p.Fronts.Vals = make([]svcVal, 0, len(t))
	}
	// The states of new frontends, and the slots of all, allocated
	// together.
	fresh := make([]svcState, 0, max(len(t)-len(cur), 0))
	var arena []beVal
	for k, f := range t {
		key := keyOf(k)
		aff := lbplan.AffinitySeconds(f.Affinity)
		old := cur[key]
		if old != nil && aff == old.aff && !old.dirty && len(old.stray) == 0 && holds(old.slots, f.Backends) {
			// Unchanged, found without making its slots: most
			// frontends of most Syncs.
			p.Next[key] = old
			continue
		}
		want := lbplan.Desired(&arena, f.Backends, beOf)
		n := uint32(len(want))
		if old == nil {
			id := a.Get()
			for i := inlineSlots; i < len(want); i++ {
				p.Slots.Add(slotKey{id, uint32(i)}, want[i])
			}
			p.Fronts.Add(key, svcValOf(id, aff, want))
			if len(fresh) == cap(fresh) {
				fresh = make([]svcState, 0, 16)
			}
			fresh = append(fresh, svcState{id: id, aff: aff, slots: want})
			p.Next[key] = &fresh[len(fresh)-1]
			continue
		}
		slots := lbplan.Assign(old.slots, want)
		oldN := uint32(len(old.slots))
		writes := &p.Slots
		if n < oldN {
			writes = &p.Holes
		}
		inlineChanged := false
		for i, b := range slots {
			if i < len(old.slots) && old.slots[i] == b {
				continue
			}
			if i < inlineSlots {
				inlineChanged = true
				continue
			}
			writes.Add(slotKey{old.id, uint32(i)}, b)
		}
		val := svcValOf(old.id, aff, slots)
		switch {
		case n < oldN:
			p.FrontShrink.Add(key, val)
			for i := max(n, inlineSlots); i < oldN; i++ {
				p.SlotDel = append(p.SlotDel, slotKey{old.id, i})
			}
		case n > oldN || aff != old.aff || old.dirty || inlineChanged:
			p.Fronts.Add(key, val)
		}
		for _, s := range old.stray {
			if s >= n || s < inlineSlots {
				p.SlotDel = append(p.SlotDel, slotKey{old.id, s})
			}
		}
		if aff == old.aff && !old.dirty && len(old.stray) == 0 && slices.Equal(slots, old.slots) {
			p.Next[key] = old // unchanged: states are not modified once made
			continue
		}
		p.Next[key] = &svcState{id: old.id, aff: aff, slots: slots}
	}
	for key, old := range cur {
		if _, ok := p.Next[key]; ok {
			continue
		}
		p.FrontDel = append(p.FrontDel, key)
		for i := inlineSlots; i < len(old.slots); i++ {
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
func stateFrom(svcs map[svcKey]svcVal, slots map[slotKey]beVal) (map[svcKey]*svcState, []slotKey, *lbplan.IDs) {
	state := make(map[svcKey]*svcState, len(svcs))
	byID := make(map[uint32]*svcState, len(svcs))
	keys := make([]svcKey, 0, len(svcs))
	for k := range svcs {
		keys = append(keys, k)
	}
	// A stable order, so that which of two frontends sharing an id
	// keeps it does not depend on map iteration.
	slices.SortFunc(keys, func(x, y svcKey) int {
		return slices.Compare(append(x.Addr[:], x.Port[0], x.Port[1], x.Proto), append(y.Addr[:], y.Port[0], y.Port[1], y.Proto))
	})
	var redo []*svcState
	for _, k := range keys {
		v := svcs[k]
		s := &svcState{id: v.ID, aff: v.Affinity}
		state[k] = s
		if byID[v.ID] != nil || v.ID == 0 || v.ID > lbplan.MaxID || v.Count > services.MaxBackends {
			// Start it afresh under a new id: Sync writes its slots,
			// then its entry.
			s.dirty = true
			redo = append(redo, s)
			continue
		}
		byID[v.ID] = s
		s.slots = make([]beVal, v.Count)
		for i := range min(int(v.Count), inlineSlots) {
			s.slots[i] = v.Inline[i].be()
		}
	}
	var orphans []slotKey
	for k, v := range slots {
		s := byID[k.ID]
		switch {
		case s == nil:
			orphans = append(orphans, k)
		case k.Slot >= inlineSlots && k.Slot < uint32(len(s.slots)):
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

// migrate returns the services entries that hold what the legacy services
// map old and the backends map slots hold, for an agent that finds the
// maps of an older one: each frontend keeps its id, affinity and slots,
// its first inlineSlots backends copied into the entry. A frontend whose
// inline slot is missing from slots (a Sync of the older agent cut short)
// keeps only the slots below it; the next Sync repairs it.
func migrate(old map[svcKey]legacyVal, slots map[slotKey]beVal) map[svcKey]svcVal {
	out := make(map[svcKey]svcVal, len(old))
	for k, o := range old {
		v := svcVal{ID: o.ID, Count: o.Count, Affinity: o.Affinity, Tag: o.ID}
		for i := range min(o.Count, inlineSlots) {
			b, ok := slots[slotKey{o.ID, i}]
			if !ok {
				v.Count = i
				break
			}
			v.Inline[i] = b.inline()
		}
		out[k] = v
	}
	return out
}
