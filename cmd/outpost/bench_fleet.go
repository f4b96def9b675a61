package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/outpost-mesh/outpost/bench/fleetbench"
)

// newBenchFleetCmd returns `outpost bench fleet`, which measures a hub it
// runs as a child with a fleet of simulated edge nodes in this process.
func newBenchFleetCmd() *cobra.Command {
	var (
		cfg   = fleetbench.DefaultConfig()
		out   string
		quick bool
	)
	cmd := &cobra.Command{
		Use:   "fleet",
		Short: "Measure a hub with a fleet of simulated edge nodes: join, pod starts, idle traffic, reconnect storm",
		Long: `Start a hub (this binary, ` + "`outpost hub`" + `) on a fresh data dir under --dir,
and --nodes edge agents on the fake runtime in this process, each with its own
checkpoint under --agent-dir and its own QUIC connection to the hub through a
counting UDP relay. Then:

  join     start every agent at once; wait for every Node to be Ready
  pods     create --pods-per-node pods on each node through client-go with
           --workers workers; time each from its Create call to a watch
           seeing it Running
  idle     after --settle, leave the fleet alone for --idle and count its
           bytes on the wire, and the hub's RSS and CPU
  restart  kill the hub with SIGKILL, start it again on the same data dir and
           addresses, create a probe pod on --probe-nodes nodes, and wait for
           every agent to reconnect and every probe to be Running

The results are printed as a table, next to the targets (for 1,000 nodes of
10 pods: pod start p99 under 2s, idle traffic under 0.1 kbit/s per node,
reconnect storm converged within 30s), and written as JSON to --out. A full
run takes three to four minutes on two CPUs; --quick (50 nodes of 2 pods, a
20s idle window) in under a minute, with rough numbers.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context() // canceled on SIGINT and SIGTERM by main
			if quick {
				q := fleetbench.QuickConfig()
				unlessSet(cmd.Flags(), "nodes", &cfg.Nodes, q.Nodes)
				unlessSet(cmd.Flags(), "pods-per-node", &cfg.PodsPerNode, q.PodsPerNode)
				unlessSet(cmd.Flags(), "workers", &cfg.Workers, q.Workers)
				unlessSet(cmd.Flags(), "settle", &cfg.Settle, q.Settle)
				unlessSet(cmd.Flags(), "idle", &cfg.Idle, q.Idle)
				unlessSet(cmd.Flags(), "profile-duration", &cfg.ProfileDuration, q.ProfileDuration)
			}
			exe, err := os.Executable()
			if err != nil {
				return fmt.Errorf("find own binary to run the hub: %w", err)
			}
			cfg.Binary = exe
			if err := cfg.Validate(); err != nil {
				return fmt.Errorf("invalid flags: %w", err)
			}
			rep, err := fleetbench.Run(ctx, cfg, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			return writeReport(cmd, rep, out)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Dir, "dir", "", "parent directory of the run's temporary directory, holding the hub's and the agents' data (default the system temp dir)")
	f.StringVar(&cfg.AgentDir, "agent-dir", defaultAgentDir(), "parent of the agents' temporary data dir: a tmpfs, so that a thousand agents' synced writes do not all wait on one disk (\"\": under --dir)")
	f.StringVar(&cfg.Namespace, "namespace", cfg.Namespace, "namespace the pods are created in")
	f.IntVar(&cfg.Nodes, "nodes", cfg.Nodes, "simulated edge nodes, each an agent with its own QUIC connection")
	f.IntVar(&cfg.PodsPerNode, "pods-per-node", cfg.PodsPerNode, "pods created on each node")
	f.IntVar(&cfg.Workers, "workers", cfg.Workers, "concurrent pod creators, sharing one client")
	f.IntVar(&cfg.ProbeNodes, "probe-nodes", cfg.ProbeNodes, "nodes that get a probe pod after the hub restarts (0: every node)")
	f.DurationVar(&cfg.Settle, "settle", cfg.Settle, "pause after every pod runs, before the idle window")
	f.DurationVar(&cfg.Idle, "idle", cfg.Idle, "idle window over which traffic and the hub's steady-state CPU are measured")
	f.DurationVar(&cfg.AgentResync, "agent-resync", cfg.AgentResync, "each agent's unprompted reconcile period (the agent's default is 1s)")
	f.DurationVar(&cfg.ReadyTimeout, "ready-timeout", cfg.ReadyTimeout, "longest wait for the hub to be ready, at start and after the restart")
	f.DurationVar(&cfg.JoinTimeout, "join-timeout", cfg.JoinTimeout, "longest wait for every node to be Ready")
	f.DurationVar(&cfg.RunningTimeout, "running-timeout", cfg.RunningTimeout, "longest wait, after the creates, for every pod to be Running")
	f.DurationVar(&cfg.ConvergeTimeout, "converge-timeout", cfg.ConvergeTimeout, "longest wait, from the kill, for the fleet to converge on the restarted hub")
	f.DurationVar(&cfg.StopTimeout, "stop-timeout", cfg.StopTimeout, "how long the hub gets to exit after SIGTERM before it is killed")
	f.StringVar(&cfg.ProfileDir, "profile", "", "directory to write CPU profiles of the hub and of this process to, taken over the first --profile-duration of --profile-phase")
	f.DurationVar(&cfg.ProfileDuration, "profile-duration", cfg.ProfileDuration, "length of the CPU profiles of --profile")
	f.StringVar(&cfg.ProfilePhase, "profile-phase", cfg.ProfilePhase, "phase to profile: join, pods, idle or restart (from the restarted hub being ready)")
	f.StringVar(&out, "out", "bench-results/fleet.json", "file to write the results to as JSON")
	f.BoolVar(&quick, "quick", false, "50 nodes of 2 pods, 10 workers, a 20s idle window, for a smoke run (flags given explicitly still apply)")
	return cmd
}

// defaultAgentDir returns /dev/shm when this machine has it, else "".
func defaultAgentDir() string {
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		return "/dev/shm"
	}
	return ""
}
