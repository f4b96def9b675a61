// Package wait has tests wait for what happens elsewhere (another
// goroutine, process or machine) by polling it with a deadline, never by
// sleeping a guessed while. Only tests import it.
package wait

import (
	"testing"
	"time"
)

// Every is how often For polls.
const Every = 10 * time.Millisecond

// For polls cond every Every until it reports true, and fails t if it has
// not within timeout, with what, the timeout and the reason cond last gave.
// It must be called from the test's goroutine, as t.Fatalf must.
func For(t testing.TB, timeout time.Duration, what string, cond func() (ok bool, why string)) {
	t.Helper()
	ForEvery(t, Every, timeout, what, cond)
}

// ForEvery is For polling every interval: for conditions dear to check,
// such as a list through the API.
func ForEvery(t testing.TB, interval, timeout time.Duration, what string, cond func() (ok bool, why string)) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		ok, why := cond()
		if ok {
			return
		}
		select {
		case <-deadline.C:
			if ok, why = cond(); !ok {
				t.Fatalf("%s: not within %v: %s", what, timeout, why)
			}
			return
		case <-tick.C:
		}
	}
}
