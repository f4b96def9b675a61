package session

import (
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	// With the highest draw every wait is the whole step, with the lowest
	// its upper half's start.
	highest := func(n int64) int64 { return n - 1 }
	lowest := func(int64) int64 { return 0 }
	for _, tc := range []struct {
		name string
		rnd  func(int64) int64
		want []time.Duration
	}{
		{"highest", highest, []time.Duration{100, 200, 400, 800, 1000, 1000}},
		{"lowest", lowest, []time.Duration{50, 100, 200, 400, 500, 500}},
	} {
		b := Backoff{Min: 100, Max: 1000, Rand: tc.rnd}
		for i, want := range tc.want {
			if got := b.Next(0); got != want {
				t.Errorf("%s: wait %d = %v, want %v", tc.name, i, got, want)
			}
		}
	}

	// A long attempt starts over; a short one does not.
	b := Backoff{Min: 100, Max: 1000, Reset: 5000, Rand: highest}
	for _, step := range []struct {
		ran, want time.Duration
	}{{0, 100}, {10, 200}, {4999, 400}, {5000, 100}, {0, 200}} {
		if got := b.Next(step.ran); got != step.want {
			t.Errorf("after an attempt of %v: wait = %v, want %v", step.ran, got, step.want)
		}
	}

	// Min above Max is Max.
	b = Backoff{Min: time.Second, Max: 10 * time.Millisecond, Rand: highest}
	if got := b.Next(0); got != 10*time.Millisecond {
		t.Errorf("Min above Max: wait = %v, want Max", got)
	}

	// The default source stays within the step's upper half.
	b = Backoff{Min: time.Second, Max: 8 * time.Second}
	for i, step := range []time.Duration{1, 2, 4, 8, 8} {
		step *= time.Second
		if got := b.Next(0); got < step/2 || got > step {
			t.Errorf("wait %d = %v, want within [%v, %v]", i, got, step/2, step)
		}
	}
}
