package rollout

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"testing"
	"time"
)

// t0 is the fake clock's start; a Monday.
var t0 = time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)

// fleet drives Plan by hand: it holds the nodes, the status Plan returned
// and a fake now that tests step forward.
type fleet struct {
	t     *testing.T
	spec  Spec
	nodes map[string]*Node
	st    Status
	now   time.Time
	res   Result
}

// newFleet returns a fleet of online, Idle nodes on version 1.0.0, named
// after their site ("a1", "a2", ... on site "a"), count per site.
func newFleet(t *testing.T, spec Spec, sites map[string]int) *fleet {
	f := &fleet{t: t, spec: spec, nodes: map[string]*Node{}, now: t0}
	for site, n := range sites {
		for i := 1; i <= n; i++ {
			f.add(fmt.Sprintf("%s%d", site, i), site)
		}
	}
	return f
}

// add adds an online Idle node.
func (f *fleet) add(name, site string) *Node {
	n := &Node{Name: name, Site: site, Online: true, Version: "1.0.0", State: Idle, Since: f.now}
	f.nodes[name] = n
	return n
}

// plan calls Plan with the fleet's state and keeps its status.
func (f *fleet) plan() Result {
	f.t.Helper()
	var nodes []Node
	for _, name := range slices.Sorted(maps.Keys(f.nodes)) {
		nodes = append(nodes, *f.nodes[name])
	}
	f.res = Plan(f.spec, nodes, f.st, f.now)
	f.st = f.res.Status
	return f.res
}

// step moves the fake clock forward.
func (f *fleet) step(d time.Duration) { f.now = f.now.Add(d) }

// set puts the named nodes in state s as of now; Updated also sets their
// version.
func (f *fleet) set(s NodeState, names ...string) {
	for _, name := range names {
		n := f.nodes[name]
		n.State, n.Since = s, f.now
		if s == Updated {
			n.Version = f.spec.Version
		}
	}
}

// offline takes the named nodes offline as of now.
func (f *fleet) offline(names ...string) {
	for _, name := range names {
		f.nodes[name].Online, f.nodes[name].OfflineSince = false, f.now
	}
}

// wantOffer checks the last plan's offers.
func (f *fleet) wantOffer(want ...string) {
	f.t.Helper()
	if !slices.Equal(f.res.Offer, want) {
		f.t.Errorf("at %v: Plan().Offer = %v, want %v", f.now.Sub(t0), f.res.Offer, want)
	}
}

// wantWave checks the last plan's current wave (0-based) and completion.
func (f *fleet) wantWave(wave int, complete bool) {
	f.t.Helper()
	if f.st.Wave != wave || f.st.Complete != complete {
		f.t.Errorf("at %v: Plan() wave %d complete %v, want wave %d complete %v", f.now.Sub(t0), f.st.Wave, f.st.Complete, wave, complete)
	}
}

// wantNextCheck checks the last plan's NextCheck, as an offset from t0
// (negative for the zero time).
func (f *fleet) wantNextCheck(after time.Duration) {
	f.t.Helper()
	want := time.Time{}
	if after >= 0 {
		want = t0.Add(after)
	}
	if !f.res.NextCheck.Equal(want) {
		f.t.Errorf("at %v: Plan().NextCheck = %v, want %v", f.now.Sub(t0), f.res.NextCheck, want)
	}
}

// condition returns the last plan's condition of type typ.
func (f *fleet) condition(typ string) Condition {
	for _, c := range f.res.Conditions {
		if c.Type == typ {
			return c
		}
	}
	f.t.Fatalf("no condition %s in %v", typ, f.res.Conditions)
	return Condition{}
}

// spec3 is waves 1, 50%, 100% of version 2.0.0 with a 5-minute window.
func spec3() Spec {
	return Spec{Waves: []Step{{Count: 1}, {Percent: 50}, {Percent: 100}}, Version: "2.0.0", HealthWindow: 5 * time.Minute}
}

// tenNodes are 4 nodes on site a, 3 on b, 3 on c.
var tenNodes = map[string]int{"a": 4, "b": 3, "c": 3}

// wave0, wave1 and wave2 are the waves of spec3 over tenNodes, round-robin
// across sites: a1 b1 c1 a2 b2 c2 a3 b3 c3 a4.
var (
	wave0 = []string{"a1"}
	wave1 = []string{"a2", "b1", "b2", "c1"}
	wave2 = []string{"a3", "a4", "b3", "c2", "c3"}
)

func TestTargets(t *testing.T) {
	tests := []struct {
		steps []Step
		total int
		want  []int
	}{
		{[]Step{{Count: 1}, {Percent: 50}, {Percent: 100}}, 10, []int{1, 5, 10}},
		{[]Step{{Count: 1}, {Percent: 5}, {Percent: 25}, {Percent: 100}}, 1000, []int{1, 50, 250, 1000}},
		{[]Step{{Percent: 1}, {Percent: 10}}, 7, []int{1, 1}},   // rounded up
		{[]Step{{Count: 5}, {Percent: 10}}, 20, []int{5, 5}},    // never decreasing
		{[]Step{{Count: 50}, {Percent: 100}}, 3, []int{3, 3}},   // capped
		{[]Step{{Count: 1}, {Percent: 100}}, 0, []int{0, 0}},    // no nodes
		{[]Step{{Percent: 33}, {Percent: 66}}, 10, []int{4, 7}}, // last under 100%
	}
	for _, tt := range tests {
		if got := targets(tt.steps, tt.total); !slices.Equal(got, tt.want) {
			t.Errorf("targets(%v, %d) = %v, want %v", tt.steps, tt.total, got, tt.want)
		}
	}
}

// assignedTo returns the nodes assigned to wave w, sorted.
func assignedTo(st Status, w int) []string {
	var out []string
	for name, a := range st.Assigned {
		if a == w {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

func TestAssignmentSpreadsSitesAndIsStable(t *testing.T) {
	f := newFleet(t, spec3(), tenNodes)
	f.plan()
	for w, want := range [][]string{wave0, wave1, wave2} {
		if got := assignedTo(f.st, w); !slices.Equal(got, want) {
			t.Errorf("wave %d = %v, want %v", w, got, want)
		}
	}
	f.wantOffer("a1")
	first := maps.Clone(f.st.Assigned)

	f.step(time.Minute)
	f.plan()
	if !maps.Equal(f.st.Assigned, first) {
		t.Errorf("second Plan() moved nodes: %v, want %v", f.st.Assigned, first)
	}

	// A node added during wave 0 joins the first wave with room (wave 1:
	// targets are 1, 6, 11 over 11 nodes); nobody else moves.
	f.add("b4", "b")
	f.plan()
	if got := f.st.Assigned["b4"]; got != 1 {
		t.Errorf("added node b4 in wave %d, want 1", got)
	}
	others := maps.Clone(f.st.Assigned)
	delete(others, "b4")
	if !maps.Equal(others, first) {
		t.Errorf("adding a node moved others: %v, want %v", f.st.Assigned, first)
	}

	// A removed node vanishes from the status and the counts.
	delete(f.nodes, "c3")
	f.plan()
	if _, ok := f.st.Assigned["c3"]; ok || f.res.Counts.Nodes != 10 || f.res.Waves[2].Nodes != 4 {
		t.Errorf("after removing c3: assigned %v, counts %+v, wave 2 %+v", f.st.Assigned, f.res.Counts, f.res.Waves[2])
	}
}

func TestAddedNodeJoinsCurrentWaveOrLater(t *testing.T) {
	f := newFleet(t, spec3(), tenNodes)
	f.plan()
	f.set(Updated, wave0...)
	f.step(5 * time.Minute)
	f.plan()
	f.wantWave(1, false)
	// Over 12 nodes wave 1's cumulative target is 6, with 5 in waves 0
	// and 1: d1 joins wave 1, d2 wave 2, and neither the finished wave 0.
	f.add("d1", "d")
	f.add("d2", "d")
	f.plan()
	if f.st.Assigned["d1"] != 1 || f.st.Assigned["d2"] != 2 {
		t.Errorf("added d1, d2 in waves %d, %d, want 1, 2", f.st.Assigned["d1"], f.st.Assigned["d2"])
	}
	f.wantOffer("a2", "b1", "b2", "c1", "d1")
}

func TestHealthWindowGatesWaves(t *testing.T) {
	f := newFleet(t, spec3(), tenNodes)
	f.plan()
	f.wantWave(0, false)
	f.wantOffer("a1")
	f.wantNextCheck(-1)
	if c := f.condition(ConditionProgressing); !c.Status || c.Reason != "WaveProgressing" {
		t.Errorf("Progressing = %+v, want true WaveProgressing", c)
	}

	f.set(Offered, "a1")
	f.plan()
	f.wantOffer()

	f.step(time.Minute)
	f.set(Updated, "a1")
	f.plan()
	f.wantWave(0, false)
	f.wantNextCheck(6 * time.Minute)
	if w := f.res.Waves[0]; w.Updated != 1 || w.Healthy != 0 {
		t.Errorf("wave 0 summary = %+v, want 1 updated, 0 healthy", w)
	}

	f.step(5*time.Minute - time.Second)
	f.plan()
	f.wantWave(0, false)
	f.wantOffer()

	f.step(time.Second) // t0+6m: a1 healthy
	f.plan()
	f.wantWave(1, false)
	f.wantOffer(wave1...)
	if got := f.st.WaveStarted; len(got) != 2 || !got[1].Equal(t0.Add(6*time.Minute)) {
		t.Errorf("WaveStarted = %v, want wave 1 at t0+6m", got)
	}

	f.step(time.Minute)
	f.set(Updated, wave1[:3]...)
	f.step(time.Minute)
	f.set(Trial, wave1[3])
	f.plan()
	f.wantNextCheck(12 * time.Minute)
	if w := f.res.Waves[1]; w.Updated != 3 || w.InProgress != 1 || w.Nodes != 4 || w.Target != 5 {
		t.Errorf("wave 1 summary = %+v", w)
	}

	f.step(5 * time.Minute) // t0+13m: three healthy, one still on trial
	f.plan()
	f.wantWave(1, false)
	f.set(Updated, wave1[3])
	f.step(5 * time.Minute) // t0+18m
	f.plan()
	f.wantWave(2, false)
	f.wantOffer(wave2...)

	f.set(Updated, wave2...)
	f.step(5 * time.Minute)
	f.plan()
	f.wantWave(2, true)
	f.wantOffer()
	f.wantNextCheck(-1)
	if c := f.condition(ConditionComplete); !c.Status {
		t.Errorf("Complete = %+v, want true", c)
	}
	if c := f.condition(ConditionProgressing); c.Status || c.Reason != "Complete" {
		t.Errorf("Progressing = %+v, want false Complete", c)
	}
	if f.res.Counts != (Counts{Nodes: 10, Updated: 10}) {
		t.Errorf("Counts = %+v, want 10 nodes all updated", f.res.Counts)
	}
}

func TestNodeAlreadyOnVersion(t *testing.T) {
	f := newFleet(t, spec3(), tenNodes)
	f.nodes["a1"].Version = "2.0.0" // runs it already, State Idle
	f.plan()
	// a1 is healthy at once, so wave 0 is done and wave 1 starts now.
	f.wantWave(1, false)
	f.wantOffer(wave1...)
}

func TestOfflineNode(t *testing.T) {
	f := newFleet(t, spec3(), tenNodes)
	f.plan()
	f.set(Updated, "a1")
	f.step(time.Minute)
	f.offline("b2") // before wave 1 starts
	f.step(4 * time.Minute)
	f.plan() // t0+5m: wave 1 starts
	f.wantWave(1, false)
	f.wantOffer("a2", "b1", "c1")
	if w := f.res.Waves[1]; w.Offline != 1 || w.Pending != 3 {
		t.Errorf("wave 1 summary = %+v, want 1 offline, 3 pending", w)
	}

	// c1 drops out mid-download: it holds the wave for a health window
	// from going offline, then not.
	f.set(Updated, "a2", "b1")
	f.step(2 * time.Minute)
	f.set(Downloading, "c1")
	f.offline("c1") // t0+7m
	f.plan()
	f.wantNextCheck(10 * time.Minute) // a2, b1 healthy at t0+10m; c1 released at t0+12m
	f.step(3 * time.Minute)
	f.plan()
	f.wantWave(1, false)
	f.wantNextCheck(12 * time.Minute)
	f.step(2 * time.Minute)
	f.plan() // t0+12m
	f.wantWave(2, false)
	f.wantOffer(wave2...)

	f.set(Updated, wave2...)
	f.step(5 * time.Minute)
	f.plan()
	f.wantWave(2, true)
	if f.res.Counts.Pending != 2 {
		t.Errorf("Counts = %+v, want b2 and c1 pending", f.res.Counts)
	}

	// Back after completion: offered, as long as the rollout exists.
	f.nodes["b2"].Online = true
	f.nodes["c1"].Online = true
	f.set(Idle, "c1") // its agent dropped the interrupted download
	f.step(time.Hour)
	f.plan()
	f.wantOffer("b2", "c1")
	f.wantWave(2, true)
}

func TestOfflineWithUnknownSinceHoldsForHealthWindow(t *testing.T) {
	f := newFleet(t, spec3(), tenNodes)
	f.nodes["a1"].Online = false // OfflineSince unknown
	f.plan()
	f.wantOffer()
	f.wantNextCheck(5 * time.Minute)
	f.step(5 * time.Minute)
	f.plan()
	f.wantWave(1, false)
}

func TestNeverOffersFailedVersion(t *testing.T) {
	f := newFleet(t, spec3(), tenNodes)
	f.nodes["a1"].FailedVersions = []string{"1.5.0", "2.0.0"}
	f.plan()
	// a1 is settled as failed (not counted by the budget, which counts
	// this rollout's Failed and Reverted), so wave 1 starts at once.
	f.wantWave(1, false)
	f.wantOffer(wave1...)
	if f.res.Waves[0].Failed != 1 || len(f.st.Failed) != 0 {
		t.Errorf("wave 0 = %+v, status failed %v; want 1 failed in the summary, none for the budget", f.res.Waves[0], f.st.Failed)
	}
	f.set(Reverted, "b1")
	f.nodes["b1"].Version = "1.0.0"
	f.plan()
	if slices.Contains(f.res.Offer, "a1") || slices.Contains(f.res.Offer, "b1") {
		t.Errorf("Offer = %v, offers a failed version", f.res.Offer)
	}
}

func TestBudgetMinSample(t *testing.T) {
	spec := spec3()
	spec.Budget = Budget{Count: 2, MinSample: 4}
	f := newFleet(t, spec, tenNodes)
	f.plan()
	f.set(Failed, "a1") // failed settles wave 0
	f.plan()
	f.wantWave(1, false)
	f.set(Failed, "b1")
	f.set(Updated, "a2")
	f.plan() // 2 failed, sample 2 (a2 not healthy yet): below the minimum
	if f.st.Tripped {
		t.Fatalf("tripped with a sample of 2 under a minimum of 4")
	}
	f.wantOffer("b2", "c1")
	f.set(Updated, "b2")
	f.step(5 * time.Minute)
	f.plan() // sample 4: a1, b1 failed, a2, b2 healthy
	if !f.st.Tripped {
		t.Fatalf("not tripped with 2 failed of a sample of 4, budget %v", spec.Budget)
	}
	f.wantOffer()
	f.wantNextCheck(-1)
	if c := f.condition(ConditionBudgetExceeded); !c.Status || c.Reason != "FailureBudgetTripped" {
		t.Errorf("BudgetExceeded = %+v", c)
	}
	if !slices.Equal(f.st.Failed, []string{"a1", "b1"}) {
		t.Errorf("Status.Failed = %v, want [a1 b1]", f.st.Failed)
	}
}

func TestBudgetPercent(t *testing.T) {
	tests := []struct {
		budget          Budget
		failed, healthy int
		want            bool
	}{
		{Budget{Percent: 10}, 1, 9, true},   // 10% of 10
		{Budget{Percent: 10}, 1, 10, false}, // 9% of 11
		{Budget{Percent: 10, MinSample: 12}, 2, 9, false},
		{Budget{Count: 3, Percent: 50}, 3, 20, true},
		{Budget{}, 5, 0, false},
	}
	for _, tt := range tests {
		spec := spec3()
		spec.Waves = []Step{{Percent: 100}}
		spec.Budget = tt.budget
		f := newFleet(t, spec, map[string]int{"f": tt.failed, "h": tt.healthy})
		for i := 1; i <= tt.failed; i++ {
			f.set(Failed, fmt.Sprintf("f%d", i))
		}
		for i := 1; i <= tt.healthy; i++ {
			f.set(Updated, fmt.Sprintf("h%d", i))
		}
		f.step(5 * time.Minute)
		if f.plan(); f.st.Tripped != tt.want {
			t.Errorf("budget %v with %d failed, %d healthy: tripped %v, want %v", tt.budget, tt.failed, tt.healthy, f.st.Tripped, tt.want)
		}
	}
}

func TestTripPauseVersusRevert(t *testing.T) {
	for _, action := range []Action{Pause, Revert} {
		t.Run(string(action), func(t *testing.T) {
			spec := spec3()
			spec.Budget = Budget{Count: 1}
			spec.OnTrip = action
			f := newFleet(t, spec, tenNodes)
			f.plan()
			f.set(Updated, "a1")
			f.step(5 * time.Minute)
			f.plan()
			f.set(Updated, "a2")
			f.set(Trial, "b1")
			f.set(Offered, "b2")
			f.set(Reverted, "c1")
			f.plan()
			if !f.st.Tripped {
				t.Fatal("not tripped on one failure with a budget of 1")
			}
			var want []string
			if action == Revert {
				want = []string{"a1", "a2", "b1", "b2"}
			}
			if !slices.Equal(f.res.Revert, want) {
				t.Errorf("Revert = %v, want %v", f.res.Revert, want)
			}
			f.wantOffer()
			if c := f.condition(ConditionPaused); !c.Status || c.Reason != "BudgetExceeded" {
				t.Errorf("Paused = %+v, want true BudgetExceeded", c)
			}
			if c := f.condition(ConditionProgressing); c.Status {
				t.Errorf("Progressing = %+v, want false", c)
			}

			// The trip stays when the failed node goes away.
			delete(f.nodes, "c1")
			f.step(time.Hour)
			f.plan()
			if !f.st.Tripped || f.st.Wave != 1 {
				t.Errorf("after the failed node left: tripped %v wave %d, want tripped in wave 1", f.st.Tripped, f.st.Wave)
			}
		})
	}
}

func TestResume(t *testing.T) {
	spec := spec3()
	spec.Budget = Budget{Count: 1}
	f := newFleet(t, spec, tenNodes)
	f.plan()
	f.set(Failed, "a1")
	f.plan()
	if !f.st.Tripped {
		t.Fatal("not tripped")
	}
	// The controller pauses the spec; a human unpauses.
	f.spec.Paused = true
	f.plan()
	if !f.st.Paused {
		t.Fatalf("Status.Paused = false under a paused spec")
	}
	f.spec.Paused = false
	f.st = Resume(f.st)
	if f.st.Tripped || !slices.Equal(f.st.Excused, []string{"a1"}) {
		t.Fatalf("Resume() = tripped %v, excused %v; want untripped, a1 excused", f.st.Tripped, f.st.Excused)
	}
	f.plan()
	if f.st.Tripped {
		t.Fatal("tripped again on an excused failure")
	}
	f.wantWave(1, false)
	f.wantOffer(wave1...)
	f.set(Failed, "b1") // a new failure trips again
	f.plan()
	if !f.st.Tripped {
		t.Error("not tripped on a new failure after Resume")
	}
}

func TestPausedSpec(t *testing.T) {
	spec := spec3()
	spec.Paused = true
	f := newFleet(t, spec, tenNodes)
	f.plan()
	f.wantOffer()
	f.wantNextCheck(-1)
	if len(f.st.WaveStarted) != 0 || len(f.st.Assigned) != 10 {
		t.Errorf("paused first Plan(): started %v, assigned %v; want not started, all assigned", f.st.WaveStarted, f.st.Assigned)
	}
	if c := f.condition(ConditionPaused); !c.Status || c.Reason != "PausedBySpec" {
		t.Errorf("Paused = %+v", c)
	}

	f.spec.Paused = false
	f.step(time.Minute)
	f.plan()
	f.wantOffer("a1")
	f.set(Updated, "a1")

	// Paused mid-wave with the wave done: it does not advance, and a
	// failure is not counted until unpaused.
	f.spec.Paused = true
	f.spec.Budget = Budget{Count: 1}
	f.spec.OnTrip = Revert
	f.set(Failed, "b1")
	f.step(time.Hour)
	before := f.st
	f.plan()
	f.wantWave(0, false)
	f.wantOffer()
	if len(f.res.Revert) != 0 || f.st.Tripped || !reflect.DeepEqual(f.st.Assigned, before.Assigned) {
		t.Errorf("paused Plan() acted: revert %v, tripped %v", f.res.Revert, f.st.Tripped)
	}
}

func TestLastWaveUnder100(t *testing.T) {
	spec := spec3()
	spec.Waves = []Step{{Count: 1}, {Percent: 50}}
	f := newFleet(t, spec, tenNodes)
	f.plan()
	beyond := assignedTo(f.st, 2)
	if !slices.Equal(beyond, wave2) {
		t.Errorf("nodes beyond the last wave = %v, want %v", beyond, wave2)
	}
	f.set(Updated, "a1")
	f.step(5 * time.Minute)
	f.plan()
	f.set(Updated, wave1...)
	f.step(5 * time.Minute)
	f.plan()
	f.wantWave(1, true)
	f.wantOffer()
	if f.res.Counts != (Counts{Nodes: 10, Updated: 5}) {
		t.Errorf("Counts = %+v, want 5 of 10 updated, none pending", f.res.Counts)
	}
}

func TestMaintenanceWindowsInPlan(t *testing.T) {
	berlin := mustZone(t, "Europe/Berlin")
	newYork := mustZone(t, "America/New_York")
	spec := spec3()
	spec.Waves = []Step{{Percent: 100}}
	spec.Windows = []Window{
		{Start: "13:00", End: "15:00"},
		{Days: []time.Weekday{time.Saturday}, Start: "22:00", End: "01:00"},
	}
	f := newFleet(t, spec, map[string]int{"ber": 1, "nyc": 1})
	f.nodes["ber1"].Location = berlin
	f.nodes["nyc1"].Location = newYork
	f.plan() // t0 is 13:00 in Berlin, 07:00 in New York
	f.wantOffer("ber1")
	f.wantNextCheck(6 * time.Hour) // 13:00 in New York

	// Saturday 2026-12-12 just after midnight in New York: inside the
	// hours of the midnight window, but that one opens on Saturday
	// evenings, not Fridays; the daily 13:00 window is next.
	f.set(Offered, "ber1")
	f.now = time.Date(2026, 12, 12, 0, 30, 0, 0, newYork)
	f.plan()
	f.wantOffer()
	if want := time.Date(2026, 12, 12, 13, 0, 0, 0, newYork); !f.res.NextCheck.Equal(want) {
		t.Errorf("NextCheck = %v, want %v", f.res.NextCheck, want)
	}
	f.now = time.Date(2026, 12, 13, 0, 30, 0, 0, newYork) // Sunday, in Saturday's window
	f.plan()
	f.wantOffer("nyc1")
}

func TestNoNodesWaits(t *testing.T) {
	f := newFleet(t, spec3(), nil)
	f.plan()
	f.wantWave(0, false)
	if c := f.condition(ConditionProgressing); c.Status || c.Reason != "NoNodes" {
		t.Errorf("Progressing = %+v, want false NoNodes", c)
	}
	// Nodes that appear later still go through the waves.
	for site, n := range tenNodes {
		for i := 1; i <= n; i++ {
			f.add(fmt.Sprintf("%s%d", site, i), site)
		}
	}
	f.step(time.Minute)
	f.plan()
	f.wantWave(0, false)
	f.wantOffer(wave0...)
}

func TestInvalidSpec(t *testing.T) {
	f := newFleet(t, Spec{Waves: []Step{{Count: 1}}}, tenNodes) // no version
	f.plan()
	f.wantOffer()
	if c := f.condition(ConditionProgressing); c.Status || c.Reason != "InvalidSpec" || c.Message != "version: empty" {
		t.Errorf("Progressing = %+v, want false InvalidSpec", c)
	}
	if len(f.st.Assigned) != 0 {
		t.Errorf("invalid spec assigned %v", f.st.Assigned)
	}
}

func TestPlanDoesNotModifyPrev(t *testing.T) {
	f := newFleet(t, spec3(), tenNodes)
	f.plan()
	prev := f.st.clone()
	f.set(Updated, "a1")
	f.add("z1", "z")
	f.step(time.Hour)
	f.plan()
	if len(prev.Assigned) != 10 || len(prev.WaveStarted) != 1 {
		t.Errorf("Plan() modified its prev status: %+v", prev)
	}
}

func TestStatusJSONRoundTrip(t *testing.T) {
	f := newFleet(t, spec3(), tenNodes)
	f.plan()
	f.set(Failed, "a1")
	f.plan()
	st := Resume(f.st)
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var got Status
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, st) {
		t.Errorf("json round trip of %s = %+v, want %+v", b, got, st)
	}
}

func TestStatusOfEditedWaves(t *testing.T) {
	// A status written when the spec had four waves, replayed against
	// two: the wave is clamped, extra start times dropped, an assignment
	// out of range redone and an absent node forgotten.
	f := newFleet(t, spec3(), tenNodes)
	f.spec.Waves = []Step{{Count: 1}, {Percent: 100}}
	f.st = Status{
		Wave:        3,
		WaveStarted: []time.Time{t0, t0, t0, t0},
		Assigned:    map[string]int{"a1": 0, "b1": 1, "c1": 7, "gone": 0},
	}
	f.plan()
	f.wantWave(1, false)
	if len(f.st.WaveStarted) != 2 || f.st.Assigned["c1"] != 1 || len(f.st.Assigned) != 10 {
		t.Errorf("Plan() status = %+v", f.st)
	}
	f.st.Wave = -1
	f.st.WaveStarted = nil
	f.plan()
	f.wantWave(0, false)
}

func TestUnknownStateHoldsAndIsNotOffered(t *testing.T) {
	f := newFleet(t, spec3(), tenNodes)
	f.set("Verifying", "a1") // a state of a newer agent
	f.step(time.Hour)
	f.plan()
	f.wantWave(0, false)
	f.wantOffer()
	if f.res.Waves[0].InProgress != 1 {
		t.Errorf("wave 0 = %+v, want a1 in progress", f.res.Waves[0])
	}
}
