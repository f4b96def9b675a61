package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// output collects what a process writes and lets a test wait for text in
// it. It is safe for concurrent use.
type output struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{} // closed and replaced on every write
}

func newOutput() *output { return &output{changed: make(chan struct{})} }

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	n, err := o.buf.Write(p)
	close(o.changed)
	o.changed = make(chan struct{})
	return n, err
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

func (o *output) snapshot() (string, <-chan struct{}) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String(), o.changed
}

// errExited is returned by waitFor when the process ended without writing
// what was waited for.
var errExited = errors.New("process exited")

// waitFor blocks until match accepts what was written so far and returns
// it. It returns errExited once exited is closed and nothing more can come,
// and ctx.Err() at the deadline.
func (o *output) waitFor(ctx context.Context, exited <-chan struct{}, match func(string) bool) (string, error) {
	for {
		s, changed := o.snapshot()
		if match(s) {
			return s, nil
		}
		select {
		case <-changed:
		case <-exited:
			// The copying goroutines are done once exited is closed;
			// look at the final output once more.
			if s := o.String(); match(s) {
				return s, nil
			}
			return o.String(), errExited
		case <-ctx.Done():
			return o.String(), ctx.Err()
		}
	}
}

// proc is a process running in the background of a test.
type proc struct {
	name           string // the command line, for messages
	cmd            *exec.Cmd
	stdout, stderr *output
	exited         chan struct{} // closed once Wait returned
	waitErr        error         // Wait's result; read after exited is closed
}

// startProc starts cmd with its output collected. The caller stops it.
func startProc(t *testing.T, cmd *exec.Cmd) *proc {
	t.Helper()
	p := &proc{
		name:   strings.Join(cmd.Args, " "),
		cmd:    cmd,
		stdout: newOutput(),
		stderr: newOutput(),
		exited: make(chan struct{}),
	}
	cmd.Stdout = p.stdout
	cmd.Stderr = p.stderr
	dieWithTest(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", p.name, err)
	}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	return p
}

// waitOutput waits up to timeout for match to accept the process's stdout
// (or its stderr, with fromStderr) and returns it; it fails the test, with
// both outputs, when the process exits first or the time is up.
func (p *proc) waitOutput(t *testing.T, timeout time.Duration, what string, fromStderr bool, match func(string) bool) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	o := p.stdout
	if fromStderr {
		o = p.stderr
	}
	s, err := o.waitFor(ctx, p.exited, match)
	if err != nil {
		t.Fatalf("%s: waiting for %s: %v\n%s", p.name, what, err, p.describe())
	}
	return s
}

// wait waits up to timeout for the process to exit on its own and returns
// Wait's error; it fails the test if the process is still running then.
func (p *proc) wait(t *testing.T, timeout time.Duration) error {
	t.Helper()
	select {
	case <-p.exited:
		return p.waitErr
	case <-time.After(timeout):
		t.Fatalf("%s: still running after %v\n%s", p.name, timeout, p.describe())
		return nil
	}
}

// running reports whether the process has not exited yet.
func (p *proc) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// stop sends SIGTERM, waits up to grace for the process to exit, then
// sends SIGKILL. It returns Wait's error and whether the process had to be
// killed; on a process that already exited it only returns Wait's error.
func (p *proc) stop(grace time.Duration) (waitErr error, killed bool) {
	if p.running() {
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(grace):
			p.cmd.Process.Kill()
			<-p.exited
			killed = true
		}
	}
	return p.waitErr, killed
}

// describe returns the command line and both outputs, for failure
// messages.
func (p *proc) describe() string {
	return fmt.Sprintf("command: %s\n--- stdout:\n%s\n--- stderr:\n%s", p.name, p.stdout, p.stderr)
}
