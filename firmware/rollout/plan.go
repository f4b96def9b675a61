package rollout

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// Condition types of a Result, as the Rollout's status shows them.
const (
	ConditionProgressing    = "Progressing"
	ConditionPaused         = "Paused"
	ConditionBudgetExceeded = "BudgetExceeded"
	ConditionComplete       = "Complete"
)

// Result is what Plan decides. Its slices are sorted by node name and
// owned by the caller.
type Result struct {
	// Status is the next status, to store and pass to the next Plan.
	Status Status
	// Offer are the nodes to offer the release to now.
	Offer []string
	// Revert are the nodes to revert (Updated) or whose offer to withdraw
	// (Offered to Trial), when the budget tripped with OnTrip Revert.
	Revert []string
	// Waves summarises each wave, in order.
	Waves []WaveSummary
	// Conditions are the four condition types, always, in a fixed order.
	Conditions []Condition
	// Counts are the totals `kubectl get rollouts` shows.
	Counts Counts
	// NextCheck is when the plan could change with no event (a health
	// window ending, an offline node's grace ending, a maintenance window
	// opening); the zero time when only an event can change it.
	NextCheck time.Time
}

// WaveSummary counts the nodes of one wave. Nodes = Updated + Failed +
// InProgress + Pending + Offline.
type WaveSummary struct {
	// Target is the wave's cumulative target: the nodes of this wave and
	// the earlier ones.
	Target int `json:"target"`
	// Nodes is the number of nodes assigned to this wave.
	Nodes int `json:"nodes"`
	// Started is when the wave started; zero if it has not.
	Started time.Time `json:"started,omitempty"`
	// Updated run the version; Healthy of them are past the health window.
	Updated int `json:"updated"`
	Healthy int `json:"healthy"`
	// Failed failed the version.
	Failed int `json:"failed"`
	// InProgress are online and between offer and commit.
	InProgress int `json:"inProgress"`
	// Pending are online and not yet offered.
	Pending int `json:"pending"`
	// Offline are offline, neither updated nor failed.
	Offline int `json:"offline"`
}

// Condition is one condition of the Rollout's status.
type Condition struct {
	Type    string `json:"type"`
	Status  bool   `json:"status"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// Counts are the rollout's totals over every node.
type Counts struct {
	Nodes   int `json:"nodes"`
	Updated int `json:"updated"`
	Failed  int `json:"failed"`
	// Pending are the nodes of a wave neither updated nor failed; nodes
	// beyond the last wave's target are not pending.
	Pending int `json:"pending"`
}

// planner holds one Plan call's inputs and working state.
type planner struct {
	spec    Spec
	now     time.Time
	hw      time.Duration
	nodes   []Node // by name, unique
	st      Status
	targets []int
	res     Result
}

// Plan returns what to do now for the rollout of spec over nodes, given the
// Status the previous call returned (the zero Status the first time). It
// follows the rules of the package doc; it does not modify its arguments.
// An invalid spec (see Spec.Validate) offers nothing and keeps the status
// but for Status.Paused: the Progressing condition says why.
func Plan(spec Spec, nodes []Node, prev Status, now time.Time) Result {
	p := &planner{spec: spec, now: now, hw: spec.healthWindow(), nodes: uniqueNodes(nodes), st: prev.clone()}
	p.st.Paused = spec.Paused
	if err := spec.Validate(); err != nil {
		p.res.Status = p.st
		p.res.Conditions = invalidConditions(err)
		return p.res
	}
	p.normalize()
	p.targets = targets(spec.Waves, len(p.nodes))
	p.assign()
	if !spec.Paused {
		p.start()
		p.evaluateBudget()
		p.advance()
		p.act()
	}
	p.summarise()
	p.res.Conditions = p.conditions()
	p.res.Status = p.st
	return p.res
}

// uniqueNodes returns nodes sorted by name, keeping the first of each name.
func uniqueNodes(nodes []Node) []Node {
	out := slices.Clone(nodes)
	slices.SortStableFunc(out, func(a, b Node) int { return cmp.Compare(a.Name, b.Name) })
	return slices.CompactFunc(out, func(a, b Node) bool { return a.Name == b.Name })
}

// normalize fits a status written for another spec (waves edited) to this
// one: the wave index within the waves, one start time per started wave,
// assignments only for present nodes and within range.
func (p *planner) normalize() {
	last := len(p.spec.Waves) - 1
	if p.st.Wave > last {
		p.st.Wave = last
	}
	if p.st.Wave < 0 {
		p.st.Wave = 0
	}
	if len(p.st.WaveStarted) > p.st.Wave+1 {
		p.st.WaveStarted = p.st.WaveStarted[:p.st.Wave+1]
	}
	for len(p.st.WaveStarted) > 0 && len(p.st.WaveStarted) < p.st.Wave+1 {
		p.st.WaveStarted = append(p.st.WaveStarted, p.now)
	}
	slices.Sort(p.st.Excused) // Resume sorts it; a hand-edited status may not be
	present := make(map[string]bool, len(p.nodes))
	for _, n := range p.nodes {
		present[n.Name] = true
	}
	for name, w := range p.st.Assigned {
		if !present[name] || w < 0 || w > len(p.spec.Waves) {
			delete(p.st.Assigned, name)
		}
	}
}

// targets returns the cumulative target of each step over total nodes:
// percentages rounded up, capped at total, never below the step before.
func targets(steps []Step, total int) []int {
	out := make([]int, len(steps))
	prev := 0
	for i, st := range steps {
		t := st.Count
		if st.Percent > 0 {
			t = (st.Percent*total + 99) / 100
		}
		t = max(min(t, total), prev)
		out[i], prev = t, t
	}
	return out
}

// assign gives every node not yet assigned a wave: in spread order, the
// earliest wave from the current one whose target is not reached, or
// len(waves) (no wave) when none is left.
func (p *planner) assign() {
	if p.st.Assigned == nil {
		p.st.Assigned = make(map[string]int, len(p.nodes))
	}
	count := make([]int, len(p.spec.Waves)+1)
	var fresh []Node
	for _, n := range p.nodes {
		if w, ok := p.st.Assigned[n.Name]; ok {
			count[w]++
		} else {
			fresh = append(fresh, n)
		}
	}
	for _, n := range spreadOrder(fresh) {
		w := p.freeWave(count)
		p.st.Assigned[n.Name] = w
		count[w]++
	}
}

// freeWave returns the earliest wave from the current one whose cumulative
// count is under its target, or len(targets).
func (p *planner) freeWave(count []int) int {
	cum := 0
	for w := range p.targets {
		cum += count[w]
		if w >= p.st.Wave && cum < p.targets[w] {
			return w
		}
	}
	return len(p.targets)
}

// spreadOrder returns nodes round-robin across their sites (sites by name,
// nodes by name within a site), so that consecutive nodes are on different
// sites while any site has nodes left.
func spreadOrder(nodes []Node) []Node {
	bySite := map[string][]Node{}
	var sites []string
	for _, n := range nodes { // nodes are sorted by name
		if _, ok := bySite[n.Site]; !ok {
			sites = append(sites, n.Site)
		}
		bySite[n.Site] = append(bySite[n.Site], n)
	}
	slices.Sort(sites)
	out := make([]Node, 0, len(nodes))
	for i := 0; len(out) < len(nodes); i++ {
		for _, s := range sites {
			if i < len(bySite[s]) {
				out = append(out, bySite[s][i])
			}
		}
	}
	return out
}

// start starts the first wave on the first unpaused plan.
func (p *planner) start() {
	if len(p.st.WaveStarted) == 0 {
		p.st.Wave = 0
		p.st.WaveStarted = []time.Time{p.now}
	}
}

// evaluateBudget records the failed nodes and trips the budget as the
// package doc says.
func (p *planner) evaluateBudget() {
	var failed []string
	healthy := 0
	for _, n := range p.nodes {
		if n.State == Failed || n.State == Reverted {
			failed = append(failed, n.Name)
		} else if p.healthy(n) {
			healthy++
		}
	}
	p.st.Failed = failed
	if p.st.Tripped {
		return
	}
	counted := 0
	for _, name := range failed {
		if _, excused := slices.BinarySearch(p.st.Excused, name); !excused {
			counted++
		}
	}
	b, sample := p.spec.Budget, healthy+len(failed)
	if sample >= b.MinSample && (b.Count > 0 && counted >= b.Count || b.Percent > 0 && counted*100 >= b.Percent*sample) {
		p.st.Tripped = true
	}
}

// healthy reports whether n runs the version and, if it committed it in
// this rollout, has done so for the health window.
func (p *planner) healthy(n Node) bool {
	if classify(n, p.spec.Version) != classUpdated {
		return false
	}
	return n.State != Updated || !p.now.Before(n.Since.Add(p.hw))
}

// heldUntil returns until when offline node n holds its wave: the zero time
// if it went offline before the wave started, else the health window from
// the later of the wave's start and its going offline. A node of a wave not
// started holds nothing.
func (p *planner) heldUntil(n Node) time.Time {
	w := p.st.Assigned[n.Name]
	if w >= len(p.st.WaveStarted) {
		return time.Time{}
	}
	started := p.st.WaveStarted[w]
	if !n.OfflineSince.IsZero() && !n.OfflineSince.After(started) {
		return time.Time{}
	}
	from := started
	if n.OfflineSince.After(from) {
		from = n.OfflineSince
	}
	return from.Add(p.hw)
}

// settled reports whether n no longer holds its wave.
func (p *planner) settled(n Node) bool {
	switch classify(n, p.spec.Version) {
	case classFailed:
		return true
	case classUpdated:
		return p.healthy(n)
	case classOffline:
		return !p.now.Before(p.heldUntil(n))
	}
	return false
}

// waveDone reports whether every node of wave w and the earlier waves is
// settled.
func (p *planner) waveDone(w int) bool {
	for _, n := range p.nodes {
		if p.st.Assigned[n.Name] <= w && !p.settled(n) {
			return false
		}
	}
	return true
}

// advance moves to the next wave while the current one is done, and marks
// the rollout complete after the last. With no nodes it waits: a selector
// that matches nothing yet (or a controller's cache not yet filled) must
// not finish every wave, which would offer the release to all the nodes
// that appear later at once.
func (p *planner) advance() {
	if len(p.nodes) == 0 {
		return
	}
	for !p.st.Complete && !p.st.Tripped && p.waveDone(p.st.Wave) {
		if p.st.Wave == len(p.spec.Waves)-1 {
			p.st.Complete = true
			return
		}
		p.st.Wave++
		p.st.WaveStarted = append(p.st.WaveStarted, p.now)
	}
}

// act fills the offers, the reverts and NextCheck.
func (p *planner) act() {
	if p.st.Tripped {
		if p.spec.onTrip() == Revert {
			for _, n := range p.nodes {
				if n.State == Updated || n.State.inFlight() {
					p.res.Revert = append(p.res.Revert, n.Name)
				}
			}
		}
		return
	}
	for _, n := range p.nodes {
		w := p.st.Assigned[n.Name]
		if w > p.st.Wave || w >= len(p.spec.Waves) {
			continue
		}
		switch classify(n, p.spec.Version) {
		case classPending:
			if inWindow(p.spec.Windows, n.Location, p.now) {
				p.res.Offer = append(p.res.Offer, n.Name)
			} else {
				p.check(nextWindowOpen(p.spec.Windows, n.Location, p.now))
			}
		case classUpdated:
			if n.State == Updated {
				p.check(n.Since.Add(p.hw))
			}
		case classOffline:
			p.check(p.heldUntil(n))
		}
	}
}

// check brings NextCheck forward to t if t is after now.
func (p *planner) check(t time.Time) {
	if t.After(p.now) {
		p.res.NextCheck = earliest(p.res.NextCheck, t)
	}
}

// summarise fills the wave summaries and the counts.
func (p *planner) summarise() {
	p.res.Waves = make([]WaveSummary, len(p.spec.Waves))
	for i := range p.res.Waves {
		p.res.Waves[i].Target = p.targets[i]
		if i < len(p.st.WaveStarted) {
			p.res.Waves[i].Started = p.st.WaveStarted[i]
		}
	}
	p.res.Counts.Nodes = len(p.nodes)
	for _, n := range p.nodes {
		c := classify(n, p.spec.Version)
		switch c {
		case classUpdated:
			p.res.Counts.Updated++
		case classFailed:
			p.res.Counts.Failed++
		}
		w := p.st.Assigned[n.Name]
		if w >= len(p.res.Waves) {
			continue
		}
		if c != classUpdated && c != classFailed {
			p.res.Counts.Pending++
		}
		p.res.Waves[w].add(c, p.healthy(n))
	}
}

// add counts one node of class c in s.
func (s *WaveSummary) add(c class, healthy bool) {
	s.Nodes++
	switch c {
	case classUpdated:
		s.Updated++
		if healthy {
			s.Healthy++
		}
	case classFailed:
		s.Failed++
	case classInProgress:
		s.InProgress++
	case classPending:
		s.Pending++
	case classOffline:
		s.Offline++
	}
}

// conditions returns the four conditions of a valid spec's plan.
func (p *planner) conditions() []Condition {
	st, n := p.st, len(p.spec.Waves)
	prog := Condition{Type: ConditionProgressing, Status: true, Reason: "WaveProgressing",
		Message: fmt.Sprintf("wave %d of %d: %d of %d nodes updated", st.Wave+1, n, p.res.Counts.Updated, p.res.Counts.Nodes)}
	paused := Condition{Type: ConditionPaused, Reason: "NotPaused"}
	switch {
	case st.Tripped:
		prog.Status, prog.Reason = false, "BudgetExceeded"
		paused = Condition{Type: ConditionPaused, Status: true, Reason: "BudgetExceeded",
			Message: fmt.Sprintf("the failure budget tripped; action %s", p.spec.onTrip())}
	case p.spec.Paused:
		prog.Status, prog.Reason = false, "Paused"
		paused = Condition{Type: ConditionPaused, Status: true, Reason: "PausedBySpec", Message: "spec.paused is set"}
	case st.Complete:
		prog.Status, prog.Reason = false, "Complete"
	case len(p.nodes) == 0:
		prog.Status, prog.Reason, prog.Message = false, "NoNodes", "no node matches the selector"
	}
	budget := Condition{Type: ConditionBudgetExceeded, Status: st.Tripped, Reason: "WithinBudget", Message: p.budgetMessage()}
	if st.Tripped {
		budget.Reason = "FailureBudgetTripped"
	}
	done := Condition{Type: ConditionComplete, Status: st.Complete, Reason: "WavesRemaining"}
	if st.Complete {
		done.Reason = "AllWavesDone"
		done.Message = fmt.Sprintf("%d updated, %d failed of %d nodes", p.res.Counts.Updated, p.res.Counts.Failed, p.res.Counts.Nodes)
	}
	return []Condition{prog, paused, budget, done}
}

// budgetMessage describes the failures against the budget.
func (p *planner) budgetMessage() string {
	return fmt.Sprintf("%d failed (%d excused); budget %s", len(p.st.Failed), len(p.st.Excused), p.spec.Budget)
}

// invalidConditions returns the conditions of a plan refused for err.
func invalidConditions(err error) []Condition {
	return []Condition{
		{Type: ConditionProgressing, Status: false, Reason: "InvalidSpec", Message: err.Error()},
		{Type: ConditionPaused, Status: false, Reason: "InvalidSpec"},
		{Type: ConditionBudgetExceeded, Status: false, Reason: "InvalidSpec"},
		{Type: ConditionComplete, Status: false, Reason: "InvalidSpec"},
	}
}
