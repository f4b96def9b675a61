package containerd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"

	"github.com/outpost-mesh/outpost/edge/logs"
	"github.com/outpost-mesh/outpost/edge/runtime"
)

var _ runtime.Attacher = (*Runtime)(nil)

// attachBuffer is how many pieces of output (each at most cio's copy
// buffer, 32 KiB) an attacher may fall behind before it is cut off.
const attachBuffer = 64

// Attach implements runtime.Attacher: the container's output is handed
// to the attacher by the copying of its log, through a buffer of
// attachBuffer pieces, so that a slow attacher never delays the log. A
// container started without a log file has no output to attach to
// (ErrNotSupported). opts.Stdin goes into the stdin FIFO whose write end
// the Runtime keeps, as CRI's ContainerIO does (see stdinFeed); a
// stdinOnce stdin closed by an earlier attach takes no more input, and
// the attach goes on with the output alone. A resize is the main task's.
func (r *Runtime) Attach(ctx context.Context, pod runtime.PodRef, container string, opts runtime.AttachOptions) (int, error) {
	nctx := r.nsctx(ctx)
	cs, err := r.find(nctx, pod.UID, container)
	if err != nil {
		return -1, err
	}
	if len(cs) == 0 {
		return -1, fmt.Errorf("attach to %q of pod %s: %w", container, pod, runtime.ErrNotFound)
	}
	id := cs[len(cs)-1].ID
	ctr, err := r.c.LoadContainer(nctx, id)
	if err != nil {
		return -1, fmt.Errorf("attach to %q of pod %s: %w", container, pod, native(err))
	}
	task, err := ctr.Task(nctx, nil)
	if errdefs.IsNotFound(err) {
		return -1, fmt.Errorf("attach to %q of pod %s: not running: %w", container, pod, runtime.ErrNotFound)
	}
	if err != nil {
		return -1, fmt.Errorf("attach to %q of pod %s: %w", container, pod, native(err))
	}
	r.mu.Lock()
	l := r.ios[id]
	r.mu.Unlock()
	if l == nil || l.pending || l.fan == nil {
		return -1, fmt.Errorf("attach to %q of pod %s: no output copied by this agent: %w", container, pod, runtime.ErrNotSupported)
	}
	if opts.Stdin != nil && l.stdin == nil {
		return -1, fmt.Errorf("attach to %q of pod %s: %w", container, pod, runtime.ErrNoStdin)
	}
	sub := l.fan.subscribe()
	if sub == nil {
		return -1, fmt.Errorf("attach to %q of pod %s: not running: %w", container, pod, runtime.ErrNotFound)
	}
	defer l.fan.unsubscribe(sub)
	exited, err := task.Wait(nctx)
	if err != nil {
		return -1, fmt.Errorf("attach to %q of pod %s: %w", container, pod, native(err))
	}
	stdout, stderr := opts.Stdout, opts.Stderr
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	// once: the end of this attacher's stdin closes the container's.
	once := opts.StdinOnce && !l.tty
	var stdinEnd chan error // the end of the copying of opts.Stdin
	if opts.Stdin != nil && !l.stdin.isClosed() {
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stdinEnd = make(chan error, 1)
		go func() { stdinEnd <- l.stdin.copyFrom(cctx, opts.Stdin) }()
		if once {
			// However the attach ends, as CRI's.
			defer r.closeStdin(ctx, id, task, l.stdin)
		}
	}
	resize := opts.Resize
	if !l.tty {
		resize = nil
	}
	var (
		es     *client.ExitStatus
		ended  bool // the output ended
		drain  <-chan time.Time
		output = sub.ch
	)
	for !ended || es == nil {
		select {
		case c, ok := <-output:
			if !ok {
				if sub.isBehind() {
					return -1, fmt.Errorf("attach to %q of pod %s: %w", container, pod, runtime.ErrAttachBehind)
				}
				ended, output = true, nil
				continue
			}
			w := stdout
			if c.stream == streamStderr {
				w = stderr
			}
			if _, err := w.Write(c.data); err != nil {
				return -1, fmt.Errorf("attach to %q of pod %s: %w", container, pod, err)
			}
		case err := <-stdinEnd:
			stdinEnd = nil
			switch {
			case errors.Is(err, errStdinClosed) || ctx.Err() != nil:
				// The container's IO is finished: its exit comes.
			case once:
				r.closeStdin(ctx, id, task, l.stdin)
			default:
				// The attacher is done: the container goes on.
				return 0, nil
			}
		case sz, ok := <-resize:
			if !ok {
				resize = nil
				continue
			}
			if err := task.Resize(nctx, uint32(sz.Width), uint32(sz.Height)); err != nil && !errdefs.IsNotFound(err) {
				r.cfg.Logger.Warn("attach: resize terminal", "container", id, "err", err)
			}
		case s := <-exited:
			es, exited = &s, nil
			// The output ends when the exit has been reaped and the
			// log drained; a runtime that does not reap it (another
			// agent's) never ends it.
			t := time.NewTimer(drainTimeout + time.Second)
			defer t.Stop()
			drain = t.C
		case <-drain:
			ended = true
		case <-ctx.Done():
			return -1, ctx.Err()
		}
	}
	code, _, err := es.Result()
	if err != nil {
		return -1, fmt.Errorf("attach to %q of pod %s: %w", container, pod, native(err))
	}
	return int(code), nil
}

// closeStdin closes a container's stdin for good: the feed, then the
// shim's own end of the FIFO, so that the process reads EOF once what
// was sent is read; a label keeps a later agent from opening it again.
// It is safe to call twice.
func (r *Runtime) closeStdin(ctx context.Context, id string, task client.Task, f *stdinFeed) {
	if f.isClosed() {
		return
	}
	f.close()
	bg := r.nsctx(context.WithoutCancel(ctx))
	if err := task.CloseIO(bg, client.WithStdinCloser); err != nil && !errdefs.IsNotFound(err) {
		r.cfg.Logger.Warn("attach: close stdin", "container", id, "err", err)
	}
	if err := r.setLabels(bg, id, map[string]string{labelStdinClosed: "true"}); err != nil && !errors.Is(err, runtime.ErrNotFound) && !errdefs.IsNotFound(err) {
		r.cfg.Logger.Warn("attach: record closed stdin", "container", id, "err", err)
	}
}

const (
	streamStdout = 1
	streamStderr = 2
)

// fanout hands one container's output to its attachers.
type fanout struct {
	mu     sync.Mutex
	subs   map[*subscriber]struct{}
	closed bool
}

// subscriber is one attacher: ch is closed when the output ends or the
// attacher fell behind.
type subscriber struct {
	ch     chan outPiece
	behind bool // under fanout.mu
	fan    *fanout
}

type outPiece struct {
	stream int
	data   []byte
}

// subscribe returns a new subscriber, or nil once the output has ended.
func (f *fanout) subscribe() *subscriber {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil
	}
	if f.subs == nil {
		f.subs = map[*subscriber]struct{}{}
	}
	s := &subscriber{ch: make(chan outPiece, attachBuffer), fan: f}
	f.subs[s] = struct{}{}
	return s
}

func (f *fanout) unsubscribe(s *subscriber) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.subs[s]; ok {
		delete(f.subs, s)
		close(s.ch)
	}
}

func (s *subscriber) isBehind() bool {
	s.fan.mu.Lock()
	defer s.fan.mu.Unlock()
	return s.behind
}

// publish hands a copy of p to every subscriber that has room, and cuts
// off those that have none. It never blocks.
func (f *fanout) publish(stream int, p []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.subs) == 0 || len(p) == 0 {
		return
	}
	data := append([]byte(nil), p...) // shared by the subscribers, read only
	for s := range f.subs {
		select {
		case s.ch <- outPiece{stream, data}:
		default:
			s.behind = true
			delete(f.subs, s)
			close(s.ch)
		}
	}
}

// close ends the output: every subscriber's channel is closed.
func (f *fanout) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	for s := range f.subs {
		delete(f.subs, s)
		close(s.ch)
	}
}

// teeWriter writes a stream of the container's output to its log, then
// to its attachers.
type teeWriter struct {
	w      io.Writer
	stream string
	fan    *fanout
}

func (t teeWriter) Write(p []byte) (int, error) {
	n, err := t.w.Write(p)
	s := streamStdout
	if t.stream == logs.Stderr {
		s = streamStderr
	}
	t.fan.publish(s, p)
	return n, err
}
