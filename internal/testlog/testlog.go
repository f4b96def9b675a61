// Package testlog gives tests a logger that writes to the test's own log,
// so that a failing test shows what the code under it said, and a passing
// one stays quiet unless run with -v. Only tests import it.
package testlog

import (
	"log/slog"
	"strings"
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
