// Package version holds the build's version and commit, which the Makefile
// sets with -ldflags -X; a plain `go build` leaves both "dev".
package version

import (
	"fmt"
	"runtime"
)

// Set at link time:
//
//	-X github.com/outpost-mesh/outpost/internal/version.Version=...
//	-X github.com/outpost-mesh/outpost/internal/version.Commit=...
//	-X github.com/outpost-mesh/outpost/internal/version.BuildDate=...
var (
	// Version is the release, as `git describe --always --dirty` prints it.
	Version = "dev"
	// Commit is the full git commit hash the binary was built from.
	Commit = "dev"
	// BuildDate is the commit's date in RFC 3339 UTC, kept reproducible.
	BuildDate = "1970-01-01T00:00:00Z"
)

// Platform returns GOOS/GOARCH of the running binary.
func Platform() string { return runtime.GOOS + "/" + runtime.GOARCH }

// String describes the build in one line, as `outpost version` prints it.
func String(binary string) string {
	return fmt.Sprintf("%s %s (commit %s, %s %s)", binary, Version, Commit, runtime.Version(), Platform())
}
