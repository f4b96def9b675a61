package report

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// LoadAvg is the machine's load averages over 1, 5 and 15 minutes, from
// /proc/loadavg, at a phase of the run: the machine may be shared.
type LoadAvg struct {
	Phase string     `json:"phase"`
	Load  [3]float64 `json:"load"`
}

// parseLoadAvg parses the first three fields of /proc/loadavg.
func parseLoadAvg(b []byte) ([3]float64, error) {
	var l [3]float64
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return l, fmt.Errorf("parse /proc/loadavg: %d fields", len(f))
	}
	for i := range l {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			return l, fmt.Errorf("parse /proc/loadavg: %w", err)
		}
		l[i] = v
	}
	return l, nil
}

// ReadLoadAvg reads /proc/loadavg for phase; it is zero where unreadable.
func ReadLoadAvg(phase string) LoadAvg {
	b, _ := os.ReadFile("/proc/loadavg")
	l, _ := parseLoadAvg(b)
	return LoadAvg{Phase: phase, Load: l}
}

// WriteLoad appends the load averages of a run's phases, under a heading.
func WriteLoad(b *strings.Builder, load []LoadAvg) {
	b.WriteString("\nload average (1, 5, 15 min)\n")
	for _, l := range load {
		fmt.Fprintf(b, "  %-14s %.2f %.2f %.2f\n", l.Phase, l.Load[0], l.Load[1], l.Load[2])
	}
}
