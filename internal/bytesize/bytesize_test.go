package bytesize

import "testing"

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
	}{
		{"1024", 1024},
		{"1024B", 1024},
		{"500KB", 500_000},
		{"500kB", 500_000},
		{"500k", 500_000},
		{" 500 kb ", 500_000},
		{"1.5MB", 1_500_000},
		{"2G", 2_000_000_000},
		{"512KiB", 512 << 10},
		{"1.5Mi", 3 << 19},
		{"1GiB", 1 << 30},
		{"0", 0},
	} {
		if got, err := Parse(tc.in); err != nil || got != tc.want {
			t.Errorf("Parse(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"", "KB", "x", "-1KB", "1e3", "NaN", "1TB", "1.5.5MB", "99999999999GB"} {
		if got, err := Parse(in); err == nil {
			t.Errorf("Parse(%q) = %d, nil; want an error", in, got)
		}
	}
}
