package streams

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/outpost-mesh/outpost/edge/runtime"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// ExecTunnel handles an exec tunnel: the command runs in the pod's
// running container with the streams asked for, and its exit code ends
// the tunnel. A hub that closes the tunnel early has the command killed.
func (s *Server) ExecTunnel(ctx context.Context, open *wire.TunnelOpen) (func(wire.TunnelStream), error) {
	if s.cfg.Exec == nil {
		return nil, refuse(wire.CodeNotFound, "this node serves no exec")
	}
	var argv []string
	for _, p := range open.Params {
		if p.Name == "command" {
			argv = append(argv, p.Value)
		}
	}
	if len(argv) == 0 {
		return nil, refuse(wire.CodeBadRequest, "an exec tunnel needs a command")
	}
	pod, c, err := s.runningContainer(ctx, open)
	if err != nil {
		return nil, err
	}
	want := ioOf(open)
	ref, name := pod.ref(), c.Name
	return func(st wire.TunnelStream) {
		s.serveChunks(ctx, st, want, func(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer, resize <-chan runtime.TermSize) (int, error) {
			return s.cfg.Exec.Exec(ctx, ref, name, runtime.ExecOptions{
				Command: argv, Stdin: stdin, Stdout: stdout, Stderr: stderr, TTY: want.tty, Resize: resize,
			})
		})
	}, nil
}

// AttachTunnel handles an attach tunnel: the output of the pod's running
// container from now on, ended by its exit code when it exits; the hub's
// stdin goes to the container's stdin, for a container with stdin: true
// (refused otherwise), and its resizes to the container's terminal. The
// end of the hub's stdin does what runtime.AttachOptions says: with
// stdinOnce on a container without a TTY it closes the container's stdin
// and the attach goes on until the container exits; otherwise it ends
// the attach with exit code 0 and the container goes on.
func (s *Server) AttachTunnel(ctx context.Context, open *wire.TunnelOpen) (func(wire.TunnelStream), error) {
	if s.cfg.Attach == nil {
		return nil, refuse(wire.CodeNotFound, "this node serves no attach")
	}
	pod, c, err := s.runningContainer(ctx, open)
	if err != nil {
		return nil, err
	}
	want := ioOf(open)
	if want.stdin && !c.Stdin {
		return nil, refuse(wire.CodeBadRequest, "container %s in pod %s was not started with stdin: true", c.Name, pod.Spec.Name)
	}
	want.tty = c.TTY // the container's terminal merges its stderr
	// The process runs already: a resize is applied whenever it comes,
	// there is no first size to wait for.
	want.noFirstSize = true
	ref, name, once := pod.ref(), c.Name, c.StdinOnce
	return func(st wire.TunnelStream) {
		s.serveChunks(ctx, st, want, func(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer, resize <-chan runtime.TermSize) (int, error) {
			return s.cfg.Attach.Attach(ctx, ref, name, runtime.AttachOptions{
				Stdin: stdin, StdinOnce: once, Stdout: stdout, Stderr: stderr, Resize: resize,
			})
		})
	}, nil
}

// runningContainer returns the pod and the spec of the running container
// the open names, or a refusal.
func (s *Server) runningContainer(ctx context.Context, open *wire.TunnelOpen) (*Pod, *corev1.Container, error) {
	name := open.Param("container")
	if name == "" {
		return nil, nil, refuse(wire.CodeBadRequest, "an %s tunnel names its container", open.Kind)
	}
	pod, err := s.findPod(ctx, open)
	if err != nil {
		return nil, nil, err
	}
	c := pod.container(name)
	if c == nil {
		return nil, nil, refuse(wire.CodeBadRequest, "container %s is not valid for pod %s", name, pod.Spec.Name)
	}
	if !running(pod.status(name)) {
		return nil, nil, refuse(wire.CodeNotFound, "container %q in pod %q is not running", name, pod.Spec.Name)
	}
	return pod, c, nil
}

// streamsWanted is which streams an exec or attach asks for.
type streamsWanted struct {
	stdin, stdout, stderr, tty bool
	// noFirstSize starts at once with a TTY, without waiting for the
	// terminal's first size.
	noFirstSize bool
}

func ioOf(open *wire.TunnelOpen) streamsWanted {
	return streamsWanted{
		stdin:  boolParam(open, "stdin"),
		stdout: boolParam(open, "stdout"),
		stderr: boolParam(open, "stderr"),
		tty:    boolParam(open, "tty"),
	}
}

// firstSizeWait bounds how long a TTY exec waits for the terminal's
// first size before its command starts.
const firstSizeWait = time.Second

// stdinQueue is how many chunks of stdin (each at most wire.MaxChunk) a
// tunnel holds for a command that does not read them yet.
const stdinQueue = 8

// runFunc runs what an exec or attach tunnel serves, until it ends or
// ctx is done.
type runFunc func(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer, resize <-chan runtime.TermSize) (int, error)

// serveChunks serves an exec or attach tunnel on st: the hub's stdin and
// resize chunks go to run, run's output goes back in chunks, then its
// exit. Stdin goes through a pipe behind a queue of stdinQueue chunks, so
// that a resize is read while the command does not read its stdin yet,
// and what is buffered stays bounded: a full queue holds the hub's
// chunks back by the stream's flow control.
func (s *Server) serveChunks(ctx context.Context, st wire.TunnelStream, want streamsWanted, run runFunc) {
	defer st.Close()
	ctx, cancel := streamContext(ctx, st)
	defer cancel()
	cw := wire.NewChunkWriter(st)
	var stdin io.Reader
	var pr *io.PipeReader
	var stdinq chan []byte // nil: the command gets no stdin; closed: its end
	var wg sync.WaitGroup
	if want.stdin {
		var pw *io.PipeWriter
		pr, pw = io.Pipe()
		stdin = pr
		stdinq = make(chan []byte, stdinQueue)
		wg.Go(func() {
			for b := range stdinq {
				// An error: the command is done with its stdin; the
				// rest is dropped.
				pw.Write(b)
			}
			pw.Close()
		})
	}
	endStdin := sync.OnceFunc(func() {
		if stdinq != nil {
			close(stdinq)
		}
	})
	resize := make(chan runtime.TermSize, 1)
	// first is closed once the hub sent a terminal size, or will send
	// none, so that the first size, which kubectl sends as it starts, can
	// be the command's from its start.
	first := make(chan struct{})
	firstSize := sync.OnceFunc(func() { close(first) })
	wg.Go(func() {
		cr := wire.NewChunkReader(st)
		stdinOpen := stdinq != nil // stdin after its end is dropped
		for {
			ch, data, err := cr.Next()
			if err != nil {
				firstSize()
				endStdin() // the hub sends no more: the end of stdin
				if !errors.Is(err, io.EOF) {
					cancel() // the stream broke or the hub closed it
				}
				return
			}
			switch ch {
			case wire.ChanStdin:
				if !stdinOpen {
					continue
				}
				if len(data) == 0 {
					stdinOpen = false
					endStdin()
					continue
				}
				select {
				case stdinq <- bytes.Clone(data):
				case <-ctx.Done():
				}
			case wire.ChanResize:
				w, h, err := wire.ParseResize(data)
				if err != nil {
					continue
				}
				select { // the newest size wins
				case <-resize:
				default:
				}
				resize <- runtime.TermSize{Width: w, Height: h}
				firstSize()
			}
		}
	})
	var stdout, stderr io.Writer
	if want.stdout {
		stdout = &cancelWriter{w: cw.ChannelWriter(wire.ChanStdout), cancel: cancel}
	}
	if want.stderr && !want.tty {
		stderr = &cancelWriter{w: cw.ChannelWriter(wire.ChanStderr), cancel: cancel}
	}
	if want.tty && !want.noFirstSize {
		// Wait a little for the terminal's first size; a client that
		// sends none starts the command all the same.
		t := time.NewTimer(firstSizeWait)
		select {
		case <-first:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
	code, err := run(ctx, stdin, stdout, stderr, resize)
	if pr != nil {
		pr.Close() // unblocks a stdin write the command will not read
	}
	if ctx.Err() != nil {
		// The hub went away or closed the tunnel: nobody to tell.
		st.Close()
		wg.Wait()
		return
	}
	msg := ""
	if err != nil {
		code, msg = -1, err.Error()
	}
	if err := cw.Write(wire.ChanExit, wire.AppendExit(nil, code, msg)); err == nil {
		_ = st.CloseWrite()
	}
	st.Close()
	wg.Wait()
}

// cancelWriter cancels the command when its output cannot be written:
// the hub is gone.
type cancelWriter struct {
	w      io.Writer
	cancel context.CancelFunc
}

func (c *cancelWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	if err != nil {
		c.cancel()
		return n, fmt.Errorf("write to the hub: %w", err)
	}
	return n, nil
}
