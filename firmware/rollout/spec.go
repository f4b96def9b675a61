package rollout

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// DefaultHealthWindow is the HealthWindow of a Spec that sets none: how long
// the hub watches a committed node before it counts as healthy.
const DefaultHealthWindow = 5 * time.Minute

// maxSpecText bounds the text ParseWaves and ParseBudget accept, since it
// comes from the API or the command line.
const maxSpecText = 1024

// maxWaves bounds the number of waves of a Spec.
const maxWaves = 100

// Action is what a rollout does when its failure budget trips.
type Action string

const (
	// Pause stops offering the release; nodes keep what they run.
	Pause Action = "Pause"
	// Revert stops offering the release and reverts the nodes that took it.
	Revert Action = "Revert"
)

// Spec is the part of a Rollout the planner reads.
type Spec struct {
	// Waves are the cumulative targets, in order; at least one.
	Waves []Step `json:"waves"`
	// HealthWindow is how long a node must stay Updated to count as
	// healthy; zero means DefaultHealthWindow.
	HealthWindow time.Duration `json:"healthWindow,omitempty"`
	// Budget is the failure budget; the zero Budget never trips.
	Budget Budget `json:"budget,omitempty"`
	// OnTrip is what happens when the budget trips; empty means Pause.
	OnTrip Action `json:"onTrip,omitempty"`
	// Windows are the maintenance windows, in each node's site-local time;
	// none means any time.
	Windows []Window `json:"windows,omitempty"`
	// Paused stops offers, reverts and wave progress.
	Paused bool `json:"paused,omitempty"`
	// Version is the release's version, compared as a string with the
	// nodes' versions.
	Version string `json:"version"`
}

// Step is one wave's cumulative target: exactly one of Count (nodes) and
// Percent (of the nodes, 1-100) is set.
type Step struct {
	Count   int `json:"count,omitempty"`
	Percent int `json:"percent,omitempty"`
}

// String returns the step as ParseWaves reads it.
func (s Step) String() string {
	if s.Percent > 0 {
		return strconv.Itoa(s.Percent) + "%"
	}
	return strconv.Itoa(s.Count)
}

// Budget is a failure budget: it trips at Count failed nodes, or when
// Percent of the sample failed, once the sample holds MinSample nodes.
// Zero Count or Percent disables that test.
type Budget struct {
	Count     int `json:"count,omitempty"`
	Percent   int `json:"percent,omitempty"`
	MinSample int `json:"minSample,omitempty"`
}

// String returns the budget as ParseBudget reads it.
func (b Budget) String() string {
	var parts []string
	if b.Count > 0 {
		parts = append(parts, strconv.Itoa(b.Count))
	}
	if b.Percent > 0 {
		parts = append(parts, strconv.Itoa(b.Percent)+"%")
	}
	if b.MinSample > 0 {
		parts = append(parts, "min="+strconv.Itoa(b.MinSample))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ",")
}

// Window is a daily maintenance window in a node's site-local time, from
// Start to End ("HH:MM", 24-hour). An End before Start crosses midnight.
// Days are the days the window opens on; none means every day.
type Window struct {
	Days  []time.Weekday `json:"days,omitempty"`
	Start string         `json:"start"`
	End   string         `json:"end"`
}

// ParseWaves reads a comma-separated list of cumulative wave targets, each a
// node count ("1") or a percentage of the nodes ("25%"), such as
// "1,5%,25%,100%". Targets of one kind must increase, and nothing may follow
// 100%; a count after a percentage (or the reverse) cannot be compared
// without the fleet's size, and the planner keeps targets non-decreasing.
func ParseWaves(s string) ([]Step, error) {
	if len(s) > maxSpecText {
		return nil, fmt.Errorf("waves: longer than %d bytes", maxSpecText)
	}
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("waves: empty, want targets such as 1,5%,25%,100%")
	}
	fields := strings.Split(s, ",")
	if len(fields) > maxWaves {
		return nil, fmt.Errorf("waves: %d waves, at most %d", len(fields), maxWaves)
	}
	steps := make([]Step, 0, len(fields))
	for i, f := range fields {
		st, err := parseStep(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("waves: wave %d: %w", i+1, err)
		}
		steps = append(steps, st)
	}
	if err := validateWaves(steps); err != nil {
		return nil, err
	}
	return steps, nil
}

// parseStep reads one wave target.
func parseStep(f string) (Step, error) {
	if p, ok := strings.CutSuffix(f, "%"); ok {
		n, err := parsePositive(p)
		if err != nil {
			return Step{}, fmt.Errorf("%q: %w", f, err)
		}
		if n > 100 {
			return Step{}, fmt.Errorf("%q: over 100%%", f)
		}
		return Step{Percent: n}, nil
	}
	n, err := parsePositive(f)
	if err != nil {
		return Step{}, fmt.Errorf("%q: %w", f, err)
	}
	return Step{Count: n}, nil
}

// parsePositive reads a decimal integer of at least 1.
func parsePositive(s string) (int, error) {
	if s == "" || strings.TrimLeft(s, "0123456789") != "" || len(s) > 9 {
		return 0, errors.New("not a count or a percentage")
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, errors.New("not a count or a percentage")
	}
	if n < 1 {
		return 0, errors.New("must be at least 1")
	}
	return n, nil
}

// validateWaves checks steps as ParseWaves documents.
func validateWaves(steps []Step) error {
	if len(steps) == 0 {
		return errors.New("waves: none, want targets such as 1,5%,25%,100%")
	}
	if len(steps) > maxWaves {
		return fmt.Errorf("waves: %d waves, at most %d", len(steps), maxWaves)
	}
	lastCount, lastPercent := 0, 0
	for i, st := range steps {
		switch {
		case (st.Count > 0) == (st.Percent > 0):
			return fmt.Errorf("waves: wave %d: set exactly one of count and percent", i+1)
		case st.Count < 0 || st.Percent < 0:
			return fmt.Errorf("waves: wave %d: negative target", i+1)
		case st.Percent > 100:
			return fmt.Errorf("waves: wave %d: %d%% is over 100%%", i+1, st.Percent)
		case lastPercent == 100:
			return fmt.Errorf("waves: wave %d: follows 100%%, which already covers every node", i+1)
		case st.Count > 0 && st.Count <= lastCount:
			return fmt.Errorf("waves: wave %d: target %d does not exceed the earlier %d", i+1, st.Count, lastCount)
		case st.Percent > 0 && st.Percent <= lastPercent:
			return fmt.Errorf("waves: wave %d: target %d%% does not exceed the earlier %d%%", i+1, st.Percent, lastPercent)
		}
		lastCount, lastPercent = max(lastCount, st.Count), max(lastPercent, st.Percent)
	}
	return nil
}

// ParseBudget reads a failure budget: comma-separated terms, each at most
// once, a count of failed nodes ("1"), a percentage of the sample ("10%")
// and a minimum sample ("min=20"), such as "1,10%" or "5%,min=20". At least
// one of the count and the percentage is required.
func ParseBudget(s string) (Budget, error) {
	if len(s) > maxSpecText {
		return Budget{}, fmt.Errorf("failure budget: longer than %d bytes", maxSpecText)
	}
	if strings.TrimSpace(s) == "" {
		return Budget{}, errors.New("failure budget: empty, want a count and/or a percentage such as 1,10%")
	}
	var b Budget
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if err := b.parseTerm(f); err != nil {
			return Budget{}, fmt.Errorf("failure budget: %w", err)
		}
	}
	if err := b.validate(); err != nil {
		return Budget{}, err
	}
	return b, nil
}

// parseTerm reads one term of a budget into b.
func (b *Budget) parseTerm(f string) error {
	switch {
	case strings.HasPrefix(f, "min="):
		if b.MinSample > 0 {
			return fmt.Errorf("%q: minimum sample given twice", f)
		}
		n, err := parsePositive(strings.TrimPrefix(f, "min="))
		if err != nil {
			return fmt.Errorf("%q: %w", f, err)
		}
		b.MinSample = n
	case strings.HasSuffix(f, "%"):
		if b.Percent > 0 {
			return fmt.Errorf("%q: percentage given twice", f)
		}
		st, err := parseStep(f)
		if err != nil {
			return err
		}
		b.Percent = st.Percent
	default:
		if b.Count > 0 {
			return fmt.Errorf("%q: count given twice", f)
		}
		n, err := parsePositive(f)
		if err != nil {
			return fmt.Errorf("%q: %w", f, err)
		}
		b.Count = n
	}
	return nil
}

// validate checks a budget's ranges; the zero Budget is valid (it never
// trips), but one with only a MinSample is not.
func (b Budget) validate() error {
	switch {
	case b.Count < 0 || b.Percent < 0 || b.MinSample < 0:
		return errors.New("failure budget: negative value")
	case b.Percent > 100:
		return fmt.Errorf("failure budget: %d%% is over 100%%", b.Percent)
	case b.Count == 0 && b.Percent == 0 && b.MinSample > 0:
		return errors.New("failure budget: a minimum sample without a count or a percentage")
	}
	return nil
}

// Validate reports the first thing wrong with s, in words for a
// condition's message. Plan refuses to act on a Spec that fails it.
func (s Spec) Validate() error {
	if err := validateWaves(s.Waves); err != nil {
		return err
	}
	if s.HealthWindow < 0 {
		return fmt.Errorf("health window: %v is negative", s.HealthWindow)
	}
	if err := s.Budget.validate(); err != nil {
		return err
	}
	if s.OnTrip != "" && s.OnTrip != Pause && s.OnTrip != Revert {
		return fmt.Errorf("on trip: %q, want %q or %q", s.OnTrip, Pause, Revert)
	}
	for i, w := range s.Windows {
		if err := w.validate(); err != nil {
			return fmt.Errorf("window %d: %w", i+1, err)
		}
	}
	if s.Version == "" {
		return errors.New("version: empty")
	}
	return nil
}

// healthWindow returns s.HealthWindow with its default.
func (s Spec) healthWindow() time.Duration {
	if s.HealthWindow == 0 {
		return DefaultHealthWindow
	}
	return s.HealthWindow
}

// onTrip returns s.OnTrip with its default.
func (s Spec) onTrip() Action {
	if s.OnTrip == "" {
		return Pause
	}
	return s.OnTrip
}
