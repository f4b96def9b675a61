package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/outpost-mesh/outpost/bench/fleetbench"
)

// newBenchControllersCmd returns `outpost bench controllers`, which
// measures the hub's controllers and scheduler placing workloads on a
// fleet of simulated edge nodes.
func newBenchControllersCmd() *cobra.Command {
	var (
		cfg   = fleetbench.DefaultControllersConfig()
		out   string
		quick bool
	)
	cmd := &cobra.Command{
		Use:   "controllers",
		Short: "Measure the controllers and scheduler: Deployments and a DaemonSet placed on a fleet of simulated nodes",
		Long: `Start a hub (this binary, ` + "`outpost hub`" + `, with its controllers and
scheduler) on a fresh data dir and --nodes edge agents on the fake runtime in
this process, each with its own QUIC connection. Once every Node is Ready,
create --deployments Deployments of --replicas replicas at once, and wait for
every pod to be Running; then create a DaemonSet and wait for its pod on
every node. A watch times each pod from its creation by a controller to its
binding by the scheduler and to Running.

The results are printed as a table next to the targets (for 1,000 nodes and
100 Deployments of 100: at least 300 pods/s bound, all 10,000 Running within
60s, hub peak RSS under 800 MB) and written as JSON to --out. --quick runs
50 nodes and 10 Deployments of 20.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if quick {
				q := fleetbench.QuickControllersConfig()
				unlessSet(cmd.Flags(), "nodes", &cfg.Fleet.Nodes, q.Fleet.Nodes)
				unlessSet(cmd.Flags(), "workers", &cfg.Fleet.Workers, q.Fleet.Workers)
				unlessSet(cmd.Flags(), "deployments", &cfg.Deployments, q.Deployments)
				unlessSet(cmd.Flags(), "replicas", &cfg.Replicas, q.Replicas)
			}
			exe, err := os.Executable()
			if err != nil {
				return fmt.Errorf("find own binary to run the hub: %w", err)
			}
			cfg.Fleet.Binary = exe
			if err := cfg.Validate(); err != nil {
				return fmt.Errorf("invalid flags: %w", err)
			}
			rep, err := fleetbench.RunControllers(cmd.Context(), cfg, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			return writeReport(cmd, rep, out)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Fleet.Dir, "dir", "", "parent directory of the run's temporary directory (default the system temp dir)")
	f.StringVar(&cfg.Fleet.AgentDir, "agent-dir", defaultAgentDir(), "parent of the agents' temporary data dir: a tmpfs where there is one (\"\": under --dir)")
	f.StringVar(&cfg.Fleet.Namespace, "namespace", cfg.Fleet.Namespace, "namespace of the workloads")
	f.IntVar(&cfg.Fleet.Nodes, "nodes", cfg.Fleet.Nodes, "simulated edge nodes")
	f.IntVar(&cfg.Fleet.Workers, "workers", cfg.Fleet.Workers, "concurrent Deployment creators")
	f.IntVar(&cfg.Deployments, "deployments", cfg.Deployments, "Deployments created at once")
	f.IntVar(&cfg.Replicas, "replicas", cfg.Replicas, "replicas of each Deployment")
	f.BoolVar(&cfg.DaemonSet, "daemonset", cfg.DaemonSet, "then create a DaemonSet over every node")
	f.DurationVar(&cfg.Fleet.JoinTimeout, "join-timeout", cfg.Fleet.JoinTimeout, "longest wait for every node to be Ready")
	f.DurationVar(&cfg.Fleet.RunningTimeout, "running-timeout", cfg.Fleet.RunningTimeout, "longest wait, after the creates, for every pod of a workload to be Running")
	f.StringVar(&cfg.HeapProfileDir, "heap-profile", "", "directory to write the hub's heap profile to at the end of each workload (after a collection)")
	f.StringVar(&out, "out", "bench-results/controllers.json", "file to write the results to as JSON")
	f.BoolVar(&quick, "quick", false, "50 nodes and 10 Deployments of 20, for a smoke run (flags given explicitly still apply)")
	return cmd
}
