package main

import (
	"fmt"

	"github.com/spf13/cobra"
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
	return cmd
}
