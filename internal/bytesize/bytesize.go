// Package bytesize reads byte sizes as users type them in flags ("500KB",
// "1.5GiB").
package bytesize

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// byteUnits are the suffixes Parse accepts, lowercased, longest
// first within each family so that "kib" is not read as "k" + "ib".
var byteUnits = []struct {
	suffix string
	mult   float64
}{
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30},
	{"ki", 1 << 10}, {"mi", 1 << 20}, {"gi", 1 << 30},
	{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9},
	{"k", 1e3}, {"m", 1e6}, {"g", 1e9},
	{"b", 1},
}

// Parse parses a size as a user types it: plain bytes ("1024",
// "1024B"), decimal units as the benchmarks print them ("500KB", "500kB", "500k",
// "1.5MB"), or binary units ("512KiB", "1.5Mi"). Units are not case
// sensitive; fractions are rounded to the nearest byte.
func Parse(s string) (uint64, error) {
	t := strings.TrimSpace(s)
	num, mult := t, 1.0
	lower := strings.ToLower(t)
	for _, u := range byteUnits {
		if strings.HasSuffix(lower, u.suffix) {
			num, mult = strings.TrimSpace(t[:len(t)-len(u.suffix)]), u.mult
			break
		}
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || num == "" || strings.ContainsAny(num, "eE") {
		return 0, fmt.Errorf("size %q is not a number of bytes with an optional unit (B, kB, MB, GB, KiB, MiB, GiB)", s)
	}
	n := math.Round(f * mult)
	if !(n >= 0) || n >= 1<<63 {
		return 0, fmt.Errorf("size %q is out of range", s)
	}
	return uint64(n), nil
}
