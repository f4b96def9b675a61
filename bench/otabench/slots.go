package otabench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/outpost-mesh/outpost/edge/agent"
	"github.com/outpost-mesh/outpost/firmware/manifest"
)

// SimSlots are a simulated node's firmware slots (agent.FirmwareSlots):
// they install nothing. Install records a trial of file components only
// (SlotTrial.Agent false, so the agent does not restart) and keeps no
// copy of the artifact, Commit makes the trial's version the committed
// one. Base returns a shared copy of an artifact the node is taken to
// hold, so that the hub can send a delta against it. Its methods are
// safe for concurrent use.
type SimSlots struct {
	now func() time.Time
	// bases maps a version to the path of its artifact, shared by every
	// simulated node.
	bases map[string]string

	mu      sync.Mutex
	st      agent.SlotState
	fetched time.Time // the first Base call since the last Install: a fetch starting
	times   map[string]SlotTimes
}

// SlotTimes is when a version's fetch started (the agent asked its slots
// for a base), when it was installed and when committed.
type SlotTimes struct {
	Fetch, Install, Commit time.Time
}

var _ agent.FirmwareSlots = (*SimSlots)(nil)

// NewSimSlots returns slots that hold nothing yet; bases maps versions to
// the shared path of their artifact, offered as the base of a delta once
// the version is committed.
func NewSimSlots(bases map[string]string, now func() time.Time) *SimSlots {
	if now == nil {
		now = time.Now
	}
	return &SimSlots{now: now, bases: bases, times: map[string]SlotTimes{}}
}

// State implements agent.FirmwareSlots.
func (s *SimSlots) State() agent.SlotState {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.st
	st.Failed = slices.Clone(st.Failed)
	if st.Trial != nil {
		t := *st.Trial
		st.Trial = &t
	}
	return st
}

// Base implements agent.FirmwareSlots: the shared artifact of the
// committed version, if there is one.
func (s *SimSlots) Base(string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fetched.IsZero() {
		s.fetched = s.now()
	}
	p, ok := s.bases[s.st.Committed]
	return p, ok && s.st.Committed != ""
}

// Install implements agent.FirmwareSlots: it records a trial of m's
// version and asks for no restart.
func (s *SimSlots) Install(_ context.Context, release string, m *manifest.Manifest, paths map[string]string, window time.Duration, _ bool) (bool, error) {
	if len(paths) == 0 {
		return false, errors.New("no component to install")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.st.Trial != nil {
		return false, fmt.Errorf("version %s is on trial already", s.st.Trial.Version)
	}
	now := s.now()
	s.st.Trial = &agent.SlotTrial{Release: release, Version: m.Version, Deadline: now.Add(window)}
	s.times[m.Version] = SlotTimes{Fetch: s.fetched, Install: now}
	s.fetched = time.Time{}
	return false, nil
}

// Commit implements agent.FirmwareSlots.
func (s *SimSlots) Commit(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.st.Trial
	if t == nil {
		return errors.New("no trial to commit")
	}
	if s.st.Committed != "" {
		s.st.Previous, s.st.CanRevert = s.st.Committed, true
	}
	s.st.Committed, s.st.Trial = t.Version, nil
	if s.st.Highest == "" {
		s.st.Highest = t.Version
	} else if c, err := manifest.CompareVersions(t.Version, s.st.Highest); err == nil && c > 0 {
		s.st.Highest = t.Version
	}
	tm := s.times[t.Version]
	tm.Commit = s.now()
	s.times[t.Version] = tm
	return nil
}

// Revert implements agent.FirmwareSlots: the trial's version fails.
func (s *SimSlots) Revert(_ context.Context, _, _ string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.st.Trial == nil {
		return false, errors.New("no trial to revert")
	}
	s.st.Failed = append(s.st.Failed, s.st.Trial.Version)
	s.st.Trial = nil
	return false, nil
}

// RevertCommitted implements agent.FirmwareSlots.
func (s *SimSlots) RevertCommitted(context.Context, string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.st.CanRevert {
		return false, errors.New("no earlier version to revert to")
	}
	s.st.Failed = append(s.st.Failed, s.st.Committed)
	s.st.Committed, s.st.Previous, s.st.CanRevert = s.st.Previous, "", false
	return false, nil
}

// Times returns when version was fetched, installed and committed; ok is
// false until it was installed.
func (s *SimSlots) Times(version string) (SlotTimes, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.times[version]
	return t, ok
}
