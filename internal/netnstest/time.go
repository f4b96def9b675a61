package netnstest

import "time"

// timeUntil returns the time left until d, rounded to seconds, at least
// one.
func timeUntil(d time.Time) time.Duration {
	return max(time.Until(d).Round(time.Second), time.Second)
}
