package session

import (
	"math/rand/v2"
	"time"
)

// Backoff spaces the attempts of a reconnect or retry loop. The step
// starts at Min and doubles after each attempt up to Max; each wait is
// drawn uniformly from the upper half of the step, so that a fleet whose
// hub restarted does not reconnect in step. An attempt that ran for Reset
// or longer counts as a success: the step starts over from Min.
//
// The zero value is not useful; set Min and Max. A Backoff is not safe
// for concurrent use; each loop keeps its own.
type Backoff struct {
	Min, Max time.Duration // a Min above Max is read as Max
	// Reset is how long an attempt must have run to start the step over
	// from Min; 0 never does.
	Reset time.Duration
	// Rand returns a number in [0, n); nil is math/rand/v2's Int64N.
	// Tests set it.
	Rand func(n int64) int64

	step time.Duration
}

// Next returns how long to wait after an attempt that ran for ran, and
// steps the back-off for the attempt after.
func (b *Backoff) Next(ran time.Duration) time.Duration {
	if b.step == 0 || (b.Reset > 0 && ran >= b.Reset) {
		b.step = min(b.Min, b.Max)
	}
	rnd := b.Rand
	if rnd == nil {
		rnd = rand.Int64N
	}
	half := b.step / 2
	wait := half + time.Duration(rnd(int64(b.step-half)+1))
	b.step = min(b.step*2, b.Max)
	return wait
}
