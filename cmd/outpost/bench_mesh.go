package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/outpost-mesh/outpost/bench/meshbench"
)

// newBenchMeshCmd returns `outpost bench mesh`, which measures the site
// mesh's membership: joins, deaths and idle gossip.
func newBenchMeshCmd() *cobra.Command {
	var (
		cfg   = meshbench.DefaultConfig()
		out   string
		quick bool
	)
	cmd := &cobra.Command{
		Use:   "mesh",
		Short: "Measure the site mesh: join convergence, death detection, dead endpoints dropped, idle gossip bytes, relayed sync",
		Long: `Simulate sites of --sizes nodes in this process, each node a real site
mesh (edge/mesh over memberlist) on 127.0.0.1 with a port of its own,
all with mesh.DefaultConfig's timings (what is measured: nothing is
sped up), the gossip encrypted with a random key per site. For each
size, --runs times on a fresh site:

  join    a node joins one member of a converged site of one node
          fewer; from its start until every node, it too, sees every
          other alive
  crash   a node is closed without leaving; until no other node lists
          it alive (suspected, then declared dead), and until every
          other node's service proxy (edge/proxy with the agent's
          500ms poll and min sync, kicked by its mesh) routes a Service
          with an endpoint on each node without the dead one's
  leave   a node is added back, then another leaves and is closed;
          until no other node lists it

views polled every 5ms, the median and max reported; then on a fresh,
converged site left 5s to settle, for --idle:

  idle    the bytes each node sends: UDP packets and what it writes
          on the TCP streams it dials and accepts (push/pull), as
          bytes a minute and kbit/s, mean and max over the nodes

then, unless --sync-bytes is 0, --sync-runs times each way:

  sync    --sync-bytes of pods sent to one node's sync client by an
          in-process sync server (sync/server over a view index, as the
          hub runs it), straight and through a site peer's relay
          (edge/relay with its defaults; the client's direct dial
          fails and it fails over to the relay), each run a fresh
          client and relay; the throughputs and relayed/direct

Results are printed as tables next to the targets (a crashed node found
dead and its endpoints dropped by every peer within 5s at 10 nodes,
judged on the p95 over runs, the max under 20 runs; idle gossip under 2 kbit/s per node at 10
nodes, judged on the max over nodes) and written as JSON to --out. A
full run takes
about seven minutes on two CPUs: three counting idle gossip, two growing
the sites of 50 nodes until they converge, a few seconds the sync;
--quick about 45 seconds.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context() // canceled on SIGINT and SIGTERM by main
			if quick {
				q := meshbench.QuickConfig()
				unlessSet(cmd.Flags(), "sizes", &cfg.Sizes, q.Sizes)
				unlessSet(cmd.Flags(), "runs", &cfg.Runs, q.Runs)
				unlessSet(cmd.Flags(), "idle", &cfg.Idle, q.Idle)
				unlessSet(cmd.Flags(), "sync-runs", &cfg.SyncRuns, q.SyncRuns)
			}
			if err := cfg.Validate(); err != nil {
				return fmt.Errorf("invalid flags: %w", err)
			}
			rep, err := meshbench.Run(ctx, cfg, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			return writeReport(cmd, rep, out)
		},
	}
	f := cmd.Flags()
	f.IntSliceVar(&cfg.Sizes, "sizes", cfg.Sizes, "numbers of nodes of the sites measured")
	f.IntVar(&cfg.Runs, "runs", cfg.Runs, "times the join and the deaths are measured at each size, each on a fresh site; the median and max are reported")
	f.DurationVar(&cfg.Idle, "idle", cfg.Idle, "how long the bytes the nodes of an idle site send are counted")
	f.DurationVar(&cfg.Settle, "settle", cfg.Settle, "how long a converged site is left before its idle bytes are counted")
	f.DurationVar(&cfg.Timeout, "timeout", cfg.Timeout, "bound on each wait for the nodes to see a join or a death")
	f.Int64Var(&cfg.SyncBytes, "sync-bytes", cfg.SyncBytes, "bytes of pods sent to a sync client in each run, direct and relayed; 0 skips the sync measure")
	f.IntVar(&cfg.SyncObjectBytes, "sync-object-bytes", cfg.SyncObjectBytes, "size of each pod the sync measure sends")
	f.IntVar(&cfg.SyncRuns, "sync-runs", cfg.SyncRuns, "runs of the sync measure each way; the median and max are reported")
	f.StringVar(&out, "out", "bench-results/mesh.json", "file to write the results to as JSON")
	f.BoolVar(&quick, "quick", false, "sites of 3 and 10 nodes, one run, 10s idle, for a fast look (flags given explicitly still apply)")
	return cmd
}
