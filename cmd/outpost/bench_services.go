package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/outpost-mesh/outpost/bench/servicesbench"
)

// servicesNetNSEnv marks the `outpost bench services` run again inside
// the network namespace made for it.
const servicesNetNSEnv = "OUTPOST_BENCH_SERVICES_NETNS"

// newBenchServicesCmd returns `outpost bench services`, which measures
// the node's service routing in the kernel, eBPF against nftables, and
// its DNS server.
func newBenchServicesCmd() *cobra.Command {
	var (
		cfg   = servicesbench.DefaultConfig()
		out   string
		quick bool
	)
	cmd := &cobra.Command{
		Use:   "services",
		Short: "Measure service routing, eBPF socket load-balancing against the nftables fallback, and the node DNS server",
		Long: `Run as root. The benchmark runs itself again in a network namespace of its
own, and there makes a network namespace for each node it plays, a bpffs
and an empty cgroup of its own; eBPF programs act only on the sockets of
its namespaces. It measures, eBPF socket load-balancing (netd/ebpflb)
against the nftables fallback (netd/nftlb, the mode that routes
everything) in the same run:

  programming   the first Sync of --sizes ClusterIP Services of 4
                backends each into a fresh dataplane, and the Sync that
                then changes one Service's backends, median of --runs
  connect       TCP connect latency through a ClusterIP, with
                --connect-sizes Services programmed, against a connect
                straight to a backend, --connects a path, taking turns
  dns           the node DNS server (netd/dns) with a zone of
                --dns-services Services, queried over UDP from a pod
                namespace joined by a veth, --dns-clients at once, for
                --dns-duration: cluster names and a cached external name
  agent         a fresh process (this binary again) doing the agent's
                work for the largest of --sizes: decoding the objects,
                building the table and DNS zone, the eBPF Sync; its CPU
                time and peak RSS
  real agent    a hub (this binary) and an agent (--edge-binary, with its
                containerd) as the density benchmark runs them, the
                largest of --sizes Services created through the hub: the
                agent's CPU time and peak RSS until it serves them all

Results are printed as tables next to the targets (10,000 Services
programmed in under 1s with eBPF, at least 50x faster than nftables;
connect latency within 10% from 10 to 10,000 Services; agent RSS under
60 MB at 10,000 Services, judged on the real agent) and written as JSON
to --out. A full run takes about three minutes on two CPUs, two of them
creating the real agent's Services through the hub; --quick (1,000
Services only, no real agent, targets not judged) some 15 seconds. Everything the run made is taken away at its
end, also on ^C.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context() // canceled on SIGINT and SIGTERM by main
			if os.Getenv(servicesbench.AgentEnv) != "" {
				// The agent's stand-in, run by the benchmark.
				return servicesbench.AgentMain(ctx, cmd.OutOrStdout())
			}
			if quick {
				q := servicesbench.QuickConfig()
				unlessSet(cmd.Flags(), "sizes", &cfg.Sizes, q.Sizes)
				unlessSet(cmd.Flags(), "runs", &cfg.Runs, q.Runs)
				unlessSet(cmd.Flags(), "connects", &cfg.Connects, q.Connects)
				unlessSet(cmd.Flags(), "connect-sizes", &cfg.ConnectSizes, q.ConnectSizes)
				unlessSet(cmd.Flags(), "dns-services", &cfg.DNSServices, q.DNSServices)
				unlessSet(cmd.Flags(), "dns-duration", &cfg.DNSDuration, q.DNSDuration)
				unlessSet(cmd.Flags(), "real-agent", &cfg.RealAgent, q.RealAgent)
			}
			var err error
			if cfg.Binary, cfg.EdgeBinary, err = nodeBenchBinaries(cfg.EdgeBinary); err != nil {
				return err
			}
			self := cfg.Binary
			if err := cfg.Validate(); err != nil {
				return fmt.Errorf("invalid flags: %w", err)
			}
			if err := servicesbench.Check(cfg); err != nil {
				return err
			}
			if done, err := isolateNodeBench(cmd, self, servicesNetNSEnv, cfg.OpTimeout+time.Minute); done || err != nil {
				return err
			}
			rep, err := servicesbench.Run(ctx, cfg, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			return writeReport(cmd, rep, out)
		},
	}
	f := cmd.Flags()
	f.IntSliceVar(&cfg.Sizes, "sizes", cfg.Sizes, "numbers of Services to time programming at; the agent's stand-in runs at the largest")
	f.IntVar(&cfg.Runs, "runs", cfg.Runs, "programming runs per dataplane and size; the median counts")
	f.IntVar(&cfg.Connects, "connects", cfg.Connects, "TCP connects per path and table size")
	f.IntVar(&cfg.ConnectBatch, "connect-batch", cfg.ConnectBatch, "connects a path makes before the next path's turn")
	f.IntSliceVar(&cfg.ConnectSizes, "connect-sizes", cfg.ConnectSizes, "numbers of Services programmed while connect latency is measured")
	f.IntVar(&cfg.ConnectRounds, "connect-rounds", cfg.ConnectRounds, "rounds in which the connect sizes take turns, one order then the other")
	f.IntVar(&cfg.DNSServices, "dns-services", cfg.DNSServices, "Services in the DNS server's zone")
	f.IntVar(&cfg.DNSClients, "dns-clients", cfg.DNSClients, "DNS clients querying at once")
	f.DurationVar(&cfg.DNSDuration, "dns-duration", cfg.DNSDuration, "how long each kind of DNS query is sent")
	f.BoolVar(&cfg.Agent, "agent", cfg.Agent, "measure the agent's stand-in, a fresh process, programming the largest of --sizes")
	f.BoolVar(&cfg.RealAgent, "real-agent", cfg.RealAgent, "measure a real agent joined to a hub while the largest of --sizes Services are created through the hub (not with --quick unless given)")
	f.StringVar(&cfg.EdgeBinary, "edge-binary", "", "the outpost-edge binary the real agent runs as (default outpost-edge next to this binary)")
	f.StringVar(&cfg.ContainerdBinary, "containerd-binary", cfg.ContainerdBinary, "the containerd the real agent starts")
	f.StringVar(&out, "out", "bench-results/services.json", "file to write the results to as JSON")
	f.BoolVar(&quick, "quick", false, "1,000 Services only, fewer runs and connects, for a fast look (flags given explicitly still apply)")
	return cmd
}
