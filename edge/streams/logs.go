package streams

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/outpost-mesh/outpost/edge/logs"
	"github.com/outpost-mesh/outpost/edge/runtime"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// LogOptions is what a logs tunnel asks for, as kubelet's
// PodLogOptions.
type LogOptions struct {
	Container  string
	Follow     bool
	Previous   bool
	Timestamps bool
	TailLines  int64     // -1 for all
	LimitBytes int64     // 0 for no limit
	Since      time.Time // zero for all
}

// ParseLogOptions reads the options of a logs tunnel; now resolves
// sinceSeconds. The error is a refusal.
func ParseLogOptions(open *wire.TunnelOpen, now time.Time) (LogOptions, error) {
	o := LogOptions{
		Container:  open.Param("container"),
		Follow:     boolParam(open, "follow"),
		Previous:   boolParam(open, "previous"),
		Timestamps: boolParam(open, "timestamps"),
		TailLines:  -1,
	}
	if o.Container == "" {
		return o, refuse(wire.CodeBadRequest, "a logs tunnel names its container")
	}
	if n, ok, err := intParam(open, "tailLines"); err != nil {
		return o, err
	} else if ok {
		o.TailLines = n
	}
	n, _, err := intParam(open, "limitBytes")
	if err != nil {
		return o, err
	}
	o.LimitBytes = n
	if n, ok, err := intParam(open, "sinceSeconds"); err != nil {
		return o, err
	} else if ok {
		o.Since = now.Add(-time.Duration(n) * time.Second)
	}
	if v := open.Param("sinceTime"); v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return o, refuse(wire.CodeBadRequest, "sinceTime=%q is not an RFC 3339 time", v)
		}
		o.Since = t
	}
	return o, nil
}

// stopCheck is the least time between two checks of whether a followed
// instance stopped.
const stopCheck = time.Second

// openLog opens the log file of the container instance opt asks for
// and returns it with its path and the instance's ID ("" for a previous
// one). A container replaced while this looks (a restart removes the log
// from two instances back) is looked up again, a few times at most.
func (s *Server) openLog(ctx context.Context, open *wire.TunnelOpen, pod *Pod, opt *LogOptions) (*os.File, string, string, error) {
	podName := pod.Spec.Name
	for try := 0; ; try++ {
		cs := pod.status(opt.Container)
		var attempt int
		var instance string
		switch {
		case opt.Previous && cs != nil:
			// As kubelet: the previous instance is there even while the
			// next one is being created.
			attempt, opt.Follow = cs.Attempt-1, false
		case cs == nil || cs.State == runtime.StateCreated:
			return nil, "", "", refuse(wire.CodeBadRequest, "container %q in pod %q is waiting to start: ContainerCreating", opt.Container, podName)
		default:
			attempt, instance = cs.Attempt, cs.ID
		}
		path := s.cfg.Logs.LogPath(pod.ref(), opt.Container, attempt)
		if attempt >= 0 {
			f, err := os.Open(path)
			if err == nil {
				return f, path, instance, nil
			}
			if !errors.Is(err, os.ErrNotExist) {
				return nil, "", "", fmt.Errorf("open log: %w", err)
			}
		}
		if try < 2 && cs != nil {
			// Did a restart replace the instance meanwhile?
			again, err := s.findPod(ctx, open)
			if err != nil {
				return nil, "", "", err
			}
			if c := again.status(opt.Container); c != nil && c.ID != cs.ID {
				pod = again
				continue
			}
		}
		if opt.Previous {
			return nil, "", "", refuse(wire.CodeNotFound, "previous terminated container %q in pod %q not found", opt.Container, podName)
		}
		return nil, "", "", refuse(wire.CodeNotFound, "container %q in pod %q is not available", opt.Container, podName)
	}
}

// maxLogLine bounds a log line the tunnel reads: longer ones are
// skipped, as the reader of package logs does.
const maxLogLine = logs.DefaultMaxLine

// Logs handles a logs tunnel: the log of the pod's container instance
// (its current one, or with previous the one before), from the CRI log
// file the node writes, as kubelet serves it.
func (s *Server) Logs(ctx context.Context, open *wire.TunnelOpen) (func(wire.TunnelStream), error) {
	if s.cfg.Logs == nil {
		return nil, refuse(wire.CodeNotFound, "this node serves no logs")
	}
	opt, err := ParseLogOptions(open, s.now())
	if err != nil {
		return nil, err
	}
	pod, err := s.findPod(ctx, open)
	if err != nil {
		return nil, err
	}
	podName := pod.Spec.Name
	if pod.container(opt.Container) == nil {
		return nil, refuse(wire.CodeBadRequest, "container %s is not valid for pod %s", opt.Container, podName)
	}
	f, path, instance, err := s.openLog(ctx, open, pod, &opt)
	if err != nil {
		return nil, err
	}
	ref := pod.ref()
	// stopped reports whether the instance no longer runs: a follow
	// ends then.
	stopped := func(ctx context.Context) bool {
		p, err := s.cfg.Pods.Pod(ctx, ref.Namespace, ref.Name)
		if err != nil {
			return false // not known: go on
		}
		if p == nil || p.Spec == nil || p.Spec.UID != pod.Spec.UID {
			return true
		}
		c := p.status(opt.Container)
		return c == nil || c.ID != instance || !running(c)
	}
	return func(st wire.TunnelStream) {
		defer st.Close()
		defer func() { f.Close() }()
		ctx, cancel := streamContext(ctx, st)
		defer cancel()
		lw := &logWriter{w: bufio.NewWriterSize(st, 32<<10), opt: opt}
		err := s.copyLog(ctx, lw, &f, path, opt, stopped)
		if ferr := lw.w.Flush(); err == nil {
			err = ferr
		}
		if err != nil && !errors.Is(err, errLimit) && ctx.Err() == nil {
			s.log.Debug("logs tunnel ended", "pod", ref.String(), "container", opt.Container, "err", err)
			return
		}
		_ = st.CloseWrite()
	}, nil
}

// sleepCtx waits d, or until ctx is done and returns its error.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// errLimit ends a log that reached its limitBytes.
var errLimit = errors.New("log limit reached")

// copyLog writes the log in *f (opened at path) to lw from where the
// tail starts; with follow, it goes on across rotations until stopped
// says the instance stopped or ctx ends. *f is the file being read, for
// the caller to close.
func (s *Server) copyLog(ctx context.Context, lw *logWriter, f **os.File, path string, opt LogOptions, stopped func(context.Context) bool) error {
	var r io.Reader = *f
	if opt.TailLines >= 0 {
		end, err := seekTail(*f, opt.TailLines)
		if err != nil {
			return err
		}
		if !opt.Follow {
			// The last lines as the tail counted them: lines written
			// since are not among them (kubectl logs --tail=1 prints
			// one line however fast the container writes).
			if r, err = upTo(*f, end); err != nil {
				return err
			}
		}
	}
	lr := &lineReader{r: bufio.NewReaderSize(r, 64<<10)}
	if !opt.Follow {
		return lr.each(lw.entry, true)
	}
	w := newFileWatch(path)
	defer func() { w.close() }()
	var lastCheck time.Time
	for {
		if err := lr.each(lw.entry, false); err != nil {
			return err
		}
		if err := lw.w.Flush(); err != nil {
			return err
		}
		if err := w.wait(ctx, s.cfg.FollowPoll); err != nil {
			return err
		}
		// A rotation renamed the file: what is left of it is read,
		// then the new one from its start.
		if fi, err := os.Stat(path); err == nil {
			if cur, err := (*f).Stat(); err == nil && !os.SameFile(fi, cur) {
				if err := lr.each(lw.entry, true); err != nil {
					return err
				}
				nf, err := os.Open(path)
				if err != nil {
					return fmt.Errorf("open rotated log: %w", err)
				}
				(*f).Close()
				*f = nf
				lr = &lineReader{r: bufio.NewReaderSize(nf, 64<<10)}
				w.close()
				w = newFileWatch(path)
				continue
			}
		}
		// Whether the instance stopped is asked of the runtime at most
		// once a second: a listing costs more than a look at a file.
		if now := s.now(); now.Sub(lastCheck) < stopCheck {
			continue
		} else {
			lastCheck = now
		}
		if stopped(ctx) {
			// The runtime drains the output before it shows the
			// instance stopped: what is in the file is all.
			return lr.each(lw.entry, true)
		}
	}
}

// upTo returns a reader of f from where it is to the offset end.
func upTo(f *os.File, end int64) (io.Reader, error) {
	cur, err := f.Seek(0, io.SeekCurrent)
	if err != nil {
		return nil, fmt.Errorf("read log: %w", err)
	}
	return io.LimitReader(f, max(end-cur, 0)), nil
}

// seekTail moves f to the start of its last n lines, and returns the
// offset just past the last of them, the end of the last complete line
// it saw: the file may grow as it is read, and a line being written is
// not yet one.
func seekTail(f *os.File, n int64) (end int64, err error) {
	var total, read int64
	br := bufio.NewReaderSize(f, 64<<10)
	for {
		chunk, err := br.ReadSlice('\n')
		read += int64(len(chunk))
		if len(chunk) > 0 && chunk[len(chunk)-1] == '\n' {
			total, end = total+1, read
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return 0, fmt.Errorf("read log: %w", err)
		}
	}
	skip := total - n
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return 0, fmt.Errorf("read log: %w", err)
	}
	if skip <= 0 {
		return end, nil
	}
	var off int64
	br.Reset(f)
	for skip > 0 {
		chunk, err := br.ReadSlice('\n')
		off += int64(len(chunk))
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil {
			break
		}
		skip--
	}
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return 0, fmt.Errorf("read log: %w", err)
	}
	return end, nil
}

// lineReader reads the complete lines of a log file that may be being
// written: a last line without its newline waits for the rest, unless
// the end is final.
type lineReader struct {
	r       *bufio.Reader
	pending []byte // the start of a line not yet ended; at most maxLogLine+1
	tooLong bool   // the line being read is over the limit: skipped
}

// each calls fn with each complete line read until the end of what the
// file holds now; with final, a last line without its newline too. Lines
// over the limit or not in the CRI format are skipped.
func (lr *lineReader) each(fn func(logs.Entry) error, final bool) error {
	for {
		frag, err := lr.r.ReadSlice('\n')
		if !lr.tooLong {
			if len(lr.pending)+len(frag) > maxLogLine+1 {
				lr.tooLong, lr.pending = true, lr.pending[:0]
			} else {
				lr.pending = append(lr.pending, frag...)
			}
		}
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			if !final || (len(lr.pending) == 0 && !lr.tooLong) {
				return nil
			}
		case err != nil:
			return fmt.Errorf("read log: %w", err)
		}
		line, skip := bytes.TrimSuffix(lr.pending, []byte{'\n'}), lr.tooLong
		lr.pending, lr.tooLong = lr.pending[:0], false
		if !skip {
			if e, perr := logs.ParseLine(line); perr == nil {
				if err := fn(e); err != nil {
					return err
				}
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
	}
}

// logWriter writes entries as kubelet serves them.
type logWriter struct {
	w       *bufio.Writer
	opt     LogOptions
	written int64
	buf     []byte
}

func (lw *logWriter) entry(e logs.Entry) error {
	if !lw.opt.Since.IsZero() && e.Time.Before(lw.opt.Since) {
		return nil
	}
	b := lw.buf[:0]
	if lw.opt.Timestamps {
		b = e.Time.UTC().AppendFormat(b, logs.TimeFormat)
		b = append(b, ' ')
	}
	b = append(b, e.Msg...)
	if !e.Partial {
		b = append(b, '\n')
	}
	lw.buf = b
	if lw.opt.LimitBytes > 0 {
		if room := lw.opt.LimitBytes - lw.written; int64(len(b)) >= room {
			_, err := lw.w.Write(b[:room])
			lw.written += room
			if err != nil {
				return err
			}
			return errLimit
		}
	}
	_, err := lw.w.Write(b)
	lw.written += int64(len(b))
	return err
}
