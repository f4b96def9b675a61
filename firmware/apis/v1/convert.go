package v1

import (
	"errors"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/firmware/rollout"
)

// DefaultWaves are the waves of a Rollout that gives none: every node at
// once.
var DefaultWaves = []string{"100%"}

// weekdays maps the day names of MaintenanceWindow.Days to weekdays.
var weekdays = map[string]time.Weekday{
	"Sun": time.Sunday, "Mon": time.Monday, "Tue": time.Tuesday, "Wed": time.Wednesday,
	"Thu": time.Thursday, "Fri": time.Friday, "Sat": time.Saturday,
}

// PlannerSpec returns the planner's Spec of s for the release's version,
// with the API's defaults for what s leaves empty, or the first thing
// wrong with s in words for a condition's message. The API server's
// schema refuses most of it already; this also checks what the schema
// cannot, such as targets that do not increase.
func (s *RolloutSpec) PlannerSpec(version string) (rollout.Spec, error) {
	steps, err := parseWaves(s.Waves)
	if err != nil {
		return rollout.Spec{}, err
	}
	windows, err := plannerWindows(s.MaintenanceWindows)
	if err != nil {
		return rollout.Spec{}, err
	}
	spec := rollout.Spec{
		Waves: steps,
		Budget: rollout.Budget{
			Count:     int(s.FailureBudget.Count),
			Percent:   int(s.FailureBudget.Percent),
			MinSample: int(s.FailureBudget.MinSample),
		},
		OnTrip:  rollout.Action(s.OnFailure),
		Windows: windows,
		Paused:  s.Paused,
		Version: version,
	}
	if s.HealthWindow != nil {
		spec.HealthWindow = s.HealthWindow.Duration
	}
	if err := spec.Validate(); err != nil {
		return rollout.Spec{}, err
	}
	return spec, nil
}

// parseWaves reads each of waves as one target; none means DefaultWaves.
func parseWaves(waves []string) ([]rollout.Step, error) {
	if len(waves) == 0 {
		waves = DefaultWaves
	}
	steps := make([]rollout.Step, 0, len(waves))
	for i, w := range waves {
		if strings.Contains(w, ",") {
			return nil, fmt.Errorf("waves: wave %d: %q holds a comma, want one target", i+1, w)
		}
		st, err := rollout.ParseWaves(w)
		if err != nil {
			return nil, fmt.Errorf("wave %d: %w", i+1, err)
		}
		steps = append(steps, st...)
	}
	return steps, nil
}

// plannerWindows converts maintenance windows, reading day names.
func plannerWindows(ws []MaintenanceWindow) ([]rollout.Window, error) {
	if len(ws) == 0 {
		return nil, nil
	}
	out := make([]rollout.Window, 0, len(ws))
	for i, w := range ws {
		pw := rollout.Window{Start: w.Start, End: w.End}
		for _, d := range w.Days {
			wd, ok := weekdays[d]
			if !ok {
				return nil, fmt.Errorf("window %d: day %q, want Mon, Tue, Wed, Thu, Fri, Sat or Sun", i+1, d)
			}
			pw.Days = append(pw.Days, wd)
		}
		out = append(out, pw)
	}
	return out, nil
}

// errNegativeWave is returned by PlannerStatus for a planner state whose
// wave index or an assigned wave is negative, which no plan writes.
var errNegativeWave = errors.New("planner state: negative wave")

// PlannerStatus returns the planner's Status kept in s, the zero Status
// (a rollout not yet planned) when there is none.
func (s *RolloutStatus) PlannerStatus() (rollout.Status, error) {
	p := s.Planner
	if p == nil {
		return rollout.Status{}, nil
	}
	if p.Wave < 0 {
		return rollout.Status{}, errNegativeWave
	}
	st := rollout.Status{
		Wave:     int(p.Wave),
		Tripped:  p.Tripped,
		Complete: p.Complete,
		Paused:   p.Paused,
		Failed:   cloneStrings(p.Failed),
		Excused:  cloneStrings(p.Excused),
	}
	for _, t := range p.WaveStarted {
		st.WaveStarted = append(st.WaveStarted, t.Time)
	}
	if p.Assigned != nil {
		st.Assigned = make(map[string]int, len(p.Assigned))
		for n, w := range p.Assigned {
			if w < 0 {
				return rollout.Status{}, fmt.Errorf("%w: node %s", errNegativeWave, n)
			}
			st.Assigned[n] = int(w)
		}
	}
	return st, nil
}

// SetPlannerStatus keeps st in s, to the second, and sets s.Wave to the
// current wave counted from 1 (0 before the first starts). The counts,
// waves, nodes and conditions are the controller's to set from the plan.
func (s *RolloutStatus) SetPlannerStatus(st rollout.Status) {
	p := &PlannerState{
		Wave:     int32(st.Wave),
		Tripped:  st.Tripped,
		Complete: st.Complete,
		Paused:   st.Paused,
		Failed:   cloneStrings(st.Failed),
		Excused:  cloneStrings(st.Excused),
	}
	for _, t := range st.WaveStarted {
		p.WaveStarted = append(p.WaveStarted, metav1.NewTime(t.Truncate(time.Second)))
	}
	if st.Assigned != nil {
		p.Assigned = make(map[string]int32, len(st.Assigned))
		for n, w := range st.Assigned {
			p.Assigned[n] = int32(w)
		}
	}
	s.Planner = p
	s.Wave = 0
	if len(st.WaveStarted) > 0 {
		s.Wave = int32(st.Wave) + 1
	}
}

// cloneStrings returns a copy of s, nil for an empty s.
func cloneStrings(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return append([]string(nil), s...)
}
