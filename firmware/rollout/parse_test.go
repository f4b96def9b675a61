package rollout

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseWaves(t *testing.T) {
	tests := []struct {
		in      string
		want    []Step
		wantErr string
	}{
		{in: "1,5%,25%,100%", want: []Step{{Count: 1}, {Percent: 5}, {Percent: 25}, {Percent: 100}}},
		{in: " 1 , 50% ,100% ", want: []Step{{Count: 1}, {Percent: 50}, {Percent: 100}}},
		{in: "3", want: []Step{{Count: 3}}},
		{in: "2,10,25%", want: []Step{{Count: 2}, {Count: 10}, {Percent: 25}}},
		{in: "", wantErr: "waves: empty"},
		{in: "0,100%", wantErr: `waves: wave 1: "0": must be at least 1`},
		{in: "0%", wantErr: `waves: wave 1: "0%": must be at least 1`},
		{in: "1,150%", wantErr: `waves: wave 2: "150%": over 100%`},
		{in: "5,3", wantErr: "waves: wave 2: target 3 does not exceed the earlier 5"},
		{in: "50%,50%", wantErr: "waves: wave 2: target 50% does not exceed the earlier 50%"},
		{in: "100%,5", wantErr: "waves: wave 2: follows 100%"},
		{in: "1,,2", wantErr: `waves: wave 2: "": not a count or a percentage`},
		{in: "abc", wantErr: `waves: wave 1: "abc": not a count or a percentage`},
		{in: "-1", wantErr: `"-1": not a count or a percentage`},
		{in: "1.5%", wantErr: `"1.5%": not a count or a percentage`},
		{in: "99999999999", wantErr: "not a count or a percentage"},
		{in: strings.Repeat("1", maxSpecText+1), wantErr: "longer than"},
		{in: strings.Repeat("1,", maxWaves) + "1", wantErr: "at most 100"},
	}
	for _, tt := range tests {
		got, err := ParseWaves(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseWaves(%q) = %v, %v, want error containing %q", tt.in, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseWaves(%q) = %v, %v, want %v", tt.in, got, err, tt.want)
		}
	}
}

func TestParseBudget(t *testing.T) {
	tests := []struct {
		in      string
		want    Budget
		wantErr string
	}{
		{in: "1,10%", want: Budget{Count: 1, Percent: 10}},
		{in: "10%", want: Budget{Percent: 10}},
		{in: "3", want: Budget{Count: 3}},
		{in: "5%, min=20", want: Budget{Percent: 5, MinSample: 20}},
		{in: "min=4,2", want: Budget{Count: 2, MinSample: 4}},
		{in: "", wantErr: "failure budget: empty"},
		{in: "0", wantErr: `failure budget: "0": must be at least 1`},
		{in: "0%", wantErr: `failure budget: "0%": must be at least 1`},
		{in: "101%", wantErr: `failure budget: "101%": over 100%`},
		{in: "1,2", wantErr: `failure budget: "2": count given twice`},
		{in: "1%,2%", wantErr: `failure budget: "2%": percentage given twice`},
		{in: "min=3", wantErr: "a minimum sample without a count or a percentage"},
		{in: "min=0,1", wantErr: `"min=0": must be at least 1`},
		{in: "x%", wantErr: `"x%": not a count or a percentage`},
		{in: "1;10%", wantErr: "not a count or a percentage"},
		{in: strings.Repeat(" ", maxSpecText+1), wantErr: "longer than"},
	}
	for _, tt := range tests {
		got, err := ParseBudget(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseBudget(%q) = %v, %v, want error containing %q", tt.in, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseBudget(%q) = %v, %v, want %v", tt.in, got, err, tt.want)
		}
	}
}

// joinSteps writes steps back as ParseWaves reads them.
func joinSteps(steps []Step) string {
	parts := make([]string, len(steps))
	for i, s := range steps {
		parts[i] = s.String()
	}
	return strings.Join(parts, ",")
}

func FuzzParseWaves(f *testing.F) {
	for _, s := range []string{"1,5%,25%,100%", "0", "5,3", "100%,1", "", "1,,", "%", "9999999999%", " 7 ,8"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		steps, err := ParseWaves(s)
		if err != nil {
			return
		}
		if err := validateWaves(steps); err != nil {
			t.Fatalf("ParseWaves(%q) = %v, which fails validation: %v", s, steps, err)
		}
		again, err := ParseWaves(joinSteps(steps))
		if err != nil || !reflect.DeepEqual(again, steps) {
			t.Fatalf("ParseWaves(%q) = %v, but its text reads as %v, %v", s, steps, again, err)
		}
	})
}

func FuzzParseBudget(f *testing.F) {
	for _, s := range []string{"1,10%", "min=5,2%", "0", "101%", "min=", "1,1", ",", "5%,min=20"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, err := ParseBudget(s)
		if err != nil {
			return
		}
		if b.Count == 0 && b.Percent == 0 || b.validate() != nil {
			t.Fatalf("ParseBudget(%q) = %+v, not a valid budget", s, b)
		}
		again, err := ParseBudget(b.String())
		if err != nil || again != b {
			t.Fatalf("ParseBudget(%q) = %+v, but its text %q reads as %+v, %v", s, b, b.String(), again, err)
		}
	})
}

func TestSpecValidate(t *testing.T) {
	good := Spec{Waves: []Step{{Count: 1}}, Version: "1.4.0"}
	tests := []struct {
		name    string
		edit    func(*Spec)
		wantErr string
	}{
		{"good", func(*Spec) {}, ""},
		{"no waves", func(s *Spec) { s.Waves = nil }, "waves: none"},
		{"both kinds", func(s *Spec) { s.Waves = []Step{{Count: 1, Percent: 5}} }, "exactly one of count and percent"},
		{"negative window", func(s *Spec) { s.HealthWindow = -1 }, "health window"},
		{"bad action", func(s *Spec) { s.OnTrip = "Explode" }, `on trip: "Explode"`},
		{"bad clock", func(s *Spec) { s.Windows = []Window{{Start: "25:00", End: "01:00"}} }, `window 1: start: "25:00" is not a time of day`},
		{"empty window", func(s *Spec) { s.Windows = []Window{{Start: "01:00", End: "01:00"}} }, "empty window"},
		{"bad day", func(s *Spec) { s.Windows = []Window{{Days: []time.Weekday{9}, Start: "01:00", End: "02:00"}} }, "day 9 is not a weekday"},
		{"no version", func(s *Spec) { s.Version = "" }, "version: empty"},
		{"budget over", func(s *Spec) { s.Budget.Percent = 200 }, "over 100%"},
	}
	for _, tt := range tests {
		s := good
		tt.edit(&s)
		err := s.Validate()
		if (err == nil) != (tt.wantErr == "") || err != nil && !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%s: Validate() = %v, want error containing %q", tt.name, err, tt.wantErr)
		}
	}
}
