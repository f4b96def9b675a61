package childhub

import (
	"context"
	"time"
)

// settleDrop is how far below its lowest reading so far RSS must fall for
// Settle to count it as still falling.
const settleDrop = 1_000_000

// Settle calls read every step until RSS has not set a new low (by more
// than 1 MB) for five steps, or for at most limit, and returns the last
// reading and how long it waited. A step is a second, or a quarter of a
// shorter limit. first is the reading Settle starts from.
func Settle(ctx context.Context, read func() (Sample, error), first Sample, limit time.Duration) (Sample, time.Duration, error) {
	step := min(time.Second, limit/4)
	start := time.Now()
	last, low, lowAt := first, first.RSS, start
	tick := time.NewTicker(step)
	defer tick.Stop()
	for time.Since(start) < limit && time.Since(lowAt) < 5*step {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return Sample{}, 0, ctx.Err()
		}
		s, err := read()
		if err != nil {
			return Sample{}, 0, err
		}
		last = s
		if s.RSS+settleDrop < low {
			low, lowAt = s.RSS, time.Now()
		}
	}
	return last, time.Since(start), nil
}
