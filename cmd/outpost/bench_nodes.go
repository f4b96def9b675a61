package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/outpost-mesh/outpost/bench/edgenode"
)

// nodeBenchBinaries returns the binaries of a benchmark of real edge
// nodes (density, streams): this one, which runs the hub, and the agent's,
// edge or else outpost-edge next to this one.
func nodeBenchBinaries(edge string) (self, agent string, err error) {
	self, err = os.Executable()
	if err != nil {
		return "", "", fmt.Errorf("find own binary to run the hub: %w", err)
	}
	if edge == "" {
		edge = filepath.Join(filepath.Dir(self), "outpost-edge")
	}
	return self, edge, nil
}

// isolateNodeBench puts a benchmark of real edge nodes in a network
// namespace of its own. Outside one (env unset) it runs this command
// again, as self, in a new namespace marked by env, and returns true with
// that run's result once it ended (stopTimeout bounds its clean-up after
// ctx ends). Inside, it sets the namespace's loopback up and returns
// false: the caller runs the benchmark.
func isolateNodeBench(cmd *cobra.Command, self, env string, stopTimeout time.Duration) (done bool, err error) {
	if os.Getenv(env) == "" {
		return true, edgenode.Isolate(cmd.Context(), self, os.Args[1:], env, cmd.OutOrStdout(), cmd.ErrOrStderr(), stopTimeout)
	}
	return false, edgenode.LoopbackUp()
}
