// Package rollout is the pure wave planner of Outpost's over-the-air
// rollouts. It does no I/O, reads no clock, starts no goroutines and talks to
// no API: the hub's rollout controller passes it the Rollout's Spec, the
// nodes the Rollout's selector matched with their update state, the Status
// the previous call returned and the time, and acts on the Result (offers
// the release, withdraws or reverts it, writes the status, requeues at
// NextCheck). Any package may import it; it imports the standard library
// only.
//
// # Rules
//
// Nodes. The nodes are exactly those the controller passes. Node.State is
// the node's update state for Spec.Version (Idle when it has none). A node
// that runs Spec.Version (Node.Version == Spec.Version, or State Updated) is
// updated and is never offered. A node whose State is Failed or Reverted, or
// whose FailedVersions holds Spec.Version, has failed: that is final, it is
// never offered the version again.
//
// Waves. Each Step gives a cumulative target: Count as is, Percent as
// ceil(Percent% of the nodes), capped at the number of nodes and never
// below the previous step's target. A last step under 100% ends the
// rollout at its target: the nodes beyond it are in no wave and are never
// offered. The first time a node is seen it is given a wave, kept in
// Status.Assigned so that it never moves: nodes are ordered round-robin
// across sites (sites by name, nodes by name within a site) so that every
// wave spreads over the sites, and each takes the earliest wave, from the
// current one on, whose target is not yet reached. Nodes added later
// therefore join the current wave or a later one; removed nodes vanish from
// Status and counts.
//
// Offers. While the rollout is active (not paused, not tripped, spec
// valid), the release is offered to every node of the current or an
// earlier wave that is Online, Idle, not updated, not failed, and, when the
// Spec has maintenance windows, inside one of them in its site's local time
// (Node.Location). A Window's Days name the day the window opens, so a
// window 22:00-04:00 on Saturday covers Sunday until 04:00. Offers are also
// made after the rollout is complete, for as long as the Rollout exists: a
// node that was offline during its wave, or that joins later, is offered
// the release when it is online and Idle.
//
// Health and wave progress. A node is healthy when it has been Updated for
// HealthWindow (Node.Since is when it entered Updated; the edge commits
// only after its own trial, so the window is the hub's observation time);
// a node that already ran the version in another state is healthy at once.
// A node is settled when it is healthy, failed, or offline and no longer
// holding its wave: an offline node does not hold its wave if it went
// offline before the wave started (Node.OfflineSince known and not after
// the wave's start), and otherwise holds it for HealthWindow from the later
// of the wave's start and OfflineSince. The current wave is done when every
// node of it and of the earlier waves is settled; the planner then starts
// the next wave (Status.WaveStarted records when), and after the last one
// marks the rollout Complete, which stays true. With no nodes at all the
// waves wait, rather than all finish empty.
//
// Failure budget. failed counts the nodes in State Failed or Reverted (this
// rollout's failures; a node failed only through FailedVersions is settled
// and shown as failed, but not charged to the budget) that Resume has not
// excused; sample counts the healthy nodes and every Failed or Reverted
// node. The
// budget trips when sample >= MinSample and (Count > 0 and failed >= Count,
// or Percent > 0 and failed*100 >= Percent*sample). A zero Budget never
// trips. A trip is kept in Status.Tripped: no more offers, the Paused and
// BudgetExceeded conditions are true, and with OnTrip Revert every node in
// Offered, Downloading, Installing, Trial or Updated is listed in
// Result.Revert (the controller withdraws the offer or orders the revert).
// A node the controller reverted reports Reverted and so counts as failed
// from then on; the controller may set such a node back to Idle (and keep
// the version out of its FailedVersions) if it should be offered again.
//
// Pause. While Spec.Paused, nothing is offered or reverted, waves do not
// advance and the budget is not evaluated: the Status is kept as it was,
// except that nodes seen for the first time are given a wave. The
// controller's part on a trip is to set spec.paused so that a human sees
// it; when the human unpauses (Status.Paused true, Spec.Paused false) it
// calls Resume, which clears the trip and excuses the failures counted so
// far, before calling Plan.
package rollout
