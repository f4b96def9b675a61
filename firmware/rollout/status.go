package rollout

import (
	"maps"
	"slices"
	"time"
)

// Status is the planner's memory between calls, which the controller keeps
// in the Rollout's status and passes back to the next Plan. Its zero value
// is the status of a rollout not yet planned.
type Status struct {
	// Wave is the index of the current wave.
	Wave int `json:"wave"`
	// WaveStarted[i] is when wave i started; it has Wave+1 entries once
	// the rollout has started, none before.
	WaveStarted []time.Time `json:"waveStarted,omitempty"`
	// Assigned maps each node to its wave's index, or to len(Spec.Waves)
	// for a node beyond the last wave's target. A node keeps its wave.
	Assigned map[string]int `json:"assigned,omitempty"`
	// Tripped records that the failure budget tripped; only Resume
	// clears it.
	Tripped bool `json:"tripped,omitempty"`
	// Complete records that the last wave was done; it stays true.
	Complete bool `json:"complete,omitempty"`
	// Paused is Spec.Paused as of the last Plan, so that the controller
	// sees a human unpause (Paused true here, false in the Spec).
	Paused bool `json:"paused,omitempty"`
	// Failed are the nodes, by name, that counted as failed at the last
	// Plan (State Failed or Reverted).
	Failed []string `json:"failed,omitempty"`
	// Excused are the failed nodes that Resume forgave: they no longer
	// count towards the failure budget's failures.
	Excused []string `json:"excused,omitempty"`
}

// Resume returns prev with the trip cleared and the failures counted so far
// excused, so that the budget counts only new failures. The controller
// calls it when a human unpauses a tripped rollout, then calls Plan with
// the result. prev is not modified.
func Resume(prev Status) Status {
	st := prev.clone()
	st.Tripped = false
	excused := append(st.Excused, st.Failed...)
	slices.Sort(excused)
	st.Excused = slices.Compact(excused)
	return st
}

// clone returns a copy of s sharing no memory with it.
func (s Status) clone() Status {
	s.WaveStarted = slices.Clone(s.WaveStarted)
	s.Assigned = maps.Clone(s.Assigned)
	s.Failed = slices.Clone(s.Failed)
	s.Excused = slices.Clone(s.Excused)
	return s
}
