package pods

import "time"

// Back-off of restarts and of failed starts, as kubelet's (its
// flowcontrol.Backoff with no jitter): 10s, doubling to 5 minutes; a
// container that runs 10 minutes after its last restart before failing
// again starts over at 10s.
const (
	backOffInitial = 10 * time.Second
	backOffMax     = 5 * time.Minute
	backOffReset   = 2 * backOffMax
)

// expiredAt reports whether b no longer applies to a failure at event:
// it was never set, or event came backOffReset after it was last moved.
func (b BackOff) expiredAt(event time.Time) bool {
	return b.Delay == 0 || event.Sub(b.Since) > backOffReset
}

// next returns b moved on for a failure at event, decided at now
// (flowcontrol's Next).
func (b BackOff) next(event, now time.Time) BackOff {
	if b.expiredAt(event) {
		return BackOff{Delay: backOffInitial, Since: now}
	}
	return BackOff{Delay: min(2*b.Delay, backOffMax), Since: now}
}

// holdsSince reports whether now is still within b's delay after the
// failure at event (flowcontrol's IsInBackOffSince): a container that
// exited at event is not restarted yet.
func (b BackOff) holdsSince(event, now time.Time) bool {
	return !b.expiredAt(event) && now.Sub(event) < b.Delay
}

// holds reports whether now is still within b's delay after b was last
// moved (flowcontrol's IsInBackOffSinceUpdate): a failed start is not
// retried yet.
func (b BackOff) holds(now time.Time) bool {
	return !b.expiredAt(now) && now.Sub(b.Since) < b.Delay
}
