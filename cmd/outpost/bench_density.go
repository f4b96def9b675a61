package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/outpost-mesh/outpost/bench/densitybench"
	"github.com/outpost-mesh/outpost/bench/report"
)

// densityNetNSEnv marks the `outpost bench density` run again inside the
// network namespace made for it.
const densityNetNSEnv = "OUTPOST_BENCH_DENSITY_NETNS"

// newBenchDensityCmd returns `outpost bench density`, which measures pod
// density on this machine with real containerd and runc.
func newBenchDensityCmd() *cobra.Command {
	var (
		cfg                      = densitybench.DefaultConfig()
		out, svg                 string
		pods, modes, ociRuntimes string
		quick                    bool
	)
	cmd := &cobra.Command{
		Use:   "density",
		Short: "Measure pod density on this machine: real containerd and runc, memory per pod, start latency, offline reboot",
		Long: `Run as root. The benchmark runs itself again in a network namespace of its
own, with only a loopback and no route out, and there starts a hub (this
binary, ` + "`outpost hub`" + `) and one edge agent (--edge-binary) on its own
containerd, each on fresh data dirs under --dir. For each OCI runtime of
--oci-runtimes (runc, the agent's default, and crun beside it) and each
mode of --modes (pod: a runc shim per pod, the agent's default; node:
--shim-per-node) it:

  imports a busybox image made from this machine's /bin/busybox
  idle     once the node is Ready, after --settle, reads the RSS, anonymous
           RSS and PSS of the agent and its containerd
  steps    for each count of --pods, creates pods up to it in batches of
           --batch through client-go (one busybox sleep each), times each
           from its Create to a watch seeing it Running and Ready, and
           after --settle reads the agent, containerd and the shims

Then, unless --reboot-pods is 0, on a hub and agent of their own with that
many pods running: it kills the hub and the agent with SIGKILL, powers the
node off (every shim, container and containerd killed, mounts, network
namespaces, veths, bridge and cgroups removed), starts the agent again with
the hub still down and times its start to every pod's task running again
with its old IP.

Unless --baseline=false, it measures the floor under those start times in
the same run: the same containerd, image and batches with each OCI runtime
alone (a shim per container, no agent, hub or pod network), and, with the
reboot, containerd started afresh and as many containers started at once.

Results are printed as tables next to the targets (agent idle under 35 MB
RSS and 20 MB anonymous; per-pod overhead under 1 MB PSS with a shim per
node, 4 MB with a shim per pod; pod start p99 under 1s; 100 pods back
within 10s of a reboot), written as JSON to --out and plotted as SVG to
--svg. A full run takes about five minutes on two CPUs; --quick (10 and 20
pods, a reboot of 20) about one.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context() // canceled on SIGINT and SIGTERM by main
			if quick {
				q := densitybench.QuickConfig()
				unlessSet(cmd.Flags(), "pods", &pods, joinInts(q.Pods))
				unlessSet(cmd.Flags(), "reboot-pods", &cfg.RebootPods, q.RebootPods)
				unlessSet(cmd.Flags(), "settle", &cfg.Settle, q.Settle)
			}
			var err error
			if cfg.Pods, err = parseInts(pods); err != nil {
				return fmt.Errorf("--pods: %w", err)
			}
			cfg.Modes, cfg.OCIRuntimes = nil, nil
			if modes != "" {
				cfg.Modes = strings.Split(modes, ",")
			}
			if ociRuntimes != "" {
				cfg.OCIRuntimes = strings.Split(ociRuntimes, ",")
			}
			if !cmd.Flags().Changed("oci-runtimes") && slices.Contains(cfg.OCIRuntimes, densitybench.RuntimeCrun) {
				// By default beside runc where it can run; asked for,
				// Check refuses it where it cannot.
				if err := densitybench.CrunUsable(); err != nil {
					cfg.OCIRuntimes = slices.DeleteFunc(cfg.OCIRuntimes, func(rt string) bool { return rt == densitybench.RuntimeCrun })
					cfg.CrunSkipped = err.Error()
				}
			}
			if cfg.Binary, cfg.EdgeBinary, err = nodeBenchBinaries(cfg.EdgeBinary); err != nil {
				return err
			}
			if err := cfg.Validate(); err != nil {
				return fmt.Errorf("invalid flags: %w", err)
			}
			if err := densitybench.Check(cfg); err != nil {
				return err
			}
			if done, err := isolateNodeBench(cmd, cfg.Binary, densityNetNSEnv, 3*cfg.StopTimeout+time.Minute); done || err != nil {
				return err
			}
			rep, err := densitybench.Run(ctx, cfg, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout())
			if err := rep.Render(cmd.OutOrStdout()); err != nil {
				return err
			}
			if err := report.WriteJSON(out, rep); err != nil {
				return err
			}
			if svg == "" {
				svg = strings.TrimSuffix(out, ".json") + ".svg"
			}
			if err := report.WriteLineSVG(svg, rep.Chart()); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "\nresults written to %s, plot to %s\n", out, svg)
			return nil
		},
	}
	f := cmd.Flags()
	pods, modes, ociRuntimes = joinInts(cfg.Pods), strings.Join(cfg.Modes, ","), strings.Join(cfg.OCIRuntimes, ",")
	f.StringVar(&cfg.EdgeBinary, "edge-binary", "", "the outpost-edge binary the agent runs as (default outpost-edge next to this binary)")
	f.StringVar(&cfg.ContainerdBinary, "containerd-binary", cfg.ContainerdBinary, "the containerd the agent starts")
	f.StringVar(&cfg.Dir, "dir", "", "parent of the run's temporary directory, holding the hub's and the agents' data; keep it short, containerd's sockets live there (default the system temp dir)")
	f.StringVar(&cfg.LogDir, "log-dir", "", "directory to keep the agents' logs in, agent-<mode>.log (default: removed with the run's directory)")
	f.StringVar(&pods, "pods", pods, "pod counts to measure at, ascending, comma-separated")
	f.IntVar(&cfg.Batch, "batch", cfg.Batch, "pods created at once; each batch runs before the next is created")
	f.StringVar(&modes, "modes", modes, "shim modes, comma-separated: pod (a shim per pod) and node (--shim-per-node)")
	f.StringVar(&ociRuntimes, "oci-runtimes", ociRuntimes, "OCI runtimes each mode runs with, comma-separated: runc and crun (the agent's --oci-runtime)")
	f.IntVar(&cfg.RebootPods, "reboot-pods", cfg.RebootPods, "pods running when the node is rebooted offline (0: no reboot)")
	f.BoolVar(&cfg.Baseline, "baseline", cfg.Baseline, "measure containerd and each OCI runtime alone beside the agent, the floor under its start times")
	f.StringVar(&cfg.RebootMode, "reboot-mode", cfg.RebootMode, "shim mode of the rebooted node: pod or node")
	f.DurationVar(&cfg.Settle, "settle", cfg.Settle, "pause before each memory reading")
	f.DurationVar(&cfg.BatchTimeout, "batch-timeout", cfg.BatchTimeout, "longest wait for a batch's pods to run")
	f.DurationVar(&cfg.RecoverTimeout, "recover-timeout", cfg.RecoverTimeout, "longest wait, after the reboot, for every pod to run again")
	f.StringVar(&out, "out", "bench-results/density.json", "file to write the results to as JSON")
	f.StringVar(&svg, "svg", "", "file to write the SVG plot of memory against pods to (default --out with .svg for .json)")
	f.BoolVar(&quick, "quick", false, "both modes at 10 and 20 pods, a reboot of 20, 3s settles, for a fast look (flags given explicitly still apply)")
	return cmd
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

func parseInts(s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("%q is not a number", f)
		}
		out = append(out, n)
	}
	return out, nil
}
