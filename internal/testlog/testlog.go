// Package testlog gives tests a logger that writes to the test's own log,
// so that a failing test shows what the code under it said, and a passing
// one stays quiet unless run with -v. Only tests import it.
package testlog

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// New returns a text logger at level writing to t.Log. Lines logged after
// the test ended (by goroutines still winding down) are dropped, since
// t.Log would panic then.
func New(t testing.TB, level slog.Level) *slog.Logger {
	w := &writer{t: t}
	t.Cleanup(func() { w.done.Store(true) })
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

type writer struct {
	t    testing.TB
	done atomic.Bool
}

func (w *writer) Write(p []byte) (int, error) {
	if !w.done.Load() {
		w.t.Log(strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}

// Recorder is a slog.Handler that logs to the test as New's logger does,
// and keeps every record's message, with its "err" attribute if it has
// one, for the test to check what the code under test said. Loggers
// derived with With share its records. It is safe for concurrent use.
type Recorder struct {
	slog.Handler
	seen *records
}

// record is one record's message and attributes, as "key=value".
type record struct {
	msg   string
	attrs []string
}

type records struct {
	mu    sync.Mutex
	lines []string // "message" or "message: err"
	recs  []record // per line, its message and attributes
	count map[string]int
}

// NewRecorder returns a Recorder logging to t at level.
func NewRecorder(t testing.TB, level slog.Level) *Recorder {
	return &Recorder{Handler: New(t, level).Handler(), seen: &records{count: map[string]int{}}}
}

// Handle keeps r, then logs it to the test.
func (h *Recorder) Handle(ctx context.Context, r slog.Record) error {
	line := r.Message
	attrs := make([]string, 0, r.NumAttrs())
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "err" {
			line += ": " + a.Value.String()
		}
		attrs = append(attrs, a.Key+"="+a.Value.String())
		return true
	})
	h.seen.mu.Lock()
	h.seen.lines = append(h.seen.lines, line)
	h.seen.recs = append(h.seen.recs, record{r.Message, attrs})
	h.seen.count[r.Message]++
	h.seen.mu.Unlock()
	return h.Handler.Handle(ctx, r)
}

func (h *Recorder) WithAttrs(as []slog.Attr) slog.Handler {
	return &Recorder{Handler: h.Handler.WithAttrs(as), seen: h.seen}
}

func (h *Recorder) WithGroup(g string) slog.Handler {
	return &Recorder{Handler: h.Handler.WithGroup(g), seen: h.seen}
}

// Count returns how many records had the message msg.
func (h *Recorder) Count(msg string) int {
	h.seen.mu.Lock()
	defer h.seen.mu.Unlock()
	return h.seen.count[msg]
}

// Has reports whether a record kept so far, as "message: err", contains s.
func (h *Recorder) Has(s string) bool {
	h.seen.mu.Lock()
	defer h.seen.mu.Unlock()
	return slices.ContainsFunc(h.seen.lines, func(l string) bool { return strings.Contains(l, s) })
}

// HasRecord reports whether a record kept so far has the message msg and,
// among the attributes logged with it (not those of With), each of attrs,
// given as "key=value".
func (h *Recorder) HasRecord(msg string, attrs ...string) bool {
	h.seen.mu.Lock()
	defer h.seen.mu.Unlock()
	return slices.ContainsFunc(h.seen.recs, func(r record) bool {
		return r.msg == msg && !slices.ContainsFunc(attrs, func(a string) bool { return !slices.Contains(r.attrs, a) })
	})
}
