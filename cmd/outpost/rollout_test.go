package main

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"

	fwv1 "github.com/outpost-mesh/outpost/firmware/apis/v1"
)

// parseRolloutCreate parses args as `outpost rollout create` flags and
// builds the Rollout named name.
func parseRolloutCreate(name string, args ...string) (*fwv1.Rollout, error) {
	var o rolloutCreate
	f := pflag.NewFlagSet("create", pflag.ContinueOnError)
	o.flags(f)
	if err := f.Parse(args); err != nil {
		return nil, err
	}
	return o.build(name)
}

func TestRolloutCreateFlags(t *testing.T) {
	ro, err := parseRolloutCreate("agent-1-4", "--release", "agent-1-4", "--selector", "tier=gw,rack=3",
		"--site", "berlin", "--site", "paris", "--waves", "1, 50%,100%", "--health-window", "10m",
		"--failure-budget", "2,10%,20", "--on-failure", "revert", "--paused")
	if err != nil {
		t.Fatal(err)
	}
	s := ro.Spec
	switch {
	case ro.Name != "agent-1-4" || ro.Kind != "Rollout" || ro.APIVersion != "firmware.outpost.dev/v1":
		t.Errorf("object = %s %s %s", ro.APIVersion, ro.Kind, ro.Name)
	case s.Release != "agent-1-4":
		t.Errorf("release = %q", s.Release)
	case !slices.Equal(s.Waves, []string{"1", "50%", "100%"}):
		t.Errorf("waves = %q", s.Waves)
	case !slices.Equal(s.Sites, []string{"berlin", "paris"}):
		t.Errorf("sites = %q", s.Sites)
	case s.NodeSelector == nil || s.NodeSelector.MatchLabels["tier"] != "gw" || s.NodeSelector.MatchLabels["rack"] != "3":
		t.Errorf("selector = %+v", s.NodeSelector)
	case s.HealthWindow == nil || s.HealthWindow.Duration != 10*time.Minute:
		t.Errorf("health window = %v", s.HealthWindow)
	case s.FailureBudget != fwv1.FailureBudget{Count: 2, Percent: 10, MinSample: 20}:
		t.Errorf("budget = %+v", s.FailureBudget)
	case s.OnFailure != fwv1.FailureRevert || !s.Paused:
		t.Errorf("on failure %q paused %v", s.OnFailure, s.Paused)
	}

	ro, err = parseRolloutCreate("r", "--release", "rel")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ro.Spec.Waves, []string{"100%"}) || ro.Spec.OnFailure != fwv1.FailurePause ||
		ro.Spec.HealthWindow.Duration != 5*time.Minute || ro.Spec.FailureBudget != (fwv1.FailureBudget{}) || ro.Spec.NodeSelector != nil {
		t.Errorf("defaults = %+v", ro.Spec)
	}
	ro, err = parseRolloutCreate("r", "--release", "rel", "--maintenance-window", "01:00-05:00",
		"--maintenance-window", "Fri-Mon 22:00-04:00", "--maintenance-window", "Sat,Wed,Sat 12:00-13:00")
	if err != nil {
		t.Fatal(err)
	}
	wantWindows := []fwv1.MaintenanceWindow{
		{Start: "01:00", End: "05:00"},
		{Days: []string{"Fri", "Sat", "Sun", "Mon"}, Start: "22:00", End: "04:00"},
		{Days: []string{"Sat", "Wed"}, Start: "12:00", End: "13:00"},
	}
	if !slices.EqualFunc(ro.Spec.MaintenanceWindows, wantWindows, func(a, b fwv1.MaintenanceWindow) bool {
		return a.Start == b.Start && a.End == b.End && slices.Equal(a.Days, b.Days)
	}) {
		t.Errorf("maintenance windows = %+v, want %+v", ro.Spec.MaintenanceWindows, wantWindows)
	}
	ro, err = parseRolloutCreate("r", "--release", "rel", "--failure-budget", "5%,min=20")
	if err != nil || ro.Spec.FailureBudget != (fwv1.FailureBudget{Percent: 5, MinSample: 20}) {
		t.Errorf("--failure-budget 5%%,min=20 = %+v, %v", ro.Spec.FailureBudget, err)
	}
}

func TestRolloutCreateRefusals(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"r", []string{}, "--release is required"},
		{"Bad_Name", []string{"--release", "rel"}, "invalid name"},
		{"r", []string{"--release", "rel", "--waves", "50%,10%"}, "--waves"},
		{"r", []string{"--release", "rel", "--waves", "100%,1"}, "--waves"},
		{"r", []string{"--release", "rel", "--waves", ""}, "--waves"},
		{"r", []string{"--release", "rel", "--failure-budget", "1,2"}, "--failure-budget"},
		{"r", []string{"--release", "rel", "--failure-budget", "min=3"}, "--failure-budget"},
		{"r", []string{"--release", "rel", "--failure-budget", "150%"}, "--failure-budget"},
		{"r", []string{"--release", "rel", "--on-failure", "explode"}, "--on-failure"},
		{"r", []string{"--release", "rel", "--health-window", "-1m"}, "health window"},
		{"r", []string{"--release", "rel", "--health-window", "0s"}, "--health-window"},
		{"r", []string{"--release", "rel", "--selector", "a in (b"}, "--selector"},
		{"r", []string{"--release", "rel", "--site", "not a site"}, "--site"},
		{"r", []string{"--release", "rel", "--maintenance-window", ""}, "--maintenance-window"},
		{"r", []string{"--release", "rel", "--maintenance-window", "01:00"}, "HH:MM-HH:MM"},
		{"r", []string{"--release", "rel", "--maintenance-window", "Mon-Funday 01:00-02:00"}, "Funday"},
		{"r", []string{"--release", "rel", "--maintenance-window", "mon 01:00-02:00"}, `day "mon"`},
		{"r", []string{"--release", "rel", "--maintenance-window", "Mon 01:00-25:00"}, "HH:MM"},
		{"r", []string{"--release", "rel", "--maintenance-window", "Mon 02:00-02:00"}, "equal"},
		{"r", []string{"--release", "rel", "--maintenance-window", "Mon Tue 01:00-02:00"}, "--maintenance-window"},
	}
	for _, tt := range tests {
		_, err := parseRolloutCreate(tt.name, tt.args...)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("create %s %q = %v, want an error with %q", tt.name, tt.args, err, tt.want)
		}
	}
}

func TestBar(t *testing.T) {
	tests := []struct {
		updated, failed, total int
		want                   string
	}{
		{0, 0, 0, "[------------]"},
		{7, 1, 12, "[#######x----]"},
		{12, 0, 12, "[############]"},
		{1, 0, 3, "[####--------]"},
		{0, 3, 3, "[xxxxxxxxxxxx]"},
	}
	for _, tt := range tests {
		if got := bar(tt.updated, tt.failed, tt.total); got != tt.want {
			t.Errorf("bar(%d, %d, %d) = %s, want %s", tt.updated, tt.failed, tt.total, got, tt.want)
		}
	}
}

// statusRollout is a rollout in its second wave of three, with a failed
// node.
func statusRollout() *fwv1.Rollout {
	at := func(m int) *metav1.Time { return new(metav1.NewTime(time.Date(2026, 3, 2, 10, m, 0, 0, time.UTC))) }
	return &fwv1.Rollout{
		ObjectMeta: metav1.ObjectMeta{Name: "agent-1-4"},
		Spec: fwv1.RolloutSpec{Release: "agent-1-4", Waves: []string{"1", "50%", "100%"},
			HealthWindow: &metav1.Duration{Duration: 5 * time.Minute}, FailureBudget: fwv1.FailureBudget{Count: 2, Percent: 10},
			OnFailure: fwv1.FailurePause},
		Status: fwv1.RolloutStatus{
			Wave: 2, Updated: 7, Failed: 1, Pending: 4,
			Waves: []fwv1.WaveStatus{
				{Target: 1, Nodes: 1, Updated: 1, Healthy: 1, Started: at(0)},
				{Target: 6, Nodes: 5, Updated: 4, Healthy: 2, Failed: 1, Started: at(7)},
				{Target: 12, Nodes: 6, Updated: 2, InProgress: 1, Pending: 2, Offline: 1},
			},
			Nodes: []fwv1.NodeStatus{
				{Name: "gw-1", State: "Updated", Version: "1.4.0"},
				{Name: "gw-4", State: "Reverted", Version: "1.3.0", Reason: "HealthCheckFailed", Message: "agent did not connect within 5m"},
			},
			Conditions: []metav1.Condition{
				{Type: "ReleaseReady", Status: metav1.ConditionTrue, Reason: "Verified", Message: "release agent-1-4, version 1.4.0, verified"},
				{Type: "Progressing", Status: metav1.ConditionTrue, Reason: "WaveProgressing", Message: "wave 2 of 3: 7 of 12 nodes updated"},
				{Type: "Paused", Status: metav1.ConditionFalse, Reason: "NotPaused"},
			},
		},
	}
}

const statusGolden = `rollout agent-1-4: release agent-1-4 (1.4.0), waves 1,50%,100%, health window 5m0s, failure budget 2,10%, on failure Pause
wave 2/3 [#######x----] 7/12 updated, 1 failed, 4 pending
  WAVE  TARGET  NODES  UPDATED  HEALTHY  FAILED  IN PROGRESS  PENDING  OFFLINE  STARTED
  1     1       1      1        1        0       0            0        0        2026-03-02T10:00:00Z
  2     6       5      4        2        1       0            0        0        2026-03-02T10:07:00Z
  3     12      6      2        0        0       1            2        1        -
conditions:
  ReleaseReady  True   Verified         release agent-1-4, version 1.4.0, verified
  Progressing   True   WaveProgressing  wave 2 of 3: 7 of 12 nodes updated
  Paused        False  NotPaused
failed nodes:
  gw-4  Reverted  HealthCheckFailed: agent did not connect within 5m
`

func TestRenderRolloutStatus(t *testing.T) {
	var b bytes.Buffer
	if err := renderRolloutStatus(&b, statusRollout(), "1.4.0"); err != nil {
		t.Fatal(err)
	}
	if got := b.String(); got != statusGolden {
		t.Errorf("status =\n%s\nwant\n%s", got, statusGolden)
	}

	ro := &fwv1.Rollout{ObjectMeta: metav1.ObjectMeta{Name: "new"}, Spec: fwv1.RolloutSpec{Release: "rel", Paused: true}}
	b.Reset()
	if err := renderRolloutStatus(&b, ro, ""); err != nil {
		t.Fatal(err)
	}
	want := "rollout new: release rel, waves 100%, health window 5m0s, failure budget none, on failure Pause\n" +
		"paused (spec.paused): `outpost rollout resume new` resumes it\n" +
		"wave 0/0 [------------] 0/0 updated, 0 failed, 0 pending\n"
	if got := b.String(); got != want {
		t.Errorf("status of a new rollout =\n%s\nwant\n%s", got, want)
	}
}

// TestRolloutCreatePauseResume creates a rollout on a fake API, then
// pauses and resumes it.
func TestRolloutCreatePauseResume(t *testing.T) {
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		rolloutsGVR: "RolloutList", releasesGVR: "ReleaseList",
	})
	ro, err := parseRolloutCreate("r", "--release", "rel", "--waves", "1,100%")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var out, errOut bytes.Buffer
	if err := createRollout(ctx, dyn, ro, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), "rollout r created: release rel, waves 1,100%\n"; got != want {
		t.Errorf("create printed %q, want %q", got, want)
	}
	if !strings.Contains(errOut.String(), "release rel does not exist yet") {
		t.Errorf("no warning of the missing release: %q", errOut.String())
	}
	for _, paused := range []bool{true, false} {
		if err := setRolloutPaused(ctx, dyn, "r", paused, &out); err != nil {
			t.Fatal(err)
		}
		got, err := getRollout(ctx, dyn, "r")
		if err != nil {
			t.Fatal(err)
		}
		if got.Spec.Paused != paused || !slices.Equal(got.Spec.Waves, []string{"1", "100%"}) {
			t.Errorf("after setting paused %v: %+v", paused, got.Spec)
		}
	}
}
