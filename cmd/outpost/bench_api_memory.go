package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/outpost-mesh/outpost/bench/apibench"
	"github.com/outpost-mesh/outpost/bench/report"
	"github.com/outpost-mesh/outpost/internal/bytesize"
)

// newBenchAPIMemoryCmd returns `outpost bench api memory`, which measures
// how the hub's memory grows with the size of what it stores.
func newBenchAPIMemoryCmd() *cobra.Command {
	var (
		cfg   = apibench.DefaultMemoryConfig()
		size  = byteSize{n: &cfg.ObjectSize}
		out   string
		plot  string
		quick bool
		// hubBinary is the outpost binary the hub runs from.
		hubBinary string
	)
	cmd := &cobra.Command{
		Use:   "memory",
		Short: "Measure the hub's memory with large objects: RSS per phase against the bytes stored",
		Long: `Start a hub (this binary, ` + "`outpost hub`" + `) on a fresh data dir under --dir and a
free loopback port, then, phase by phase:

  ready    the hub starts
  create   --json-watches and --protobuf-watches watches on the namespace's
           ConfigMaps are opened, and --objects ConfigMaps of --object-size
           bytes each are created by --writers writers
  lists    every ConfigMap is listed: unpaged in JSON and in protobuf, in
           pages of --page-size in both, in pages of --small-page-size in
           JSON, and as kubectl get's Table (--table); each response is read
           as a stream and discarded
  settle   the hub is left idle for --min-idle, then until its RSS stops
           falling (at most --settle-limit)
  restart  the hub is stopped and started again on the same data dir

and read the hub's RSS at the end of each phase and its peak during it
(VmHWM reset through /proc/PID/clear_refs, and RSS sampled). The results
are printed as tables next to the targets (peak RSS under 2x the bytes
stored plus 150 MB, settled RSS under 1.5x plus 100 MB), written as JSON
to --out and plotted as SVG to --plot. With the defaults, 400 ConfigMaps
of 500 KB (200 MB), a run takes about a minute; --quick a few seconds,
with numbers not held to the targets. An idle Go process collects garbage
only every two minutes: --min-idle 130s shows the hub after that.`,
		Example: `  outpost bench api memory
  outpost bench api memory --object-size 1MB --objects 200
  outpost bench api memory --hub-flag=--memory-limit=600MB --profile /tmp/heap`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context() // canceled on SIGINT and SIGTERM by main
			if quick {
				q := apibench.QuickMemoryConfig()
				unlessSet(cmd.Flags(), "objects", &cfg.Objects, q.Objects)
				unlessSet(cmd.Flags(), "object-size", &cfg.ObjectSize, q.ObjectSize)
				unlessSet(cmd.Flags(), "page-size", &cfg.PageSize, q.PageSize)
				unlessSet(cmd.Flags(), "small-page-size", &cfg.SmallPageSize, q.SmallPageSize)
				unlessSet(cmd.Flags(), "min-idle", &cfg.MinIdle, q.MinIdle)
				unlessSet(cmd.Flags(), "settle-limit", &cfg.SettleLimit, q.SettleLimit)
			}
			if hubBinary == "" {
				exe, err := os.Executable()
				if err != nil {
					return fmt.Errorf("find own binary to run the hub: %w", err)
				}
				hubBinary = exe
			}
			cfg.Binary = hubBinary
			if err := cfg.Validate(); err != nil {
				return fmt.Errorf("invalid flags: %w", err)
			}
			if plot == "" {
				plot = strings.TrimSuffix(out, ".json") + ".svg"
			}
			rep, err := apibench.RunMemory(ctx, cfg, cmd.ErrOrStderr())
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
			if err := report.WriteSVG(plot, rep.Chart()); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "\nresults written to %s, plot to %s\n", out, plot)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Dir, "dir", "", "parent directory of the hub's temporary data dir (default the system temp dir)")
	f.StringVar(&cfg.Namespace, "namespace", cfg.Namespace, "namespace the ConfigMaps are created in")
	f.IntVar(&cfg.Objects, "objects", cfg.Objects, "ConfigMaps to store")
	f.Var(size, "object-size", fmt.Sprintf("size of each ConfigMap's data, such as 500KB or 1MiB (at most %s)", report.Bytes(apibench.MaxObjectSize)))
	f.IntVar(&cfg.Writers, "writers", cfg.Writers, "concurrent creators, sharing one client")
	f.IntVar(&cfg.JSONWatches, "json-watches", cfg.JSONWatches, "JSON watches on the ConfigMaps, open from before the creates to the end of the settle")
	f.IntVar(&cfg.ProtobufWatches, "protobuf-watches", cfg.ProtobufWatches, "protobuf watches on the ConfigMaps, likewise")
	f.IntVar(&cfg.PageSize, "page-size", cfg.PageSize, "limit of the paged lists and of the Table list")
	f.IntVar(&cfg.SmallPageSize, "small-page-size", cfg.SmallPageSize, "limit of one more paged JSON list; 0 for none")
	f.BoolVar(&cfg.Table, "table", cfg.Table, "also list as kubectl get does, as a Table")
	f.DurationVar(&cfg.MinIdle, "min-idle", cfg.MinIdle, "how long the hub is left idle after the lists before its RSS is watched for settling")
	f.DurationVar(&cfg.SettleLimit, "settle-limit", cfg.SettleLimit, "longest wait, after --min-idle, for the hub's RSS to stop falling")
	f.DurationVar(&cfg.SampleInterval, "sample-interval", cfg.SampleInterval, "how often the hub's RSS is read during a phase")
	f.StringVar(&hubBinary, "hub-binary", "", "outpost binary to run the hub under test with, such as an older build to compare (default this binary)")
	f.StringArrayVar(&cfg.HubArgs, "hub-flag", nil, "a flag of outpost hub for the hub under test, such as --hub-flag=--memory-limit=600MB (repeatable)")
	f.StringVar(&cfg.ProfileDir, "profile", "", "directory to write a heap profile of the hub to at the end of every phase (after settle, with a forced GC: what stays live)")
	f.DurationVar(&cfg.ReadyTimeout, "ready-timeout", cfg.ReadyTimeout, "longest wait for the hub to be ready")
	f.DurationVar(&cfg.DeliveryTimeout, "delivery-timeout", cfg.DeliveryTimeout, "longest wait, after the creates, for every watch to have every ConfigMap")
	f.DurationVar(&cfg.StopTimeout, "stop-timeout", cfg.StopTimeout, "how long the hub gets to exit after SIGTERM before it is killed")
	f.StringVar(&out, "out", "bench-results/api-memory.json", "file to write the results to as JSON")
	f.StringVar(&plot, "plot", "", "file to write the SVG plot of RSS per phase to (default --out with .svg for .json)")
	f.BoolVar(&quick, "quick", false, "20 ConfigMaps of 20 kB, pages of 8 and 3, a short idle, for a smoke run (flags given explicitly still apply)")
	return cmd
}

// byteSize is a flag holding a size in bytes, given with an optional unit
// (500KB, 1.5MiB).
type byteSize struct{ n *int }

func (b byteSize) String() string {
	if b.n == nil {
		return ""
	}
	return report.Bytes(uint64(*b.n))
}

func (b byteSize) Set(s string) error {
	v, err := bytesize.Parse(s)
	if err != nil {
		return err
	}
	if v > 1<<31 {
		return fmt.Errorf("size %q is too large", s)
	}
	*b.n = int(v)
	return nil
}

func (byteSize) Type() string { return "size" }
