// Package cron parses the cron schedules of CronJobs and computes when
// they fire. It accepts what upstream's CronJob validation accepts
// (robfig/cron's standard parser), so that the API refuses the same
// schedules and the cronjob controller fires at the same times. Both the
// batch registry and the cronjob controller import it.
package cron

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	// Time zones are checked and computed from the zone database built in,
	// so that a schedule means the same on every hub, whatever its host
	// carries in /usr/share/zoneinfo.
	_ "time/tzdata"
)

// Schedule is a parsed cron schedule: the five fields of standard cron
// (minute, hour, day of month, month, day of week), or a descriptor such as
// @daily or @every 90m. It accepts what upstream's CronJob validation
// accepts (robfig/cron's standard parser), so a schedule valid here is valid
// there and means the same. A Schedule is immutable and safe for concurrent
// use.
type Schedule struct {
	// Location is the time zone named by a TZ= or CRON_TZ= prefix of the
	// spec, or nil when the spec named none: Next then uses the location
	// of the time it is given.
	Location *time.Location

	minute, hour, dom, month, dow uint64 // bit n set: value n matches
	domStar, dowStar              bool   // the field was * or ?
	every                         time.Duration
}

// cronField is the range of one of the five fields.
type cronField struct {
	min, max int
	names    map[string]int
}

var (
	minuteField = cronField{min: 0, max: 59}
	hourField   = cronField{min: 0, max: 23}
	domField    = cronField{min: 1, max: 31}
	monthField  = cronField{min: 1, max: 12, names: map[string]int{
		"jan": 1, "feb": 2, "mar": 3, "apr": 4, "may": 5, "jun": 6,
		"jul": 7, "aug": 8, "sep": 9, "oct": 10, "nov": 11, "dec": 12,
	}}
	dowField = cronField{min: 0, max: 6, names: map[string]int{
		"sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6,
	}}
)

// descriptors are the @ shorthands and the five fields they stand for.
var descriptors = map[string]string{
	"@yearly":   "0 0 1 1 *",
	"@annually": "0 0 1 1 *",
	"@monthly":  "0 0 1 * *",
	"@weekly":   "0 0 * * 0",
	"@daily":    "0 0 * * *",
	"@midnight": "0 0 * * *",
	"@hourly":   "0 * * * *",
}

// Parse parses a cron schedule:
//
//	minute hour day-of-month month day-of-week
//
// Each field is * (or ? for the days), a value, a range a-b, a step */n,
// a-b/n or a/n (a to the field's maximum), or a comma-separated list of
// these. Months and days of week may be named (jan, mon, case ignored);
// days of week run from 0 (Sunday) to 6. When both day fields are
// restricted, a day matching either matches, as in cron. A spec may
// instead be @yearly (@annually), @monthly, @weekly, @daily (@midnight),
// @hourly, or @every followed by a Go duration; and may start with
// TZ=zone or CRON_TZ=zone. Errors read as upstream's, such as "end of range
// (60) above maximum (59): 60".
func Parse(spec string) (*Schedule, error) {
	s := &Schedule{}
	if strings.HasPrefix(spec, "TZ=") || strings.HasPrefix(spec, "CRON_TZ=") {
		zone, rest, _ := strings.Cut(spec[strings.IndexByte(spec, '=')+1:], " ")
		loc, err := time.LoadLocation(zone)
		if err != nil {
			return nil, fmt.Errorf("provided bad location %s: %w", zone, err)
		}
		s.Location, spec = loc, strings.TrimSpace(rest)
	}
	if spec == "" {
		return nil, fmt.Errorf("empty spec string")
	}
	if spec[0] == '@' {
		if d, ok := strings.CutPrefix(spec, "@every "); ok {
			every, err := time.ParseDuration(d)
			if err != nil {
				return nil, fmt.Errorf("failed to parse duration %s: %w", spec, err)
			}
			// As upstream: at least a second, in whole seconds.
			s.every = max(every.Truncate(time.Second), time.Second)
			return s, nil
		}
		fields, ok := descriptors[spec]
		if !ok {
			return nil, fmt.Errorf("unrecognized descriptor: %s", spec)
		}
		spec = fields
	}
	f := strings.Fields(spec)
	if len(f) != 5 {
		return nil, fmt.Errorf("expected exactly 5 fields, found %d: %s", len(f), f)
	}
	var err error
	if s.minute, _, err = minuteField.parse(f[0]); err != nil {
		return nil, err
	}
	if s.hour, _, err = hourField.parse(f[1]); err != nil {
		return nil, err
	}
	if s.dom, s.domStar, err = domField.parse(f[2]); err != nil {
		return nil, err
	}
	if s.month, _, err = monthField.parse(f[3]); err != nil {
		return nil, err
	}
	if s.dow, s.dowStar, err = dowField.parse(f[4]); err != nil {
		return nil, err
	}
	return s, nil
}

// parse parses one field: a comma-separated list of ranges. star reports
// whether the field matches everything through * or ? (or */1).
func (f cronField) parse(expr string) (set uint64, star bool, err error) {
	for _, r := range strings.Split(expr, ",") {
		bits, s, err := f.parseRange(r)
		if err != nil {
			return 0, false, err
		}
		set |= bits
		star = star || s
	}
	return set, star, nil
}

func (f cronField) parseRange(expr string) (set uint64, star bool, err error) {
	rng, stepStr, stepped := strings.Cut(expr, "/")
	if strings.Contains(stepStr, "/") {
		return 0, false, fmt.Errorf("too many slashes: %s", expr)
	}
	var lo, hi int
	loStr, hiStr, isRange := strings.Cut(rng, "-")
	if loStr == "*" || loStr == "?" {
		// Like upstream, whatever follows "*-" is ignored.
		lo, hi, star = f.min, f.max, true
	} else {
		if strings.Contains(hiStr, "-") {
			return 0, false, fmt.Errorf("too many hyphens: %s", expr)
		}
		if lo, err = f.value(loStr); err != nil {
			return 0, false, err
		}
		hi = lo
		switch {
		case isRange:
			if hi, err = f.value(hiStr); err != nil {
				return 0, false, err
			}
		case stepped:
			hi = f.max // a/n: from a to the maximum
		}
	}
	step := 1
	if stepped {
		if step, err = number(stepStr); err != nil {
			return 0, false, err
		}
		if step > 1 {
			star = false
		}
	}
	switch {
	case lo < f.min:
		return 0, false, fmt.Errorf("beginning of range (%d) below minimum (%d): %s", lo, f.min, expr)
	case hi > f.max:
		return 0, false, fmt.Errorf("end of range (%d) above maximum (%d): %s", hi, f.max, expr)
	case lo > hi:
		return 0, false, fmt.Errorf("beginning of range (%d) beyond end of range (%d): %s", lo, hi, expr)
	case step == 0:
		return 0, false, fmt.Errorf("step of range should be a positive number: %s", expr)
	}
	step = min(step, 64) // larger steps select the same single value; no overflow
	for v := lo; v <= hi; v += step {
		set |= 1 << v
	}
	return set, star, nil
}

// value parses a value of the field, a number or a name.
func (f cronField) value(s string) (int, error) {
	if v, ok := f.names[strings.ToLower(s)]; ok {
		return v, nil
	}
	return number(s)
}

// number parses a non-negative decimal number.
func number(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("failed to parse int from %s: %w", s, err)
	}
	if n < 0 {
		return 0, fmt.Errorf("negative number (%d) not allowed: %s", n, s)
	}
	return n, nil
}

// Next returns the first time after t the schedule fires, in t's location,
// or the zero time if it never does within five years (as for February
// 30th). Times are computed in s.Location if set, else in t's location, so
// a schedule follows that zone's daylight saving changes: a time skipped
// when clocks go forward does not fire, and a time repeated when they go
// back fires twice.
func (s *Schedule) Next(t time.Time) time.Time {
	if s.every > 0 {
		return t.Add(s.every - time.Duration(t.Nanosecond()))
	}
	orig := t.Location()
	loc := orig
	if s.Location != nil {
		loc = s.Location
	}
	t = t.In(loc)
	// The first candidate is the next whole minute.
	t = t.Add(time.Minute - time.Duration(t.Second())*time.Second - time.Duration(t.Nanosecond()))
	limit := t.Year() + 5
	for t.Year() <= limit {
		var next time.Time
		switch {
		case s.month&(1<<int(t.Month())) == 0:
			next = time.Date(t.Year(), t.Month()+1, 1, 0, 0, 0, 0, loc)
		case !s.dayMatches(t):
			next = time.Date(t.Year(), t.Month(), t.Day()+1, 0, 0, 0, 0, loc)
		case s.hour&(1<<t.Hour()) == 0:
			// Whole hours by elapsed time, so that wall clocks that jump
			// are followed and never loop.
			next = t.Add(time.Duration(60-t.Minute()) * time.Minute)
		case s.minute&(1<<t.Minute()) == 0:
			next = t.Add(time.Minute)
		default:
			return t.In(orig)
		}
		// Midnight may not exist on a day clocks change there; make sure
		// the search moves forward whatever the zone does.
		if !next.After(t) {
			next = t.Add(time.Minute)
		}
		t = next
	}
	return time.Time{}
}

// dayMatches reports whether t's day is scheduled: when both day fields
// are restricted, matching either is enough, as in cron.
func (s *Schedule) dayMatches(t time.Time) bool {
	dom := s.dom&(1<<t.Day()) != 0
	dow := s.dow&(1<<int(t.Weekday())) != 0
	if s.domStar || s.dowStar {
		return dom && dow
	}
	return dom || dow
}
