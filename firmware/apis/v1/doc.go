// Package v1 holds the Go types of Outpost's firmware API, group
// firmware.outpost.dev version v1: Release (a signed release manifest and
// a summary of its components) and Rollout (a release offered to a fleet
// in waves, with a failure budget and maintenance windows), both
// cluster-scoped. The hub serves them as custom resources, through the
// CustomResourceDefinitions of hub/registry/firmware, whose schemas these
// types mirror field for field; the edge agent and the command line read
// and write them through client-go.
//
// It imports only k8s.io/apimachinery and the pure leaf packages
// firmware/manifest and firmware/rollout, so that every Outpost binary,
// the edge agent on 32-bit arm included, may import it. It converts a
// Rollout's spec and status to and from the planner's (PlannerSpec,
// PlannerStatus, SetPlannerStatus).
//
// +k8s:deepcopy-gen=package
// +groupName=firmware.outpost.dev
package v1
