package updater

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	firmwarev1 "github.com/outpost-mesh/outpost/firmware/apis/v1"
)

var t0 = time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)

func both(string) bool { return true }

func only(slots ...string) func(string) bool {
	return func(s string) bool {
		for _, x := range slots {
			if x == s {
				return true
			}
		}
		return false
	}
}

func trialState(boots int, started time.Time) *State {
	return &State{Format: stateFormat, AgentComponent: "agent",
		Committed: &Slot{Slot: SlotA, Release: "r1", Version: "1.0.0"}, Highest: "1.0.0",
		Trial: &Trial{Slot: SlotB, Release: "r2", Version: "1.1.0", Installed: t0, Started: started, Window: 5 * time.Minute, Boots: boots, MaxBoots: 1}}
}

func TestDecideBoot(t *testing.T) {
	for _, tc := range []struct {
		name        string
		s           *State
		ev          bootEvent
		wantSlot    string
		wantVersion string
		wantTrial   bool
		wantRevert  Reason // "" for none
		wantBoots   int    // of the trial in the next state, when wantTrial
		wantChanged bool
		wantFiles   int
	}{
		{name: "empty state runs the installed binary",
			s: &State{Format: stateFormat}, ev: bootEvent{now: t0, present: both},
			wantSlot: SlotInstalled},
		{name: "committed slot",
			s:  &State{Format: stateFormat, Committed: &Slot{Slot: SlotB, Version: "1.0.0"}},
			ev: bootEvent{now: t0, present: both}, wantSlot: SlotB, wantVersion: "1.0.0"},
		{name: "first trial start counts and runs the trial",
			s: trialState(0, time.Time{}), ev: bootEvent{now: t0.Add(time.Hour), present: both},
			wantSlot: SlotB, wantVersion: "1.1.0", wantTrial: true, wantBoots: 1, wantChanged: true},
		{name: "second trial start means the first died",
			s: trialState(1, t0), ev: bootEvent{now: t0.Add(time.Second), present: both},
			wantSlot: SlotA, wantVersion: "1.0.0", wantRevert: CrashedInTrial, wantChanged: true},
		{name: "the same start after exec carries its token",
			s: trialState(1, t0), ev: bootEvent{now: t0.Add(time.Second), token: "b:1:1.1.0", present: both},
			wantSlot: SlotB, wantVersion: "1.1.0", wantTrial: true, wantBoots: 1},
		{name: "a stale token does not count",
			s: trialState(1, t0), ev: bootEvent{now: t0.Add(time.Second), token: "b:1:1.0.9", present: both},
			wantSlot: SlotA, wantVersion: "1.0.0", wantRevert: CrashedInTrial, wantChanged: true},
		{name: "window and grace passed",
			s: trialState(1, t0), ev: bootEvent{now: t0.Add(6 * time.Minute), token: "b:1:1.1.0", grace: time.Minute, present: both},
			wantSlot: SlotA, wantVersion: "1.0.0", wantRevert: HealthWindowExpired, wantChanged: true},
		{name: "window passed, within grace",
			s: trialState(1, t0), ev: bootEvent{now: t0.Add(5*time.Minute + 59*time.Second), token: "b:1:1.1.0", grace: time.Minute, present: both},
			wantSlot: SlotB, wantVersion: "1.1.0", wantTrial: true, wantBoots: 1},
		{name: "trial slot missing",
			s: trialState(0, time.Time{}), ev: bootEvent{now: t0, present: only(SlotA)},
			wantSlot: SlotA, wantVersion: "1.0.0", wantRevert: SlotMissing, wantChanged: true},
		{name: "committed slot missing, previous present",
			s:  &State{Format: stateFormat, Committed: &Slot{Slot: SlotB, Version: "1.1.0"}, Previous: &Slot{Slot: SlotA, Version: "1.0.0"}},
			ev: bootEvent{now: t0, present: only(SlotA)}, wantSlot: SlotA, wantVersion: "1.0.0", wantChanged: true},
		{name: "committed slot missing, nothing else",
			s:  &State{Format: stateFormat, Committed: &Slot{Slot: SlotB, Version: "1.1.0"}},
			ev: bootEvent{now: t0, present: only()}, wantSlot: SlotInstalled, wantChanged: true},
		{name: "file trial interrupted and one expired",
			s: &State{Format: stateFormat, Files: []*FileRecord{
				{Name: "modem", Trial: &FileTrial{Phase: PhaseInstalling, Installed: t0, Window: time.Hour}},
				{Name: "cfg", Trial: &FileTrial{Phase: PhaseInstalled, Installed: t0, Window: time.Minute}},
				{Name: "ok", Trial: &FileTrial{Phase: PhaseInstalled, Installed: t0, Window: time.Hour}},
			}},
			ev: bootEvent{now: t0.Add(2 * time.Minute), present: both}, wantSlot: SlotInstalled, wantFiles: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.s.clone()
			n, d, changed := decideBoot(tc.s, tc.ev)
			if !reflect.DeepEqual(tc.s, before) {
				t.Errorf("decideBoot changed its input")
			}
			if d.Slot != tc.wantSlot || d.Version != tc.wantVersion || (d.Trial != nil) != tc.wantTrial || changed != tc.wantChanged {
				t.Errorf("decideBoot = slot %q version %q trial %v changed %v, want %q %q %v %v",
					d.Slot, d.Version, d.Trial != nil, changed, tc.wantSlot, tc.wantVersion, tc.wantTrial, tc.wantChanged)
			}
			if tc.wantTrial && n.Trial.Boots != tc.wantBoots {
				t.Errorf("trial boots = %d, want %d", n.Trial.Boots, tc.wantBoots)
			}
			if tc.wantRevert != "" {
				if !d.Reverted || n.Trial != nil || d.LastOutcome == nil || d.LastOutcome.Reason != tc.wantRevert || d.LastOutcome.State != firmwarev1.StateReverted {
					t.Errorf("decision %+v outcome %+v, want reverted with %s", d, d.LastOutcome, tc.wantRevert)
				}
				if len(n.Failed) != 1 || n.Failed[0].Version != "1.1.0" || n.Failed[0].Reason != tc.wantRevert {
					t.Errorf("failed = %+v, want 1.1.0 %s", n.Failed, tc.wantRevert)
				}
				if n.Committed == nil || n.Committed.Version != "1.0.0" {
					t.Errorf("committed = %+v, want unchanged", n.Committed)
				}
			} else if d.Reverted {
				t.Errorf("decision reverted, want not")
			}
			if len(d.FileReverts) != tc.wantFiles {
				t.Errorf("file reverts = %+v, want %d", d.FileReverts, tc.wantFiles)
			}
			if changed {
				if err := n.validate(); err != nil {
					t.Errorf("next state does not validate: %v", err)
				}
			}
		})
	}
}

func TestPlanInstallAgent(t *testing.T) {
	committed := &State{Format: stateFormat, Committed: &Slot{Slot: SlotA, Version: "1.2.0"}, Previous: &Slot{Slot: SlotB, Version: "1.1.0"},
		Highest: "1.2.0", Failed: []Failure{{Version: "1.3.0", Reason: CrashedInTrial}}}
	ev := func(v string, allow bool) installAgent {
		return installAgent{component: "agent", release: "r", version: v, window: time.Minute, maxBoots: 1, allowDowngrade: allow, now: t0}
	}
	for _, tc := range []struct {
		s        *State
		ev       installAgent
		wantSlot string
		wantErr  error
	}{
		{&State{Format: stateFormat}, ev("1.0.0", false), SlotA, nil},
		{committed, ev("1.4.0", false), SlotB, nil},
		{committed, ev("1.1.9", false), "", &Error{Reason: Downgrade}},
		{committed, ev("1.1.9", true), SlotB, nil},
		{committed, ev("1.3.0", false), "", &Error{Reason: AlreadyFailed}},
		{committed, ev("1.2.0", false), "", &Error{Reason: AlreadyCommitted}},
		{committed, ev("v1.4", false), "", &Error{Reason: BadInput}},
		{trialState(0, time.Time{}), ev("1.4.0", false), "", ErrTrialInProgress},
	} {
		n, slot, err := planInstallAgent(tc.s, tc.ev)
		if tc.wantErr != nil {
			if !errors.Is(err, tc.wantErr) {
				t.Errorf("planInstallAgent(%s) = %v, want %v", tc.ev.version, err, tc.wantErr)
			}
			continue
		}
		if err != nil || slot != tc.wantSlot {
			t.Fatalf("planInstallAgent(%s) = %q, %v, want %q", tc.ev.version, slot, err, tc.wantSlot)
		}
		if n.Trial == nil || n.Trial.Slot != slot || n.Trial.Boots != 0 {
			t.Errorf("trial = %+v", n.Trial)
		}
		if n.Previous != nil && n.Previous.Slot == slot {
			t.Errorf("previous %+v kept though its slot is overwritten", n.Previous)
		}
	}
}

// TestScript walks the agent's protocol through its transitions.
func TestScript(t *testing.T) {
	s := &State{Format: stateFormat}
	step := func(what string, f func() (*State, error)) {
		t.Helper()
		n, err := f()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if err := n.validate(); err != nil {
			t.Fatalf("%s: state does not validate: %v", what, err)
		}
		s = n
	}
	boot := func(now time.Time) Decision {
		n, d, _ := decideBoot(s, bootEvent{now: now, present: both})
		s = n
		return d
	}
	install := func(v string) {
		step("install "+v, func() (*State, error) {
			n, _, err := planInstallAgent(s, installAgent{component: "agent", release: "r-" + v, version: v, window: time.Minute, maxBoots: 1, now: t0})
			return n, err
		})
	}
	commit := func() { step("commit", func() (*State, error) { return planCommit(s, t0) }) }

	if _, err := planCommit(s, t0); err != ErrNoTrial {
		t.Fatalf("commit without trial = %v", err)
	}
	install("1.0.0")
	if _, err := planCommit(s, t0); err != ErrTrialNotStarted {
		t.Fatalf("commit before the trial booted = %v", err)
	}
	if d := boot(t0); d.Slot != SlotA || d.Trial == nil {
		t.Fatalf("boot after install = %+v", d)
	}
	commit()
	if s.Committed.Slot != SlotA || s.Highest != "1.0.0" || s.Previous.Slot != SlotInstalled {
		t.Fatalf("after commit: %+v", s)
	}
	install("1.1.0")
	boot(t0)
	commit()
	if s.Committed.Slot != SlotB || s.Previous.Slot != SlotA || s.Highest != "1.1.0" {
		t.Fatalf("after second commit: committed %+v previous %+v", s.Committed, s.Previous)
	}
	install("1.2.0")
	boot(t0)
	step("revert", func() (*State, error) { return planRevert(s, Unhealthy, "pods did not come back\n", t0) })
	if s.Committed.Version != "1.1.0" || s.Trial != nil || s.Previous != nil || s.LastOutcome.State != firmwarev1.StateReverted {
		t.Fatalf("after revert: %+v", s)
	}
	if _, err := planRevertCommitted(s, RevertOrdered, "", t0); err != ErrNoPrevious {
		t.Fatalf("revert committed without previous (overwritten by 1.2.0) = %v", err)
	}
	install("1.3.0")
	boot(t0)
	commit()
	step("revert committed", func() (*State, error) { return planRevertCommitted(s, RevertOrdered, "budget", t0) })
	if s.Committed.Version != "1.1.0" || s.Committed.Slot != SlotB || s.Highest != "1.1.0" {
		t.Fatalf("after revert committed: %+v highest %s", s.Committed, s.Highest)
	}
	if got := fmt.Sprint(s.FailedVersions()); got != "[1.2.0 1.3.0]" {
		t.Fatalf("failed = %s", got)
	}
	for i := range 40 {
		recordFailure(s, Failure{Version: fmt.Sprintf("2.0.%d", i), Reason: Unhealthy, At: t0})
	}
	if len(s.Failed) != MaxFailed || s.Failed[MaxFailed-1].Version != "2.0.39" {
		t.Fatalf("failed list: %d entries, last %+v", len(s.Failed), s.Failed[len(s.Failed)-1])
	}
}
