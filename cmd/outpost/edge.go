package main

import (
	"os"
	"slices"

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
			// After an update the agent runs outpost-edge, or this
			// binary again as `outpost edge`, with the same flags.
			f.Args, f.InstalledArgs = edgeArgs(os.Args[1:]), []string{"edge"}
			return f.Run(cmd.Context())
		},
	}
	f.Register(cmd.Flags())
	for _, name := range edgecmd.Required {
		cmd.MarkFlagRequired(name)
	}
	return cmd
}

// edgeArgs returns the arguments of `outpost edge` without the command's
// name: the flags, which outpost-edge takes as they are.
func edgeArgs(args []string) []string {
	if i := slices.Index(args, "edge"); i >= 0 {
		return append(slices.Clone(args[:i]), args[i+1:]...)
	}
	return args
}
