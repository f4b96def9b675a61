package main

import (
	"github.com/spf13/cobra"

	"github.com/outpost-mesh/outpost/cmd/internal/cli"
)

// newVersionCmd returns `outpost version`, which prints cli.PrintVersion's
// line on stdout.
func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: cli.VersionShort,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cli.PrintVersion(cmd.OutOrStdout(), "outpost")
		},
	}
}
