package cron

import (
	"strings"
	"testing"
	"time"
)

func TestParseErrors(t *testing.T) {
	tests := []struct {
		spec string
		want string // the error, or its start
	}{
		{"", "empty spec string"},
		{"* * * *", "expected exactly 5 fields, found 4: [* * * *]"},
		{"* * * * * *", "expected exactly 5 fields, found 6: [* * * * * *]"},
		{"60 * * * *", "end of range (60) above maximum (59): 60"},
		{"* 24 * * *", "end of range (24) above maximum (23): 24"},
		{"* * 0 * *", "beginning of range (0) below minimum (1): 0"},
		{"* * 32 * *", "end of range (32) above maximum (31): 32"},
		{"* * * 13 *", "end of range (13) above maximum (12): 13"},
		{"* * * * 7", "end of range (7) above maximum (6): 7"},
		{"5-1 * * * *", "beginning of range (5) beyond end of range (1): 5-1"},
		{"*/0 * * * *", "step of range should be a positive number: */0"},
		{"1/2/3 * * * *", "too many slashes: 1/2/3"},
		{"1-2-3 * * * *", "too many hyphens: 1-2-3"},
		{"x * * * *", "failed to parse int from x: "},
		{"1,,2 * * * *", "failed to parse int from : "},
		{"* * * foo *", "failed to parse int from foo: "},
		{"* * * * MONDAY", "failed to parse int from MONDAY: "},
		{"*/-1 * * * *", "negative number (-1) not allowed: -1"},
		{"@fortnightly", "unrecognized descriptor: @fortnightly"},
		{"@DAILY", "unrecognized descriptor: @DAILY"},
		{"@every 5x", "failed to parse duration @every 5x: "},
		{"TZ=Mars/Olympus_Mons * * * * *", "provided bad location Mars/Olympus_Mons: "},
	}
	for _, tt := range tests {
		_, err := Parse(tt.spec)
		if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("Parse(%q) error = %v, want %q", tt.spec, err, tt.want)
		}
	}
}

func TestParseValid(t *testing.T) {
	for _, spec := range []string{
		"* * * * *",
		"0 0 ? * ?",
		"*/15 0-6,18-23 1,15 JAN-mar mon-FRI",
		"5/10 * * * *",
		"0 9-17/2 * * 1-5",
		"59 23 31 12 6",
		"*-5 * * * *",
		"5/9223372036854775805 * * * *",
		"  0   0  *  *  *  ",
		"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly",
		"@every 90m",
		"TZ=Europe/Berlin 0 9 * * 1-5",
		"CRON_TZ=Asia/Tokyo @daily",
	} {
		if _, err := Parse(spec); err != nil {
			t.Errorf("Parse(%q) = %v", spec, err)
		}
	}
}

func TestScheduleNext(t *testing.T) {
	newYork, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	utc := func(s string) time.Time {
		t.Helper()
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	ny := func(s string) time.Time {
		t.Helper()
		v, err := time.ParseInLocation("2006-01-02T15:04:05", s, newYork)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	tests := []struct {
		spec     string
		from     time.Time
		want     time.Time // zero: never
		wantZone string    // the zone abbreviation of the answer, when it matters
	}{
		{"*/15 * * * *", utc("2025-03-07T10:07:30Z"), utc("2025-03-07T10:15:00Z"), ""},
		{"*/15 * * * *", utc("2025-03-07T10:15:00Z"), utc("2025-03-07T10:30:00Z"), ""},
		{"* * * * *", utc("2025-03-07T10:07:00.000000001Z"), utc("2025-03-07T10:08:00Z"), ""},
		{"5/20 * * * *", utc("2025-03-07T10:46:00Z"), utc("2025-03-07T11:05:00Z"), ""},
		{"0 9 * * 1-5", utc("2025-03-07T10:00:00Z"), utc("2025-03-10T09:00:00Z"), ""}, // Friday to Monday
		{"0 0 1 * *", utc("2025-01-31T12:00:00Z"), utc("2025-02-01T00:00:00Z"), ""},
		{"@yearly", utc("2025-06-15T00:00:00Z"), utc("2026-01-01T00:00:00Z"), ""},
		{"0 0 29 2 *", utc("2025-03-01T00:00:00Z"), utc("2028-02-29T00:00:00Z"), ""},
		{"0 0 30 2 *", utc("2025-03-01T00:00:00Z"), time.Time{}, ""},
		{"0 0 13 * 5", utc("2025-06-01T00:00:00Z"), utc("2025-06-06T00:00:00Z"), ""}, // a Friday before the 13th
		{"0 0 13 * *", utc("2025-06-01T00:00:00Z"), utc("2025-06-13T00:00:00Z"), ""},
		{"0 0 13 * ?", utc("2025-06-01T00:00:00Z"), utc("2025-06-13T00:00:00Z"), ""},
		{"0 0 */2 * 5", utc("2025-06-01T00:00:00Z"), utc("2025-06-03T00:00:00Z"), ""},
		{"@every 90m", utc("2025-03-07T10:00:00.5Z"), utc("2025-03-07T11:30:00Z"), ""},
		{"@every 100ms", utc("2025-03-07T10:00:00Z"), utc("2025-03-07T10:00:01Z"), ""},
		// A zone named in the spec; the answer keeps the caller's location.
		{"TZ=Asia/Kolkata 0 9 * * *", utc("2025-03-01T00:00:00Z"), utc("2025-03-01T03:30:00Z"), "UTC"},
		// 02:30 does not exist on 2025-03-09 in New York: skipped.
		{"30 2 * * *", ny("2025-03-08T03:00:00"), ny("2025-03-10T02:30:00"), "EDT"},
		// 01:30 happens twice on 2025-11-02 in New York: it fires twice.
		{"30 1 * * *", ny("2025-11-02T00:00:00"), utc("2025-11-02T05:30:00Z"), "EDT"},
		{"30 1 * * *", utc("2025-11-02T05:30:00Z").In(newYork), utc("2025-11-02T06:30:00Z"), "EST"},
		{"0 * * * *", utc("2025-11-02T05:00:00Z").In(newYork), utc("2025-11-02T06:00:00Z"), "EST"},
		{"0 0 * * *", ny("2025-03-08T12:00:00"), ny("2025-03-09T00:00:00"), "EST"},
	}
	for _, tt := range tests {
		s, err := Parse(tt.spec)
		if err != nil {
			t.Fatalf("Parse(%q): %v", tt.spec, err)
		}
		got := s.Next(tt.from)
		if !got.Equal(tt.want) {
			t.Errorf("Parse(%q).Next(%v) = %v, want %v", tt.spec, tt.from, got, tt.want)
		}
		if zone, _ := got.Zone(); tt.wantZone != "" && zone != tt.wantZone {
			t.Errorf("Parse(%q).Next(%v) = %v, want it in zone %s", tt.spec, tt.from, got, tt.wantZone)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"* * * * *", "*/5 1-3 ? JAN mon", "@every 1h", "TZ=UTC 0 0 * * *", "1-2-3 * * * *"} {
		f.Add(s)
	}
	from := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, spec string) {
		s, err := Parse(spec)
		if err != nil {
			return
		}
		if next := s.Next(from); !next.IsZero() && !next.After(from) {
			t.Errorf("Parse(%q).Next(%v) = %v, not after", spec, from, next)
		}
	})
}
