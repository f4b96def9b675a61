package hubd

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestIdleReturn: memory is returned once after each busy spell, when
// nothing new was served for the idle time, and never while requests
// keep coming or when nothing happened since the last return.
func TestIdleReturn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var served, releases atomic.Uint64
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			defer close(done)
			idleReturn(ctx, served.Load, 10*time.Second, func() { releases.Add(1) })
		}()
		step := func(d time.Duration, want uint64) {
			t.Helper()
			time.Sleep(d) // the bubble's clock
			synctest.Wait()
			if got := releases.Load(); got != want {
				t.Fatalf("after %v more: %d releases, want %d", d, got, want)
			}
		}
		step(9*time.Second, 0)  // busy from the start, not idle long enough
		step(2*time.Second, 1)  // idle for 10s: returned
		step(60*time.Second, 1) // nothing since: not again
		for range 20 {          // requests keep coming
			served.Add(1)
			step(5*time.Second, 1)
		}
		step(11*time.Second, 2) // then stop
		cancel()
		<-done
	})
}
