package report

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Rate formats a per-second rate with three significant digits, e.g. "12.3k/s".
func Rate(perSec float64) string {
	switch {
	case perSec >= 1e6:
		return sig3(perSec/1e6) + "M/s"
	case perSec >= 1e3:
		return sig3(perSec/1e3) + "k/s"
	}
	return sig3(perSec) + "/s"
}

// Duration formats d with three significant digits in the largest unit that
// keeps it at least 1: "850µs", "1.23ms", "2.50s".
func Duration(d time.Duration) string {
	f := float64(d)
	switch {
	case d >= time.Second:
		return sig3(f/1e9) + "s"
	case d >= time.Millisecond:
		return sig3(f/1e6) + "ms"
	case d >= time.Microsecond:
		return sig3(f/1e3) + "µs"
	}
	return strconv.FormatInt(int64(d), 10) + "ns"
}

// Bytes formats n in decimal units (1 MB = 1,000,000 bytes), the units
// targets such as "RSS under 150 MB" are stated in.
func Bytes(n uint64) string {
	f := float64(n)
	switch {
	case f >= 1e9:
		return sig3(f/1e9) + " GB"
	case f >= 1e6:
		return sig3(f/1e6) + " MB"
	case f >= 1e3:
		return sig3(f/1e3) + " kB"
	}
	return strconv.FormatUint(n, 10) + " B"
}

// Ratio formats a/b as "1.35x", or "-" when either is not a positive number.
func Ratio(a, b float64) string {
	if !(a > 0) || !(b > 0) || math.IsInf(a, 0) || math.IsInf(b, 0) {
		return "-"
	}
	return fmt.Sprintf("%.2fx", a/b)
}

// sig3 formats f (>= 0) with three significant digits, without an exponent.
func sig3(f float64) string {
	switch {
	case f >= 100:
		return strconv.FormatFloat(f, 'f', 0, 64)
	case f >= 10:
		return strconv.FormatFloat(f, 'f', 1, 64)
	}
	return strconv.FormatFloat(f, 'f', 2, 64)
}

// Latency summarizes a set of latency samples. Durations encode in JSON as
// integer nanoseconds.
type Latency struct {
	Count int           `json:"count"`
	Mean  time.Duration `json:"mean_ns"`
	P50   time.Duration `json:"p50_ns"`
	P90   time.Duration `json:"p90_ns"`
	P99   time.Duration `json:"p99_ns"`
	Max   time.Duration `json:"max_ns"`
}

// Summarize returns the summary of samples, sorting samples in place. An
// empty set gives the zero Latency.
func Summarize(samples []time.Duration) Latency {
	if len(samples) == 0 {
		return Latency{}
	}
	slices.Sort(samples)
	var sum float64
	for _, s := range samples {
		sum += float64(s)
	}
	return Latency{
		Count: len(samples),
		Mean:  time.Duration(sum / float64(len(samples))),
		P50:   quantile(samples, 0.50),
		P90:   quantile(samples, 0.90),
		P99:   quantile(samples, 0.99),
		Max:   samples[len(samples)-1],
	}
}

// quantile returns the nearest-rank q-quantile of sorted, which is not empty.
func quantile(sorted []time.Duration, q float64) time.Duration {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// Count formats n with thousands separators: "100,000".
func Count(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
