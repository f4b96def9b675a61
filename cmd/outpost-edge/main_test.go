package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
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
			cmd := newRootCmd()
			var stderr bytes.Buffer
			cmd.SetOut(&stderr)
			cmd.SetErr(&stderr)
			cmd.SetArgs(args)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := cmd.ExecuteContext(ctx)
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
