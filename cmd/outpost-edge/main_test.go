package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/outpost-mesh/outpost/cmd/internal/cli"
	"github.com/outpost-mesh/outpost/cmd/internal/edgecmd"
)

// TestBadJoinFlags: a join flag of the wrong form stops outpost-edge at
// once with an error that says what is wrong and what a good value looks
// like, instead of the agent taking it for a hub it cannot reach and
// retrying forever. Nothing listens at the hub address: a command that
// went on to join would retry until the test's deadline.
func TestBadJoinFlags(t *testing.T) {
	const (
		hub   = "127.0.0.1:9"
		token = "abcdef.0123456789abcdef"
	)
	hash := "sha256:" + strings.Repeat("ab", 32)
	for _, tc := range []struct {
		name string
		args []string
		want []string // in the error, in order
	}{
		{"CA hash not a hash", []string{"--hub", hub, "--token", token, "--ca-cert-hash", "nothash"},
			[]string{"--ca-cert-hash", "sha256:<64 hex digits>", `"nothash"`}},
		{"CA hash not hex", []string{"--hub", hub, "--token", token, "--ca-cert-hash", "sha256:" + strings.Repeat("zz", 32)},
			[]string{"--ca-cert-hash", "sha256:<64 hex digits>", "not hex"}},
		{"CA hash short", []string{"--hub", hub, "--token", token, "--ca-cert-hash", hash[:len(hash)-1]},
			[]string{"--ca-cert-hash", "sha256:<64 hex digits>"}},
		{"token without a dot", []string{"--hub", hub, "--token", "abcdef0123456789abcdef", "--ca-cert-hash", hash},
			[]string{"--token", "<6 characters [a-z0-9]>.<16 characters [a-z0-9]>", "outpost token create"}},
		{"token upper-case", []string{"--hub", hub, "--token", "ABCDEF.0123456789ABCDEF", "--ca-cert-hash", hash},
			[]string{"--token", "<6 characters [a-z0-9]>.<16 characters [a-z0-9]>"}},
		{"hub without a port", []string{"--hub", "hub.example.com", "--token", token, "--ca-cert-hash", hash},
			[]string{`--hub "hub.example.com"`, "missing port", "host:port", "hub.example.com:7443"}},
		{"hub with a named port", []string{"--hub", "hub.example.com:sync", "--token", token, "--ca-cert-hash", hash},
			[]string{`--hub "hub.example.com:sync"`, "1 to 65535", "host:port"}},
		{"hub without a host", []string{"--hub", ":7443", "--token", token, "--ca-cert-hash", hash},
			[]string{`--hub ":7443"`, "no host", "host:port"}},
		{"node name not a DNS name", []string{"--hub", hub, "--token", token, "--ca-cert-hash", hash, "--node-name", "Gw_17"},
			[]string{`--node-name "Gw_17"`, "RFC 1123", "gw-17"}},
		{"site not a label value", []string{"--hub", hub, "--token", token, "--ca-cert-hash", hash, "--site", "store 17"},
			[]string{`--site "store 17"`, "store-17"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--log-level", "error", "--data-dir", t.TempDir()}, tc.args...)
			if !strings.Contains(strings.Join(args, " "), "--node-name") {
				args = append(args, "--node-name", "gw-17")
			}
			var stderr bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := run(ctx, args, &stderr, &stderr)
			if ctx.Err() != nil {
				t.Fatalf("outpost-edge %v was still running after 10s (err %v), want it to stop at once", tc.args, err)
			}
			if err == nil {
				t.Fatalf("outpost-edge %v = nil, want an error", tc.args)
			}
			msg := err.Error()
			at := 0
			for _, w := range tc.want {
				i := strings.Index(msg[at:], w)
				if i < 0 {
					t.Fatalf("outpost-edge %v = %q, want it to say %q (after %q)", tc.args, msg, w, msg[:at])
				}
				at += i + len(w)
			}
			if !strings.Contains(stderr.String(), "Error: "+msg) {
				t.Errorf("outpost-edge printed %q, want the error", stderr.String())
			}
			if strings.Contains(msg, "0123456789") {
				t.Errorf("the error %q gives the token's secret away", msg)
			}
		})
	}
}

// TestVersion: `outpost-edge version` prints the line `outpost version`
// prints, with this binary's name, and checks the logging flags as any
// command does.
func TestVersion(t *testing.T) {
	var want bytes.Buffer
	if err := cli.PrintVersion(&want, "outpost-edge"); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"version"},
		{"--log-level", "debug", "version"},
		{"version", "--log-format", "json"},
	} {
		var stdout, stderr bytes.Buffer
		if err := run(t.Context(), args, &stdout, &stderr); err != nil {
			t.Errorf("outpost-edge %v = %v, want nil", args, err)
		}
		if stdout.String() != want.String() || stderr.Len() != 0 {
			t.Errorf("outpost-edge %v printed %q on stdout and %q on stderr, want %q and nothing", args, stdout.String(), stderr.String(), want.String())
		}
	}
}

// TestHelp: --help, -h and `help` print on stdout a usage that names every
// flag, and run nothing.
func TestHelp(t *testing.T) {
	f := edgecmd.DefaultFlags()
	var lf cli.LogFlags
	fs, _ := newFlagSet(&f, &lf)
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}, {"--hub", "127.0.0.1:9", "-h"}} {
		var stdout, stderr bytes.Buffer
		if err := run(t.Context(), args, &stdout, &stderr); err != nil {
			t.Errorf("outpost-edge %v = %v, want nil", args, err)
		}
		if stderr.Len() != 0 {
			t.Errorf("outpost-edge %v printed %q on stderr, want nothing", args, stderr.String())
		}
		out := stdout.String()
		for _, want := range []string{"Usage:", "outpost-edge [flags]", "outpost-edge version"} {
			if !strings.Contains(out, want) {
				t.Errorf("outpost-edge %v printed %q, want it to say %q", args, out, want)
			}
		}
		fs.VisitAll(func(fl *pflag.Flag) {
			if !strings.Contains(out, "--"+fl.Name+" ") {
				t.Errorf("outpost-edge %v printed %q, want it to list --%s", args, out, fl.Name)
			}
		})
	}
}

// TestBadCommandLine: an unknown flag, a stray argument or a missing
// required flag is an error, printed after "Error: " on stderr, that says
// what is wrong; nothing is printed on stdout.
func TestBadCommandLine(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--bogus"}, "unknown flag: --bogus"},
		{[]string{"--hub", "127.0.0.1:9", "--node-name", "gw-17", "stray"}, `unexpected argument "stray"`},
		{[]string{"version", "extra"}, `unexpected argument "extra"`},
		{[]string{"--hub", "127.0.0.1:9", "version"}, "--hub does not go with version"},
		{[]string{"--log-level", "loud", "version"}, `invalid --log-level "loud"`},
		{[]string{"--log-format", "yaml", "--hub", "127.0.0.1:9", "--node-name", "gw-17"}, `invalid --log-format "yaml"`},
		{[]string{}, `required flag(s) "hub", "node-name" not set`},
		{[]string{"--hub", "127.0.0.1:9"}, `required flag(s) "node-name" not set`},
	} {
		var stdout, stderr bytes.Buffer
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		err := run(ctx, tc.args, &stdout, &stderr)
		cancel()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("outpost-edge %v = %v, want an error saying %q", tc.args, err, tc.want)
			continue
		}
		if got := stderr.String(); got != "Error: "+err.Error()+"\n" || stdout.Len() != 0 {
			t.Errorf("outpost-edge %v printed %q on stdout and %q on stderr, want nothing and the error", tc.args, stdout.String(), got)
		}
	}
}

// mainEnv makes the test binary run outpost-edge's main on the arguments
// after "--", for TestExitCode.
const mainEnv = "OUTPOST_EDGE_TEST_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(mainEnv) == "1" {
		for i, a := range os.Args {
			if a == "--" {
				os.Args = append([]string{"outpost-edge"}, os.Args[i+1:]...)
				break
			}
		}
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestExitCode: the process exits 0 after printing the version or the
// usage, and 1 on a bad command line, with the error on stderr.
func TestExitCode(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"version"}, 0},
		{[]string{"--help"}, 0},
		{[]string{"--bogus"}, 1},
		{[]string{"stray"}, 1},
	} {
		cmd := exec.CommandContext(t.Context(), os.Args[0], append([]string{"-test.run=^$", "--"}, tc.args...)...)
		cmd.Env = append(os.Environ(), mainEnv+"=1")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		code := 0
		if exit, ok := err.(*exec.ExitError); ok {
			code = exit.ExitCode()
		} else if err != nil {
			t.Fatalf("run outpost-edge %v: %v", tc.args, err)
		}
		if code != tc.code {
			t.Errorf("outpost-edge %v exited %d, want %d (stderr %q)", tc.args, code, tc.code, stderr.String())
		}
		if tc.code != 0 && !strings.HasPrefix(stderr.String(), "Error: ") {
			t.Errorf("outpost-edge %v printed %q on stderr, want the error", tc.args, stderr.String())
		}
	}
}
