// Package firmwarerollout is the hub's rollout controller: for each
// firmware.outpost.dev/v1 Rollout it reads the Release and the Nodes the
// Rollout selects, asks firmware/rollout's pure wave planner what to do, and
// does it through the API: it writes and withdraws the offer annotation on
// the Nodes (firmware/apis/v1's AnnotationOffer), records the versions that
// failed on a node (AnnotationFailedVersions), pauses a rollout whose failure
// budget tripped, writes the Rollout's status and Events, and comes back when
// the plan says it could change.
//
// The decisions that are not the planner's (which node a rollout may touch
// when two select it, what a node's reported state means for this
// rollout's version, which offer a node should carry, when a node is stuck)
// are pure functions of this package (decide.go); the Controller is the
// client-go shell around them. Like every controller under hub/controllers
// it reaches the API only through its clients: Nodes through the shared
// typed informers, Rollouts and Releases through the dynamic client.
package firmwarerollout
