package updater

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	firmwarev1 "github.com/outpost-mesh/outpost/firmware/apis/v1"
	"github.com/outpost-mesh/outpost/firmware/manifest"
)

// This file holds the updater's decisions: functions of the state and an
// event that return the next state and what to do, with no I/O. The I/O
// shell (updater.go, files.go) reads the state, calls one of them, writes
// the returned state atomically and then acts.

// Decision is what Boot decided: which binary this start of the agent runs,
// and what to report.
type Decision struct {
	// Slot is the slot to run (SlotA, SlotB), or SlotInstalled for the
	// binary the node was installed with.
	Slot string
	// Binary is the path of the binary to run. If it is not the running
	// executable, the caller execs into it (Updater.Exec).
	Binary string
	// Version is the release version of Slot ("" for the installed binary
	// before any update).
	Version string
	// Trial is set when Slot is on trial: the agent must run its health
	// check and call Commit or Revert before Trial.Deadline().
	Trial *Trial
	// Reverted is set when this boot reverted a trial.
	Reverted bool
	// Fallback, if not empty, says why Boot did not run what the state
	// named (a corrupt state, a missing slot binary).
	Fallback string
	// FileReverts are the file components whose trial must be reverted
	// (Updater.RecoverFiles does it), with why.
	FileReverts []FileRevert
	// LastOutcome is the latest transition, for the agent to report.
	LastOutcome *Outcome
	// token marks the boot as decided, for a process exec'd into Binary.
	token string
}

// FileRevert is a file component trial that Boot found must be reverted.
type FileRevert struct {
	Component string
	Reason    Reason
	Message   string
}

// bootEvent is the input of decideBoot besides the state.
type bootEvent struct {
	now time.Time
	// token is the boot token in the environment of this process, set by
	// the supervisor or by Exec when this start was decided already.
	token string
	// present reports whether a slot's binary exists with the size the
	// state records.
	present func(slot string) bool
	// grace is added to a trial's deadline before a start reverts it.
	grace time.Duration
}

// bootToken names one decided start of a trial: the slot, the boot count and
// the version. A process carrying the token of the current trial boot is
// that boot (after an exec), not a new start.
func bootToken(t *Trial) string {
	return t.Slot + ":" + strconv.Itoa(t.Boots) + ":" + t.Version
}

// decideBoot is Boot's decision. It returns the next state and whether it
// differs from s (then the caller writes it before running anything).
func decideBoot(s *State, ev bootEvent) (*State, Decision, bool) {
	n := s.clone()
	var d Decision
	changed := false
	if t := n.Trial; t != nil {
		switch {
		case !ev.present(t.Slot):
			revertTrial(n, SlotMissing, fmt.Sprintf("the trial slot %s binary is missing or has the wrong size", t.Slot), ev.now)
			d.Reverted, changed = true, true
		case !t.Started.IsZero() && !ev.now.Before(t.Deadline().Add(ev.grace)):
			revertTrial(n, HealthWindowExpired, fmt.Sprintf("not committed within the health window of %v (plus %v grace), by %s", t.Window, ev.grace, t.Deadline().UTC().Format(time.RFC3339)), ev.now)
			d.Reverted, changed = true, true
		case t.Boots > 0 && ev.token == bootToken(t):
			// The same start, exec'd into the trial slot after the
			// decision: not a new boot.
		case t.Boots >= t.MaxBoots:
			revertTrial(n, CrashedInTrial, fmt.Sprintf("the trial started %d time(s) and exited without committing", t.Boots), ev.now)
			d.Reverted, changed = true, true
		default:
			t.Boots++
			if t.Started.IsZero() {
				t.Started = ev.now
			}
			changed = true
		}
	}
	if t := n.Trial; t != nil {
		tc := *t
		d.Slot, d.Version, d.Trial, d.token = t.Slot, t.Version, &tc, bootToken(t)
	} else {
		switch c := n.Committed; {
		case c == nil:
			d.Slot = SlotInstalled
		case ev.present(c.Slot):
			d.Slot, d.Version = c.Slot, c.Version
		case n.Previous != nil && (n.Previous.Slot == SlotInstalled || ev.present(n.Previous.Slot)):
			d.Fallback = fmt.Sprintf("the committed slot %s (%s) is missing; running the previous one", c.Slot, c.Version)
			n.Committed, n.Previous = n.Previous, nil
			if n.Committed.Slot == SlotInstalled {
				n.Committed = nil
			}
			n.LastOutcome = outcome("agent", c.Release, c.Version, firmwarev1.StateFailed, SlotMissing, d.Fallback, ev.now)
			changed = true
			if n.Committed != nil {
				d.Slot, d.Version = n.Committed.Slot, n.Committed.Version
			}
		default:
			d.Fallback = fmt.Sprintf("the committed slot %s (%s) is missing; running the installed binary", c.Slot, c.Version)
			n.Committed, n.Previous = nil, nil
			n.LastOutcome = outcome("agent", c.Release, c.Version, firmwarev1.StateFailed, SlotMissing, d.Fallback, ev.now)
			changed = true
		}
	}
	for _, f := range n.Files {
		t := f.Trial
		switch {
		case t == nil:
		case t.Phase == PhaseInstalling:
			d.FileReverts = append(d.FileReverts, FileRevert{f.Name, HookInterrupted, "the agent stopped while the install hook ran"})
		case !ev.now.Before(t.Deadline().Add(ev.grace)):
			d.FileReverts = append(d.FileReverts, FileRevert{f.Name, HealthWindowExpired, fmt.Sprintf("not committed within the health window of %v", t.Window)})
		}
	}
	if n.LastOutcome != nil {
		o := *n.LastOutcome
		d.LastOutcome = &o
	}
	return n, d, changed
}

// installAgent is the event of InstallAgent after the artifact verified.
type installAgent struct {
	component, release, version string
	size                        int64
	sha256                      string
	window                      time.Duration
	maxBoots                    int
	allowDowngrade              bool
	now                         time.Time
}

// checkVersionAllowed refuses a version that failed here, or that is below
// highest without allowDowngrade.
func checkVersionAllowed(s *State, version, highest string, allowDowngrade bool) error {
	if err := checkVersion(version); err != nil {
		return refuse(BadInput, "version: %v", err)
	}
	for _, f := range s.Failed {
		if f.Version == version {
			return refuse(AlreadyFailed, "version %s failed here before (%s: %s)", version, f.Reason, f.Message)
		}
	}
	if highest != "" && !allowDowngrade {
		c, err := manifest.CompareVersions(version, highest)
		if err != nil {
			return refuse(BadInput, "version: %v", err)
		}
		if c < 0 {
			return refuse(Downgrade, "version %s is below the highest committed %s", version, highest)
		}
	}
	return nil
}

// planInstallAgent returns the state with the trial marker of ev and the
// slot to write, or a refusal.
func planInstallAgent(s *State, ev installAgent) (*State, string, error) {
	if s.Trial != nil {
		return nil, "", ErrTrialInProgress
	}
	if err := checkText("release", ev.release, false); err != nil {
		return nil, "", refuse(BadInput, "%v", err)
	}
	if ev.window <= 0 || ev.window > maxWindow {
		return nil, "", refuse(BadInput, "health window %v is not in (0, %v]", ev.window, maxWindow)
	}
	if err := checkVersionAllowed(s, ev.version, s.Highest, ev.allowDowngrade); err != nil {
		return nil, "", err
	}
	if s.Committed != nil && s.Committed.Version == ev.version {
		return nil, "", refuse(AlreadyCommitted, "version %s is committed in slot %s", ev.version, s.Committed.Slot)
	}
	n := s.clone()
	slot := SlotA
	if n.Committed != nil && n.Committed.Slot == SlotA {
		slot = SlotB
	}
	if n.Previous != nil && n.Previous.Slot == slot {
		// The install overwrites the previous binary.
		n.Previous = nil
	}
	n.AgentComponent = ev.component
	n.Trial = &Trial{Slot: slot, Release: ev.release, Version: ev.version, Size: ev.size, SHA256: ev.sha256,
		Installed: ev.now, Window: ev.window, MaxBoots: ev.maxBoots}
	n.LastOutcome = outcome(ev.component, ev.release, ev.version, firmwarev1.StateTrial, "", "installed in slot "+slot, ev.now)
	return n, slot, nil
}

// planCommit returns the state with the trial committed.
func planCommit(s *State, now time.Time) (*State, error) {
	if s.Trial == nil {
		return nil, ErrNoTrial
	}
	if s.Trial.Boots == 0 {
		return nil, ErrTrialNotStarted
	}
	n := s.clone()
	t := n.Trial
	if n.Committed != nil {
		n.Previous = n.Committed
	} else {
		n.Previous = &Slot{Slot: SlotInstalled}
	}
	n.Committed = &Slot{Slot: t.Slot, Release: t.Release, Version: t.Version, Size: t.Size, SHA256: t.SHA256}
	n.Highest = maxVersion(n.Highest, t.Version)
	n.Trial = nil
	n.LastOutcome = outcome(n.AgentComponent, t.Release, t.Version, firmwarev1.StateUpdated, "", "committed in slot "+t.Slot, now)
	return n, nil
}

// planRevert returns the state with the trial reverted and recorded failed.
func planRevert(s *State, reason Reason, message string, now time.Time) (*State, error) {
	if s.Trial == nil {
		return nil, ErrNoTrial
	}
	n := s.clone()
	revertTrial(n, reason, message, now)
	return n, nil
}

// planRevertCommitted returns the state with the previous version committed
// again and the reverted one recorded failed. The highest committed version
// becomes the previous one's, so that a fixed release between the two can
// be installed.
func planRevertCommitted(s *State, reason Reason, message string, now time.Time) (*State, error) {
	if s.Trial != nil {
		return nil, ErrTrialInProgress
	}
	if s.Committed == nil || s.Previous == nil {
		return nil, ErrNoPrevious
	}
	n := s.clone()
	c := n.Committed
	recordFailure(n, Failure{Version: c.Version, Release: c.Release, Component: n.AgentComponent, Reason: reason, Message: message, At: now})
	n.Committed, n.Previous = n.Previous, nil
	if n.Committed.Slot == SlotInstalled {
		n.Committed = nil
		n.Highest = ""
	} else {
		n.Highest = n.Committed.Version
	}
	n.LastOutcome = outcome(n.AgentComponent, c.Release, c.Version, firmwarev1.StateReverted, reason, message, now)
	return n, nil
}

// revertTrial clears n's trial and records its version failed.
func revertTrial(n *State, reason Reason, message string, now time.Time) {
	t := n.Trial
	recordFailure(n, Failure{Version: t.Version, Release: t.Release, Component: n.AgentComponent, Reason: reason, Message: message, At: now})
	n.Trial = nil
	n.LastOutcome = outcome(n.AgentComponent, t.Release, t.Version, firmwarev1.StateReverted, reason, message, now)
}

// recordFailure appends f, keeping the latest MaxFailed and one entry per
// version.
func recordFailure(n *State, f Failure) {
	f.Message = cleanText(f.Message)
	n.Failed = slices.DeleteFunc(n.Failed, func(g Failure) bool { return g.Version == f.Version })
	n.Failed = append(n.Failed, f)
	if len(n.Failed) > MaxFailed {
		n.Failed = slices.Delete(n.Failed, 0, len(n.Failed)-MaxFailed)
	}
}

func outcome(component, release, version string, st firmwarev1.FirmwareState, reason Reason, message string, now time.Time) *Outcome {
	return &Outcome{Component: component, Release: release, Version: version, State: st, Reason: reason, Message: cleanText(message), At: now}
}

// cleanText makes s fit the state's text rules: valid UTF-8, control
// characters as spaces, at most maxText bytes.
func cleanText(s string) string {
	s = strings.ToValidUTF8(s, "?")
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r == utf8.RuneError {
			return ' '
		}
		return r
	}, s)
	for len(s) > maxText {
		_, size := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-size]
	}
	return s
}

// maxVersion returns the higher of two versions; "" is the lowest.
func maxVersion(a, b string) string {
	if a == "" {
		return b
	}
	if b == "" {
		return a
	}
	if c, err := manifest.CompareVersions(a, b); err == nil && c < 0 {
		return b
	}
	return a
}

// fileEvent is the event of InstallFile after the artifact verified.
type installFile struct {
	FileState
	name           string
	window         time.Duration
	allowDowngrade bool
	now            time.Time
}

func fileRecord(s *State, name string) *FileRecord {
	for _, f := range s.Files {
		if f.Name == name {
			return f
		}
	}
	return nil
}

// planInstallFile returns the state with the file trial marker (phase
// Installing), or a refusal.
func planInstallFile(s *State, ev installFile) (*State, error) {
	if err := checkText("component", ev.name, false); err != nil {
		return nil, refuse(BadInput, "%v", err)
	}
	if err := checkText("release", ev.Release, false); err != nil {
		return nil, refuse(BadInput, "%v", err)
	}
	if ev.window <= 0 || ev.window > maxWindow {
		return nil, refuse(BadInput, "health window %v is not in (0, %v]", ev.window, maxWindow)
	}
	rec := fileRecord(s, ev.name)
	highest := ""
	if rec != nil {
		if rec.Trial != nil {
			return nil, ErrTrialInProgress
		}
		if rec.Committed != nil {
			highest = rec.Committed.Version
			if rec.Committed.Version == ev.Version {
				return nil, refuse(AlreadyCommitted, "component %s version %s is committed", ev.name, ev.Version)
			}
		}
	} else if len(s.Files) >= MaxFiles {
		return nil, refuse(BadInput, "already %d file components", MaxFiles)
	}
	if err := checkVersionAllowed(s, ev.Version, highest, ev.allowDowngrade); err != nil {
		return nil, err
	}
	n := s.clone()
	rec = fileRecord(n, ev.name)
	if rec == nil {
		rec = &FileRecord{Name: ev.name}
		n.Files = append(n.Files, rec)
	}
	rec.Trial = &FileTrial{FileState: ev.FileState, Phase: PhaseInstalling, Installed: ev.now, Window: ev.window}
	n.LastOutcome = outcome(ev.name, ev.Release, ev.Version, firmwarev1.StateInstalling, "", "install hook running", ev.now)
	return n, nil
}

// planFileInstalled returns the state after the hook installed the trial.
func planFileInstalled(s *State, name string, now time.Time) (*State, error) {
	n := s.clone()
	rec := fileRecord(n, name)
	if rec == nil || rec.Trial == nil {
		return nil, ErrNoTrial
	}
	rec.Trial.Phase = PhaseInstalled
	rec.Trial.Installed = now
	t := rec.Trial
	n.LastOutcome = outcome(name, t.Release, t.Version, firmwarev1.StateTrial, "", "installed by the hook", now)
	return n, nil
}

// planCommitFile returns the state with the file trial committed and the
// digest of the artifact it replaces ("" if none), to be removed.
func planCommitFile(s *State, name string, now time.Time) (*State, string, error) {
	n := s.clone()
	rec := fileRecord(n, name)
	if rec == nil || rec.Trial == nil {
		return nil, "", ErrNoTrial
	}
	if rec.Trial.Phase != PhaseInstalled {
		return nil, "", fmt.Errorf("commit %s: the install hook has not finished", name)
	}
	old := ""
	if rec.Committed != nil && rec.Committed.SHA256 != rec.Trial.SHA256 {
		old = rec.Committed.SHA256
	}
	fs := rec.Trial.FileState
	rec.Committed, rec.Trial = &fs, nil
	n.LastOutcome = outcome(name, fs.Release, fs.Version, firmwarev1.StateUpdated, "", "committed", now)
	return n, old, nil
}

// planRevertFile returns the state with the file trial reverted and
// recorded failed, and the digest of its artifact, to be removed.
func planRevertFile(s *State, name string, reason Reason, message string, now time.Time) (*State, string, error) {
	n := s.clone()
	rec := fileRecord(n, name)
	if rec == nil || rec.Trial == nil {
		return nil, "", ErrNoTrial
	}
	t := rec.Trial
	rec.Trial = nil
	recordFailure(n, Failure{Version: t.Version, Release: t.Release, Component: name, Reason: reason, Message: message, At: now})
	n.LastOutcome = outcome(name, t.Release, t.Version, firmwarev1.StateReverted, reason, message, now)
	drop := t.SHA256
	if rec.Committed != nil && rec.Committed.SHA256 == drop {
		drop = ""
	}
	return n, drop, nil
}
