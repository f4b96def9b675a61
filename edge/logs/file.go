package logs

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// Config configures a File.
type Config struct {
	// MaxSize is the size in bytes past which the file is rotated
	// (kubelet's containerLogMaxSize); default 10 MiB.
	MaxSize int64
	// MaxFiles is how many files a log keeps, the current one included
	// (kubelet's containerLogMaxFiles); default 5, at least 2.
	MaxFiles int
	// LineSize is the longest piece of a line written as one entry; a
	// longer line is split into partial (P) entries. Default 16 KiB, as
	// containerd's CRI plugin.
	LineSize int
	// Clock returns the time entries are stamped with and rotated files
	// are named by; nil for time.Now.
	Clock func() time.Time
}

// DefaultConfig returns kubelet's defaults.
func DefaultConfig() Config {
	return Config{
		MaxSize:  10 << 20, // kubelet's containerLogMaxSize
		MaxFiles: 5,        // kubelet's containerLogMaxFiles
		LineSize: 16 << 10, // containerd CRI's max_container_log_line_size
	}
}

// Validate reports whether c can be used.
func (c Config) Validate() error {
	if c.MaxSize < 1024 {
		return errors.New("log MaxSize below 1 KiB")
	}
	if c.MaxFiles < 2 {
		return errors.New("log MaxFiles below 2")
	}
	if c.LineSize < 1 {
		return errors.New("log LineSize below 1")
	}
	return nil
}

// RotatedTimeFormat is the layout of the timestamp suffix of a rotated
// file, as kubelet's container log manager names them:
// "0.log.20240102-150405", gzip-compressed as "0.log.20240102-150405.gz"
// once a newer rotation exists.
const RotatedTimeFormat = "20060102-150405"

// File is a container's log file at one path, rotated by size. Rotation
// renames the current file to path.<timestamp> and opens a new one; every
// rotated file but the newest is gzip-compressed (kubelet keeps the
// newest uncompressed for runtimes still writing to it); files beyond
// MaxFiles, oldest first, are removed. A File's methods may be called
// concurrently.
type File struct {
	path string
	cfg  Config

	mu   sync.Mutex
	f    *os.File // nil after Close
	size int64
	buf  []byte
	err  error // the last write or rotation error
}

// Open opens, or creates, the log at path for appending, making its
// directory if needed.
func Open(path string, cfg Config) (*File, error) {
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("open log: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("open log: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("open log: %w", err)
	}
	return &File{path: path, cfg: cfg, f: f, size: fi.Size()}, nil
}

// Path returns the path the File was opened at.
func (l *File) Path() string { return l.path }

// Err returns the last error a write or rotation met, or nil. Writes
// through a Stream never fail, so that a full disk never blocks a
// container's output; this tells that lines were lost.
func (l *File) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// WriteEntry writes one entry stamped now, rotating first if the file
// would grow past MaxSize. msg must not hold a newline.
func (l *File) WriteEntry(stream string, partial bool, msg []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return os.ErrClosed
	}
	now := l.cfg.Clock()
	l.buf = appendLine(l.buf[:0], now, stream, partial, msg)
	if l.size > 0 && l.size+int64(len(l.buf)) > l.cfg.MaxSize {
		if err := l.rotate(now); err != nil {
			l.err = err
			if l.f == nil {
				return err
			}
		}
	}
	n, err := l.f.Write(l.buf)
	l.size += int64(n)
	if err != nil {
		l.err = fmt.Errorf("write log: %w", err)
		return l.err
	}
	return nil
}

// rotate renames the current file, opens a new one, and compresses and
// prunes the rotated ones. l.mu is held.
func (l *File) rotate(now time.Time) error {
	name := ""
	for t := now; ; t = t.Add(time.Second) {
		name = l.path + "." + t.Format(RotatedTimeFormat)
		if !exists(name) && !exists(name+".gz") {
			break
		}
	}
	if err := os.Rename(l.path, name); err != nil {
		return fmt.Errorf("rotate log: %w", err)
	}
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		l.f.Close()
		l.f = nil
		return fmt.Errorf("rotate log: %w", err)
	}
	l.f.Close()
	l.f, l.size = f, 0
	return l.prune()
}

// prune compresses every rotated file but the newest and removes the
// oldest beyond MaxFiles-1.
func (l *File) prune() error {
	rotated, err := Rotated(l.path)
	if err != nil {
		return err
	}
	var errs []error
	for len(rotated) > l.cfg.MaxFiles-1 {
		if err := os.Remove(rotated[0]); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
		rotated = rotated[1:]
	}
	for _, r := range rotated[:max(len(rotated)-1, 0)] {
		if !strings.HasSuffix(r, ".gz") {
			if err := compress(r); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// Rotated returns the rotated files of the log at path, oldest first.
func Rotated(path string) ([]string, error) {
	m, err := filepath.Glob(globEscape(path) + ".*")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, f := range m {
		ts := strings.TrimSuffix(strings.TrimPrefix(f, path+"."), ".gz")
		if _, err := time.Parse(RotatedTimeFormat, ts); err == nil {
			out = append(out, f)
		}
	}
	slices.SortFunc(out, func(a, b string) int {
		return strings.Compare(strings.TrimSuffix(a, ".gz"), strings.TrimSuffix(b, ".gz"))
	})
	return out, nil
}

// Remove removes the log at path with its rotated files.
func Remove(path string) error {
	rotated, err := Rotated(path)
	if err != nil {
		return err
	}
	var errs []error
	for _, f := range append(rotated, path) {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// compress replaces file with file.gz, atomically.
func compress(file string) error {
	in, err := os.Open(file)
	if err != nil {
		return fmt.Errorf("compress log: %w", err)
	}
	defer in.Close()
	tmp := file + ".gz.tmp"
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o640)
	if err != nil {
		return fmt.Errorf("compress log: %w", err)
	}
	zw := gzip.NewWriter(out)
	_, err = io.Copy(zw, in)
	if err == nil {
		err = zw.Close()
	}
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, file+".gz")
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("compress log: %w", err)
	}
	return os.Remove(file)
}

func exists(name string) bool {
	_, err := os.Lstat(name)
	return err == nil
}

func globEscape(s string) string {
	r := strings.NewReplacer(`*`, `\*`, `?`, `\?`, `[`, `\[`, `\`, `\\`)
	return r.Replace(s)
}

// Close flushes nothing (entries are written whole) and closes the file.
// Later writes fail with os.ErrClosed. Close is safe to call twice.
func (l *File) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

// Stream returns a writer of the named stream's raw output into l, split
// into entries at newlines and at LineSize. One goroutine at a time may
// write to a stream; two streams of one File may be written at once.
// Close the stream to write out a last line that has no newline.
func (l *File) Stream(stream string) *StreamWriter {
	return &StreamWriter{l: l, stream: stream}
}

// StreamWriter splits one stream's output into log entries.
type StreamWriter struct {
	l      *File
	stream string
	// pending is the start of a line not yet written, shorter than
	// LineSize. It grows only as far as lines are cut across writes: a
	// container logs through two streams, and at 16 KiB each the
	// buffers of idle containers were an agent's largest use of memory.
	pending []byte
}

// Write writes the complete lines of p and keeps the rest for the next
// call. It never fails: an entry that cannot be written is lost and
// File.Err says so.
func (w *StreamWriter) Write(p []byte) (int, error) {
	n := len(p)
	max := w.l.cfg.LineSize
	for len(p) > 0 {
		i := indexNL(p)
		if i < 0 {
			room := max - len(w.pending)
			if len(p) < room {
				w.pending = append(w.pending, p...)
				break
			}
			w.pending = append(w.pending, p[:room]...)
			p = p[room:]
			w.emit(true)
			continue
		}
		line := p[:i]
		p = p[i+1:]
		if len(w.pending) == 0 && len(line) <= max {
			// A whole line in one write, as most are, goes out as it is.
			_ = w.l.WriteEntry(w.stream, false, line)
			continue
		}
		for len(w.pending)+len(line) > max {
			room := max - len(w.pending)
			w.pending = append(w.pending, line[:room]...)
			line = line[room:]
			w.emit(true)
		}
		w.pending = append(w.pending, line...)
		w.emit(false)
	}
	return n, nil
}

// Close writes out a pending line without its newline as a full entry.
func (w *StreamWriter) Close() error {
	if len(w.pending) > 0 {
		w.emit(false)
	}
	return nil
}

func (w *StreamWriter) emit(partial bool) {
	_ = w.l.WriteEntry(w.stream, partial, w.pending)
	w.pending = w.pending[:0]
}

func indexNL(p []byte) int {
	for i, c := range p {
		if c == '\n' {
			return i
		}
	}
	return -1
}
