package lbplan

import (
	"maps"
	"slices"
	"testing"
)

// TestPlanSteps: the steps are the plan's entries, in the documented
// order, and Ops counts them.
func TestPlanSteps(t *testing.T) {
	var p Plan[string, int, int, string, struct{}]
	p.Holes.Add(1, "hole")
	p.FrontDel = []string{"gone"}
	p.FrontShrink.Add("shrunk", 1)
	p.SlotDel = []int{9}
	p.Slots.Add(2, "new")
	p.Fronts.Add("grown", 3)
	fronts := map[string]int{"gone": 1, "shrunk": 2, "grown": 1}
	backends := map[int]string{1: "old", 9: "x"}
	var log []string
	for _, s := range p.Steps(fronts, backends) {
		s()
		log = append(log, fmtState(fronts, backends))
	}
	want := []string{
		"gone grown shrunk | 1=hole 9=x",
		"grown shrunk | 1=hole 9=x",
		"grown shrunk | 1=hole 9=x",
		"grown shrunk | 1=hole",
		"grown shrunk | 1=hole 2=new",
		"grown shrunk | 1=hole 2=new",
	}
	if !slices.Equal(log, want) {
		t.Errorf("steps:\n%q\nwant\n%q", log, want)
	}
	if fronts["grown"] != 3 || fronts["shrunk"] != 1 {
		t.Errorf("fronts after: %v", fronts)
	}
	if p.Ops() != 6 {
		t.Errorf("Ops = %d, want 6", p.Ops())
	}
}

func fmtState(fronts map[string]int, backends map[int]string) string {
	s := ""
	for _, k := range slices.Sorted(maps.Keys(fronts)) {
		s += k + " "
	}
	s += "|"
	for _, k := range slices.Sorted(maps.Keys(backends)) {
		s += " " + string(rune('0'+k)) + "=" + backends[k]
	}
	return s
}
