// Package wait has tests wait for what happens elsewhere (another
// goroutine, process or machine) by polling it with a deadline, never by
// sleeping a guessed while, and run the code under test in the background
// until they stop it. Only tests import it.
package wait

import (
	"context"
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

// Background is the code under test running in a goroutine of its own,
// such as an agent's Run(ctx), until Stop ends its context.
type Background struct {
	t       testing.TB
	what    string
	timeout time.Duration
	cancel  context.CancelFunc
	done    chan struct{}
	err     error // what run returned, once done is closed
}

// Start runs run(ctx) in a goroutine until Stop cancels ctx; what names it
// in failures, such as "agent Run". Stop is also called when the test
// ends, which only makes sure run has returned: the caller checks what it
// returned, in a cleanup of its own if need be.
func Start(t testing.TB, timeout time.Duration, what string, run func(ctx context.Context) error) *Background {
	ctx, cancel := context.WithCancel(context.Background())
	b := &Background{t: t, what: what, timeout: timeout, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(b.done)
		b.err = run(ctx)
	}()
	t.Cleanup(func() { b.Stop() })
	return b
}

// Done is closed once run has returned; Err then says what it returned.
func (b *Background) Done() <-chan struct{} { return b.done }

// Err returns what run returned; call it once Done is closed.
func (b *Background) Err() error { return b.err }

// Stop cancels run's context and waits for run to return, failing the test
// if it does not within the timeout; it returns what run returned. It may
// be called more than once, from the test's goroutine.
func (b *Background) Stop() error {
	b.t.Helper()
	b.cancel()
	select {
	case <-b.done:
		return b.err
	case <-time.After(b.timeout):
		b.t.Fatalf("%s did not return within %v of its context's end", b.what, b.timeout)
		return nil
	}
}
