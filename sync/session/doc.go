// Package session is to hold the sync client's steps as a pure core: what
// to do next as a function of what came from the hub and when, with no
// I/O and no clock of its own, so that each step can be tested alone.
// Its first member is Backoff, the wait between the attempts of every
// reconnect and retry loop of the edge.
package session
