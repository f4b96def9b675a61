package fake

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/outpost-mesh/outpost/edge/runtime"
	"github.com/outpost-mesh/outpost/internal/wait"
)

type attachResult struct {
	code int
	err  error
}

// attachIn attaches to the container of web with a stdin the test writes.
func attachIn(r *Runtime, name string, opts runtime.AttachOptions) (*io.PipeWriter, <-chan attachResult) {
	pr, pw := io.Pipe()
	opts.Stdin = pr
	res := make(chan attachResult, 1)
	go func() {
		code, err := r.Attach(ctx, web, name, opts)
		pr.Close()
		res <- attachResult{code, err}
	}()
	return pw, res
}

func result(t *testing.T, res <-chan attachResult) attachResult {
	t.Helper()
	select {
	case x := <-res:
		return x
	case <-time.After(10 * time.Second):
		t.Fatal("Attach did not return")
		return attachResult{}
	}
}

func TestAttachStdin(t *testing.T) {
	r, _ := newTest(nil)
	in := spec("in", "x")
	in.Stdin = true
	tty := in
	tty.Name, tty.TTY = "tty", true
	for _, c := range []runtime.ContainerSpec{in, tty, spec("plain", "x")} {
		if err := r.StartContainer(ctx, web, c, 0); err != nil {
			t.Fatal(err)
		}
	}
	stdinIs := func(name, want string, closed bool) {
		t.Helper()
		wait.For(t, 5*time.Second, name+" stdin "+want, func() (bool, string) {
			b, c, err := r.Stdin(web.UID, name)
			return string(b) == want && c == closed && err == nil, string(b)
		})
	}

	// Without StdinOnce the end of stdin ends the attach, not the stdin.
	pw, res := attachIn(r, "in", runtime.AttachOptions{})
	io.WriteString(pw, "one\n")
	stdinIs("in", "one\n", false)
	pw.Close()
	if x := result(t, res); x.code != 0 || x.err != nil {
		t.Errorf("Attach after its stdin ended = %+v, want 0", x)
	}
	// With StdinOnce it closes the stdin; the attach goes on until the
	// container exits.
	pw, res = attachIn(r, "in", runtime.AttachOptions{StdinOnce: true})
	io.WriteString(pw, "two\n")
	stdinIs("in", "one\ntwo\n", false)
	pw.Close()
	stdinIs("in", "one\ntwo\n", true)
	if err := r.Exit(web.UID, "in", 3); err != nil {
		t.Fatal(err)
	}
	if x := result(t, res); x.code != 3 || x.err != nil {
		t.Errorf("Attach of stdinOnce = %+v, want the exit code 3", x)
	}

	// A terminal: resizes are kept, StdinOnce does not close the stdin.
	resize := make(chan runtime.TermSize, 1)
	pw, res = attachIn(r, "tty", runtime.AttachOptions{StdinOnce: true, Resize: resize})
	resize <- runtime.TermSize{Width: 100, Height: 37}
	wait.For(t, 5*time.Second, "the resize", func() (bool, string) {
		return len(r.Resizes(web.UID, "tty")) == 1, ""
	})
	pw.Close()
	if x := result(t, res); x.code != 0 || x.err != nil {
		t.Errorf("Attach with a TTY after its stdin ended = %+v, want 0", x)
	}
	stdinIs("tty", "", false)

	_, err := r.Attach(ctx, web, "plain", runtime.AttachOptions{Stdin: strings.NewReader("x")})
	if !errors.Is(err, runtime.ErrNoStdin) {
		t.Errorf("Attach with a stdin to a container without = %v, want ErrNoStdin", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := r.Attach(cctx, web, "in", runtime.AttachOptions{}); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("Attach to an exited container = %v, want ErrNotFound", err)
	}
}
