package fake

import (
	"context"
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
	r.settle(r.now())
	c, err := r.find(uid, name)
	if err != nil {
		return err
	}
	if c.State != runtime.StateRunning {
		return fmt.Errorf("not running: %w", runtime.ErrNotFound)
	}
	return nil
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
// writes for the container from now on, and its exit code.
func (r *Runtime) Attach(ctx context.Context, pod runtime.PodRef, container string, opts runtime.AttachOptions) (int, error) {
	a := &attacher{out: make(chan piece, attachBuffer), code: -1}
	err := func() error {
		defer r.flush()
		r.mu.Lock()
		defer r.mu.Unlock()
		r.settle(r.now())
		c, err := r.find(pod.UID, container)
		if err != nil {
			return err
		}
		if c.State != runtime.StateRunning {
			return fmt.Errorf("not running: %w", runtime.ErrNotFound)
		}
		if c.attached == nil {
			c.attached = map[*attacher]struct{}{}
		}
		c.attached[a] = struct{}{}
		return nil
	}()
	if err != nil {
		return -1, fmt.Errorf("attach to %q of pod %s: %w", container, pod, err)
	}
	detach := func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if c, err := r.find(pod.UID, container); err == nil && c.attached != nil {
			if _, ok := c.attached[a]; ok {
				delete(c.attached, a)
				close(a.out)
			}
		}
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
		case <-ctx.Done():
			detach()
			return -1, ctx.Err()
		}
	}
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
