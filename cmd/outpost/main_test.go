package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestVersion(t *testing.T) {
	cmd := newRootCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"version"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "outpost dev") {
		t.Errorf("outpost version printed %q", out.String())
	}
}

func TestBadLogFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--log-level", "loud", "version"},
		{"--log-format", "xml", "version"},
	} {
		cmd := newRootCmd()
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		cmd.SetArgs(args)
		if err := cmd.Execute(); err == nil {
			t.Errorf("outpost %v succeeded, want an error", args)
		}
	}
}

// TestHubCommand runs `outpost hub` and reads the export line it prints once
// ready.
func TestHubCommand(t *testing.T) {
	// containerd's dialer leaves a goroutine per dial that ends once the
	// dial does, after the client that asked for it closed: the image
	// commands' tests before this one may leave one behind.
	defer goleak.VerifyNone(t,
		goleak.IgnoreTopFunction("github.com/containerd/containerd/v2/pkg/dialer.timeoutDialer"),
		goleak.IgnoreTopFunction("github.com/containerd/containerd/v2/pkg/dialer.timeoutDialer.func1"))
	dir := t.TempDir()
	pr, pw := io.Pipe()
	cmd := newRootCmd()
	cmd.SetOut(pw)
	cmd.SetErr(io.Discard)
	cmd.SetArgs([]string{"--log-level", "error", "hub", "--data-dir", dir, "--api-addr", "127.0.0.1:0", "--sync-addr", "127.0.0.1:0", "--tls-san", "hub.example.com"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- cmd.ExecuteContext(ctx)
		pw.Close()
	}()

	line := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(pr)
		s.Scan()
		line <- s.Text()
		io.Copy(io.Discard, pr)
	}()
	select {
	case l := <-line:
		want := "export KUBECONFIG=" + filepath.Join(dir, "admin.kubeconfig")
		if l != want {
			t.Errorf("outpost hub printed %q, want %q", l, want)
		}
	case err := <-done:
		t.Fatalf("outpost hub exited before ready: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatalf("outpost hub printed nothing within 60s")
	}
	if _, err := os.Stat(filepath.Join(dir, "admin.kubeconfig")); err != nil {
		t.Error(err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("outpost hub returned %v after cancel", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("outpost hub did not stop within 30s of cancel")
	}
}
