package job

import (
	"time"

	corev1 "k8s.io/api/core/v1"
)

// The back-off before pods of a job that failed are replaced, as upstream:
// 10s after the first failure since the last success, doubling with each
// further one, at most 6 minutes.
const (
	DefaultPodFailureBackoff = 10 * time.Second
	MaxPodFailureBackoff     = 6 * time.Minute
)

// backoffRecord is how a job's pods have failed since one last succeeded.
type backoffRecord struct {
	failures    int32     // failed pods since the last success
	lastFailure time.Time // when the last of them finished; zero if none
}

// next returns b moved on by pods that finished since it was recorded.
func (b backoffRecord) next(succeeded, failed []*corev1.Pod) backoffRecord {
	if len(failed) == 0 {
		if len(succeeded) > 0 {
			return backoffRecord{}
		}
		return b
	}
	failed = append([]*corev1.Pod(nil), failed...)
	sortByFinished(failed)
	if len(succeeded) == 0 {
		return backoffRecord{failures: b.failures + int32(len(failed)), lastFailure: finishedAt(failed[len(failed)-1])}
	}
	// Only the failures after the last success count.
	var lastSuccess time.Time
	for _, p := range succeeded {
		if t := finishedAt(p); t.After(lastSuccess) {
			lastSuccess = t
		}
	}
	out := backoffRecord{}
	for i := len(failed) - 1; i >= 0; i-- {
		t := finishedAt(failed[i])
		if !t.After(lastSuccess) {
			break
		}
		if out.lastFailure.IsZero() {
			out.lastFailure = t
		}
		out.failures++
	}
	return out
}

// remaining is how long after now pods may be created again.
func (b backoffRecord) remaining(now time.Time) time.Duration {
	return backoffRemaining(b.failures, b.lastFailure, now)
}

// backoffRemaining is how long after now the back-off of failures ending
// at last lasts.
func backoffRemaining(failures int32, last, now time.Time) time.Duration {
	if failures == 0 {
		return 0
	}
	d := DefaultPodFailureBackoff
	for i := int32(1); i < failures && d < MaxPodFailureBackoff; i++ {
		d *= 2
	}
	d = min(d, MaxPodFailureBackoff)
	if elapsed := now.Sub(last); elapsed < d {
		return d - elapsed
	}
	return 0
}
