package job

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
)

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// testJob is a job as the API stores it: defaults set, started at t0.
func testJob(edit ...func(*batchv1.Job)) *batchv1.Job {
	j := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "pi", Namespace: "default", UID: "job-uid"},
		Spec: batchv1.JobSpec{
			Completions:    new(int32(3)),
			Parallelism:    new(int32(2)),
			BackoffLimit:   new(int32(6)),
			CompletionMode: new(batchv1.NonIndexedCompletion),
			Suspend:        new(false),
			Selector:       &metav1.LabelSelector{MatchLabels: map[string]string{batchv1.ControllerUidLabel: "job-uid"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{batchv1.ControllerUidLabel: "job-uid", batchv1.JobNameLabel: "pi"}},
				Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					Containers:    []corev1.Container{{Name: "pi", Image: "perl"}},
				},
			},
		},
		Status: batchv1.JobStatus{StartTime: new(metav1.NewTime(t0))},
	}
	for _, e := range edit {
		e(j)
	}
	return j
}

func indexed(completions, parallelism int32) func(*batchv1.Job) {
	return func(j *batchv1.Job) {
		j.Spec.CompletionMode = new(batchv1.IndexedCompletion)
		j.Spec.Completions = new(completions)
		j.Spec.Parallelism = new(parallelism)
	}
}

// pod is a pod of testJob in phase, with the tracking finalizer; index
// >= 0 gives it a completion index.
func pod(name string, phase corev1.PodPhase, index int, edit ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "default", UID: types.UID(name),
			Finalizers:        []string{batchv1.JobTrackingFinalizer},
			CreationTimestamp: metav1.NewTime(t0),
		},
		Status: corev1.PodStatus{Phase: phase},
	}
	if index >= 0 {
		p.Annotations = map[string]string{batchv1.JobCompletionIndexAnnotation: fmt.Sprint(index)}
	}
	for _, e := range edit {
		e(p)
	}
	return p
}

func exited(container string, code int32, at time.Time) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{
			Name:  container,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, FinishedAt: metav1.NewTime(at)}},
		})
	}
}

func counted(p *corev1.Pod) { p.Finalizers = nil }

func state(j *batchv1.Job, now time.Time, b backoffRecord, pods ...*corev1.Pod) *syncState {
	return newSyncState(j, pods, sets.New[types.UID](), b, now)
}

func TestPlan(t *testing.T) {
	tests := []struct {
		name       string
		job        *batchv1.Job
		pods       []*corev1.Pod
		backoff    backoffRecord
		wantCreate []int
		wantDelete []string
		wantWait   time.Duration
	}{
		{name: "new job: parallelism", job: testJob(), wantCreate: []int{noIndex, noIndex}},
		{name: "no more than completions left", job: testJob(func(j *batchv1.Job) { j.Status.Succeeded = 1 }), pods: []*corev1.Pod{
			pod("a", corev1.PodSucceeded, -1), pod("b", corev1.PodSucceeded, -1, counted)},
			wantCreate: []int{noIndex}},
		{name: "enough running", job: testJob(), pods: []*corev1.Pod{
			pod("a", corev1.PodRunning, -1), pod("b", corev1.PodPending, -1)}},
		{name: "too many: pending first", job: testJob(func(j *batchv1.Job) { j.Spec.Parallelism = new(int32(1)) }),
			pods:       []*corev1.Pod{pod("a", corev1.PodRunning, -1), pod("b", corev1.PodPending, -1)},
			wantDelete: []string{"b"}},
		{name: "suspended: delete all", job: testJob(func(j *batchv1.Job) { j.Spec.Suspend = new(true) }),
			pods:       []*corev1.Pod{pod("a", corev1.PodRunning, -1), pod("b", corev1.PodPending, -1)},
			wantDelete: []string{"b", "a"}},
		{name: "work queue: none after a success", job: testJob(func(j *batchv1.Job) { j.Spec.Completions = nil }),
			pods: []*corev1.Pod{pod("a", corev1.PodSucceeded, -1)}},
		{name: "back-off after a failure", job: testJob(),
			pods:     []*corev1.Pod{pod("a", corev1.PodFailed, -1, exited("pi", 1, t0.Add(-4*time.Second))), pod("b", corev1.PodRunning, -1)},
			wantWait: 6 * time.Second},
		{name: "back-off doubles", job: testJob(), backoff: backoffRecord{failures: 2, lastFailure: t0.Add(-5 * time.Second)},
			pods:     []*corev1.Pod{pod("b", corev1.PodRunning, -1)},
			wantWait: 15 * time.Second},
		{name: "back-off over", job: testJob(), backoff: backoffRecord{failures: 1, lastFailure: t0.Add(-10 * time.Second)},
			pods:       []*corev1.Pod{pod("b", corev1.PodRunning, -1)},
			wantCreate: []int{noIndex}},
		{name: "replaced only once failed", job: testJob(func(j *batchv1.Job) { j.Spec.PodReplacementPolicy = new(batchv1.Failed) }),
			pods:       []*corev1.Pod{pod("a", corev1.PodRunning, -1, func(p *corev1.Pod) { p.DeletionTimestamp = new(metav1.NewTime(t0)) })},
			wantCreate: []int{noIndex}},
		{name: "indexed: first pending", job: testJob(indexed(5, 3)), pods: []*corev1.Pod{
			pod("a", corev1.PodSucceeded, 0), pod("b", corev1.PodRunning, 2)},
			wantCreate: []int{1, 3}},
		{name: "indexed: duplicate and out of range", job: testJob(indexed(3, 3)), pods: []*corev1.Pod{
			pod("a", corev1.PodRunning, 0), pod("b", corev1.PodPending, 0), pod("c", corev1.PodRunning, 7)},
			wantDelete: []string{"c", "b"}},
		{name: "per index back-off", job: testJob(indexed(2, 2), func(j *batchv1.Job) { j.Spec.BackoffLimitPerIndex = new(int32(2)) }),
			pods:     []*corev1.Pod{pod("a", corev1.PodFailed, 0, exited("pi", 1, t0.Add(-time.Second))), pod("b", corev1.PodRunning, 1)},
			wantWait: 9 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := state(tt.job, t0, tt.backoff, tt.pods...)
			s.decideFinished()
			p := s.plan()
			var del []string
			for _, d := range p.delete {
				del = append(del, d.Name)
			}
			if !reflect.DeepEqual(p.create, tt.wantCreate) || !reflect.DeepEqual(del, tt.wantDelete) || p.wait != tt.wantWait {
				t.Errorf("plan() = create %v delete %v wait %v, want create %v delete %v wait %v",
					p.create, del, p.wait, tt.wantCreate, tt.wantDelete, tt.wantWait)
			}
		})
	}
}

func TestDecideFinished(t *testing.T) {
	failJob := &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{
		{Action: batchv1.PodFailurePolicyActionIgnore, OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}}},
		{Action: batchv1.PodFailurePolicyActionFailJob, OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{42}}},
	}}
	disrupted := func(p *corev1.Pod) {
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue})
	}
	tests := []struct {
		name       string
		job        *batchv1.Job
		pods       []*corev1.Pod
		now        time.Time
		want       batchv1.JobConditionType // "" for none
		wantReason string
		wantMsg    string
		wantIn     time.Duration
	}{
		{name: "running", job: testJob(), pods: []*corev1.Pod{pod("a", corev1.PodRunning, -1)}},
		{name: "backoff limit", job: testJob(func(j *batchv1.Job) { j.Spec.BackoffLimit = new(int32(1)); j.Status.Failed = 1 }),
			pods: []*corev1.Pod{pod("a", corev1.PodFailed, -1), pod("b", corev1.PodFailed, -1, counted)},
			want: batchv1.JobFailureTarget, wantReason: batchv1.JobReasonBackoffLimitExceeded, wantMsg: backoffLimitMessage},
		{name: "within backoff limit", job: testJob(func(j *batchv1.Job) { j.Spec.BackoffLimit = new(int32(2)); j.Status.Failed = 1 }),
			pods: []*corev1.Pod{pod("a", corev1.PodFailed, -1), pod("b", corev1.PodFailed, -1, counted)}},
		{name: "restarts OnFailure", job: testJob(func(j *batchv1.Job) {
			j.Spec.BackoffLimit = new(int32(2))
			j.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
		}), pods: []*corev1.Pod{pod("a", corev1.PodRunning, -1, func(p *corev1.Pod) {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "pi", RestartCount: 2}}
		})}, want: batchv1.JobFailureTarget, wantReason: batchv1.JobReasonBackoffLimitExceeded, wantMsg: backoffLimitMessage},
		{name: "deadline ahead", job: testJob(func(j *batchv1.Job) { j.Spec.ActiveDeadlineSeconds = new(int64(60)) }),
			now: t0.Add(20 * time.Second), wantIn: 40 * time.Second},
		{name: "deadline passed", job: testJob(func(j *batchv1.Job) { j.Spec.ActiveDeadlineSeconds = new(int64(60)) }),
			now: t0.Add(60 * time.Second), want: batchv1.JobFailureTarget, wantReason: batchv1.JobReasonDeadlineExceeded, wantMsg: deadlineMessage},
		{name: "no deadline while suspended", job: testJob(func(j *batchv1.Job) {
			j.Spec.ActiveDeadlineSeconds = new(int64(60))
			j.Spec.Suspend = new(true)
		}), now: t0.Add(time.Hour)},
		{name: "policy FailJob", job: testJob(func(j *batchv1.Job) { j.Spec.PodFailurePolicy = failJob }),
			pods: []*corev1.Pod{pod("a", corev1.PodFailed, -1, exited("pi", 42, t0))},
			want: batchv1.JobFailureTarget, wantReason: batchv1.JobReasonPodFailurePolicy,
			wantMsg: "Container pi for pod default/a failed with exit code 42 matching FailJob rule at index 1"},
		{name: "policy Ignore does not count", job: testJob(func(j *batchv1.Job) {
			j.Spec.PodFailurePolicy = failJob
			j.Spec.BackoffLimit = new(int32(0))
		}), pods: []*corev1.Pod{pod("a", corev1.PodFailed, -1, exited("pi", 42, t0), disrupted)}},
		{name: "policy no match counts", job: testJob(func(j *batchv1.Job) {
			j.Spec.PodFailurePolicy = failJob
			j.Spec.BackoffLimit = new(int32(0))
		}), pods: []*corev1.Pod{pod("a", corev1.PodFailed, -1, exited("pi", 1, t0))},
			want: batchv1.JobFailureTarget, wantReason: batchv1.JobReasonBackoffLimitExceeded, wantMsg: backoffLimitMessage},
		{name: "earlier FailureTarget", job: testJob(func(j *batchv1.Job) {
			j.Status.Conditions = []batchv1.JobCondition{*newCondition(batchv1.JobFailureTarget, "DeadlineExceeded", "m", t0)}
		}), want: batchv1.JobFailed, wantReason: "DeadlineExceeded", wantMsg: "m"},
		{name: "per index: max failed indexes", job: testJob(indexed(3, 3), func(j *batchv1.Job) {
			j.Spec.BackoffLimitPerIndex = new(int32(0))
			j.Spec.MaxFailedIndexes = new(int32(0))
		}), pods: []*corev1.Pod{pod("a", corev1.PodFailed, 1)},
			want: batchv1.JobFailureTarget, wantReason: batchv1.JobReasonMaxFailedIndexesExceeded, wantMsg: "Job has exceeded the specified maximal number of failed indexes"},
		{name: "per index: FailIndex", job: testJob(indexed(2, 2), func(j *batchv1.Job) {
			j.Spec.BackoffLimitPerIndex = new(int32(3))
			j.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{Action: batchv1.PodFailurePolicyActionFailIndex,
				OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{Operator: batchv1.PodFailurePolicyOnExitCodesOpNotIn, Values: []int32{0}}}}}
			j.Status.CompletedIndexes = "0"
			j.Status.Succeeded = 1
		}), pods: []*corev1.Pod{pod("a", corev1.PodFailed, 1, exited("pi", 3, t0))},
			want: batchv1.JobFailureTarget, wantReason: batchv1.JobReasonFailedIndexes, wantMsg: "Job has failed indexes"},
		{name: "success policy", job: testJob(indexed(4, 4), func(j *batchv1.Job) {
			j.Spec.SuccessPolicy = &batchv1.SuccessPolicy{Rules: []batchv1.SuccessPolicyRule{
				{SucceededIndexes: new("0-1,3")}, {SucceededIndexes: new("0-2"), SucceededCount: new(int32(2))}}}
		}), pods: []*corev1.Pod{pod("a", corev1.PodSucceeded, 0), pod("b", corev1.PodSucceeded, 2), pod("c", corev1.PodRunning, 1)},
			want: batchv1.JobSuccessCriteriaMet, wantReason: batchv1.JobReasonSuccessPolicy, wantMsg: "Matched rules at index 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := tt.now
			if now.IsZero() {
				now = t0
			}
			s := state(tt.job, now, backoffRecord{}, tt.pods...)
			in := s.decideFinished()
			var got batchv1.JobConditionType
			var reason, msg string
			if s.finished != nil {
				got, reason, msg = s.finished.Type, s.finished.Reason, s.finished.Message
			}
			if got != tt.want || reason != tt.wantReason || msg != tt.wantMsg || in != tt.wantIn {
				t.Errorf("decideFinished() = %q %q %q in %v, want %q %q %q in %v", got, reason, msg, in, tt.want, tt.wantReason, tt.wantMsg, tt.wantIn)
			}
		})
	}
}

// TestTrackToComplete walks a job's status through the syncs that count
// its last pods: uncounted, then counted, then Complete.
func TestTrackToComplete(t *testing.T) {
	j := testJob(func(j *batchv1.Job) { j.Status.Succeeded = 2 })
	last := pod("c", corev1.PodSucceeded, -1)

	// Sync 1: the pod is added to uncounted, SuccessCriteriaMet recorded.
	s := state(j, t0, backoffRecord{}, last)
	s.decideFinished()
	if !s.complete(0) {
		t.Fatal("complete(0) = false with 3 of 3 succeeded")
	}
	s.finished = newCondition(batchv1.JobSuccessCriteriaMet, batchv1.JobReasonCompletionsReached, completionsReachedMessage, t0)
	rm, with, flush, _ := s.track()
	if len(rm) != 1 || !flush || !reflect.DeepEqual(s.job.Status.UncountedTerminatedPods.Succeeded, []types.UID{"c"}) {
		t.Fatalf("track() = rm %d flush %v uncounted %v, want the pod", len(rm), flush, s.job.Status.UncountedTerminatedPods)
	}
	if !hasTrueCondition(s.job, batchv1.JobSuccessCriteriaMet) || s.finished.Type != batchv1.JobComplete {
		t.Fatalf("track(): conditions %v, finished %v, want SuccessCriteriaMet then Complete", s.job.Status.Conditions, s.finished.Type)
	}
	// The finalizer is removed: the pod is counted.
	with.Delete("c")
	if !countUncounted(&s.job.Status, with) || s.job.Status.Succeeded != 3 {
		t.Fatalf("countUncounted: succeeded %d, want 3", s.job.Status.Succeeded)
	}
	if !s.enactFinished() || !hasTrueCondition(s.job, batchv1.JobComplete) || s.job.Status.CompletionTime == nil {
		t.Fatalf("enactFinished: %v, want Complete with a completion time", s.job.Status)
	}
	if c := findCondition(s.job.Status.Conditions, batchv1.JobComplete); c.Reason != batchv1.JobReasonCompletionsReached {
		t.Errorf("Complete reason = %q, want %q", c.Reason, batchv1.JobReasonCompletionsReached)
	}
}

func TestTrackFailingJob(t *testing.T) {
	j := testJob(func(j *batchv1.Job) { j.Spec.BackoffLimit = new(int32(0)) })
	failed := pod("a", corev1.PodFailed, -1)
	running := pod("b", corev1.PodRunning, -1)
	s := state(j, t0, backoffRecord{}, failed, running)
	s.decideFinished()
	if s.finished == nil || s.finished.Type != batchv1.JobFailureTarget {
		t.Fatalf("decideFinished() = %v, want FailureTarget", s.finished)
	}
	// The shell deleted the running pod: it terminates.
	s.terminating++
	rm, _, _, _ := s.track()
	if len(rm) != 2 || len(s.job.Status.UncountedTerminatedPods.Failed) != 2 {
		t.Fatalf("track() = rm %d, uncounted %v, want both pods failed", len(rm), s.job.Status.UncountedTerminatedPods)
	}
	if !hasTrueCondition(s.job, batchv1.JobFailureTarget) || s.finished.Type != batchv1.JobFailed {
		t.Fatalf("track(): conditions %v, want FailureTarget, then Failed", s.job.Status.Conditions)
	}
	countUncounted(&s.job.Status, sets.New[types.UID]())
	if s.enactFinished() {
		t.Error("enactFinished() = true with a pod terminating, want false")
	}
	s.terminating = 0
	if !s.enactFinished() || !hasTrueCondition(s.job, batchv1.JobFailed) || s.job.Status.Failed != 2 || s.job.Status.CompletionTime != nil {
		t.Errorf("enactFinished: %+v, want Failed with 2 failed and no completion time", s.job.Status)
	}
}

func TestTrackIndexed(t *testing.T) {
	j := testJob(indexed(4, 2), func(j *batchv1.Job) { j.Status.CompletedIndexes = "0"; j.Status.Succeeded = 1 })
	s := state(j, t0, backoffRecord{}, pod("a", corev1.PodSucceeded, 1), pod("b", corev1.PodSucceeded, 3), pod("c", corev1.PodSucceeded, 9))
	s.decideFinished()
	rm, _, flush, _ := s.track()
	if st := s.job.Status; st.CompletedIndexes != "0,1,3" || st.Succeeded != 3 || !flush || len(rm) != 3 {
		t.Errorf("track(): completedIndexes %q succeeded %d flush %v rm %d, want \"0,1,3\" 3 true 3", st.CompletedIndexes, st.Succeeded, flush, len(rm))
	}
}

func TestSuspendResume(t *testing.T) {
	j := testJob(func(j *batchv1.Job) { j.Spec.Suspend = new(true) })
	s := state(j, t0, backoffRecord{})
	if ev := s.setSuspended(); ev != "Suspended" || !hasTrueCondition(s.job, batchv1.JobSuspended) {
		t.Fatalf("setSuspended() = %q, conditions %v", ev, s.job.Status.Conditions)
	}
	if ev := s.setSuspended(); ev != "" {
		t.Fatalf("setSuspended() again = %q, want nothing", ev)
	}
	s.job.Spec.Suspend = new(false)
	s.now = t0.Add(time.Hour)
	if ev := s.setSuspended(); ev != "Resumed" || hasTrueCondition(s.job, batchv1.JobSuspended) || !s.job.Status.StartTime.Time.Equal(s.now) {
		t.Errorf("setSuspended() on resume = %q, conditions %v, start %v", ev, s.job.Status.Conditions, s.job.Status.StartTime)
	}
	// A job created suspended has no start time until resumed.
	s = state(testJob(func(j *batchv1.Job) { j.Spec.Suspend = new(true); j.Status.StartTime = nil }), t0, backoffRecord{})
	if s.job.Status.StartTime != nil {
		t.Errorf("suspended job start time = %v, want none", s.job.Status.StartTime)
	}
}

func TestIntervals(t *testing.T) {
	tests := []struct {
		in          string
		completions int
		add         []int
		want        string
		total       int
	}{
		{"", 10, nil, "", 0},
		{"1,3-5", 10, []int{2}, "1-5", 5},
		{"1,3-5", 4, nil, "1,3", 2},
		{"0", 10, []int{1}, "0,1", 2},
		{"2-4,x,8", 10, []int{9, 0}, "0,2-4,8,9", 6},
		{"5-3", 10, nil, "", 0},
	}
	for _, tt := range tests {
		got := parseIntervals(tt.in, tt.completions).withIndexes(tt.add)
		if got.String() != tt.want || got.total() != tt.total {
			t.Errorf("parseIntervals(%q, %d).withIndexes(%v) = %q (%d), want %q (%d)", tt.in, tt.completions, tt.add, got, got.total(), tt.want, tt.total)
		}
	}
	o := parseIntervals("1,3-5", 10)
	for ix, want := range map[int]bool{0: false, 1: true, 2: false, 4: true, 6: false} {
		if o.has(ix) != want {
			t.Errorf("%v.has(%d) = %v, want %v", o, ix, !want, want)
		}
	}
}

func TestBackoff(t *testing.T) {
	tests := []struct {
		failures int32
		ago      time.Duration
		want     time.Duration
	}{
		{0, 0, 0},
		{1, 0, 10 * time.Second},
		{1, 3 * time.Second, 7 * time.Second},
		{3, 0, 40 * time.Second},
		{6, 0, 320 * time.Second},
		{7, 0, 6 * time.Minute},
		{30, time.Minute, 5 * time.Minute},
		{2, time.Hour, 0},
	}
	for _, tt := range tests {
		if got := backoffRemaining(tt.failures, t0.Add(-tt.ago), t0); got != tt.want {
			t.Errorf("backoffRemaining(%d, %v ago) = %v, want %v", tt.failures, tt.ago, got, tt.want)
		}
	}
	// A success resets the count; failures after it still count.
	b := backoffRecord{failures: 4, lastFailure: t0}
	b = b.next([]*corev1.Pod{pod("s", corev1.PodSucceeded, -1, exited("pi", 0, t0.Add(time.Second)))},
		[]*corev1.Pod{pod("f1", corev1.PodFailed, -1, exited("pi", 1, t0)), pod("f2", corev1.PodFailed, -1, exited("pi", 1, t0.Add(2*time.Second)))})
	if b.failures != 1 || !b.lastFailure.Equal(t0.Add(2*time.Second)) {
		t.Errorf("next() = %+v, want 1 failure at +2s", b)
	}
}

func TestNewPod(t *testing.T) {
	j := testJob(indexed(3, 3), func(j *batchv1.Job) { j.Spec.BackoffLimitPerIndex = new(int32(1)) })
	p := newPod(j, 2, 1, 0)
	if p.GenerateName != "pi-2-" || p.Spec.Hostname != "pi-2" || p.Annotations[batchv1.JobCompletionIndexAnnotation] != "2" ||
		p.Labels[batchv1.JobCompletionIndexAnnotation] != "2" || p.Annotations[batchv1.JobIndexFailureCountAnnotation] != "1" {
		t.Errorf("newPod(index 2) = %s %s %v %v", p.GenerateName, p.Spec.Hostname, p.Labels, p.Annotations)
	}
	if !hasTrackingFinalizer(p) || len(p.OwnerReferences) != 1 || p.OwnerReferences[0].UID != j.UID || !*p.OwnerReferences[0].Controller {
		t.Errorf("newPod: finalizers %v owners %v", p.Finalizers, p.OwnerReferences)
	}
	if j.Spec.Template.Labels[batchv1.JobCompletionIndexAnnotation] != "" {
		t.Error("newPod changed the job's template")
	}
	if got := generateNameWithIndex(string(make([]byte, 60)), 12); len(got)+5 > 63 {
		t.Errorf("generateNameWithIndex(60 chars, 12) = %d chars, too long for a pod name", len(got))
	}
}
