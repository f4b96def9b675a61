package containerd

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/outpost-mesh/outpost/edge/runtime"
)

// Exec implements runtime.Execer: the command runs in the container's
// namespaces and cgroup with its process's user, environment and
// capabilities, its streams through FIFOs under StateDir. When ctx is
// done it is killed and Exec returns ctx's error once it has exited. A
// Stdin that stays open after the command has exited is read until its
// next Read returns.
func (r *Runtime) Exec(ctx context.Context, pod runtime.PodRef, container string, opts runtime.ExecOptions) (int, error) {
	if len(opts.Command) == 0 {
		return -1, fmt.Errorf("exec in %q of pod %s: no command: %w", container, pod, runtime.ErrNotSupported)
	}
	ctx = r.nsctx(ctx)
	cs, err := r.find(ctx, pod.UID, container)
	if err != nil {
		return -1, err
	}
	if len(cs) == 0 {
		return -1, fmt.Errorf("exec in %q of pod %s: %w", container, pod, runtime.ErrNotFound)
	}
	id := cs[len(cs)-1].ID
	ctr, err := r.c.LoadContainer(ctx, id)
	if err != nil {
		return -1, fmt.Errorf("exec in %q of pod %s: %w", container, pod, native(err))
	}
	task, err := ctr.Task(ctx, nil)
	if errdefs.IsNotFound(err) {
		return -1, fmt.Errorf("exec in %q of pod %s: not running: %w", container, pod, runtime.ErrNotFound)
	}
	if err != nil {
		return -1, fmt.Errorf("exec in %q of pod %s: %w", container, pod, native(err))
	}
	st, err := task.Status(ctx)
	if err != nil {
		return -1, fmt.Errorf("exec in %q of pod %s: %w", container, pod, native(err))
	}
	if st.Status != client.Running {
		return -1, fmt.Errorf("exec in %q of pod %s: not running: %w", container, pod, runtime.ErrNotFound)
	}
	spec, err := ctr.Spec(ctx)
	if err != nil {
		return -1, fmt.Errorf("exec in %q of pod %s: %w", container, pod, native(err))
	}
	pspec := *spec.Process
	pspec.Args = opts.Command
	pspec.Terminal = opts.TTY
	pspec.ConsoleSize = nil
	if opts.TTY {
		// A size sent before the command starts is its terminal's from
		// the first byte: a resize after the start would race what the
		// command reads of its size at once (`stty size`).
		select {
		case sz, ok := <-opts.Resize:
			if ok {
				pspec.ConsoleSize = &specs.Box{Height: uint(sz.Height), Width: uint(sz.Width)}
			}
		default:
		}
	}

	stdout, stderr := opts.Stdout, opts.Stderr
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	// The shim holds the stdin FIFO open for writing until told to close
	// it, so the end of Stdin is passed on with CloseIO.
	var stdin io.Reader
	stdinDone := make(chan struct{})
	if opts.Stdin != nil {
		stdin = &eofReader{r: opts.Stdin, done: stdinDone}
	}
	cioOpts := []cio.Opt{cio.WithStreams(stdin, stdout, stderr), cio.WithFIFODir(filepath.Join(r.fifoDir(pod.UID), "exec"))}
	if opts.TTY {
		cioOpts = append(cioOpts, cio.WithTerminal)
	}
	// The process outlives a cancelled ctx until it is killed and
	// deleted, so those calls use one that is not cancelled.
	bg := context.WithoutCancel(ctx)
	p, err := task.Exec(ctx, "exec-"+newID()[:16], &pspec, cio.NewCreator(cioOpts...))
	if err != nil {
		return -1, fmt.Errorf("exec in %q of pod %s: %w", container, pod, native(err))
	}
	defer func() { _, _ = p.Delete(bg, client.WithProcessKill) }()
	exited, err := p.Wait(bg)
	if err != nil {
		return -1, fmt.Errorf("exec in %q of pod %s: %w", container, pod, native(err))
	}
	if err := p.Start(ctx); err != nil {
		return -1, fmt.Errorf("exec in %q of pod %s: %w", container, pod, native(err))
	}
	var es client.ExitStatus
	resize := opts.Resize
	if !opts.TTY {
		resize = nil
	}
	for done := false; !done; {
		select {
		case es = <-exited:
			done = true
		case sz, ok := <-resize:
			if !ok {
				resize = nil
				continue
			}
			if err := p.Resize(ctx, uint32(sz.Width), uint32(sz.Height)); err != nil && !errdefs.IsNotFound(err) {
				r.cfg.Logger.Warn("exec: resize terminal", "err", err)
			}
		case <-stdinDone:
			stdinDone = nil
			if err := p.CloseIO(ctx, client.WithStdinCloser); err != nil && !errdefs.IsNotFound(err) {
				r.cfg.Logger.Warn("exec: close stdin", "err", err)
			}
		case <-ctx.Done():
			_ = p.Kill(bg, syscall.SIGKILL)
			<-exited
			return -1, ctx.Err()
		}
	}
	p.IO().Wait()
	code, _, err := es.Result()
	if err != nil {
		return -1, fmt.Errorf("exec in %q of pod %s: %w", container, pod, native(err))
	}
	return int(code), nil
}

// eofReader closes done when r is at its end.
type eofReader struct {
	r    io.Reader
	done chan struct{}
	once sync.Once
}

func (e *eofReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil {
		e.once.Do(func() { close(e.done) })
	}
	return n, err
}
