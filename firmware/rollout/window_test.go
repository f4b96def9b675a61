package rollout

import (
	"testing"
	"time"
	_ "time/tzdata" // the zones below, whatever the machine has
)

// mustZone loads a time zone or fails the test.
func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatalf("LoadLocation(%q): %v", name, err)
	}
	return loc
}

func TestInWindow(t *testing.T) {
	berlin := mustZone(t, "Europe/Berlin")
	newYork := mustZone(t, "America/New_York")
	nightly := []Window{{Start: "02:00", End: "04:00"}}
	saturdayNight := []Window{{Days: []time.Weekday{time.Saturday}, Start: "22:00", End: "02:00"}}
	tests := []struct {
		name    string
		windows []Window
		loc     *time.Location
		local   string // in loc, "2006-01-02 15:04"; 2026-12-12 is a Saturday
		want    bool
	}{
		{"no windows", nil, nil, "2026-12-07 12:00", true},
		{"berlin inside", nightly, berlin, "2026-12-07 02:30", true},
		{"berlin at start", nightly, berlin, "2026-12-07 02:00", true},
		{"berlin at end", nightly, berlin, "2026-12-07 04:00", false},
		{"berlin before", nightly, berlin, "2026-12-07 01:59", false},
		{"nil location is UTC", nightly, nil, "2026-12-07 03:00", true},
		{"saturday evening", saturdayNight, newYork, "2026-12-12 23:00", true},
		{"sunday small hours", saturdayNight, newYork, "2026-12-13 01:30", true},
		{"sunday at end", saturdayNight, newYork, "2026-12-13 02:00", false},
		{"sunday evening", saturdayNight, newYork, "2026-12-13 23:00", false},
		{"friday evening", saturdayNight, newYork, "2026-12-11 23:00", false},
		{"saturday small hours opened friday", saturdayNight, newYork, "2026-12-12 01:00", false},
		{"second window", append(nightly, Window{Start: "12:00", End: "13:00"}), berlin, "2026-12-07 12:10", true},
	}
	for _, tt := range tests {
		local, err := time.ParseInLocation("2006-01-02 15:04", tt.local, location(tt.loc))
		if err != nil {
			t.Fatal(err)
		}
		// Pass the instant in UTC: the planner must convert it itself.
		if got := inWindow(tt.windows, tt.loc, local.UTC()); got != tt.want {
			t.Errorf("%s: inWindow(%v, %v, %s) = %v, want %v", tt.name, tt.windows, tt.loc, tt.local, got, tt.want)
		}
	}
}

func TestNextWindowOpen(t *testing.T) {
	newYork := mustZone(t, "America/New_York")
	saturdayNight := []Window{{Days: []time.Weekday{time.Saturday}, Start: "22:00", End: "02:00"}}
	at := func(s string, loc *time.Location) time.Time {
		v, err := time.ParseInLocation("2006-01-02 15:04", s, loc)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	tests := []struct {
		name    string
		windows []Window
		loc     *time.Location
		now     time.Time
		want    time.Time
	}{
		{"none", nil, nil, at("2026-12-07 12:00", time.UTC), time.Time{}},
		{"later today", []Window{{Start: "14:00", End: "15:00"}}, nil, at("2026-12-07 12:00", time.UTC), at("2026-12-07 14:00", time.UTC)},
		{"tomorrow", []Window{{Start: "02:00", End: "04:00"}}, nil, at("2026-12-07 12:00", time.UTC), at("2026-12-08 02:00", time.UTC)},
		{"next saturday", saturdayNight, newYork, at("2026-12-07 12:00", newYork), at("2026-12-12 22:00", newYork)},
		{"a week on, once open", saturdayNight, newYork, at("2026-12-12 22:30", newYork), at("2026-12-19 22:00", newYork)},
		{"earliest of two", []Window{{Start: "20:00", End: "21:00"}, {Start: "13:00", End: "14:00"}}, nil, at("2026-12-07 12:00", time.UTC), at("2026-12-07 13:00", time.UTC)},
	}
	for _, tt := range tests {
		if got := nextWindowOpen(tt.windows, tt.loc, tt.now); !got.Equal(tt.want) {
			t.Errorf("%s: nextWindowOpen(%v, %v, %v) = %v, want %v", tt.name, tt.windows, tt.loc, tt.now, got, tt.want)
		}
	}
}
