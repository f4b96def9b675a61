// Command outpost-edge is the slim agent that runs on each edge gateway. It
// links nothing of the hub, and no cobra or text/template (test/arch checks
// both), so it stays small: its command line is parsed with pflag alone.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/outpost-mesh/outpost/cmd/internal/cli"
	"github.com/outpost-mesh/outpost/cmd/internal/edgecmd"
)

const binary = "outpost-edge"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		os.Exit(1)
	}
}

// run runs the command line args (without the program's name) until ctx is
// done: `outpost-edge [flags]` runs the agent, `outpost-edge version`
// prints the version, --help (or -h, or `help`) the usage, all on stdout.
// An error is printed on stderr, after "Error: ", and returned. The logger
// of --log-level and --log-format becomes slog's default.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	err := execute(ctx, args, stdout, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "Error:", err)
	}
	return err
}

func execute(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := edgecmd.DefaultFlags()
	var logFlags cli.LogFlags
	fs, help := newFlagSet(&f, &logFlags)
	if err := fs.Parse(args); err != nil {
		return err
	}
	rest := fs.Args()
	if *help || len(rest) > 0 && rest[0] == "help" {
		return usage(stdout, fs)
	}
	log, err := logFlags.Logger(stderr)
	if err != nil {
		return err
	}
	slog.SetDefault(log)
	switch {
	case len(rest) == 0:
		if err := edgecmd.CheckRequired(fs); err != nil {
			return err
		}
		f.Args = args
		return f.Run(ctx)
	case rest[0] == "version":
		if len(rest) > 1 {
			return fmt.Errorf("unexpected argument %q: version takes none", rest[1])
		}
		var other error
		fs.Visit(func(fl *pflag.Flag) {
			if other == nil && fl.Name != "log-level" && fl.Name != "log-format" {
				other = fmt.Errorf("--%s does not go with version, which takes only --log-level and --log-format", fl.Name)
			}
		})
		if other != nil {
			return other
		}
		return cli.PrintVersion(stdout, binary)
	}
	return fmt.Errorf("unexpected argument %q: %s takes flags only, or the command version (see %s --help)", rest[0], binary, binary)
}

// newFlagSet returns the flag set of outpost-edge: the agent's flags into f,
// the logging flags into lf, and --help, whose value it returns. The set
// returns its errors without printing them or the usage.
func newFlagSet(f *edgecmd.Flags, lf *cli.LogFlags) (*pflag.FlagSet, *bool) {
	fs := pflag.NewFlagSet(binary, pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	lf.Register(fs)
	f.Register(fs)
	help := fs.BoolP("help", "h", false, "help for "+binary)
	return fs, help
}

// usage writes the help of outpost-edge, with every flag of fs.
func usage(w io.Writer, fs *pflag.FlagSet) error {
	_, err := fmt.Fprintf(w, `Outpost edge agent: runs the pods of one gateway, online or not

%s

Usage:
  %s [flags]
  %s version    %s

Examples:
%s

Flags:
%s`, edgecmd.Long, binary, binary, cli.VersionShort, edgecmd.Example, fs.FlagUsages())
	return err
}
