package events

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestEventSeries: a repeat of an event within the window is counted on
// the first, under its name; later, or with another message, it starts a
// series of its own.
func TestEventSeries(t *testing.T) {
	var log eventLog
	start := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) metav1.Time { return metav1.NewTime(start.Add(d)) }
	key := eventKey{obj: corev1.ObjectReference{Kind: "Pod", Name: "web", UID: "u"}, typ: corev1.EventTypeWarning, reason: "BackOff", msg: "Back-off"}
	other := key
	other.msg = "something else"
	for _, step := range []struct {
		key       eventKey
		at        time.Duration
		name      string
		wantName  string
		wantCount int32
		wantFirst time.Duration
	}{
		{key, 0, "a", "a", 1, 0},
		{key, time.Minute, "b", "a", 2, 0},
		{other, 2 * time.Minute, "c", "c", 1, 2 * time.Minute},
		{key, 9 * time.Minute, "d", "a", 3, 0},
		{key, 20 * time.Minute, "e", "e", 1, 20 * time.Minute}, // 11 minutes after the last
		{key, 21 * time.Minute, "f", "e", 2, 20 * time.Minute},
	} {
		s := log.series(step.key, at(step.at), step.name)
		if s.name != step.wantName || s.count != step.wantCount || !s.first.Equal(&metav1.Time{Time: start.Add(step.wantFirst)}) {
			t.Errorf("series(%s at %v) = %s x%d from %v, want %s x%d from %v", step.key.msg, step.at, s.name, s.count, s.first.Sub(start), step.wantName, step.wantCount, step.wantFirst)
		}
	}
}
