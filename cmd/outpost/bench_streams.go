package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/outpost-mesh/outpost/bench/streamsbench"
)

// streamsNetNSEnv marks the `outpost bench streams` run again inside the
// network namespace made for it.
const streamsNetNSEnv = "OUTPOST_BENCH_STREAMS_NETNS"

// newBenchStreamsCmd returns `outpost bench streams`, which measures
// port-forward, exec and logs -f through the hub to a real pod.
func newBenchStreamsCmd() *cobra.Command {
	var (
		cfg       = streamsbench.DefaultConfig()
		out       string
		protocols string
		quick     bool
	)
	cmd := &cobra.Command{
		Use:   "streams",
		Short: "Measure kubectl port-forward, exec and logs -f through the hub against a direct connection to the pod",
		Long: `Run as root. The benchmark runs itself again in a network namespace of its
own, with only a loopback and no route out, and there starts a hub (this
binary) and one edge agent (--edge-binary) on its own containerd, and two
busybox pods on it: a server (httpd and an nc echo server) and a ticker
that copies lines the benchmark writes into a FIFO on the node to its log.
Then, as kubectl does it with client-go, over each protocol of --protocols
(spdy as kubectl 1.27, websocket as 1.30 and later):

  port-forward  fetches --bulk-size of random bytes --bulk-runs times,
                makes --requests small requests, a connection each, and
                sends --echoes lines through one connection to the echo
                server, through a port-forward and straight to the pod's
                IP, taking turns; throughput as the share of the direct
                path's, and the latency each adds
  exec          runs exec true --execs times, and --keystrokes lines
                through one exec -i cat
  logs -f       writes --log-lines lines and times each to the node's log
                file and to logs -f

Results are printed as tables next to the target (port-forward at least 50%
of the direct path's throughput) and written as JSON to --out. A full run
takes about half a minute on two CPUs; --quick about 15 seconds.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context() // canceled on SIGINT and SIGTERM by main
			if quick {
				q := streamsbench.QuickConfig()
				unlessSet(cmd.Flags(), "bulk-size", &cfg.BulkBytes, q.BulkBytes)
				unlessSet(cmd.Flags(), "bulk-runs", &cfg.BulkRuns, q.BulkRuns)
				unlessSet(cmd.Flags(), "requests", &cfg.Requests, q.Requests)
				unlessSet(cmd.Flags(), "echoes", &cfg.Echoes, q.Echoes)
				unlessSet(cmd.Flags(), "execs", &cfg.Execs, q.Execs)
				unlessSet(cmd.Flags(), "keystrokes", &cfg.Keystrokes, q.Keystrokes)
				unlessSet(cmd.Flags(), "log-lines", &cfg.LogLines, q.LogLines)
			}
			cfg.Protocols = nil
			if protocols != "" {
				cfg.Protocols = strings.Split(protocols, ",")
			}
			var err error
			if cfg.Binary, cfg.EdgeBinary, err = nodeBenchBinaries(cfg.EdgeBinary); err != nil {
				return err
			}
			if err := cfg.Validate(); err != nil {
				return fmt.Errorf("invalid flags: %w", err)
			}
			if err := streamsbench.Check(cfg); err != nil {
				return err
			}
			if done, err := isolateNodeBench(cmd, cfg.Binary, streamsNetNSEnv, 2*cfg.StopTimeout+time.Minute); done || err != nil {
				return err
			}
			rep, err := streamsbench.Run(ctx, cfg, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			return writeReport(cmd, rep, out)
		},
	}
	f := cmd.Flags()
	protocols = strings.Join(cfg.Protocols, ",")
	f.StringVar(&cfg.EdgeBinary, "edge-binary", "", "the outpost-edge binary the agent runs as (default outpost-edge next to this binary)")
	f.StringVar(&cfg.ContainerdBinary, "containerd-binary", cfg.ContainerdBinary, "the containerd the agent starts")
	f.StringVar(&cfg.Dir, "dir", "", "parent of the run's temporary directory; keep it short, containerd's sockets live there (default the system temp dir)")
	f.StringVar(&cfg.LogDir, "log-dir", "", "directory to keep the agent's log in, agent.log (default: removed with the run's directory)")
	f.StringVar(&protocols, "protocols", protocols, "client protocols, comma-separated: spdy (kubectl 1.27) and websocket (kubectl 1.30 and later)")
	f.Var(byteSize{n: &cfg.BulkBytes}, "bulk-size", "size of the file fetched for throughput, such as 64MiB")
	f.IntVar(&cfg.BulkRuns, "bulk-runs", cfg.BulkRuns, "fetches of the bulk file per path; the median counts")
	f.IntVar(&cfg.Requests, "requests", cfg.Requests, "small HTTP requests per path, a connection each")
	f.IntVar(&cfg.Echoes, "echoes", cfg.Echoes, "lines echoed through one connection per path")
	f.IntVar(&cfg.Execs, "execs", cfg.Execs, "exec true runs per protocol")
	f.IntVar(&cfg.Keystrokes, "keystrokes", cfg.Keystrokes, "lines echoed through one exec -i cat per protocol")
	f.IntVar(&cfg.LogLines, "log-lines", cfg.LogLines, "lines written while logs -f follows")
	f.DurationVar(&cfg.LogInterval, "log-interval", cfg.LogInterval, "pause between the lines written for logs -f")
	f.StringVar(&out, "out", "bench-results/streams.json", "file to write the results to as JSON")
	f.BoolVar(&quick, "quick", false, "smaller counts and a 16 MiB bulk file, for a fast look (flags given explicitly still apply)")
	return cmd
}
