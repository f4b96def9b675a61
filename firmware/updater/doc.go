// Package updater is the edge side of Outpost's over-the-air updates: the
// agent's two binary slots, the artifacts of file components, and the
// trial, commit and revert protocol that makes sure a node always comes back
// on a version that worked. It also holds the small supervisor that
// `outpost-edge --supervise` runs. The edge agent (and cmd/outpost-edge for
// --supervise) imports it; it imports firmware/manifest for the digests and
// nothing of the agent, so the supervisor only ever execs binaries.
//
// The download (firmware/transfer), the signature checks of the manifest
// (firmware/manifest.Verify) and the health check (connected to the hub,
// pods running again, the release's checks) are the caller's; this package
// verifies every artifact against its component itself before installing it.
//
// # Files
//
// Under the directory the caller names (the agent's data dir + "/firmware"):
//
//	state.json               the State, JSON, replaced atomically (write a
//	                         temporary file, fsync, rename, fsync the dir)
//	state.json.corrupt       a state that did not decode, kept for a person
//	slots/a/outpost-edge     agent slot A
//	slots/b/outpost-edge     agent slot B
//	files/<h>/<sha256>       a file component's artifacts, committed and on
//	                         trial, <h> a hash of the component's name
//
// Before the first update commits, the node runs the binary it was installed
// with (Config.Installed, e.g. /usr/local/bin/outpost-edge) and nothing is
// recorded.
//
// # Protocol
//
// The state is a committed slot (or none: the installed binary), the
// previous committed slot (for a hub-ordered revert), at most one agent
// trial (slot, release, version, when installed and first started, health
// window, boot count, max boots), the highest committed version, the failed
// versions (the latest 32, with reasons) and the file components.
//
//  1. Install. InstallAgent verifies the artifact (size, chunk digests,
//     sha256), refuses a failed version, a downgrade the signed manifest
//     does not allow, and a second trial; writes the inactive slot
//     (temporary file, fsync, chmod 0755, rename, fsync the directory);
//     then writes the trial marker with boot count 0. The caller calls
//     Exec, which execs the trial slot in the same process (same PID).
//  2. Boot. Every start of the agent calls Boot first. With a trial whose
//     boot count is below MaxBoots (default 1) it raises the count, durably,
//     and runs the trial slot. A start that finds the count used up means
//     the trial died (crash, kill, hang killed by the supervisor, power
//     loss) without committing: Boot reverts it (CrashedInTrial). So does a
//     start after the trial's deadline plus Config.Grace
//     (HealthWindowExpired), or one whose trial slot is missing
//     (SlotMissing). A revert leaves the committed pointer as it was,
//     clears the trial and records the version failed; Decision.LastOutcome
//     says why, for the agent to report. A process that Exec started after
//     Boot chose a trial slot carries the boot token (EnvBootToken) and is
//     not counted twice; so is the supervisor's child.
//  3. Trial end. The trial agent checks its health and calls Commit (the
//     trial slot becomes committed, the old one previous, the highest
//     version rises) or Revert(reason, message) and then Exec (back to the
//     committed slot). Trial tells the agent its deadline.
//  4. Hub-ordered revert. RevertCommitted goes back to the previous slot,
//     records the version failed, and lowers the highest committed version
//     to the previous one's so that a fixed release in between can come;
//     then Exec.
//
// File components follow the same protocol through the install hook, a
// fixed executable named by the node's local config (Config.Hook): install
// runs `HOOK <artifact path>`, with the stored artifact's path as its only
// argument, commit runs `HOOK commit`, revert `HOOK revert`. There is no
// shell, and no argument comes from API fields; the environment holds only
// OUTPOST_COMPONENT and OUTPOST_VERSION, both validated. Each run has a
// timeout and its process group is killed at it; the first 4 KiB of its
// output go into the failure message. The hook's verbs must be idempotent.
// Boot lists file trials to revert (Decision.FileReverts: the hook was
// interrupted, or the window passed) and RecoverFiles reverts them.
//
// Base returns the committed artifact of a component, the base of a delta
// download: the committed slot's binary for the agent.
//
// # Power loss
//
// Each write is atomic and synced before the next step, so a power cut
// between any two leaves a bootable committed slot:
//
//	cut during/after verification   nothing written: the committed slot runs
//	cut while writing the slot       a temporary file (removed at the next
//	                                 install); the committed slot runs
//	cut after the slot rename        no trial marker: the committed slot
//	                                 runs; the update can be offered again
//	cut after the trial marker       the next start runs the trial (count 1)
//	cut in trial, before commit      the next start finds the count used:
//	                                 reverted, the committed slot runs
//	cut after the commit            the new slot is committed and runs
//	cut during a revert              the state is the old or the new one;
//	                                 either boots
//
// A state file that does not decode (Boot returns a *CorruptStateError) is
// moved aside and the installed binary runs, with a new state; the node
// reports StateCorrupt and takes the next update as a first one.
//
// # Running under systemd
//
// Two ways, both in outpost-edge.service next to this file:
//
// With the supervisor, `ExecStart=/usr/local/bin/outpost-edge --supervise
// ...`: Supervise calls Boot, runs the chosen slot as a child with the same
// arguments minus --supervise, forwards SIGTERM and SIGINT (and then stops,
// without restarting), restarts a child that exits (1s backoff doubling to
// 30s, reset after a minute of running), and kills (SIGTERM, then SIGKILL)
// a trial that passes its deadline plus the grace without committing, then
// reverts it. The supervisor process itself never changes, so a bad agent
// cannot break it.
//
// Plain, `ExecStart=/usr/local/bin/outpost-edge ...` with Restart=always:
// the agent calls Boot at start and, if Decision.Binary is another binary,
// Exec. systemd's restart of a crashed trial is the start that reverts it.
// A trial that hangs is caught only when something restarts it (a watchdog,
// WatchdogSec with sd_notify, or a reboot), so the agent should Revert and
// Exec by itself when its own deadline passes; the supervisor is the safer
// choice.
package updater
