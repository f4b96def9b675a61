package rollout

import (
	"slices"
	"time"
)

// NodeState is a node's update state for one version, as its agent reports
// it to the hub.
type NodeState string

const (
	// Idle: nothing offered (the state of a node with no record).
	Idle NodeState = "Idle"
	// Offered: the hub offered the release; the agent has not started.
	Offered NodeState = "Offered"
	// Downloading: the agent is fetching the artifacts.
	Downloading NodeState = "Downloading"
	// Installing: the agent is writing the inactive slot.
	Installing NodeState = "Installing"
	// Trial: the agent runs the version on trial, not yet committed.
	Trial NodeState = "Trial"
	// Updated: the agent committed the version.
	Updated NodeState = "Updated"
	// Failed: the update failed before or during the trial.
	Failed NodeState = "Failed"
	// Reverted: the agent went back to its previous version.
	Reverted NodeState = "Reverted"
)

// inFlight reports whether s is between an offer and a commit.
func (s NodeState) inFlight() bool {
	switch s {
	case Offered, Downloading, Installing, Trial:
		return true
	}
	return false
}

// Node is one node the Rollout's selector matched, as the planner sees it.
type Node struct {
	Name string `json:"name"`
	Site string `json:"site,omitempty"`
	// Location is the site's time zone for maintenance windows; nil
	// means UTC.
	Location *time.Location `json:"-"`
	Online   bool           `json:"online"`
	// OfflineSince is when the node went offline (its Ready condition's
	// last transition); the zero time when unknown, which the planner
	// takes as "since its wave started".
	OfflineSince time.Time `json:"offlineSince,omitempty"`
	// Version is the version the node runs, committed.
	Version string `json:"version,omitempty"`
	// State is the node's update state for the Spec's version; empty
	// means Idle.
	State NodeState `json:"state,omitempty"`
	// Since is when the node entered State.
	Since time.Time `json:"since,omitempty"`
	// FailedVersions are the versions that failed on the node, which it
	// is never offered again.
	FailedVersions []string `json:"failedVersions,omitempty"`
}

// class is where a node stands in a rollout, one of the columns of a
// WaveSummary.
type class int

const (
	classPending    class = iota // online, Idle, not yet offered
	classInProgress              // online, between offer and commit
	classOffline                 // offline, neither updated nor failed
	classUpdated                 // runs the version
	classFailed                  // failed the version, for good
)

// classify returns where n stands for version. A State the planner does
// not know counts as in progress: never offered, and holding its wave.
func classify(n Node, version string) class {
	switch {
	case n.Version == version || n.State == Updated:
		return classUpdated
	case n.State == Failed || n.State == Reverted || slices.Contains(n.FailedVersions, version):
		return classFailed
	case !n.Online:
		return classOffline
	case n.State == Idle || n.State == "":
		return classPending
	}
	return classInProgress
}
