package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/outpost-mesh/outpost/bench/report"
)

// newBenchCmd returns `outpost bench`, the parent of the benchmark commands.
// Each benchmark prints a table and writes its results as JSON.
func newBenchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Run a benchmark, print a table and write the results as JSON",
		Args:  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("unknown benchmark %q: see `outpost bench --help`", args[0])
			}
			return cmd.Help()
		},
	}
	// Benchmarks, one subcommand each.
	cmd.AddCommand(newBenchStoreCmd())       // bench_store.go: outpost bench store
	cmd.AddCommand(newBenchAPICmd())         // bench_api.go: outpost bench api
	cmd.AddCommand(newBenchFleetCmd())       // bench_fleet.go: outpost bench fleet
	cmd.AddCommand(newBenchControllersCmd()) // bench_controllers.go: outpost bench controllers
	cmd.AddCommand(newBenchDensityCmd())     // bench_density.go: outpost bench density
	cmd.AddCommand(newBenchStreamsCmd())     // bench_streams.go: outpost bench streams
	cmd.AddCommand(newBenchServicesCmd())    // bench_services.go: outpost bench services
	cmd.AddCommand(newBenchMeshCmd())        // bench_mesh.go: outpost bench mesh
	cmd.AddCommand(newBenchOTACmd())         // bench_ota.go: outpost bench ota
	return cmd
}

// writeReport prints rep's tables on the command's output, writes rep as
// JSON to out, and says where.
func writeReport(cmd *cobra.Command, rep interface{ Render(io.Writer) error }, out string) error {
	fmt.Fprintln(cmd.OutOrStdout())
	if err := rep.Render(cmd.OutOrStdout()); err != nil {
		return err
	}
	if err := report.WriteJSON(out, rep); err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "\nresults written to %s\n", out)
	return nil
}
