// Command outpost is the Outpost hub and command-line tool: `outpost hub`
// runs the control plane, `outpost bench` the benchmarks, `outpost release`
// makes signed over-the-air releases, `outpost rollout` rolls them out,
// `outpost version` prints the build.
package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"github.com/outpost-mesh/outpost/cmd/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCmd().ExecuteContext(ctx)
	stop()
	if err != nil {
		os.Exit(1)
	}
}

// newRootCmd returns the outpost command with its subcommands. Its
// PersistentPreRunE builds the logger from --log-level and --log-format and
// makes it slog's default, so subcommands log through slog.Default(); a
// subcommand must not define its own PersistentPreRun(E), which would replace
// this one.
// klogOnce sets klog's logger for the first command the process runs.
var klogOnce sync.Once

func newRootCmd() *cobra.Command {
	var logFlags cli.LogFlags
	cmd := &cobra.Command{
		Use:   "outpost",
		Short: "Outpost: a Kubernetes-compatible control plane for the edge",
		Long: `Outpost serves the Kubernetes API from a hub for fleets of small edge
gateways, each running one slim agent that keeps its pods running while the
uplink is down.`,
		SilenceUsage: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			log, err := logFlags.Logger(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			slog.SetDefault(log)
			// client-go's own logs (leader election, informers) go
			// the same way, not to stderr in klog's format. Once per
			// process: klog's logger is global, and read unlocked by
			// the clients of a command that may still be running.
			klogOnce.Do(func() { klog.SetSlogLogger(log) })
			return nil
		},
	}
	logFlags.Register(cmd.PersistentFlags())
	cmd.AddCommand(
		newVersionCmd(),
		newHubCmd(),
		newBenchCmd(),
		newTokenCmd(),
		newEdgeCmd(),
		newUpCmd(),
		newImageCmd(),
		newReleaseCmd(),
		newRolloutCmd(),
	)
	return cmd
}
