package report

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
