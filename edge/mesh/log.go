package mesh

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// logWriter takes memberlist's log lines ("[WARN] memberlist: ...") and
// logs each to a slog.Logger at its level, a line said again within
// every its repeat only once: a peer that keeps sending what the node
// refuses (another site's, or without the key) is logged once a period,
// not at every packet.
type logWriter struct {
	log   *slog.Logger // nil: discard
	every time.Duration
	now   func() time.Time

	mu   sync.Mutex
	seen map[string]time.Time
}

// maxSeen bounds the lines remembered; past it they are forgotten.
const maxSeen = 256

func newLogWriter(l *slog.Logger, every time.Duration) *logWriter {
	return &logWriter{log: l, every: every, now: time.Now, seen: map[string]time.Time{}}
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.once(parseLine(string(p)))
	return len(p), nil
}

// once logs msg at level unless it was logged within the period.
func (w *logWriter) once(level slog.Level, msg string) {
	if w.log == nil || !w.log.Enabled(context.Background(), level) || !w.first(msg) {
		return
	}
	w.log.Log(context.Background(), level, msg)
}

// parseLine returns the level of one of memberlist's log lines and its
// message, as the mesh logs it: "[WARN] memberlist: x" is "mesh: x" at
// warning level; a line without a level tag is info.
func parseLine(line string) (slog.Level, string) {
	line = strings.TrimSpace(line)
	level, msg := slog.LevelInfo, line
	for _, l := range []struct {
		tag   string
		level slog.Level
	}{{"[DEBUG]", slog.LevelDebug}, {"[INFO]", slog.LevelInfo}, {"[WARN]", slog.LevelWarn}, {"[ERR]", slog.LevelError}} {
		if rest, ok := strings.CutPrefix(line, l.tag); ok {
			level, msg = l.level, strings.TrimSpace(rest)
			break
		}
	}
	return level, "mesh: " + strings.TrimPrefix(msg, "memberlist: ")
}

// first reports whether msg was not logged within the last period.
func (w *logWriter) first(msg string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.now()
	if t, ok := w.seen[msg]; ok && now.Sub(t) < w.every {
		return false
	}
	if len(w.seen) >= maxSeen {
		clear(w.seen)
	}
	w.seen[msg] = now
	return true
}
