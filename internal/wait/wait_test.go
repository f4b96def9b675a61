package wait

import (
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
