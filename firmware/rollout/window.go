package rollout

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// parseClock reads "HH:MM" as minutes after midnight.
func parseClock(s string) (int, error) {
	t, err := time.Parse("15:04", s)
	if err != nil || len(s) != 5 {
		return 0, fmt.Errorf("%q is not a time of day HH:MM", s)
	}
	return t.Hour()*60 + t.Minute(), nil
}

// validate checks w's times and days.
func (w Window) validate() error {
	start, err := parseClock(w.Start)
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	end, err := parseClock(w.End)
	if err != nil {
		return fmt.Errorf("end: %w", err)
	}
	if start == end {
		return errors.New("start and end are equal: an empty window")
	}
	for _, d := range w.Days {
		if d < time.Sunday || d > time.Saturday {
			return fmt.Errorf("day %d is not a weekday", d)
		}
	}
	return nil
}

// bounds returns w's start and end in minutes after midnight; w must have
// passed validate.
func (w Window) bounds() (start, end int) {
	start, _ = parseClock(w.Start)
	end, _ = parseClock(w.End)
	return start, end
}

// opensOn reports whether w opens on day d.
func (w Window) opensOn(d time.Weekday) bool {
	return len(w.Days) == 0 || slices.Contains(w.Days, d)
}

// contains reports whether local time t is inside w. A window crossing
// midnight that opened on the day before t's covers t until its End.
func (w Window) contains(t time.Time) bool {
	start, end := w.bounds()
	m := t.Hour()*60 + t.Minute()
	if start < end {
		return w.opensOn(t.Weekday()) && m >= start && m < end
	}
	if m >= start {
		return w.opensOn(t.Weekday())
	}
	return m < end && w.opensOn((t.Weekday()+6)%7)
}

// nextOpen returns the first time after t (which is in the node's
// location) at which w opens, within a week and a day.
func (w Window) nextOpen(t time.Time) time.Time {
	start, _ := w.bounds()
	y, mo, d := t.Date()
	for i := 0; i <= 7; i++ {
		at := time.Date(y, mo, d+i, start/60, start%60, 0, 0, t.Location())
		if at.After(t) && w.opensOn(at.Weekday()) {
			return at
		}
	}
	return time.Time{}
}

// inWindow reports whether now, in loc, is inside one of windows; with no
// windows it always is.
func inWindow(windows []Window, loc *time.Location, now time.Time) bool {
	if len(windows) == 0 {
		return true
	}
	t := now.In(location(loc))
	for _, w := range windows {
		if w.contains(t) {
			return true
		}
	}
	return false
}

// nextWindowOpen returns the earliest time after now at which one of
// windows opens in loc, or the zero time when there are none.
func nextWindowOpen(windows []Window, loc *time.Location, now time.Time) time.Time {
	t := now.In(location(loc))
	var next time.Time
	for _, w := range windows {
		next = earliest(next, w.nextOpen(t))
	}
	return next
}

// location returns loc, or UTC for nil.
func location(loc *time.Location) *time.Location {
	if loc == nil {
		return time.UTC
	}
	return loc
}

// earliest returns the earlier of a and b, where the zero time means none.
func earliest(a, b time.Time) time.Time {
	switch {
	case a.IsZero():
		return b
	case b.IsZero() || a.Before(b):
		return a
	}
	return b
}
