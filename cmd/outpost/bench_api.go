package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/outpost-mesh/outpost/bench/apibench"
)

// newBenchAPICmd returns `outpost bench api`, which measures the hub's
// Kubernetes API through client-go against a hub it runs as a child.
func newBenchAPICmd() *cobra.Command {
	var (
		cfg   = apibench.DefaultConfig()
		out   string
		quick bool
		runs  int
		as    string
	)
	cmd := &cobra.Command{
		Use:   "api",
		Short: "Measure the hub's API: pod creates, lists and watch delivery through client-go",
		Long: `Start a hub (this binary, ` + "`outpost hub`" + `) on a fresh data dir under --dir and a
free loopback port, then, through client-go over mutual TLS:

  watch    open --watchers watches on the pods of one namespace
  create   create --pods minimal pods with --workers concurrent workers
  list     list every pod at once, then in pages of --page-size
  deliver  wait until every watcher has seen every pod (at most --delivery-timeout)

and read the hub's RSS and CPU time from /proc. The hub is then stopped and
its data dir removed. With --as=both (the default) the workload runs as the
admin (system:masters) and as a user authorized by RBAC (a Role on pods
bound in the namespace), alternately, and the two are compared: the cost
of authorization, held to under 10% of creates/s. The results are printed as a table, next to the
targets (at least 1,500 creates/s, create p99 under 100ms, RSS under
300 MB for the default workload), and written as JSON to --out. The
workload runs --runs times and the median run by creates/s is reported,
with a line per run. A full run takes about a minute; --quick a few
seconds, with rough numbers.

` + "`outpost bench api memory`" + ` measures the hub's memory with large objects instead.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context() // canceled on SIGINT and SIGTERM by main
			if quick {
				q := apibench.QuickConfig()
				unlessSet(cmd.Flags(), "pods", &cfg.Pods, q.Pods)
				unlessSet(cmd.Flags(), "workers", &cfg.Workers, q.Workers)
				unlessSet(cmd.Flags(), "watchers", &cfg.Watchers, q.Watchers)
				unlessSet(cmd.Flags(), "page-size", &cfg.PageSize, q.PageSize)
				unlessSet(cmd.Flags(), "runs", &runs, 1)
			}
			exe, err := os.Executable()
			if err != nil {
				return fmt.Errorf("find own binary to run the hub: %w", err)
			}
			cfg.Binary = exe
			if err := cfg.Validate(); err != nil {
				return fmt.Errorf("invalid flags: %w", err)
			}
			switch as {
			case "both":
				cmp, err := apibench.RunCompare(ctx, cfg, runs, cmd.ErrOrStderr())
				if err != nil {
					return err
				}
				return writeReport(cmd, cmp, out)
			case "admin", "rbac":
				cfg.RBAC = as == "rbac"
				rep, err := apibench.RunMedian(ctx, cfg, runs, cmd.ErrOrStderr())
				if err != nil {
					return err
				}
				return writeReport(cmd, rep, out)
			}
			return fmt.Errorf("invalid flags: --as %q is not both, admin or rbac", as)
		},
	}
	cmd.AddCommand(newBenchAPIMemoryCmd()) // bench_api_memory.go: outpost bench api memory
	cmd.AddCommand(newBenchAPIApplyCmd())  // bench_api_apply.go: outpost bench api apply
	cmd.AddCommand(newBenchAPICRDCmd())    // bench_api_crd.go: outpost bench api crd
	f := cmd.Flags()
	f.StringVar(&cfg.Dir, "dir", "", "parent directory of the hub's temporary data dir (default the system temp dir)")
	f.StringVar(&cfg.Namespace, "namespace", cfg.Namespace, "namespace the pods are created in")
	f.IntVar(&cfg.Pods, "pods", cfg.Pods, "pods to create")
	f.IntVar(&cfg.Workers, "workers", cfg.Workers, "concurrent creators, sharing one client")
	f.IntVar(&cfg.Watchers, "watchers", cfg.Watchers, "watches on the pods, each with a client of its own")
	f.IntVar(&cfg.PageSize, "page-size", cfg.PageSize, "limit of each page of the paged list")
	f.BoolVar(&cfg.JSON, "json", cfg.JSON, "speak JSON, as kubectl does, instead of protobuf, client-go's default")
	f.BoolVar(&cfg.MetadataWatchers, "metadata-watchers", cfg.MetadataWatchers, "watch metadata only (PartialObjectMetadata), as client-go's metadata informers do")
	f.DurationVar(&cfg.ReadyTimeout, "ready-timeout", cfg.ReadyTimeout, "longest wait for the hub to be ready")
	f.DurationVar(&cfg.DeliveryTimeout, "delivery-timeout", cfg.DeliveryTimeout, "longest wait, after the creates, for every watcher to see every pod")
	f.DurationVar(&cfg.StopTimeout, "stop-timeout", cfg.StopTimeout, "how long the hub gets to exit after SIGTERM before it is killed")
	f.StringVar(&cfg.ProfileDir, "profile", "", "directory to write CPU profiles of the hub and of the clients to, taken over the first --profile-duration of the creates")
	f.DurationVar(&cfg.ProfileDuration, "profile-duration", cfg.ProfileDuration, "length of the CPU profiles of --profile")
	f.StringVar(&out, "out", "bench-results/api.json", "file to write the results to as JSON")
	f.IntVar(&runs, "runs", 3, "runs of the workload, each against a fresh hub; the median by creates/s is reported (this machine is shared and noisy)")
	f.StringVar(&as, "as", "both", "whom the workload acts as: admin (system:masters), rbac (user "+apibench.RBACUser+", authorized by RBAC), or both, compared")
	f.BoolVar(&quick, "quick", false, "500 pods, 10 workers, 10 watchers, for a smoke run (flags given explicitly still apply)")
	return cmd
}
