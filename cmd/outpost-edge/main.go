// Command outpost-edge is the slim agent that runs on each edge gateway. It
// links nothing of the hub (test/arch checks that), so it stays small.
package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/outpost-mesh/outpost/cmd/internal/cli"
	"github.com/outpost-mesh/outpost/cmd/internal/edgecmd"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCmd().ExecuteContext(ctx)
	stop()
	if err != nil {
		os.Exit(1)
	}
}

// newRootCmd returns the outpost-edge command. Its PersistentPreRunE makes
// the logger of --log-level and --log-format slog's default.
func newRootCmd() *cobra.Command {
	var logFlags cli.LogFlags
	cmd := &cobra.Command{
		Use:          "outpost-edge",
		Short:        "Outpost edge agent: runs the pods of one gateway, online or not",
		SilenceUsage: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			log, err := logFlags.Logger(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			slog.SetDefault(log)
			return nil
		},
	}
	logFlags.Register(cmd.PersistentFlags())
	cmd.AddCommand(cli.NewVersionCmd("outpost-edge"))
	// `outpost-edge --hub ...` runs the agent, as `outpost edge` does.
	run := edgecmd.NewCmd("outpost-edge")
	cmd.Flags().AddFlagSet(run.Flags())
	cmd.Args = run.Args
	cmd.RunE = run.RunE
	return cmd
}
