package wait

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestFor(t *testing.T) {
	var calls atomic.Int32
	For(t, time.Second, "third call", func() (bool, string) { return calls.Add(1) >= 3, "not yet" })
	if got := calls.Load(); got != 3 {
		t.Errorf("cond called %d times, want 3", got)
	}

	ft := &fatalT{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		For(ft, 30*time.Millisecond, "never", func() (bool, string) { return false, "still false" })
	}()
	<-done
	if !strings.Contains(ft.msg, "never: not within 30ms: still false") {
		t.Errorf("For on a condition that never holds failed with %q", ft.msg)
	}
}

// fatalT records Fatalf and ends the goroutine, as testing.T does.
type fatalT struct {
	testing.TB
	msg string
}

func (f *fatalT) Helper() {}

func (f *fatalT) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestBackground(t *testing.T) {
	b := Start(t, time.Second, "run", func(ctx context.Context) error {
		<-ctx.Done()
		return errors.New("stopped")
	})
	select {
	case <-b.Done():
		t.Fatal("Done before Stop")
	default:
	}
	for range 2 {
		if err := b.Stop(); err == nil || err.Error() != "stopped" {
			t.Errorf("Stop() = %v, want what run returned", err)
		}
	}
	if err := b.Err(); err == nil {
		t.Errorf("Err() = nil after Stop, want what run returned")
	}

	ft := &fatalT{TB: t}
	stuck := make(chan struct{})
	defer close(stuck)
	hung := Start(t, 20*time.Millisecond, "hung run", func(context.Context) error { <-stuck; return nil })
	hung.t = ft
	done := make(chan struct{})
	go func() {
		defer close(done)
		hung.Stop()
	}()
	<-done
	if !strings.Contains(ft.msg, "hung run did not return within 20ms") {
		t.Errorf("Stop of a run that does not return failed with %q", ft.msg)
	}
	hung.t = t
	hung.timeout = time.Minute // for the cleanup, once stuck is closed
}
