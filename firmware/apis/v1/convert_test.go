package v1

import (
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/firmware/rollout"
)

// TestPlannerSpec checks the conversion of valid specs, defaults included.
func TestPlannerSpec(t *testing.T) {
	tests := []struct {
		name string
		spec RolloutSpec
		want rollout.Spec
	}{
		{
			name: "defaults",
			spec: RolloutSpec{Release: "r"},
			want: rollout.Spec{Waves: []rollout.Step{{Percent: 100}}, Version: "1.4.0"},
		},
		{
			name: "everything",
			spec: RolloutSpec{
				Release:       "r",
				Waves:         []string{"1", " 5% ", "100%"},
				HealthWindow:  &metav1.Duration{Duration: 10 * time.Minute},
				FailureBudget: FailureBudget{Count: 2, Percent: 10, MinSample: 5},
				OnFailure:     FailureRevert,
				MaintenanceWindows: []MaintenanceWindow{
					{Days: []string{"Sat", "Sun"}, Start: "22:00", End: "04:00"},
					{Start: "12:00", End: "13:00"},
				},
				Paused: true,
			},
			want: rollout.Spec{
				Waves:        []rollout.Step{{Count: 1}, {Percent: 5}, {Percent: 100}},
				HealthWindow: 10 * time.Minute,
				Budget:       rollout.Budget{Count: 2, Percent: 10, MinSample: 5},
				OnTrip:       rollout.Revert,
				Windows: []rollout.Window{
					{Days: []time.Weekday{time.Saturday, time.Sunday}, Start: "22:00", End: "04:00"},
					{Start: "12:00", End: "13:00"},
				},
				Paused:  true,
				Version: "1.4.0",
			},
		},
		{
			name: "every day name",
			spec: RolloutSpec{Waves: []string{"3"}, MaintenanceWindows: []MaintenanceWindow{
				{Days: []string{"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"}, Start: "01:00", End: "02:00"}}},
			want: rollout.Spec{Waves: []rollout.Step{{Count: 3}}, Version: "1.4.0", Windows: []rollout.Window{{
				Days:  []time.Weekday{time.Monday, time.Tuesday, time.Wednesday, time.Thursday, time.Friday, time.Saturday, time.Sunday},
				Start: "01:00", End: "02:00"}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.spec.PlannerSpec("1.4.0")
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// TestPlannerSpecInvalid checks that what the planner would refuse is
// refused with words that say why.
func TestPlannerSpecInvalid(t *testing.T) {
	tests := []struct {
		name    string
		spec    RolloutSpec
		version string
		want    string
	}{
		{"zero percent", RolloutSpec{Waves: []string{"0%"}}, "1", "at least 1"},
		{"over 100", RolloutSpec{Waves: []string{"150%"}}, "1", "over 100%"},
		{"two in one", RolloutSpec{Waves: []string{"1,5%"}}, "1", "comma"},
		{"empty wave", RolloutSpec{Waves: []string{""}}, "1", "empty"},
		{"not increasing", RolloutSpec{Waves: []string{"5", "5"}}, "1", "does not exceed"},
		{"after 100%", RolloutSpec{Waves: []string{"100%", "5"}}, "1", "follows 100%"},
		{"negative window", RolloutSpec{HealthWindow: &metav1.Duration{Duration: -time.Second}}, "1", "negative"},
		{"budget over 100", RolloutSpec{FailureBudget: FailureBudget{Percent: 101}}, "1", "over 100%"},
		{"sample alone", RolloutSpec{FailureBudget: FailureBudget{MinSample: 3}}, "1", "minimum sample"},
		{"bad action", RolloutSpec{OnFailure: "Explode"}, "1", "on trip"},
		{"bad day", RolloutSpec{MaintenanceWindows: []MaintenanceWindow{{Days: []string{"Funday"}, Start: "01:00", End: "02:00"}}}, "1", "Funday"},
		{"bad time", RolloutSpec{MaintenanceWindows: []MaintenanceWindow{{Start: "25:00", End: "02:00"}}}, "1", "HH:MM"},
		{"empty window", RolloutSpec{MaintenanceWindows: []MaintenanceWindow{{Start: "02:00", End: "02:00"}}}, "1", "equal"},
		{"no version", RolloutSpec{}, "", "version"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.spec.PlannerSpec(tt.version)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one saying %q", err, tt.want)
			}
		})
	}
}

// FuzzPlannerSpec checks that any waves and window text either converts
// to a Spec the planner accepts or is refused, never a panic.
func FuzzPlannerSpec(f *testing.F) {
	for _, s := range []struct{ w1, w2, day, start, end string }{
		{"1", "100%", "Mon", "22:00", "04:00"},
		{"0%", "", "Funday", "25:00", "xx"},
		{"5%,6%", "1", "", "00:00", "00:00"},
		{"999999999", "100%", "Sun", "23:59", "00:00"},
	} {
		f.Add(s.w1, s.w2, s.day, s.start, s.end)
	}
	f.Fuzz(func(t *testing.T, w1, w2, day, start, end string) {
		spec := RolloutSpec{Waves: []string{w1, w2}, MaintenanceWindows: []MaintenanceWindow{{Days: []string{day}, Start: start, End: end}}}
		got, err := spec.PlannerSpec("1.0.0")
		if err != nil {
			return
		}
		if err := got.Validate(); err != nil {
			t.Fatalf("PlannerSpec returned a spec the planner refuses: %v", err)
		}
	})
}

// TestPlannerStatusRoundTrip checks that a planner Status kept with
// SetPlannerStatus comes back equal (to the second), and sets Wave.
func TestPlannerStatusRoundTrip(t *testing.T) {
	start := time.Date(2026, 12, 7, 18, 0, 0, 0, time.UTC)
	tests := []struct {
		name     string
		in       rollout.Status
		wantWave int32
	}{
		{"zero", rollout.Status{}, 0},
		{"first wave", rollout.Status{WaveStarted: []time.Time{start}, Assigned: map[string]int{"a": 0, "b": 1}}, 1},
		{"everything", rollout.Status{
			Wave:        1,
			WaveStarted: []time.Time{start, start.Add(time.Hour)},
			Assigned:    map[string]int{"a": 0, "b": 1, "c": 2},
			Tripped:     true, Complete: true, Paused: true,
			Failed: []string{"b"}, Excused: []string{"a"},
		}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var st RolloutStatus
			st.SetPlannerStatus(tt.in)
			if st.Wave != tt.wantWave {
				t.Errorf("Wave = %d, want %d", st.Wave, tt.wantWave)
			}
			got, err := st.PlannerStatus()
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.in) {
				t.Fatalf("got  %+v\nwant %+v", got, tt.in)
			}
		})
	}
}

// TestSetPlannerStatusTruncates checks that times are kept to the second
// and that the Status passed in is not shared.
func TestSetPlannerStatusTruncates(t *testing.T) {
	in := rollout.Status{WaveStarted: []time.Time{time.Date(2026, 1, 1, 0, 0, 0, 999, time.UTC)}, Failed: []string{"a"}}
	var st RolloutStatus
	st.SetPlannerStatus(in)
	in.Failed[0] = "changed"
	got, err := st.PlannerStatus()
	if err != nil {
		t.Fatal(err)
	}
	if got.WaveStarted[0].Nanosecond() != 0 || got.Failed[0] != "a" {
		t.Fatalf("got %+v", got)
	}
}

// TestPlannerStatusNone checks the absent and the corrupt planner state.
func TestPlannerStatusNone(t *testing.T) {
	var st RolloutStatus
	if got, err := st.PlannerStatus(); err != nil || !reflect.DeepEqual(got, rollout.Status{}) {
		t.Fatalf("PlannerStatus of none = %+v, %v", got, err)
	}
	for _, p := range []*PlannerState{{Wave: -1}, {Assigned: map[string]int32{"a": -2}}} {
		st.Planner = p
		if _, err := st.PlannerStatus(); err == nil {
			t.Fatalf("PlannerStatus of %+v: no error", p)
		}
	}
}
