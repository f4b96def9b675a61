package lbplan

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/outpost-mesh/outpost/netd/services"
)

func TestAssign(t *testing.T) {
	for _, tc := range []struct{ old, want, got []int }{
		{nil, []int{1, 2}, []int{1, 2}},
		{[]int{1, 2, 3}, []int{3, 2, 1}, []int{1, 2, 3}},             // kept where they are
		{[]int{1, 2, 3}, []int{1, 3}, []int{1, 3}},                   // 3 moves down into 2's slot
		{[]int{1, 2, 3}, []int{4, 3, 2}, []int{4, 2, 3}},             // 4 takes 1's slot
		{[]int{1, 2}, []int{2, 5, 6, 7}, []int{5, 2, 6, 7}},          // new ones fill from the lowest free slot
		{[]int{1, 2}, nil, []int{}},                                  // all gone
		{[]int{7, 8, 9}, []int{9, 8, 7, 6, 5}, []int{7, 8, 9, 6, 5}}, // grows
	} {
		if got := Assign(tc.old, tc.want); !slices.Equal(got, tc.got) {
			t.Errorf("Assign(%v, %v) = %v, want %v", tc.old, tc.want, got, tc.got)
		}
	}
}

// FuzzAssign: Assign's slots are want's backends, each once, and a
// backend of old whose slot is still there stays in it.
func FuzzAssign(f *testing.F) {
	f.Add([]byte{1, 2, 3}, []byte{3, 4})
	f.Fuzz(func(t *testing.T, o, w []byte) {
		if len(o) > 256 || len(w) > 256 {
			return
		}
		old := slices.Compact(slices.Clone(o))
		var want []byte
		for _, b := range w {
			if !slices.Contains(want, b) {
				want = append(want, b)
			}
		}
		got := Assign(old, want)
		a, b := slices.Clone(got), slices.Clone(want)
		slices.Sort(a)
		slices.Sort(b)
		if !slices.Equal(a, b) {
			t.Fatalf("Assign(%v, %v) = %v: not want's backends", old, want, got)
		}
		for i, v := range old {
			if i < len(want) && slices.Contains(want, v) && slices.Index(old, v) == i && got[i] != v {
				t.Fatalf("Assign(%v, %v) = %v: %d moved from slot %d", old, want, got, v, i)
			}
		}
	})
}

func TestIDs(t *testing.T) {
	var a IDs
	if got := []uint32{a.Get(), a.Get(), a.Get()}; !slices.Equal(got, []uint32{1, 2, 3}) {
		t.Fatalf("zero IDs handed out %v", got)
	}
	a.Free = append(a.Free, 2)
	if got := []uint32{a.Get(), a.Get()}; !slices.Equal(got, []uint32{2, 4}) {
		t.Errorf("after freeing 2: %v, want [2 4]", got)
	}
	b := IDsFrom(map[uint32]bool{2: true, 5: true, 6: true})
	if b.Last != 6 || !slices.Equal(b.Free, []uint32{1, 3, 4}) {
		t.Errorf("IDsFrom = %+v, want Last 6, Free [1 3 4]", b)
	}
	if got := []uint32{b.Get(), b.Get(), b.Get(), b.Get()}; !slices.Equal(got, []uint32{1, 3, 4, 7}) {
		t.Errorf("IDsFrom then Get: %v", got)
	}
	if c := IDsFrom(map[uint32]int{}); c.Last != 0 || len(c.Free) != 0 {
		t.Errorf("IDsFrom(none) = %+v", c)
	}
}

func TestAffinitySeconds(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want uint32
	}{
		{0, 0}, {-time.Second, 0}, {time.Nanosecond, 1}, {time.Second, 1},
		{time.Second + 1, 2}, {3 * time.Hour, 10800}, {math.MaxInt64, math.MaxUint32},
	} {
		if got := AffinitySeconds(tc.d); got != tc.want {
			t.Errorf("AffinitySeconds(%v) = %d, want %d", tc.d, got, tc.want)
		}
	}
}

// TestDesired: repeats go, the order stays, with and without an arena,
// for few backends and for many (the map path).
func TestDesired(t *testing.T) {
	of := func(b services.Backend) netip.AddrPort { return b.Addr }
	r := rand.New(rand.NewPCG(1, 2))
	var arena []netip.AddrPort
	for _, n := range []int{0, 1, 5, 16, 17, 40, 2000} {
		var bs []services.Backend
		for range n {
			a := netip.AddrFrom4([4]byte{10, 42, 0, byte(r.IntN(max(n/2, 1)))})
			bs = append(bs, services.Backend{Addr: netip.AddrPortFrom(a, 80)})
		}
		var want []netip.AddrPort
		for _, b := range bs {
			if !slices.Contains(want, b.Addr) {
				want = append(want, b.Addr)
			}
		}
		for _, ar := range []*[]netip.AddrPort{nil, &arena} {
			got := Desired(ar, bs, of)
			if !slices.Equal(got, want) {
				t.Errorf("Desired(%d backends, arena %v) = %v, want %v", n, ar != nil, got, want)
			}
		}
	}
	// Slices cut from one arena do not overlap.
	arena = nil
	x := Desired(&arena, []services.Backend{{Addr: netip.MustParseAddrPort("10.0.0.1:1")}}, of)
	y := Desired(&arena, []services.Backend{{Addr: netip.MustParseAddrPort("10.0.0.2:1")}}, of)
	if fmt.Sprint(x, y) != "[10.0.0.1:1] [10.0.0.2:1]" || cap(x) != 1 {
		t.Errorf("arena slices %v %v (cap %d)", x, y, cap(x))
	}
}
