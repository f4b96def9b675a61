package cronjob

import (
	"reflect"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t
}

func testCronJob(schedule, created string, edit ...func(*batchv1.CronJob)) *batchv1.CronJob {
	cj := &batchv1.CronJob{
		ObjectMeta: metav1.ObjectMeta{Name: "tick", Namespace: "default", UID: "cj-uid", CreationTimestamp: metav1.NewTime(at(created))},
		Spec: batchv1.CronJobSpec{
			Schedule:                   schedule,
			TimeZone:                   new("UTC"),
			ConcurrencyPolicy:          batchv1.AllowConcurrent,
			Suspend:                    new(false),
			SuccessfulJobsHistoryLimit: new(int32(3)),
			FailedJobsHistoryLimit:     new(int32(1)),
		},
	}
	for _, e := range edit {
		e(cj)
	}
	return cj
}

func active(name string) func(*batchv1.CronJob) {
	return func(cj *batchv1.CronJob) {
		cj.Status.Active = append(cj.Status.Active, corev1.ObjectReference{Kind: "Job", Namespace: "default", Name: name, UID: types.UID(name)})
	}
}

func TestDecide(t *testing.T) {
	tests := []struct {
		name        string
		cj          *batchv1.CronJob
		now         string
		wantRun     string // "" for none
		wantReplace []string
		wantEvents  []string
		wantRequeue time.Duration
	}{
		{name: "first run due", cj: testCronJob("* * * * *", "2025-03-01T10:00:30Z"), now: "2025-03-01T10:01:00.1Z",
			wantRun: "2025-03-01T10:01:00Z", wantRequeue: 60 * time.Second},
		{name: "not yet", cj: testCronJob("* * * * *", "2025-03-01T10:00:30Z"), now: "2025-03-01T10:00:59Z",
			wantRequeue: 1100 * time.Millisecond},
		{name: "ran already", cj: testCronJob("*/5 * * * *", "2025-03-01T10:00:30Z", func(cj *batchv1.CronJob) {
			cj.Status.LastScheduleTime = new(metav1.NewTime(at("2025-03-01T10:05:00Z")))
		}), now: "2025-03-01T10:06:00Z", wantRequeue: 4*time.Minute + 100*time.Millisecond},
		{name: "suspended", cj: testCronJob("* * * * *", "2025-03-01T10:00:30Z", func(cj *batchv1.CronJob) { cj.Spec.Suspend = new(true) }),
			now: "2025-03-01T10:05:00Z"},
		{name: "forbid while active", cj: testCronJob("* * * * *", "2025-03-01T10:00:30Z", active("tick-1"), func(cj *batchv1.CronJob) {
			cj.Spec.ConcurrencyPolicy = batchv1.ForbidConcurrent
		}), now: "2025-03-01T10:01:00.1Z", wantEvents: []string{"JobAlreadyActive"}, wantRequeue: 60 * time.Second},
		{name: "allow while active", cj: testCronJob("* * * * *", "2025-03-01T10:00:30Z", active("tick-1")),
			now: "2025-03-01T10:01:00.1Z", wantRun: "2025-03-01T10:01:00Z", wantRequeue: 60 * time.Second},
		{name: "replace the active", cj: testCronJob("* * * * *", "2025-03-01T10:00:30Z", active("tick-1"), func(cj *batchv1.CronJob) {
			cj.Spec.ConcurrencyPolicy = batchv1.ReplaceConcurrent
		}), now: "2025-03-01T10:01:00.1Z", wantRun: "2025-03-01T10:01:00Z", wantReplace: []string{"tick-1"}, wantRequeue: 60 * time.Second},
		{name: "missed runs: the latest only", cj: testCronJob("0 * * * *", "2025-03-01T00:30:00Z"), now: "2025-03-01T05:10:00Z",
			wantRun: "2025-03-01T05:00:00Z", wantRequeue: 50*time.Minute + 100*time.Millisecond},
		{name: "too many missed", cj: testCronJob("* * * * *", "2025-03-01T00:00:30Z"), now: "2025-03-01T05:00:30Z",
			wantRun: "2025-03-01T05:00:00Z", wantEvents: []string{"TooManyMissedTimes"}, wantRequeue: 30*time.Second + 100*time.Millisecond},
		{name: "starting deadline bounds the count", cj: testCronJob("* * * * *", "2025-03-01T00:00:30Z", func(cj *batchv1.CronJob) {
			cj.Spec.StartingDeadlineSeconds = new(int64(200))
		}), now: "2025-03-01T05:00:30Z", wantRun: "2025-03-01T05:00:00Z", wantRequeue: 30*time.Second + 100*time.Millisecond},
		{name: "starting deadline passed", cj: testCronJob("0 * * * *", "2025-03-01T00:30:00Z", func(cj *batchv1.CronJob) {
			cj.Spec.StartingDeadlineSeconds = new(int64(60))
		}), now: "2025-03-01T05:10:00Z", wantRequeue: 50*time.Minute + 100*time.Millisecond},
		{name: "time zone", cj: testCronJob("0 9 * * *", "2025-02-28T00:00:00Z", func(cj *batchv1.CronJob) { cj.Spec.TimeZone = new("Asia/Tokyo") }),
			now: "2025-03-01T00:00:00.5Z", wantRun: "2025-03-01T00:00:00Z", wantRequeue: 24*time.Hour - 400*time.Millisecond},
		{name: "CRON_TZ in schedule", cj: testCronJob("CRON_TZ=Asia/Tokyo 0 9 * * *", "2025-02-28T00:00:00Z", func(cj *batchv1.CronJob) { cj.Spec.TimeZone = nil }),
			now: "2025-03-01T00:00:00.5Z", wantRun: "2025-03-01T00:00:00Z", wantRequeue: 24*time.Hour - 400*time.Millisecond},
		{name: "never fires", cj: testCronJob("0 0 30 2 *", "2025-02-28T00:00:00Z"), now: "2025-03-01T00:00:00Z", wantRequeue: 24 * time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sched, _, err := parseSchedule(tt.cj)
			if err != nil {
				t.Fatal(err)
			}
			d := decide(tt.cj, sched, at(tt.now))
			run := ""
			if d.run != nil {
				run = d.run.UTC().Format(time.RFC3339)
			}
			var replace, evs []string
			for _, r := range d.replace {
				replace = append(replace, r.Name)
			}
			for _, e := range d.events {
				evs = append(evs, e.reason)
			}
			if run != tt.wantRun || !reflect.DeepEqual(replace, tt.wantReplace) || !reflect.DeepEqual(evs, tt.wantEvents) || d.requeue != tt.wantRequeue {
				t.Errorf("decide() = run %q replace %v events %v requeue %v, want %q %v %v %v",
					run, replace, evs, d.requeue, tt.wantRun, tt.wantReplace, tt.wantEvents, tt.wantRequeue)
			}
		})
	}
}

func TestJobFor(t *testing.T) {
	cj := testCronJob("0 9 * * *", "2025-02-28T00:00:00Z", func(cj *batchv1.CronJob) {
		cj.Spec.TimeZone = new("Asia/Tokyo")
		cj.Spec.JobTemplate.Labels = map[string]string{"app": "tick"}
		cj.Spec.JobTemplate.Spec.BackoffLimit = new(int32(2))
	})
	j, err := jobFor(cj, at("2025-03-01T00:00:00Z"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "tick-29013120"; j.Name != want {
		t.Errorf("job name = %q, want %q", j.Name, want)
	}
	if got := j.Annotations[batchv1.CronJobScheduledTimestampAnnotation]; got != "2025-03-01T09:00:00+09:00" {
		t.Errorf("scheduled timestamp = %q", got)
	}
	if j.Labels["app"] != "tick" || *j.Spec.BackoffLimit != 2 || !metav1.IsControlledBy(j, cj) {
		t.Errorf("job = %+v", j.ObjectMeta)
	}
	cj.Spec.TimeZone = nil
	if j, _ := jobFor(cj, at("2025-03-01T00:00:00Z")); j.Annotations[batchv1.CronJobScheduledTimestampAnnotation] != "2025-03-01T00:00:00Z" {
		t.Errorf("scheduled timestamp without zone = %q, want UTC", j.Annotations[batchv1.CronJobScheduledTimestampAnnotation])
	}
}

func finishedJob(name string, how batchv1.JobConditionType, start, end string) *batchv1.Job {
	j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(name)}}
	if start != "" {
		j.Status.StartTime = new(metav1.NewTime(at(start)))
	}
	if how != "" {
		j.Status.Conditions = []batchv1.JobCondition{{Type: how, Status: corev1.ConditionTrue}}
		if how == batchv1.JobComplete {
			j.Status.CompletionTime = new(metav1.NewTime(at(end)))
		}
	}
	return j
}

func TestReconcile(t *testing.T) {
	cj := testCronJob("* * * * *", "2025-03-01T00:00:00Z", active("a"), active("b"))
	jobs := []*batchv1.Job{
		finishedJob("a", batchv1.JobComplete, "2025-03-01T00:01:00Z", "2025-03-01T00:02:00Z"),
		finishedJob("b", "", "2025-03-01T00:03:00Z", ""),
		finishedJob("c", "", "", ""),
	}
	changed, evs := reconcile(cj, jobs)
	var reasons []string
	for _, e := range evs {
		reasons = append(reasons, e.reason)
	}
	if !changed || !reflect.DeepEqual(reasons, []string{"SawCompletedJob", "UnexpectedJob"}) ||
		len(cj.Status.Active) != 1 || cj.Status.Active[0].Name != "b" || !cj.Status.LastSuccessfulTime.Time.Equal(at("2025-03-01T00:02:00Z")) {
		t.Errorf("reconcile() = %v %v, status %+v", changed, reasons, cj.Status)
	}
}

func TestOldFinished(t *testing.T) {
	cj := testCronJob("* * * * *", "2025-03-01T00:00:00Z", func(cj *batchv1.CronJob) {
		cj.Spec.SuccessfulJobsHistoryLimit = new(int32(1))
		cj.Spec.FailedJobsHistoryLimit = new(int32(0))
	})
	jobs := []*batchv1.Job{
		finishedJob("s2", batchv1.JobComplete, "2025-03-01T00:02:00Z", "2025-03-01T00:03:00Z"),
		finishedJob("s1", batchv1.JobComplete, "2025-03-01T00:01:00Z", "2025-03-01T00:03:00Z"),
		finishedJob("s3", batchv1.JobComplete, "2025-03-01T00:03:00Z", "2025-03-01T00:04:00Z"),
		finishedJob("f1", batchv1.JobFailed, "2025-03-01T00:01:00Z", ""),
		finishedJob("r", "", "2025-03-01T00:01:00Z", ""),
	}
	var names []string
	for _, j := range oldFinished(cj, jobs) {
		names = append(names, j.Name)
	}
	if want := []string{"s1", "s2", "f1"}; !reflect.DeepEqual(names, want) {
		t.Errorf("oldFinished() = %v, want %v", names, want)
	}
}
