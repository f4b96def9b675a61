package containerd

import (
	"context"
	"io"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/cio"

	"github.com/outpost-mesh/outpost/edge/logs"
)

// logIO is the copying of one task's stdout and stderr into its log
// file: cio's goroutines read the FIFOs into the file's streams.
type logIO struct {
	io       cio.IO // nil until the task exists, or without a log
	file     *logs.File
	out, err *logs.StreamWriter
	fan      *fanout // the attachers of the container's live output; nil without a log
	// stdin is the main process's stdin, for a container started with
	// Stdin and a log; nil for none.
	stdin   *stdinFeed
	tty     bool // the container has a terminal
	pending bool // a placeholder while being attached
}

// newFileIO returns the logIO of log file f, and the writers of its
// stdout and stderr for cio: each writes the log, then the attachers. Its
// stdin and tty are the caller's to set.
func newFileIO(f *logs.File) (l *logIO, stdout, stderr io.Writer) {
	l = &logIO{file: f, out: f.Stream(logs.Stdout), err: f.Stream(logs.Stderr), fan: &fanout{}}
	return l, teeWriter{l.out, logs.Stdout, l.fan}, teeWriter{l.err, logs.Stderr, l.fan}
}

// drainTimeout bounds how long a reap waits for an exited task's output.
const drainTimeout = 2 * time.Second

// finish waits up to timeout for the task's output to end (the shim
// closes the FIFOs once the process has exited), then closes the log and
// removes the FIFOs.
func (l *logIO) finish(timeout time.Duration) {
	if l.stdin != nil {
		l.stdin.close()
	}
	if l.io != nil {
		done := make(chan struct{})
		go func() { l.io.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(timeout):
			l.io.Cancel()
			<-done
		}
		_ = l.io.Close()
	}
	l.closeFile()
}

// detach stops copying and closes the log, leaving the FIFOs for the
// next agent. A line being written is ended where it was cut.
func (l *logIO) detach() {
	if l.stdin != nil {
		// The shim holds its own end of the stdin FIFO: the process
		// does not read EOF, and the next agent opens the FIFO again.
		l.stdin.close()
	}
	if l.io != nil {
		l.io.Cancel()
		l.io.Wait()
	}
	l.closeFile()
}

func (l *logIO) closeFile() {
	if l.stdin != nil {
		l.stdin.close()
	}
	if l.fan != nil {
		l.fan.close()
	}
	if l.file == nil {
		return
	}
	_ = l.out.Close()
	_ = l.err.Close()
	_ = l.file.Close()
}

// finishLog finishes the container's log copying, if this Runtime runs
// it.
func (r *Runtime) finishLog(id string) {
	r.mu.Lock()
	l := r.ios[id]
	if l != nil && !l.pending {
		delete(r.ios, id)
	} else {
		l = nil
	}
	r.mu.Unlock()
	if l != nil {
		l.finish(drainTimeout)
	}
}

// reattach starts copying the log of a running container started by an
// earlier Runtime, once, and opens its stdin FIFO again for its
// attachers unless an attach closed it for good (labelStdinClosed; its
// feed is then closed): the FIFO's path is the task's, as containerd
// keeps it.
func (r *Runtime) reattach(ctx context.Context, info containers.Container) {
	path := info.Labels[labelLogPath]
	if path == "" {
		return
	}
	r.mu.Lock()
	if r.closed || r.ios[info.ID] != nil {
		r.mu.Unlock()
		return
	}
	placeholder := &logIO{pending: true}
	r.ios[info.ID] = placeholder
	r.mu.Unlock()

	l, err := r.attach(ctx, info, path)
	r.mu.Lock()
	closed := r.closed
	switch {
	case err != nil || closed:
		delete(r.ios, info.ID)
	default:
		r.ios[info.ID] = l
	}
	r.mu.Unlock()
	switch {
	case err != nil:
		r.cfg.Logger.Warn("reattach container log", "container", info.ID, "err", err)
	case closed:
		l.detach()
	}
}

func (r *Runtime) attach(ctx context.Context, info containers.Container, path string) (*logIO, error) {
	f, err := logs.Open(path, r.cfg.Logs)
	if err != nil {
		return nil, err
	}
	l, stdout, stderr := newFileIO(f)
	l.stdin = newStdinFeed()
	var stdin io.Reader = l.stdin // cio opens no FIFO for a task created without one
	if info.Labels[labelStdinClosed] != "" {
		l.stdin.close() // attachers' input is not read, as before
		stdin = nil
	}
	ctr, err := r.c.LoadContainer(ctx, info.ID)
	if err == nil {
		var t client.Task
		t, err = ctr.Task(ctx, cio.NewAttach(cio.WithStreams(stdin, stdout, stderr)))
		if err == nil {
			l.io = t.IO()
			cfg := l.io.Config()
			l.tty = cfg.Terminal
			if cfg.Stdin == "" && stdin != nil {
				l.stdin.close()
				l.stdin = nil
			}
		}
	}
	if err != nil {
		l.closeFile()
		return nil, err
	}
	return l, nil
}
