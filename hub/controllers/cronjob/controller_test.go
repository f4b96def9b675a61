package cronjob_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	metadatafake "k8s.io/client-go/metadata/fake"
	"k8s.io/client-go/tools/record"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/outpost-mesh/outpost/hub/controllers"
	"github.com/outpost-mesh/outpost/hub/controllers/cronjob"
	"github.com/outpost-mesh/outpost/hub/hubd"
	"github.com/outpost-mesh/outpost/internal/testlog"
	"github.com/outpost-mesh/outpost/internal/wait"
	"github.com/outpost-mesh/outpost/test/hubtest"
)

// run runs the controller with client and clk until the test ends.
func run(t *testing.T, c controllers.Context) {
	t.Helper()
	c.Informers = informers.NewSharedInformerFactory(c.Client, 0)
	c.Logger = testlog.New(t, slog.LevelInfo)
	if c.Events == nil {
		events := record.NewBroadcaster()
		events.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.Client.CoreV1().Events("")})
		t.Cleanup(events.Shutdown)
		c.Events = func(component string) record.EventRecorder {
			return events.NewRecorder(scheme.Scheme, corev1.EventSource{Component: component})
		}
	}
	cc, err := cronjob.New(c)
	if err != nil {
		t.Fatal(err)
	}
	bg := wait.Start(t, 30*time.Second, "cronjob controller Run", cc.Run)
	stop := make(chan struct{})
	c.Informers.Start(stop)
	t.Cleanup(func() {
		if err := bg.Stop(); err != nil {
			t.Errorf("Run = %v", err)
		}
		close(stop)
		c.Informers.Shutdown()
	})
}

func everyMinute(name string) *batchv1.CronJob {
	return &batchv1.CronJob{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: batchv1.CronJobSpec{
			Schedule:          "* * * * *",
			ConcurrencyPolicy: batchv1.ForbidConcurrent,
			JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers:    []corev1.Container{{Name: "main", Image: "busybox"}},
			}}}},
		},
	}
}

func jobsOf(t *testing.T, client kubernetes.Interface) []batchv1.Job {
	t.Helper()
	jobs, err := client.BatchV1().Jobs("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return jobs.Items
}

// TestFiresOnFakeClock runs a cronjob on the fake clientset: nothing runs
// until the fake clock reaches the next minute, then the job does.
func TestFiresOnFakeClock(t *testing.T) {
	t0 := time.Date(2025, 3, 1, 10, 0, 30, 0, time.UTC)
	clk := testingclock.NewFakeClock(t0)
	cj := everyMinute("tick")
	cj.CreationTimestamp = metav1.NewTime(t0)
	cj.UID = "tick-uid"
	cj.Spec.Suspend = new(false)
	client := fake.NewClientset(cj)
	run(t, controllers.Context{Client: client, Metadata: metadatafake.NewSimpleMetadataClient(scheme.Scheme), Clock: clk,
		Events: func(string) record.EventRecorder { return record.NewFakeRecorder(100) }})

	// The controller waits on the clock for the next minute.
	wait.For(t, 10*time.Second, "controller waiting on the clock", func() (bool, string) {
		return clk.HasWaiters(), "no timers"
	})
	if jobs := jobsOf(t, client); len(jobs) != 0 {
		t.Fatalf("jobs before the schedule: %v", jobs)
	}
	clk.Step(30 * time.Second)
	want := fmt.Sprintf("tick-%d", t0.Add(30*time.Second).Unix()/60)
	wait.For(t, 10*time.Second, "job created at 10:01", func() (bool, string) {
		jobs := jobsOf(t, client)
		return len(jobs) == 1 && jobs[0].Name == want, fmt.Sprintf("%d jobs", len(jobs))
	})
	wait.For(t, 10*time.Second, "cronjob status", func() (bool, string) {
		got, err := client.BatchV1().CronJobs("default").Get(context.Background(), "tick", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		st := got.Status
		return len(st.Active) == 1 && st.Active[0].Name == want && st.LastScheduleTime != nil &&
			st.LastScheduleTime.Time.Equal(t0.Add(30*time.Second)), fmt.Sprintf("%+v", st)
	})
	// Forbid: a minute later nothing new runs while the first job does.
	clk.Step(time.Minute)
	wait.For(t, 10*time.Second, "controller waiting again", func() (bool, string) { return clk.HasWaiters(), "" })
	if jobs := jobsOf(t, client); len(jobs) != 1 {
		t.Errorf("%d jobs under Forbid with one active, want 1", len(jobs))
	}
}

// TestFiresOnRealHub runs a cronjob through a real hub with the
// controller on a fake clock: the job appears once the clock passes the
// next minute, and its completion is seen.
func TestFiresOnRealHub(t *testing.T) {
	h := hubtest.Start(t, func(c *hubd.Config) { c.Controllers = false })
	ctx := context.Background()
	clk := testingclock.NewFakeClock(time.Now())
	run(t, controllers.Context{Client: h.Client, Metadata: h.Metadata, Clock: clk})
	cj, err := h.Client.BatchV1().CronJobs("default").Create(ctx, everyMinute("tick"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	clk.Step(61 * time.Second)
	var j batchv1.Job
	wait.For(t, 20*time.Second, "job created", func() (bool, string) {
		jobs := jobsOf(t, h.Client)
		if len(jobs) == 0 {
			return false, "no jobs"
		}
		j = jobs[0]
		return true, ""
	})
	var got *batchv1.CronJob
	wait.For(t, 20*time.Second, "cronjob status", func() (bool, string) {
		var err error
		if got, err = h.Client.BatchV1().CronJobs("default").Get(ctx, cj.Name, metav1.GetOptions{}); err != nil {
			return false, err.Error()
		}
		return got.Status.LastScheduleTime != nil, fmt.Sprintf("%+v", got.Status)
	})
	sched := got.Status.LastScheduleTime
	if sched == nil || j.Name != fmt.Sprintf("tick-%d", sched.Unix()/60) || !metav1.IsControlledBy(&j, cj) ||
		j.Annotations[batchv1.CronJobScheduledTimestampAnnotation] != sched.UTC().Format(time.RFC3339) {
		t.Fatalf("job %s %v %v for cronjob status %+v", j.Name, j.OwnerReferences, j.Annotations, got.Status)
	}
	if len(got.Status.Active) != 1 || got.Status.Active[0].UID != j.UID {
		t.Errorf("active = %v, want the job", got.Status.Active)
	}

	// The job completes (as the job controller would say).
	now := metav1.NewTime(clk.Now())
	j.Status = batchv1.JobStatus{StartTime: &now, CompletionTime: &now, Succeeded: 1, Conditions: []batchv1.JobCondition{
		{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now},
	}}
	if _, err := h.Client.BatchV1().Jobs("default").UpdateStatus(ctx, &j, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 20*time.Second, "completion seen", func() (bool, string) {
		got, err := h.Client.BatchV1().CronJobs("default").Get(ctx, cj.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(got.Status.Active) == 0 && got.Status.LastSuccessfulTime != nil, fmt.Sprintf("%+v", got.Status)
	})
	for _, reason := range []string{"SuccessfulCreate", "SawCompletedJob"} {
		wait.For(t, 10*time.Second, reason+" event", func() (bool, string) {
			evs, err := h.Client.CoreV1().Events("default").List(ctx, metav1.ListOptions{
				FieldSelector: fields.OneTermEqualSelector("involvedObject.name", cj.Name).String()})
			if err != nil {
				return false, err.Error()
			}
			for _, e := range evs.Items {
				if e.Reason == reason {
					return true, ""
				}
			}
			return false, fmt.Sprintf("%d events", len(evs.Items))
		})
	}
}
