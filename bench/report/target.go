package report

import (
	"fmt"
	"strings"
)

// Target is a goal a benchmark holds the system to, with whether a run met
// it.
type Target struct {
	Goal string `json:"goal"`
	// Status is TargetMet, TargetMissed, or TargetNA when the run cannot
	// tell (such as a quick run of a smaller workload than the goal's).
	Status string `json:"status"`
	Detail string `json:"detail,omitempty"`
	// Row names the table row the target is shown next to.
	Row string `json:"-"`
}

// Target statuses.
const (
	TargetMet    = "met"
	TargetMissed = "MISSED"
	TargetNA     = "n/a"
)

// TargetTable returns the targets as a table of goal, what was measured,
// and whether it was met, as every benchmark's report shows them.
func TargetTable(targets []Target) string {
	t := NewTable("targets", "goal", "measured", "status")
	for _, tg := range targets {
		t.AddRow(tg.Goal, tg.Detail, tg.Status)
	}
	return t.String()
}

// WriteEnd appends what every benchmark's report ends with: a line for
// each target the run did not meet, then the machine it ran on.
func WriteEnd(b *strings.Builder, targets []Target, m Machine) {
	for _, t := range targets {
		if t.Status != TargetMet {
			fmt.Fprintf(b, "target %q %s", t.Goal, t.Status)
			if t.Detail != "" {
				fmt.Fprintf(b, ": %s", t.Detail)
			}
			b.WriteString("\n")
		}
	}
	b.WriteString("\nmachine\n")
	b.WriteString(m.String())
}
