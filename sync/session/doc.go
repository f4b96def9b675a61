// Package session holds the sync client's steps as a pure core: what to
// do next as a function of what came from the hub and when, with no I/O
// and no clock of its own. Welcome decides how a session resumes (diff,
// inventory, or rewind after the hub went back), Receiver what to record
// and acknowledge of each batch, Liveness when a silent link needs a probe
// or is dead, and Backoff the wait between the attempts of every reconnect
// and retry loop of the edge. The scripts of testdata/ replay each step.
package session
