package containerd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outpost-mesh/outpost/edge/runtime"
	"github.com/outpost-mesh/outpost/internal/wait"
)

// syncBuffer is a bytes.Buffer an Attach writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// attachment is an Attach running in the background with a stdin the
// test writes.
type attachment struct {
	in     *io.PipeWriter
	out    syncBuffer
	resize chan runtime.TermSize
	cancel context.CancelFunc
	done   chan struct{}
	code   int
	err    error
}

// startAttach attaches to the container with a stdin, StdinOnce as once.
func startAttach(t *testing.T, r *Runtime, p runtime.PodRef, name string, once bool) *attachment {
	t.Helper()
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(bg)
	a := &attachment{in: pw, resize: make(chan runtime.TermSize, 1), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(a.done)
		a.code, a.err = r.Attach(ctx, p, name, runtime.AttachOptions{
			Stdin: pr, StdinOnce: once, Stdout: &a.out, Stderr: &a.out, Resize: a.resize,
		})
		pr.Close() // as edge/streams does: a write Attach will not read fails
	}()
	t.Cleanup(func() {
		cancel()
		pw.Close()
		<-a.done
	})
	return a
}

// send writes s to the attach's stdin.
func (a *attachment) send(t *testing.T, s string) {
	t.Helper()
	if _, err := io.WriteString(a.in, s); err != nil {
		t.Fatalf("write %q to the attach's stdin: %v", s, err)
	}
}

// waitOut waits until the attach's output holds want.
func (a *attachment) waitOut(t *testing.T, want string) {
	t.Helper()
	wait.For(t, 10*time.Second, "attach output "+want, func() (bool, string) {
		return strings.Contains(a.out.String(), want), a.out.String()
	})
}

// wait waits for Attach to return.
func (a *attachment) wait(t *testing.T) (int, error) {
	t.Helper()
	select {
	case <-a.done:
		return a.code, a.err
	case <-time.After(10 * time.Second):
		t.Fatalf("Attach did not return; output %q", a.out.String())
		return 0, nil
	}
}

// TestAttachStdin: a container with stdin reads what attachers send; the
// end of an attacher's stdin ends its attach and leaves the container's
// stdin open for the next one, also one of a new Runtime that adopted
// the container. A container without stdin refuses one.
func TestAttachStdin(t *testing.T) {
	r := newRuntime(t, nil)
	p := pod("stdin")
	dir := t.TempDir()
	c := sh("echo", `while read l; do echo "got $l"; done; echo eof`)
	c.Stdin, c.LogPath = true, filepath.Join(dir, "echo.log")
	plain := sh("plain", "sleep 3600")
	plain.LogPath = filepath.Join(dir, "plain.log")
	for _, c := range []runtime.ContainerSpec{c, plain} {
		if err := r.StartContainer(bg, p, c, 0); err != nil {
			t.Fatal(err)
		}
		waitState(t, r, p, c.Name, runtime.StateRunning)
	}

	a := startAttach(t, r, p, "echo", false)
	a.send(t, "one\n")
	a.waitOut(t, "got one\n")
	a.in.Close()
	if code, err := a.wait(t); code != 0 || err != nil {
		t.Errorf("Attach after the end of its stdin = %d, %v; want 0, nil", code, err)
	}

	// The next attacher, cut off by its context.
	a = startAttach(t, r, p, "echo", false)
	a.send(t, "two\n")
	a.waitOut(t, "got two\n")
	a.cancel()
	if _, err := a.wait(t); !errors.Is(err, context.Canceled) {
		t.Errorf("Attach after its context's end = %v, want context.Canceled", err)
	}

	// A new Runtime adopts the container and opens its stdin again.
	r.Close()
	r2, err := New(r.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	waitState(t, r2, p, "echo", runtime.StateRunning)
	a = startAttach(t, r2, p, "echo", false)
	a.send(t, "three\n")
	a.waitOut(t, "got three\n")
	a.in.Close()
	if code, err := a.wait(t); code != 0 || err != nil {
		t.Errorf("Attach of the new Runtime after the end of its stdin = %d, %v; want 0, nil", code, err)
	}
	waitLog(t, c.LogPath, "stdout:got one", "stdout:got two", "stdout:got three")
	if st := waitState(t, r2, p, "echo", runtime.StateRunning); st.State != runtime.StateRunning {
		t.Errorf("echo = %+v, want it running on", st)
	}

	_, err = r2.Attach(bg, p, "plain", runtime.AttachOptions{Stdin: strings.NewReader("x\n")})
	if !errors.Is(err, runtime.ErrNoStdin) {
		t.Errorf("Attach with a stdin to a container without = %v, want ErrNoStdin", err)
	}
}

// TestAttachStdinOnce: the end of the first attacher's stdin closes a
// stdinOnce container's stdin: its process reads EOF and exits, and the
// attach ends with its exit code.
func TestAttachStdinOnce(t *testing.T) {
	r := newRuntime(t, nil)
	p := pod("once")
	c := sh("once", `while read l; do echo "got $l"; done; echo eof; exit 7`)
	c.Stdin, c.LogPath = true, filepath.Join(t.TempDir(), "once.log")
	if err := r.StartContainer(bg, p, c, 0); err != nil {
		t.Fatal(err)
	}
	waitState(t, r, p, "once", runtime.StateRunning)
	a := startAttach(t, r, p, "once", true)
	a.send(t, "x\n")
	a.waitOut(t, "got x\n")
	a.in.Close()
	code, err := a.wait(t)
	if code != 7 || err != nil || a.out.String() != "got x\neof\n" {
		t.Errorf("Attach of stdinOnce = %d, %v, output %q; want 7, nil, got x and eof", code, err, a.out.String())
	}
	st := waitState(t, r, p, "once", runtime.StateExited)
	if st.ExitCode != 7 {
		t.Errorf("once = %+v, want exit 7", st)
	}

	// An attach cut off by its context closes the stdin all the same,
	// for good: a new Runtime does not open it again, and its attach
	// goes on with the output alone.
	c = sh("cut", `cat; echo eof; while [ ! -e /tmp/go ]; do sleep 0.05; done; echo go; exit 3`)
	c.Stdin, c.LogPath = true, filepath.Join(t.TempDir(), "cut.log")
	if err := r.StartContainer(bg, p, c, 0); err != nil {
		t.Fatal(err)
	}
	st = waitState(t, r, p, "cut", runtime.StateRunning)
	a = startAttach(t, r, p, "cut", true)
	a.send(t, "y\n")
	a.waitOut(t, "y\n")
	a.cancel()
	if _, err := a.wait(t); !errors.Is(err, context.Canceled) {
		t.Errorf("Attach after its context's end = %v, want context.Canceled", err)
	}
	waitLog(t, c.LogPath, "stdout:y", "stdout:eof")
	r.Close()
	r2, err := New(r.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	waitState(t, r2, p, "cut", runtime.StateRunning)
	id := strings.TrimPrefix(st.ID, "containerd://")
	r2.mu.Lock()
	l := r2.ios[id]
	r2.mu.Unlock()
	if l == nil || l.stdin == nil || !l.stdin.isClosed() {
		t.Errorf("the new Runtime's stdin of cut = %+v, want one closed", l)
	}
	a = startAttach(t, r2, p, "cut", true)
	wait.For(t, 10*time.Second, "the attach", func() (bool, string) { return attachers(r2, id) == 1, "" })
	if code, err := r2.Exec(bg, p, "cut", runtime.ExecOptions{Command: []string{"touch", "/tmp/go"}}); code != 0 || err != nil {
		t.Fatalf("touch = %d, %v", code, err)
	}
	if code, err := a.wait(t); code != 3 || err != nil || a.out.String() != "go\n" {
		t.Errorf("Attach with a stdin to a closed stdin = %d, %v, output %q; want 3, go", code, err, a.out.String())
	}
}

// TestAttachResize: a resize sent to the attach of a container with a
// TTY is its terminal's size.
func TestAttachResize(t *testing.T) {
	r := newRuntime(t, nil)
	p := pod("tty")
	c := sh("tty", `while read l; do stty size; done`)
	c.Stdin, c.TTY, c.LogPath = true, true, filepath.Join(t.TempDir(), "tty.log")
	if err := r.StartContainer(bg, p, c, 0); err != nil {
		t.Fatal(err)
	}
	waitState(t, r, p, "tty", runtime.StateRunning)
	a := startAttach(t, r, p, "tty", true) // with a TTY, stdinOnce does not close it
	for _, sz := range []runtime.TermSize{{Width: 100, Height: 37}, {Width: 80, Height: 24}} {
		a.resize <- sz
		want := fmt.Sprintf("%d %d", sz.Height, sz.Width)
		// The resize is applied beside the stdin: ask until the
		// terminal has it.
		wait.For(t, 10*time.Second, "stty size "+want, func() (bool, string) {
			a.send(t, "size\n")
			return strings.Contains(a.out.String(), want), a.out.String()
		})
	}
	a.in.Close()
	if code, err := a.wait(t); code != 0 || err != nil {
		t.Errorf("Attach after the end of its stdin = %d, %v; want 0, nil", code, err)
	}
	waitState(t, r, p, "tty", runtime.StateRunning)
	// Its stdin is still open: a later attach is read.
	a = startAttach(t, r, p, "tty", true)
	a.send(t, "again\n")
	a.waitOut(t, "24 80")
}

// TestAttachWhileListing: Lists while containers start (the agent lists
// on each task event) leave each container's output to the copiers of
// its start: an attacher gets all of it.
func TestAttachWhileListing(t *testing.T) {
	r := newRuntime(t, nil)
	p := pod("listed")
	ctx, cancel := context.WithCancel(bg)
	listed := make(chan struct{})
	go func() {
		defer close(listed)
		for ctx.Err() == nil {
			_, _ = r.List(ctx)
		}
	}()
	const n = 4
	for i := range n {
		c := sh(fmt.Sprint("echo", i), `while read l; do echo "got $l"; done`)
		c.Stdin, c.LogPath = true, filepath.Join(t.TempDir(), "echo.log")
		if err := r.StartContainer(bg, p, c, 0); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	<-listed
	for i := range n {
		name := fmt.Sprint("echo", i)
		waitState(t, r, p, name, runtime.StateRunning)
		a := startAttach(t, r, p, name, false)
		for j := range 5 {
			l := fmt.Sprint("line", j)
			a.send(t, l+"\n")
			a.waitOut(t, "got "+l+"\n")
		}
		a.in.Close()
		if code, err := a.wait(t); code != 0 || err != nil {
			t.Errorf("Attach to %s = %d, %v; want 0, nil", name, code, err)
		}
	}
}
