// Package lbplan holds the pure pieces that the Sync plans of netd's eBPF
// dataplanes (netd/ebpflb and netd/tcnat) share: frontend ids, a
// frontend's backends as map values without repeats, backends kept in
// their slots across a change, and affinity timeouts in seconds. The
// plans themselves, which differ with their maps' layouts, stay in the
// dataplanes. It does no I/O. Only packages under netd import it.
package lbplan

import (
	"math"
	"slices"
	"time"

	"github.com/outpost-mesh/outpost/netd/services"
)

// MaxID is the highest frontend id IDs hands out to a table within the
// limits: ids freed by one Sync are reused only by a later one, so at
// most MaxFrontends are in use and MaxFrontends waiting.
const MaxID = 2 * services.MaxFrontends

// IDs hands out frontend ids. An id freed by a Sync is handed out again
// only by a later one, so a program that read a removed frontend's entry
// just before it went never finds another frontend's backends under it.
// The highest id grows only when no freed id is left, so ids stay at or
// below MaxID. The zero IDs hands out 1, 2, ...
type IDs struct {
	// Last is the highest id handed out.
	Last uint32
	// Free are the ids below Last to hand out first, in order.
	Free []uint32
}

// Get returns an id not in use.
func (a *IDs) Get() uint32 {
	if len(a.Free) > 0 {
		id := a.Free[0]
		a.Free = a.Free[1:]
		return id
	}
	a.Last++
	return a.Last
}

// IDsFrom returns the allocator of a dataplane whose maps use the ids
// in used (none of them 0): the ids below the highest that are not in
// used are free.
func IDsFrom[S any](used map[uint32]S) *IDs {
	a := &IDs{}
	for id := range used {
		a.Last = max(a.Last, id)
	}
	for id := uint32(1); id < a.Last; id++ {
		if _, ok := used[id]; !ok {
			a.Free = append(a.Free, id)
		}
	}
	return a
}

// AffinitySeconds is a ClientIP affinity timeout in whole seconds,
// rounded up; 0 for none.
func AffinitySeconds(d time.Duration) uint32 {
	if d <= 0 {
		return 0
	}
	s := d / time.Second
	if d%time.Second != 0 {
		s++ // not d+time.Second-1, which overflows near the largest d
	}
	return uint32(min(s, math.MaxUint32))
}

// arenaSize is how many values Desired allocates at once.
const arenaSize = 1024

// Desired returns bs as slot values (of makes one), without repeats, in
// bs's order. With a non-nil arena, the slice is cut from *arena (which
// Desired refills when short), so that a Sync of many frontends
// allocates their slots in a few large arrays rather than one each; the
// caller must not append to it.
func Desired[V comparable](arena *[]V, bs []services.Backend, of func(services.Backend) V) []V {
	var out []V
	if arena == nil {
		out = make([]V, 0, len(bs))
	} else {
		if cap(*arena)-len(*arena) < len(bs) {
			*arena = make([]V, 0, max(arenaSize, len(bs)))
		}
		a := *arena
		out = a[len(a) : len(a) : len(a)+len(bs)]
		*arena = a[:len(a)+len(bs)] // what out does not use stays unused
	}
	var seen map[V]struct{} // for frontends of many backends
	if len(bs) > 16 {
		seen = make(map[V]struct{}, len(bs))
	}
	for _, b := range bs {
		v := of(b)
		if seen != nil {
			if _, ok := seen[v]; ok {
				continue
			}
			seen[v] = struct{}{}
		} else if slices.Contains(out, v) {
			continue
		}
		out = append(out, v)
	}
	return out
}

// Assign returns the slots of want given the slots old: a backend kept
// stays in its slot when that slot is below len(want), so that a client
// with affinity for it keeps it and its slot needs no write; the other
// slots take the new backends and those moved down, in want's order.
// want must hold no repeats. Assign returns old itself when it equals
// want.
func Assign[V comparable](old, want []V) []V {
	if slices.Equal(old, want) {
		return old
	}
	n := len(want)
	out := make([]V, n)
	filled := make([]bool, n)
	var rest []V
	for _, b := range want {
		if i := slices.Index(old, b); i >= 0 && i < n && !filled[i] {
			out[i], filled[i] = b, true
			continue
		}
		rest = append(rest, b)
	}
	for i := range out {
		if !filled[i] {
			out[i], rest = rest[0], rest[1:]
		}
	}
	return out
}
