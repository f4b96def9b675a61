package containerd

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"syscall"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"

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
		return -1, fmt.Errorf("exec in %q of pod %s: %w", container, pod, errgrpc.ToNative(err))
	}
	task, err := ctr.Task(ctx, nil)
	if errdefs.IsNotFound(err) {
		return -1, fmt.Errorf("exec in %q of pod %s: not running: %w", container, pod, runtime.ErrNotFound)
	}
	if err != nil {
		return -1, fmt.Errorf("exec in %q of pod %s: %w", container, pod, errgrpc.ToNative(err))
	}
	st, err := task.Status(ctx)
	if err != nil {
		return -1, fmt.Errorf("exec in %q of pod %s: %w", container, pod, errgrpc.ToNative(err))
	}
	if st.Status != client.Running {
		return -1, fmt.Errorf("exec in %q of pod %s: not running: %w", container, pod, runtime.ErrNotFound)
	}
	spec, err := ctr.Spec(ctx)
	if err != nil {
		return -1, fmt.Errorf("exec in %q of pod %s: %w", container, pod, errgrpc.ToNative(err))
	}
	pspec := *spec.Process
	pspec.Args = opts.Command
	pspec.Terminal = opts.TTY

	stdout, stderr := opts.Stdout, opts.Stderr
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	cioOpts := []cio.Opt{cio.WithStreams(opts.Stdin, stdout, stderr), cio.WithFIFODir(filepath.Join(r.fifoDir(pod.UID), "exec"))}
	if opts.TTY {
		cioOpts = append(cioOpts, cio.WithTerminal)
	}
	// The process outlives a cancelled ctx until it is killed and
	// deleted, so those calls use one that is not cancelled.
	bg := context.WithoutCancel(ctx)
	p, err := task.Exec(ctx, "exec-"+newID()[:16], &pspec, cio.NewCreator(cioOpts...))
	if err != nil {
		return -1, fmt.Errorf("exec in %q of pod %s: %w", container, pod, errgrpc.ToNative(err))
	}
	defer func() { _, _ = p.Delete(bg, client.WithProcessKill) }()
	exited, err := p.Wait(bg)
	if err != nil {
		return -1, fmt.Errorf("exec in %q of pod %s: %w", container, pod, errgrpc.ToNative(err))
	}
	if err := p.Start(ctx); err != nil {
		return -1, fmt.Errorf("exec in %q of pod %s: %w", container, pod, errgrpc.ToNative(err))
	}
	var es client.ExitStatus
	select {
	case es = <-exited:
	case <-ctx.Done():
		_ = p.Kill(bg, syscall.SIGKILL)
		<-exited
		return -1, ctx.Err()
	}
	p.IO().Wait()
	code, _, err := es.Result()
	if err != nil {
		return -1, fmt.Errorf("exec in %q of pod %s: %w", container, pod, errgrpc.ToNative(err))
	}
	return int(code), nil
}
