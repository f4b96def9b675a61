// Package e2e holds the end-to-end tests across processes: they build the
// outpost binary, run a real hub and drive it with real clients such as
// kubectl. It has no code of its own; only `go test` runs it.
package e2e
