package lbplan

import (
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/outpost-mesh/outpost/netd/internal/bpfpin"
)

// Plan is a Sync's operations on a dataplane's frontends map (keys K,
// values V, each value holding a frontend's id and Count) and its
// backends map (slot keys SK, backends SV), in the order they are made.
// The order keeps, at every moment and for every frontend, its Count no
// greater than the slots it has filled (a new connection or flow never
// picks an empty slot), and the backends map no fuller than the larger
// of the old and new tables. S is the dataplane's state of a frontend.
// The dataplane's makePlan fills it; Plan itself decides nothing.
type Plan[K comparable, V any, SK comparable, SV any, S any] struct {
	// 1. Frontends that shrink: the slots below their new Count that
	// change (keys that exist already).
	Holes bpfpin.Batch[SK, SV]
	// 2. Frontends removed, and those that shrink lowered to their new
	// Count.
	FrontDel    []K
	FrontShrink bpfpin.Batch[K, V]
	// 3. Slots no frontend uses any more.
	SlotDel []SK
	// 4. Frontends that are new or grow or keep their size: every slot
	// that changes, new ones included.
	Slots bpfpin.Batch[SK, SV]
	// 5. Their frontends entries, raising Count last, and those whose
	// other fields change.
	Fronts bpfpin.Batch[K, V]

	// Locked says the frontends map's values hold a bpf_spin_lock, so
	// that their entries are rewritten in place (bpfpin.PutLocked).
	Locked bool

	// Next is the state once the plan is carried out, and Freed the
	// frontend ids it no longer uses (for IDs.Free once it is).
	Next  map[K]*S
	Freed []uint32
}

// Ops returns how many map entries p writes or deletes.
func (p *Plan[K, V, SK, SV, S]) Ops() int {
	return len(p.Holes.Keys) + len(p.FrontDel) + len(p.FrontShrink.Keys) + len(p.SlotDel) + len(p.Slots.Keys) + len(p.Fronts.Keys)
}

// Apply carries p out on the kernel's frontends and backends maps; what
// names the frontends map in errors. A plan that fails part way leaves
// the maps in between: read them again.
func (p *Plan[K, V, SK, SV, S]) Apply(fronts, backends *ebpf.Map, what string) error {
	putFronts := bpfpin.Put[K, V]
	if p.Locked {
		putFronts = bpfpin.PutLocked[K, V]
	}
	if err := bpfpin.Put(backends, p.Holes); err != nil {
		return fmt.Errorf("write backends: %w", err)
	}
	if err := bpfpin.Delete(fronts, p.FrontDel); err != nil {
		return fmt.Errorf("delete %s: %w", what, err)
	}
	if err := putFronts(fronts, p.FrontShrink); err != nil {
		return fmt.Errorf("write %s: %w", what, err)
	}
	if err := bpfpin.Delete(backends, p.SlotDel); err != nil {
		return fmt.Errorf("delete backends: %w", err)
	}
	if err := bpfpin.Put(backends, p.Slots); err != nil {
		return fmt.Errorf("write backends: %w", err)
	}
	if err := putFronts(fronts, p.Fronts); err != nil {
		return fmt.Errorf("write %s: %w", what, err)
	}
	return nil
}

// Steps returns p's operations on in-memory models of the two maps, one
// map entry each, in Apply's order: for tests that check what a program
// may see between any two.
func (p *Plan[K, V, SK, SV, S]) Steps(fronts map[K]V, backends map[SK]SV) []func() {
	var steps []func()
	for i, k := range p.Holes.Keys {
		steps = append(steps, func() { backends[k] = p.Holes.Vals[i] })
	}
	for _, k := range p.FrontDel {
		steps = append(steps, func() { delete(fronts, k) })
	}
	for i, k := range p.FrontShrink.Keys {
		steps = append(steps, func() { fronts[k] = p.FrontShrink.Vals[i] })
	}
	for _, k := range p.SlotDel {
		steps = append(steps, func() { delete(backends, k) })
	}
	for i, k := range p.Slots.Keys {
		steps = append(steps, func() { backends[k] = p.Slots.Vals[i] })
	}
	for i, k := range p.Fronts.Keys {
		steps = append(steps, func() { fronts[k] = p.Fronts.Vals[i] })
	}
	return steps
}
