package cronjob

import (
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/outpost-mesh/outpost/internal/cron"
)

// nextScheduleDelta pads each wake-up past the scheduled time, so that a
// clock a little behind still finds the time passed, as upstream.
const nextScheduleDelta = 100 * time.Millisecond

// maxMissed is how many missed start times upstream tolerates before it
// warns that the clock or the starting deadline is wrong.
const maxMissed = 100

// errTooClose is returned for a schedule whose runs fall less than a second
// apart, which only a schedule that never fires does (such as February
// 31st).
var errTooClose = errors.New("time difference between two schedules is less than 1 second")

// parseSchedule parses cj's schedule in its zone: spec.timeZone, or a TZ
// or CRON_TZ prefix of a schedule stored before timeZone existed (which
// wins, as upstream), or else the controller's local zone. zoned reports
// such a prefix, which upstream warns about.
func parseSchedule(cj *batchv1.CronJob) (s *cron.Schedule, zoned bool, err error) {
	spec := cj.Spec.Schedule
	switch {
	case strings.Contains(spec, "TZ"):
		zoned = true
	case cj.Spec.TimeZone != nil:
		if _, err := time.LoadLocation(*cj.Spec.TimeZone); err != nil {
			return nil, false, err
		}
		spec = "TZ=" + *cj.Spec.TimeZone + " " + spec
	}
	s, err = cron.Parse(spec)
	if err == nil && s.Location == nil {
		s.Location = time.Local
	}
	return s, zoned, err
}

// missed is how many start times passed unstarted.
type missed int

const (
	noneMissed missed = iota
	fewMissed
	manyMissed // more than maxMissed
)

// mostRecent returns the time runs are counted from (the last scheduled
// run, or the cronjob's creation; with withDeadline, no earlier than the
// starting deadline allows), the most recent start time in (that, now] or
// nil, and how many passed. Like upstream it estimates the count from the
// spacing of two runs rather than walking every one.
func mostRecent(cj *batchv1.CronJob, sched *cron.Schedule, now time.Time, withDeadline bool) (earliest time.Time, recent *time.Time, m missed, err error) {
	earliest = cj.CreationTimestamp.Time
	if cj.Status.LastScheduleTime != nil {
		earliest = cj.Status.LastScheduleTime.Time
	}
	if d := cj.Spec.StartingDeadlineSeconds; withDeadline && d != nil {
		if limit := now.Add(-time.Duration(*d) * time.Second); limit.After(earliest) {
			earliest = limit
		}
	}
	t1 := sched.Next(earliest)
	if t1.IsZero() || now.Before(t1) {
		return earliest, nil, noneMissed, nil
	}
	t2 := sched.Next(t1)
	if t2.IsZero() || now.Before(t2) {
		return earliest, &t1, noneMissed, nil
	}
	step := int64(t2.Sub(t1).Round(time.Second).Seconds())
	if step < 1 {
		return earliest, nil, noneMissed, errTooClose
	}
	n := int64(now.Sub(t1).Seconds())/step + 1
	// Start a step before the estimate, and let the schedule find the
	// exact runs from there, as irregular schedules need.
	var last time.Time
	for t := sched.Next(t1.Add(time.Duration((n-2)*step) * time.Second)); !t.IsZero() && !t.After(now); t = sched.Next(t) {
		last = t
	}
	m = fewMissed
	if n > maxMissed {
		m = manyMissed
	}
	if last.IsZero() {
		return earliest, nil, m, nil
	}
	return earliest, &last, m, nil
}

// untilNext is how long after now the cronjob is to be synced again: just
// past its next start time.
func untilNext(cj *batchv1.CronJob, sched *cron.Schedule, now time.Time) time.Duration {
	earliest, recent, m, err := mostRecent(cj, sched, now, false)
	from := now
	switch {
	case err != nil:
	case recent != nil:
		from = *recent
	case m == noneMissed:
		from = earliest
	}
	next := sched.Next(from)
	if next.IsZero() {
		// Never again: wake up in a while in case the clock is wrong.
		return 24 * time.Hour
	}
	return next.Add(nextScheduleDelta).Sub(now)
}

// event is an Event to record on the cronjob.
type event struct {
	warning        bool
	reason, format string
	args           []any
}

// decision is what a sync of a cronjob does: start the run scheduled at
// run (nil: none), first deleting the active jobs in replace; record
// events; and sync again after requeue (0: not until something changes).
type decision struct {
	run     *time.Time
	replace []corev1.ObjectReference
	events  []event
	requeue time.Duration
}

// decide decides what a sync of cj does at now, as upstream's
// syncCronJob: nothing while suspended; else the most recent start time
// not yet run, unless it is past the starting deadline (MissSchedule), it
// ran already, or an active job forbids it (JobAlreadyActive). cj's
// active list must already be reconciled with its jobs.
func decide(cj *batchv1.CronJob, sched *cron.Schedule, now time.Time) decision {
	var d decision
	if cj.Spec.Suspend != nil && *cj.Spec.Suspend {
		return d
	}
	d.requeue = untilNext(cj, sched, now)
	_, recent, m, err := mostRecent(cj, sched, now, true)
	if err != nil {
		d.requeue = 0
		d.events = append(d.events, event{true, "InvalidSchedule", "invalid schedule: %s : %s", []any{cj.Spec.Schedule, err}})
		return d
	}
	if recent == nil || recent.After(now) {
		return d
	}
	if m == manyMissed {
		d.events = append(d.events, event{true, "TooManyMissedTimes",
			"too many missed start times. Set or decrease .spec.startingDeadlineSeconds or check clock skew", nil})
	}
	if s := cj.Spec.StartingDeadlineSeconds; s != nil && recent.Add(time.Duration(*s)*time.Second).Before(now) {
		d.events = append(d.events, event{true, "MissSchedule", "Missed scheduled time to start a job: %s", []any{recent.UTC().Format(time.RFC1123Z)}})
		return d
	}
	name := jobName(cj, *recent)
	for _, a := range cj.Status.Active {
		if a.Name == name && a.Namespace == cj.Namespace {
			return d // run already
		}
	}
	if l := cj.Status.LastScheduleTime; l != nil && l.Time.Equal(*recent) {
		return d
	}
	if cj.Spec.ConcurrencyPolicy == batchv1.ForbidConcurrent && len(cj.Status.Active) > 0 {
		d.events = append(d.events, event{false, "JobAlreadyActive", "Not starting job because prior execution is running and concurrency policy is Forbid", nil})
		return d
	}
	if cj.Spec.ConcurrencyPolicy == batchv1.ReplaceConcurrent {
		d.replace = append(d.replace, cj.Status.Active...)
	}
	d.run = recent
	return d
}

// jobName is the name of cj's job scheduled at t: the cronjob's name and
// t in minutes since the epoch, which makes a second creation of one run
// fail rather than run twice.
func jobName(cj *batchv1.CronJob, t time.Time) string {
	return fmt.Sprintf("%s-%d", cj.Name, t.Unix()/60)
}

// jobFor returns the job cj runs at scheduled: its job template, with the
// scheduled-timestamp annotation (in spec.timeZone, UTC without) and cj as
// its controller.
func jobFor(cj *batchv1.CronJob, scheduled time.Time) (*batchv1.Job, error) {
	loc := time.UTC
	if tz := cj.Spec.TimeZone; tz != nil {
		var err error
		if loc, err = time.LoadLocation(*tz); err != nil {
			return nil, err
		}
	}
	t := &cj.Spec.JobTemplate
	annotations := maps.Clone(t.Annotations)
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[batchv1.CronJobScheduledTimestampAnnotation] = scheduled.In(loc).Format(time.RFC3339)
	labels := maps.Clone(t.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	j := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name:            jobName(cj, scheduled),
			Namespace:       cj.Namespace,
			Labels:          labels,
			Annotations:     annotations,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(cj, batchv1.SchemeGroupVersion.WithKind("CronJob"))},
		},
	}
	t.Spec.DeepCopyInto(&j.Spec)
	return j, nil
}

// finishedAs returns the condition a finished job ended with, Complete or
// Failed, or "".
func finishedAs(j *batchv1.Job) batchv1.JobConditionType {
	for _, c := range j.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return c.Type
		}
	}
	return ""
}

func inActive(cj *batchv1.CronJob, uid types.UID) bool {
	for _, a := range cj.Status.Active {
		if a.UID == uid {
			return true
		}
	}
	return false
}

func removeActive(cj *batchv1.CronJob, uid types.UID) {
	out := []corev1.ObjectReference{}
	for _, a := range cj.Status.Active {
		if a.UID != uid {
			out = append(out, a)
		}
	}
	cj.Status.Active = out
}

// reconcile brings cj's status in step with its jobs, as upstream: a
// finished job leaves the active list (SawCompletedJob), a job succeeded
// later than lastSuccessfulTime moves it on, and an unfinished job not in
// the list is reported (UnexpectedJob). It reports whether the status
// changed. Active jobs missing from jobs are left to the caller, which
// asks the API.
func reconcile(cj *batchv1.CronJob, jobs []*batchv1.Job) (changed bool, evs []event) {
	for _, j := range jobs {
		found := inActive(cj, j.UID)
		how := finishedAs(j)
		switch {
		case !found && how == "":
			evs = append(evs, event{true, "UnexpectedJob", "Saw a job that the controller did not create or forgot: %s", []any{j.Name}})
		case found && how != "":
			removeActive(cj, j.UID)
			evs = append(evs, event{false, "SawCompletedJob", "Saw completed job: %s, condition: %v", []any{j.Name, how}})
			changed = true
		}
		if how == batchv1.JobComplete && j.Status.CompletionTime != nil {
			if l := cj.Status.LastSuccessfulTime; l == nil || j.Status.CompletionTime.After(l.Time) {
				cj.Status.LastSuccessfulTime = j.Status.CompletionTime.DeepCopy()
				changed = true
			}
		}
	}
	return changed, evs
}

// oldFinished returns the finished jobs beyond the history limits, oldest
// first by start time (then name), as upstream's.
func oldFinished(cj *batchv1.CronJob, jobs []*batchv1.Job) []*batchv1.Job {
	var complete, failed []*batchv1.Job
	for _, j := range jobs {
		switch finishedAs(j) {
		case batchv1.JobComplete:
			complete = append(complete, j)
		case batchv1.JobFailed:
			failed = append(failed, j)
		}
	}
	var out []*batchv1.Job
	over := func(js []*batchv1.Job, limit *int32) {
		if limit == nil || len(js) <= int(*limit) {
			return
		}
		sortByStart(js)
		out = append(out, js[:len(js)-int(*limit)]...)
	}
	over(complete, cj.Spec.SuccessfulJobsHistoryLimit)
	over(failed, cj.Spec.FailedJobsHistoryLimit)
	return out
}
