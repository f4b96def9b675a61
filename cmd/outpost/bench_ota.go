package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/outpost-mesh/outpost/bench/otabench"
)

// newBenchOTACmd returns `outpost bench ota`, which measures over-the-air
// updates of a fleet of simulated edge nodes against a hub it runs as a
// child.
func newBenchOTACmd() *cobra.Command {
	var (
		cfg   = otabench.DefaultConfig()
		out   string
		quick bool
	)
	cmd := &cobra.Command{
		Use:   "ota",
		Short: "Measure over-the-air updates of a fleet of simulated nodes: waves, hub CPU and RSS, bytes per node full and delta, resume cost",
		Long: `Start a hub (this binary, ` + "`outpost hub`" + `) on a fresh data dir under --dir,
and --nodes edge agents on the fake runtime in this process, each with its own
QUIC connection through a counting UDP relay. The nodes' slots install
nothing: each agent fetches the release over its sync connection, verifying
every chunk, into its data dir under --agent-dir (a tmpfs by default), hands
it to the slots, which record the trial, and deletes it; the trial commits.

Then make a signing key, trust it, create a release of a --artifact-size
pseudo-random agent (2.0.0) and of the same with a few small regions changed
(2.0.1), and roll out 2.0.0 to every node in --waves (cutting --cut-nodes
nodes' links for --cut-for mid-transfer in its last wave), then 2.0.1, which
the nodes fetch as a delta against 2.0.0.

Given two builds of the agent, --base-artifact and --artifact (` + "`make bench-ota`" + `
builds outpost-edge twice, with two versions linked in), the delta is measured
on them instead of 2.0.1: after 2.0.0, the base build (2.1.0) is rolled out to
--rebuilt-nodes nodes, which fetch it whole, then the rebuild (2.1.1), which
they fetch as a delta against the base build.

Printed: time per wave and in total, hub CPU and RSS, bytes per node full and
delta, and the cut nodes' bytes received per artifact; next to the targets
(1,000 nodes of a 5 MB artifact updated within 10 minutes; a small change's
delta under 25% of the full artifact). Written as JSON to --out.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if quick {
				q := otabench.QuickConfig()
				unlessSet(cmd.Flags(), "nodes", &cfg.Nodes, q.Nodes)
				unlessSet(cmd.Flags(), "cut-nodes", &cfg.CutNodes, q.CutNodes)
				unlessSet(cmd.Flags(), "rollout-timeout", &cfg.RolloutTimeout, q.RolloutTimeout)
			}
			if !cmd.Flags().Changed("rebuilt-nodes") {
				cfg.RebuiltNodes = min(cfg.RebuiltNodes, cfg.Nodes)
			}
			exe, err := os.Executable()
			if err != nil {
				return fmt.Errorf("find own binary to run the hub: %w", err)
			}
			cfg.Binary = exe
			if err := cfg.Validate(); err != nil {
				return fmt.Errorf("invalid flags: %w", err)
			}
			rep, err := otabench.Run(cmd.Context(), cfg, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			return writeReport(cmd, rep, out)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Dir, "dir", "", "parent directory of the run's temporary directory (default the system temp dir)")
	f.StringVar(&cfg.AgentDir, "agent-dir", defaultAgentDir(), "parent of the agents' temporary data dirs, where downloads are staged: a tmpfs (\"\": under --dir)")
	f.IntVar(&cfg.Nodes, "nodes", cfg.Nodes, "simulated edge nodes")
	f.IntVar(&cfg.ArtifactSize, "artifact-size", cfg.ArtifactSize, "size of the agent artifact, in bytes")
	f.IntVar(&cfg.ChangedRegions, "changed-regions", cfg.ChangedRegions, "regions changed in the delta release")
	f.IntVar(&cfg.ChangedBytes, "changed-bytes", cfg.ChangedBytes, "bytes of each changed region")
	f.StringVar(&cfg.BaseArtifact, "base-artifact", "", "a build of the agent to measure the delta from (with --artifact; default: a pseudo-random artifact)")
	f.StringVar(&cfg.Artifact, "artifact", "", "a rebuild of --base-artifact with a small change, to measure the delta to")
	f.IntVar(&cfg.RebuiltNodes, "rebuilt-nodes", cfg.RebuiltNodes, "nodes that take --base-artifact, then --artifact as a delta")
	f.StringVar(&cfg.Waves, "waves", cfg.Waves, "the rollouts' cumulative wave targets")
	f.DurationVar(&cfg.HealthWindow, "health-window", cfg.HealthWindow, "the rollouts' health window")
	f.IntVar(&cfg.CutNodes, "cut-nodes", cfg.CutNodes, "nodes whose link is cut mid-transfer in the full rollout's last wave")
	f.DurationVar(&cfg.CutFor, "cut-for", cfg.CutFor, "how long a cut link drops every datagram")
	f.DurationVar(&cfg.AgentResync, "agent-resync", cfg.AgentResync, "each agent's unprompted reconcile period")
	f.DurationVar(&cfg.JoinTimeout, "join-timeout", cfg.JoinTimeout, "longest wait for every node to be Ready")
	f.DurationVar(&cfg.RolloutTimeout, "rollout-timeout", cfg.RolloutTimeout, "longest wait for each rollout to reach every node")
	f.StringVar(&out, "out", "bench-results/ota.json", "file to write the results to as JSON")
	f.BoolVar(&quick, "quick", false, "50 nodes, 2 cuts, for a smoke run (flags given explicitly still apply)")
	return cmd
}
