package job_test

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
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/outpost-mesh/outpost/hub/controllers"
	"github.com/outpost-mesh/outpost/hub/controllers/job"
	"github.com/outpost-mesh/outpost/hub/hubd"
	"github.com/outpost-mesh/outpost/internal/testlog"
	"github.com/outpost-mesh/outpost/internal/wait"
	"github.com/outpost-mesh/outpost/test/hubtest"
)

// startController runs the job controller against a real hub until the
// test ends.
func startController(t *testing.T) *hubtest.Hub {
	t.Helper()
	h := hubtest.Start(t, func(c *hubd.Config) { c.Controllers = false })
	inf := informers.NewSharedInformerFactory(h.Client, 0)
	events := record.NewBroadcaster()
	events.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: h.Client.CoreV1().Events("")})
	t.Cleanup(events.Shutdown)
	c := controllers.Context{
		Client: h.Client, Metadata: h.Metadata, Informers: inf, Clock: clock.RealClock{},
		Events: func(component string) record.EventRecorder {
			return events.NewRecorder(scheme.Scheme, corev1.EventSource{Component: component})
		},
		Logger: testlog.New(t, slog.LevelInfo),
	}
	jm, err := job.New(c)
	if err != nil {
		t.Fatal(err)
	}
	bg := wait.Start(t, 30*time.Second, "job controller Run", jm.Run)
	stop := make(chan struct{})
	inf.Start(stop)
	t.Cleanup(func() {
		if err := bg.Stop(); err != nil {
			t.Errorf("Run = %v", err)
		}
		close(stop)
		inf.Shutdown()
	})
	return h
}

func newJob(name string, completions, parallelism, backoffLimit int32) *batchv1.Job {
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: batchv1.JobSpec{
			Completions:  &completions,
			Parallelism:  &parallelism,
			BackoffLimit: &backoffLimit,
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers:    []corev1.Container{{Name: "main", Image: "busybox"}},
			}},
		},
	}
}

func jobPods(t *testing.T, h *hubtest.Hub, j *batchv1.Job) []corev1.Pod {
	t.Helper()
	pods, err := h.Client.CoreV1().Pods(j.Namespace).List(context.Background(), metav1.ListOptions{LabelSelector: batchv1.JobNameLabel + "=" + j.Name})
	if err != nil {
		t.Fatal(err)
	}
	return pods.Items
}

// finish plays the kubelet: the pod ran to phase.
func finish(t *testing.T, h *hubtest.Hub, p corev1.Pod, phase corev1.PodPhase, code int32) {
	t.Helper()
	now := metav1.Now()
	p.ResourceVersion = "" // unconditional, as a kubelet's status report: the controller may have patched the pod meanwhile
	p.Status.Phase = phase
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", Image: "busybox", ImageID: "busybox",
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, StartedAt: now, FinishedAt: now}}}}
	if _, err := h.Client.CoreV1().Pods(p.Namespace).UpdateStatus(context.Background(), &p, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update status of pod %s: %v", p.Name, err)
	}
}

func condition(j *batchv1.Job, typ batchv1.JobConditionType) *batchv1.JobCondition {
	for i := range j.Status.Conditions {
		if c := &j.Status.Conditions[i]; c.Type == typ && c.Status == corev1.ConditionTrue {
			return c
		}
	}
	return nil
}

func hasEvent(t *testing.T, h *hubtest.Hub, j *batchv1.Job, reason string) (bool, string) {
	evs, err := h.Client.CoreV1().Events(j.Namespace).List(context.Background(), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.name", j.Name).String()})
	if err != nil {
		return false, err.Error()
	}
	var seen []string
	for _, e := range evs.Items {
		if e.Reason == reason {
			return true, ""
		}
		seen = append(seen, e.Reason)
	}
	return false, fmt.Sprintf("events %v", seen)
}

func TestJobRunsToComplete(t *testing.T) {
	h := startController(t)
	ctx := context.Background()
	j, err := h.Client.BatchV1().Jobs("default").Create(ctx, newJob("three", 3, 2, 6), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	done := map[string]bool{}
	wait.For(t, 30*time.Second, "job Complete", func() (bool, string) {
		got, err := h.Client.BatchV1().Jobs("default").Get(ctx, j.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if condition(got, batchv1.JobComplete) != nil {
			return true, ""
		}
		running := 0
		for _, p := range jobPods(t, h, j) {
			if p.Status.Phase == corev1.PodSucceeded || done[p.Name] {
				continue
			}
			running++
			if running > 2 {
				t.Fatalf("more than parallelism 2 pods running")
			}
			if len(p.OwnerReferences) != 1 || p.OwnerReferences[0].UID != j.UID || p.Labels[batchv1.ControllerUidLabel] != string(j.UID) {
				t.Fatalf("pod %s: owners %v labels %v, want the job's", p.Name, p.OwnerReferences, p.Labels)
			}
			finish(t, h, p, corev1.PodSucceeded, 0)
			done[p.Name] = true
		}
		return false, fmt.Sprintf("status %+v", got.Status)
	})
	got, err := h.Client.BatchV1().Jobs("default").Get(ctx, j.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st := got.Status; st.Succeeded != 3 || st.Active != 0 || st.CompletionTime == nil || st.StartTime == nil ||
		condition(got, batchv1.JobSuccessCriteriaMet) == nil || len(done) != 3 {
		t.Errorf("status = %+v after %d pods, want 3 succeeded, SuccessCriteriaMet and Complete", st, len(done))
	}
	for _, p := range jobPods(t, h, j) {
		if len(p.Finalizers) != 0 {
			t.Errorf("pod %s keeps finalizers %v after it was counted", p.Name, p.Finalizers)
		}
	}
	wait.For(t, 10*time.Second, "Completed event", func() (bool, string) { return hasEvent(t, h, j, "Completed") })
	if ok, why := hasEvent(t, h, j, "SuccessfulCreate"); !ok {
		t.Errorf("no SuccessfulCreate event: %s", why)
	}
}

func TestJobBackoffLimitExceeded(t *testing.T) {
	h := startController(t)
	ctx := context.Background()
	j, err := h.Client.BatchV1().Jobs("default").Create(ctx, newJob("fails", 1, 1, 0), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var failed string
	wait.For(t, 30*time.Second, "job Failed", func() (bool, string) {
		got, err := h.Client.BatchV1().Jobs("default").Get(ctx, j.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if c := condition(got, batchv1.JobFailed); c != nil {
			if c.Reason != batchv1.JobReasonBackoffLimitExceeded || got.Status.Failed != 1 || condition(got, batchv1.JobFailureTarget) == nil {
				t.Fatalf("Failed condition %+v, status %+v, want BackoffLimitExceeded after FailureTarget with 1 failed", c, got.Status)
			}
			return true, ""
		}
		for _, p := range jobPods(t, h, j) {
			if failed == "" && p.Status.Phase != corev1.PodFailed {
				finish(t, h, p, corev1.PodFailed, 1)
				failed = p.Name
			} else if p.Name != failed {
				t.Fatalf("pod %s created after the back-off limit of 0 was reached", p.Name)
			}
		}
		return false, fmt.Sprintf("status %+v", got.Status)
	})
	wait.For(t, 10*time.Second, "BackoffLimitExceeded event", func() (bool, string) { return hasEvent(t, h, j, "BackoffLimitExceeded") })
}
