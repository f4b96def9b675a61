package store

import "testing"

func TestPageSizer(t *testing.T) {
	p := PageSizer{First: 16, Max: 500, Bytes: 4 << 20}
	for _, tc := range []struct {
		seen, bytes int
		want        int64
	}{
		{0, 0, 16},
		{16, 16 << 10, 500},          // 1 KiB values: the most keys
		{16, 8 << 20, 8},             // 512 KiB values: 8 to a page
		{16, 24 << 20, 2},            // 1.5 MiB values
		{1, 16 << 20, 1},             // larger than a page: one at a time
		{10, 0, 500},                 // empty values
		{300, 300 * 14000, 299},      // 14 kB values
		{1000, 1000 * 8 << 10, 500},  // 8 KiB values: 512 fit, at most 500
		{1000, 1000 * 16 << 10, 256}, // 16 KiB
	} {
		if got := p.Next(tc.seen, tc.bytes); got != tc.want {
			t.Errorf("Next(%d, %d) = %d, want %d", tc.seen, tc.bytes, got, tc.want)
		}
	}
}
