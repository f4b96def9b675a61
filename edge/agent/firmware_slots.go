package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/outpost-mesh/outpost/firmware/manifest"
	"github.com/outpost-mesh/outpost/firmware/updater"
)

// UpdaterSlots returns the FirmwareSlots of firmware/updater's u: the
// agent in its A/B slots, file components through the install hook.
func UpdaterSlots(u *updater.Updater) FirmwareSlots { return updaterSlots{u} }

type updaterSlots struct{ u *updater.Updater }

func (s updaterSlots) State() SlotState {
	st, err := s.u.State()
	if err != nil {
		return SlotState{}
	}
	out := SlotState{Highest: st.Highest, Failed: st.FailedVersions()}
	if st.Committed != nil {
		out.Committed = st.Committed.Version
	}
	if st.Previous != nil {
		out.Previous, out.CanRevert = st.Previous.Version, true
	}
	if t := st.Trial; t != nil {
		out.Trial = &SlotTrial{Release: t.Release, Version: t.Version, Deadline: t.Deadline(), Window: t.Window, Agent: true}
	}
	for _, ft := range s.u.FileTrials() {
		if out.Trial == nil {
			out.Trial = &SlotTrial{Release: ft.Release, Version: ft.Version, Deadline: ft.Deadline(), Window: ft.Window}
		} else if d := ft.Deadline(); d.Before(out.Trial.Deadline) {
			out.Trial.Deadline = d
		}
	}
	return out
}

func (s updaterSlots) Base(component string) (string, bool) { return s.u.Base(component) }

// Install installs the file components first, through the hook, then the
// agent, whose trial needs a restart.
func (s updaterSlots) Install(ctx context.Context, release string, m *manifest.Manifest, paths map[string]string, window time.Duration, allowDowngrade bool) (bool, error) {
	var agent *manifest.Component
	for i := range m.Components {
		c := &m.Components[i]
		p, ok := paths[c.Name]
		if !ok {
			continue
		}
		if c.Kind == manifest.KindAgent {
			agent = c
			continue
		}
		if err := s.u.InstallFile(ctx, release, m.Version, p, *c, window, allowDowngrade); err != nil {
			return false, fmt.Errorf("component %s: %w", c.Name, err)
		}
	}
	if agent == nil {
		return false, nil
	}
	if err := s.u.InstallAgent(ctx, release, m.Version, paths[agent.Name], *agent, window, allowDowngrade); err != nil {
		return false, fmt.Errorf("component %s: %w", agent.Name, err)
	}
	return true, nil
}

func (s updaterSlots) Commit(ctx context.Context) error {
	var errs []error
	for name := range s.u.FileTrials() {
		errs = append(errs, s.u.CommitFile(ctx, name))
	}
	if _, ok := s.u.Trial(); ok {
		errs = append(errs, s.u.Commit())
	}
	return errors.Join(errs...)
}

func (s updaterSlots) Revert(ctx context.Context, reason, message string) (bool, error) {
	var errs []error
	for name := range s.u.FileTrials() {
		errs = append(errs, s.u.RevertFile(ctx, name, updater.Reason(reason), message))
	}
	restart := false
	if _, ok := s.u.Trial(); ok {
		errs = append(errs, s.u.Revert(updater.Reason(reason), message))
		restart = true
	}
	return restart, errors.Join(errs...)
}

func (s updaterSlots) RevertCommitted(ctx context.Context, reason string) (bool, error) {
	if err := s.u.RevertCommitted(updater.Reason(reason), "the rollout ordered a revert"); err != nil {
		return false, err
	}
	return true, nil
}
