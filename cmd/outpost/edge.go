package main

import (
	"github.com/spf13/cobra"

	"github.com/outpost-mesh/outpost/cmd/internal/edgecmd"
)

// newEdgeCmd returns `outpost edge`, the cobra command of edgecmd's flags:
// the agent outpost-edge runs.
func newEdgeCmd() *cobra.Command {
	f := edgecmd.DefaultFlags()
	cmd := &cobra.Command{
		Use:     "edge",
		Short:   edgecmd.Short,
		Long:    edgecmd.Long,
		Example: edgecmd.Example,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return f.Run(cmd.Context())
		},
	}
	f.Register(cmd.Flags())
	for _, name := range edgecmd.Required {
		cmd.MarkFlagRequired(name)
	}
	return cmd
}
