package nodeipam

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"testing"
)

func TestNewSet(t *testing.T) {
	for _, tc := range []struct {
		cluster string
		mask    int
		size    int // 0: an error
	}{
		{"10.42.0.0/16", 24, 256},
		{"10.42.0.0/16", 30, 1 << 14},
		{"10.42.0.0/16", 32, 1 << 16},
		{"10.42.0.0/16", 17, 2},
		{"10.42.0.0/16", 16, 0}, // a block as large as the range
		{"10.42.0.0/16", 8, 0},
		{"10.42.0.0/16", 33, 0},
		{"10.0.0.0/8", 24, 1 << 16},
		{"10.0.0.0/8", 25, 0}, // more than 1<<16 blocks
		{"10.42.9.9/16", 24, 256},
		{"0.0.0.0/0", 16, 1 << 16},
		{"fd00:42::/48", 64, 1 << 16},
		{"fd00:42::/56", 64, 256},
		{"fd00:42::/64", 128, 0},
		{"fd00:42::/112", 128, 1 << 16},
	} {
		s, err := NewSet(netip.MustParsePrefix(tc.cluster), tc.mask)
		switch {
		case tc.size == 0 && err == nil:
			t.Errorf("NewSet(%s, %d) = %d blocks, want an error", tc.cluster, tc.mask, s.Size())
		case tc.size != 0 && err != nil:
			t.Errorf("NewSet(%s, %d) = %v, want %d blocks", tc.cluster, tc.mask, err, tc.size)
		case tc.size != 0 && (s.Size() != tc.size || s.Used() != 0):
			t.Errorf("NewSet(%s, %d): %d blocks, %d used; want %d, none used", tc.cluster, tc.mask, s.Size(), s.Used(), tc.size)
		}
	}
	if _, err := NewSet(netip.Prefix{}, 24); err == nil {
		t.Error("NewSet(invalid prefix, 24) = nil error, want one")
	}
}

// allocateAll returns every block AllocateNext gives until it fails, and
// that failure.
func allocateAll(s *Set) ([]string, error) {
	var got []string
	for {
		p, err := s.AllocateNext()
		if err != nil {
			return got, err
		}
		got = append(got, p.String())
	}
}

func TestAllocateNextWholeRange(t *testing.T) {
	for _, tc := range []struct {
		cluster     string
		mask        int
		first, last string
		n           int
	}{
		{"10.42.0.0/16", 24, "10.42.0.0/24", "10.42.255.0/24", 256},
		{"10.42.0.0/29", 30, "10.42.0.0/30", "10.42.0.4/30", 2},
		{"10.42.0.0/16", 26, "10.42.0.0/26", "10.42.255.192/26", 1024},
		{"192.168.0.0/23", 25, "192.168.0.0/25", "192.168.1.128/25", 4},
		{"10.42.0.0/16", 32, "10.42.0.0/32", "10.42.255.255/32", 1 << 16},
		{"fd00:42::/62", 64, "fd00:42::/64", "fd00:42:0:3::/64", 4},
		{"fd00:42::/60", 65, "fd00:42::/65", "fd00:42:0:f:8000::/65", 32},
	} {
		s, err := NewSet(netip.MustParsePrefix(tc.cluster), tc.mask)
		if err != nil {
			t.Fatal(err)
		}
		got, err := allocateAll(s)
		if !errors.Is(err, ErrExhausted) {
			t.Errorf("%s /%d: AllocateNext after %d blocks = %v, want ErrExhausted", tc.cluster, tc.mask, len(got), err)
		}
		if len(got) != tc.n || got[0] != tc.first || got[len(got)-1] != tc.last {
			t.Errorf("%s /%d: AllocateNext gave %d blocks, %s first and %s last; want %d, %s and %s",
				tc.cluster, tc.mask, len(got), got[0], got[len(got)-1], tc.n, tc.first, tc.last)
		}
		if dup := duplicate(got); dup != "" {
			t.Errorf("%s /%d: AllocateNext gave %s twice", tc.cluster, tc.mask, dup)
		}
		if s.Used() != s.Size() {
			t.Errorf("%s /%d: Used() = %d of %d after all were given", tc.cluster, tc.mask, s.Used(), s.Size())
		}
	}
}

func duplicate(ss []string) string {
	seen := map[string]bool{}
	for _, s := range ss {
		if seen[s] {
			return s
		}
		seen[s] = true
	}
	return ""
}

// held returns the blocks of s that have holders, as "prefix" or
// "prefix*count" for more than one.
func held(s *Set) []string {
	var out []string
	for i, n := range s.holders {
		switch {
		case n == 1:
			out = append(out, s.block(i).String())
		case n > 1:
			out = append(out, fmt.Sprintf("%s*%d", s.block(i), n))
		}
	}
	return out
}

func TestOccupy(t *testing.T) {
	all := func() []string {
		var out []string
		for i := range 256 {
			out = append(out, fmt.Sprintf("10.42.%d.0/24", i))
		}
		return out
	}()
	for _, tc := range []struct {
		name, p string
		want    []string // nil: ErrOutOfRange
	}{
		{"first block", "10.42.0.0/24", []string{"10.42.0.0/24"}},
		{"last block", "10.42.255.0/24", []string{"10.42.255.0/24"}},
		{"inside a block", "10.42.7.128/25", []string{"10.42.7.0/24"}},
		{"one address", "10.42.3.4/32", []string{"10.42.3.0/24"}},
		{"host bits", "10.42.7.9/24", []string{"10.42.7.0/24"}},
		{"two blocks", "10.42.6.0/23", []string{"10.42.6.0/24", "10.42.7.0/24"}},
		{"the last two", "10.42.254.0/23", []string{"10.42.254.0/24", "10.42.255.0/24"}},
		{"the whole range", "10.42.0.0/16", all},
		{"around the range", "10.0.0.0/8", all},
		{"everything", "0.0.0.0/0", all},
		{"after the range", "10.43.0.0/24", nil},
		{"before the range", "10.41.255.0/24", nil},
		{"a neighbour as large", "10.43.0.0/16", nil},
		{"other family", "fd00::/64", nil},
		{"IPv4-mapped", "::ffff:10.42.0.0/120", nil},
	} {
		s, err := NewSet(netip.MustParsePrefix("10.42.0.0/16"), 24)
		if err != nil {
			t.Fatal(err)
		}
		shared, err := s.Occupy(netip.MustParsePrefix(tc.p))
		if tc.want == nil {
			if !errors.Is(err, ErrOutOfRange) || s.Used() != 0 {
				t.Errorf("%s: Occupy(%s) = %v with %d used, want ErrOutOfRange and none", tc.name, tc.p, err, s.Used())
			}
			if err := s.Release(netip.MustParsePrefix(tc.p)); !errors.Is(err, ErrOutOfRange) {
				t.Errorf("%s: Release(%s) = %v, want ErrOutOfRange", tc.name, tc.p, err)
			}
			continue
		}
		if err != nil || shared {
			t.Errorf("%s: Occupy(%s) = %v, %v; want not shared, nil", tc.name, tc.p, shared, err)
		}
		if got := held(s); !slices.Equal(got, tc.want) || s.Used() != len(tc.want) {
			t.Errorf("%s: after Occupy(%s) held %v (Used %d), want %v", tc.name, tc.p, got, s.Used(), tc.want)
		}
		if shared, err := s.Occupy(netip.MustParsePrefix(tc.p)); err != nil || !shared {
			t.Errorf("%s: a second Occupy(%s) = %v, %v; want shared, nil", tc.name, tc.p, shared, err)
		}
		s.Release(netip.MustParsePrefix(tc.p))
		if got := held(s); !slices.Equal(got, tc.want) {
			t.Errorf("%s: after two Occupy and one Release of %s held %v, want %v", tc.name, tc.p, got, tc.want)
		}
		s.Release(netip.MustParsePrefix(tc.p))
		if s.Used() != 0 || len(held(s)) != 0 {
			t.Errorf("%s: released as often as occupied: held %v (Used %d), want none", tc.name, held(s), s.Used())
		}
	}
}

// TestSetScript runs steps on one Set of four blocks: allocations skip
// what is occupied, wrap around, and a block just freed is the last given.
func TestSetScript(t *testing.T) {
	s, err := NewSet(netip.MustParsePrefix("10.42.0.0/22"), 24)
	if err != nil {
		t.Fatal(err)
	}
	type step struct {
		op   string // "alloc", "occupy", "release"
		p    string // the prefix of occupy and release; the block alloc must give, "" for ErrExhausted
		want []string
	}
	for i, st := range []step{
		{"occupy", "10.42.1.0/24", []string{"10.42.1.0/24"}},
		{"alloc", "10.42.0.0/24", []string{"10.42.0.0/24", "10.42.1.0/24"}},
		{"alloc", "10.42.2.0/24", []string{"10.42.0.0/24", "10.42.1.0/24", "10.42.2.0/24"}},
		{"release", "10.42.0.0/24", []string{"10.42.1.0/24", "10.42.2.0/24"}},
		{"alloc", "10.42.3.0/24", []string{"10.42.1.0/24", "10.42.2.0/24", "10.42.3.0/24"}},
		{"alloc", "10.42.0.0/24", []string{"10.42.0.0/24", "10.42.1.0/24", "10.42.2.0/24", "10.42.3.0/24"}},
		{"alloc", "", []string{"10.42.0.0/24", "10.42.1.0/24", "10.42.2.0/24", "10.42.3.0/24"}},
		{"occupy", "10.42.2.0/24", []string{"10.42.0.0/24", "10.42.1.0/24", "10.42.2.0/24*2", "10.42.3.0/24"}},
		{"release", "10.42.2.0/24", []string{"10.42.0.0/24", "10.42.1.0/24", "10.42.2.0/24", "10.42.3.0/24"}},
		{"alloc", "", []string{"10.42.0.0/24", "10.42.1.0/24", "10.42.2.0/24", "10.42.3.0/24"}},
		{"release", "10.42.2.0/23", []string{"10.42.0.0/24", "10.42.1.0/24"}},
		{"release", "10.42.3.0/24", []string{"10.42.0.0/24", "10.42.1.0/24"}}, // already free
		{"alloc", "10.42.2.0/24", []string{"10.42.0.0/24", "10.42.1.0/24", "10.42.2.0/24"}},
		{"release", "10.42.0.0/22", nil},
		{"alloc", "10.42.3.0/24", []string{"10.42.3.0/24"}},
	} {
		switch st.op {
		case "alloc":
			p, err := s.AllocateNext()
			if st.p == "" && !errors.Is(err, ErrExhausted) || st.p != "" && (err != nil || p.String() != st.p) {
				t.Fatalf("step %d: AllocateNext() = %v, %v; want %q (empty for ErrExhausted)", i, p, err, st.p)
			}
		case "occupy":
			if _, err := s.Occupy(netip.MustParsePrefix(st.p)); err != nil {
				t.Fatalf("step %d: Occupy(%s) = %v", i, st.p, err)
			}
		case "release":
			if err := s.Release(netip.MustParsePrefix(st.p)); err != nil {
				t.Fatalf("step %d: Release(%s) = %v", i, st.p, err)
			}
		}
		if got := held(s); !slices.Equal(got, st.want) || s.Used() != len(st.want) {
			t.Fatalf("step %d (%s %s): held %v (Used %d), want %v", i, st.op, st.p, got, s.Used(), st.want)
		}
	}
}
