package fake

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/outpost-mesh/outpost/edge/runtime"
)

var (
	_ runtime.Execer   = (*Runtime)(nil)
	_ runtime.Attacher = (*Runtime)(nil)
)

// Exec implements runtime.Execer: it checks that the container runs and
// runs the command with Config.Exec.
func (r *Runtime) Exec(ctx context.Context, pod runtime.PodRef, container string, opts runtime.ExecOptions) (int, error) {
	if err := r.running(pod.UID, container); err != nil {
		return -1, fmt.Errorf("exec in %q of pod %s: %w", container, pod, err)
	}
	if r.exec == nil {
		return -1, fmt.Errorf("exec in %q of pod %s: %w", container, pod, runtime.ErrNotSupported)
	}
	return r.exec(ctx, pod, container, opts)
}

// running returns nil if the named container of the pod runs.
func (r *Runtime) running(uid, name string) error {
	defer r.flush()
	r.mu.Lock()
	defer r.mu.Unlock()
	_, err := r.runningLocked(uid, name)
	return err
}

// runningLocked returns the named container of the pod, settled now, if
// it runs. r.mu is held.
func (r *Runtime) runningLocked(uid, name string) (*container, error) {
	r.settle(r.now())
	c, err := r.find(uid, name)
	if err != nil {
		return nil, err
	}
	if c.State != runtime.StateRunning {
		return nil, fmt.Errorf("not running: %w", runtime.ErrNotFound)
	}
	return c, nil
}

// attachBuffer is how many pieces of output an attacher may fall behind
// before it is cut off.
const attachBuffer = 16

// attacher is one Attach call.
type attacher struct {
	out  chan piece // closed by end or when cut off
	code int        // set before out is closed by end
	cut  bool       // set before out is closed when cut off
}

type piece struct {
	stderr bool
	data   []byte
}

// end ends the attacher with the container's exit code. r.mu is held.
func (a *attacher) end(code int) {
	a.code = code
	close(a.out)
}

// Attach implements runtime.Attacher: the attacher gets what Output
// writes for the container from now on, and its exit code. Its Stdin is
// read in a goroutine and kept for Stdin to return; it ends as
// runtime.AttachOptions says: with StdinOnce on a container without a
// TTY, the attach's end closes the container's stdin (Stdin reports it
// closed, later input is not read); otherwise the end of Stdin ends the
// attach with 0. Sizes from Resize are kept, for a container with a TTY,
// for Resizes to return.
func (r *Runtime) Attach(ctx context.Context, pod runtime.PodRef, container string, opts runtime.AttachOptions) (int, error) {
	a := &attacher{out: make(chan piece, attachBuffer), code: -1}
	c, err := r.register(pod.UID, container, a, opts.Stdin != nil)
	if err != nil {
		return -1, fmt.Errorf("attach to %q of pod %s: %w", container, pod, err)
	}
	detach := func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if c.attached != nil {
			if _, ok := c.attached[a]; ok {
				delete(c.attached, a)
				close(a.out)
			}
		}
	}
	once := opts.StdinOnce && !c.tty
	var stdinEnd chan error
	if opts.Stdin != nil {
		r.mu.Lock()
		closed := c.stdinClosed
		r.mu.Unlock()
		if !closed {
			done := make(chan struct{})
			defer close(done)
			stdinEnd = make(chan error, 1)
			go func() { stdinEnd <- r.readStdin(c, opts.Stdin, done) }()
			if once {
				defer r.closeStdin(c)
			}
		}
	}
	resize := opts.Resize
	if !c.tty {
		resize = nil
	}
	for {
		select {
		case p, ok := <-a.out:
			if !ok {
				r.mu.Lock()
				code, cut := a.code, a.cut
				r.mu.Unlock()
				if cut {
					return -1, fmt.Errorf("attach to %q of pod %s: %w", container, pod, runtime.ErrAttachBehind)
				}
				return code, nil
			}
			w := opts.Stdout
			if p.stderr {
				w = opts.Stderr
			}
			if w == nil {
				w = io.Discard
			}
			if _, err := w.Write(p.data); err != nil {
				detach()
				return -1, fmt.Errorf("attach to %q of pod %s: %w", container, pod, err)
			}
		case err := <-stdinEnd:
			stdinEnd = nil
			if errors.Is(err, errStdinClosed) {
				continue // the output goes on, as containerd's
			}
			if once {
				r.closeStdin(c)
				continue
			}
			detach()
			return 0, nil
		case sz, ok := <-resize:
			if !ok {
				resize = nil
				continue
			}
			r.mu.Lock()
			c.resizes = append(c.resizes, sz)
			r.mu.Unlock()
		case <-ctx.Done():
			detach()
			return -1, ctx.Err()
		}
	}
}

// register adds a to the attachers of the named running container and
// returns it.
func (r *Runtime) register(uid, name string, a *attacher, stdin bool) (*container, error) {
	defer r.flush()
	r.mu.Lock()
	defer r.mu.Unlock()
	c, err := r.runningLocked(uid, name)
	if err != nil {
		return nil, err
	}
	if stdin && !c.stdin {
		return nil, runtime.ErrNoStdin
	}
	if c.attached == nil {
		c.attached = map[*attacher]struct{}{}
	}
	c.attached[a] = struct{}{}
	return c, nil
}

// errStdinClosed ends the reading of an attacher's stdin once another
// attach closed the container's.
var errStdinClosed = errors.New("the container's stdin is closed")

// readStdin appends what in holds to c's stdin until it ends, c's stdin
// is closed (errStdinClosed) or done is closed; what a Read returns after
// that is dropped.
func (r *Runtime) readStdin(c *container, in io.Reader, done <-chan struct{}) error {
	buf := make([]byte, 32<<10)
	for {
		n, err := in.Read(buf)
		select {
		case <-done:
			return nil
		default:
		}
		r.mu.Lock()
		closed := c.stdinClosed
		if !closed {
			c.stdinData = append(c.stdinData, buf[:n]...)
		}
		r.mu.Unlock()
		if closed {
			return errStdinClosed
		}
		if err != nil {
			return err
		}
	}
}

// closeStdin closes c's stdin for good.
func (r *Runtime) closeStdin(c *container) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c.stdinClosed = true
}

// Stdin returns what attachers wrote to the stdin of the named container
// of the pod so far, and whether an attach closed it (StdinOnce). It
// returns an error wrapping runtime.ErrNotFound for an unknown
// container.
func (r *Runtime) Stdin(uid, name string) (data []byte, closed bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, err := r.find(uid, name)
	if err != nil {
		return nil, false, fmt.Errorf("stdin of %q of pod %s: %w", name, uid, err)
	}
	return append([]byte(nil), c.stdinData...), c.stdinClosed, nil
}

// Resizes returns the terminal sizes attaches applied to the named
// container of the pod, oldest first; nil for an unknown container.
func (r *Runtime) Resizes(uid, name string) []runtime.TermSize {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, err := r.find(uid, name)
	if err != nil {
		return nil
	}
	return append([]runtime.TermSize(nil), c.resizes...)
}

// Output writes data as the named running container's output on stdout
// (or stderr), for its attachers. An attacher with no room is cut off.
// It returns an error wrapping runtime.ErrNotFound if no such container
// runs.
func (r *Runtime) Output(uid, name string, stderr bool, data []byte) error {
	defer r.flush()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.settle(r.now())
	c, err := r.find(uid, name)
	if err == nil && c.State != runtime.StateRunning {
		err = fmt.Errorf("not running: %w", runtime.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("output of %q of pod %s: %w", name, uid, err)
	}
	data = append([]byte(nil), data...)
	for a := range c.attached {
		select {
		case a.out <- piece{stderr, data}:
		default:
			a.cut = true
			delete(c.attached, a)
			close(a.out)
		}
	}
	return nil
}

// Attached returns how many Attach calls are attached to the named
// container of the pod.
func (r *Runtime) Attached(uid, name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, err := r.find(uid, name)
	if err != nil {
		return 0
	}
	return len(c.attached)
}
