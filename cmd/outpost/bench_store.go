package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/outpost-mesh/outpost/bench/storebench"
)

// newBenchStoreCmd returns `outpost bench store`, which compares the badger
// and etcd store backends, and its hidden `worker` subcommand, which
// measures one backend in a process of its own.
func newBenchStoreCmd() *cobra.Command {
	var (
		flags storeBenchFlags
		out   string
		quick bool
	)
	cmd := &cobra.Command{
		Use:   "store",
		Short: "Compare the badger and etcd store backends: durable writes, watch latency, memory",
		Long: `Compare the hub's store backends, badger (embedded) and etcd (an embedded etcd
server reached over loopback, as a hub talks to a local etcd):

  writes   durable Creates of 1 KiB values by 1, 16 and 64 concurrent writers
  watch    delivery latency of a steady stream of writes to 100 watchers
  memory   RSS of the process and size on disk after 100,000 keys

Every phase of every backend runs in a child process of its own on an empty
store in a fresh directory under --dir, removed afterwards. The results are
printed as a table and written as JSON to --out. A full run takes three to
four minutes; --quick about one, with rough numbers.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context() // canceled on SIGINT and SIGTERM by main
			cfg := flags.config(cmd.Flags(), quick)
			if err := cfg.Validate(); err != nil {
				return fmt.Errorf("invalid flags: %w", err)
			}
			exe, err := os.Executable()
			if err != nil {
				return fmt.Errorf("find own binary to run workers: %w", err)
			}
			run := storebench.ExecRunner(func(b storebench.Backend, p storebench.Phase) []string {
				args := []string{exe, "bench", "store", "worker", "--json",
					"--backend", string(b), "--phase", string(p)}
				return append(args, storeBenchArgs(cfg)...)
			})
			rep, err := storebench.Compare(ctx, cfg, run, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			return writeReport(cmd, rep, out)
		},
	}
	flags.register(cmd.Flags())
	cmd.Flags().StringVar(&out, "out", "bench-results/store.json", "file to write the results to as JSON")
	cmd.Flags().BoolVar(&quick, "quick", false, "shorter measurements and 10,000 keys, for a smoke run (flags given explicitly still apply)")
	cmd.AddCommand(newBenchStoreWorkerCmd())
	return cmd
}

// newBenchStoreWorkerCmd returns the hidden `outpost bench store worker`,
// which measures one backend in this process; `bench store` runs it as a
// child per backend and phase.
func newBenchStoreWorkerCmd() *cobra.Command {
	var (
		flags   storeBenchFlags
		backend string
		phases  string
		asJSON  bool
	)
	cmd := &cobra.Command{
		Use:    "worker",
		Short:  "Measure one store backend in this process (run by `outpost bench store`)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context() // canceled on SIGINT and SIGTERM by main
			b, err := storebench.ParseBackend(backend)
			if err != nil {
				return fmt.Errorf("invalid --backend: %w", err)
			}
			ps, err := storebench.ParsePhases(phases)
			if err != nil {
				return fmt.Errorf("invalid --phase: %w", err)
			}
			cfg := flags.config(cmd.Flags(), false)
			res, err := storebench.Run(ctx, cfg, b, ps...)
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(res)
			}
			return storebench.NewReport(cfg, res).Render(cmd.OutOrStdout())
		},
	}
	flags.register(cmd.Flags())
	cmd.Flags().StringVar(&backend, "backend", "", "backend to measure: badger or etcd")
	cmd.Flags().StringVar(&phases, "phase", "all", "phases to measure, comma-separated: writes, watch, memory or all")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}

// storeBenchFlags holds the flags that set a storebench.Config.
type storeBenchFlags struct {
	cfg storebench.Config
}

func (f *storeBenchFlags) register(fs *pflag.FlagSet) {
	d := storebench.DefaultConfig()
	fs.StringVar(&f.cfg.Dir, "dir", "", "parent directory of the temporary data dirs (default the system temp dir)")
	fs.IntSliceVar(&f.cfg.Writers, "writers", d.Writers, "counts of concurrent writers to measure")
	fs.DurationVar(&f.cfg.Duration, "duration", d.Duration, "measured time per count of writers")
	fs.DurationVar(&f.cfg.Warmup, "warmup", d.Warmup, "unmeasured warm-up before each count of writers")
	fs.IntVar(&f.cfg.ValueSize, "value-size", d.ValueSize, "bytes per value")
	fs.IntVar(&f.cfg.Watchers, "watchers", d.Watchers, "concurrent watchers")
	fs.IntVar(&f.cfg.WatchRate, "watch-rate", d.WatchRate, "writes per second while watched")
	fs.DurationVar(&f.cfg.WatchDuration, "watch-duration", d.WatchDuration, "how long the watched writes go on")
	fs.DurationVar(&f.cfg.WatchDrain, "watch-drain", d.WatchDrain, "how long to wait for the last watch deliveries")
	fs.IntVar(&f.cfg.Keys, "keys", d.Keys, "keys written before measuring memory")
	fs.IntVar(&f.cfg.KeyWriters, "key-writers", d.KeyWriters, "concurrent writers of those keys")
	fs.DurationVar(&f.cfg.Settle, "settle", d.Settle, "longest wait, idle, for memory to stop falling after those writes (0 skips it)")
}

// config returns the config the flags set, starting from
// storebench.QuickConfig instead of the defaults when quick is set.
func (f *storeBenchFlags) config(fs *pflag.FlagSet, quick bool) storebench.Config {
	cfg := f.cfg
	if !quick {
		return cfg
	}
	q := storebench.QuickConfig()
	unlessSet(fs, "writers", &cfg.Writers, q.Writers)
	unlessSet(fs, "duration", &cfg.Duration, q.Duration)
	unlessSet(fs, "warmup", &cfg.Warmup, q.Warmup)
	unlessSet(fs, "value-size", &cfg.ValueSize, q.ValueSize)
	unlessSet(fs, "watchers", &cfg.Watchers, q.Watchers)
	unlessSet(fs, "watch-rate", &cfg.WatchRate, q.WatchRate)
	unlessSet(fs, "watch-duration", &cfg.WatchDuration, q.WatchDuration)
	unlessSet(fs, "watch-drain", &cfg.WatchDrain, q.WatchDrain)
	unlessSet(fs, "keys", &cfg.Keys, q.Keys)
	unlessSet(fs, "key-writers", &cfg.KeyWriters, q.KeyWriters)
	unlessSet(fs, "settle", &cfg.Settle, q.Settle)
	return cfg
}

// unlessSet sets *dst to v unless the flag name was given.
func unlessSet[T any](fs *pflag.FlagSet, name string, dst *T, v T) {
	if !fs.Changed(name) {
		*dst = v
	}
}

// storeBenchArgs returns the flags that pass cfg to a worker.
func storeBenchArgs(cfg storebench.Config) []string {
	writers := make([]string, len(cfg.Writers))
	for i, n := range cfg.Writers {
		writers[i] = strconv.Itoa(n)
	}
	dur := func(d time.Duration) string { return d.String() }
	args := []string{
		"--writers=" + strings.Join(writers, ","),
		"--duration=" + dur(cfg.Duration),
		"--warmup=" + dur(cfg.Warmup),
		"--value-size=" + strconv.Itoa(cfg.ValueSize),
		"--watchers=" + strconv.Itoa(cfg.Watchers),
		"--watch-rate=" + strconv.Itoa(cfg.WatchRate),
		"--watch-duration=" + dur(cfg.WatchDuration),
		"--watch-drain=" + dur(cfg.WatchDrain),
		"--keys=" + strconv.Itoa(cfg.Keys),
		"--key-writers=" + strconv.Itoa(cfg.KeyWriters),
		"--settle=" + dur(cfg.Settle),
	}
	if cfg.Dir != "" {
		args = append(args, "--dir="+cfg.Dir)
	}
	return args
}
