package ttlafterfinished

import (
	"context"
	"log/slog"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	metadatafake "k8s.io/client-go/metadata/fake"
	"k8s.io/client-go/tools/record"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/outpost-mesh/outpost/hub/controllers"
	"github.com/outpost-mesh/outpost/internal/testlog"
	"github.com/outpost-mesh/outpost/internal/wait"
)

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

func finished(name string, ttl *int32, how batchv1.JobConditionType, at time.Time) *batchv1.Job {
	j := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)},
		Spec:       batchv1.JobSpec{TTLSecondsAfterFinished: ttl},
	}
	if how != "" {
		j.Status.Conditions = []batchv1.JobCondition{{Type: how, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(at)}}
	}
	return j
}

func TestTimeLeft(t *testing.T) {
	tests := []struct {
		name   string
		job    *batchv1.Job
		want   time.Duration
		wantOK bool
	}{
		{"no ttl", finished("a", nil, batchv1.JobComplete, t0), 0, false},
		{"running", finished("a", new(int32(10)), "", t0), 0, false},
		{"complete, waiting", finished("a", new(int32(100)), batchv1.JobComplete, t0.Add(-30*time.Second)), 70 * time.Second, true},
		{"failed, due", finished("a", new(int32(0)), batchv1.JobFailed, t0), 0, true},
		{"long past", finished("a", new(int32(5)), batchv1.JobComplete, t0.Add(-time.Hour)), 5*time.Second - time.Hour, true},
	}
	for _, tt := range tests {
		got, ok := timeLeft(tt.job, t0)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("timeLeft(%s) = %v, %v, want %v, %v", tt.name, got, ok, tt.want, tt.wantOK)
		}
	}
}

// TestDeletesAfterTTL runs the controller on a fake clock: the job stays
// until the clock passes its TTL, then it is deleted in the background.
func TestDeletesAfterTTL(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	client := fake.NewClientset(
		finished("done", new(int32(60)), batchv1.JobComplete, t0),
		finished("keep", nil, batchv1.JobComplete, t0),
	)
	inf := informers.NewSharedInformerFactory(client, 0)
	tc, err := New(controllers.Context{
		Client: client, Metadata: metadatafake.NewSimpleMetadataClient(scheme.Scheme), Informers: inf, Clock: clk,
		Events: func(string) record.EventRecorder { return record.NewFakeRecorder(10) },
		Logger: testlog.New(t, slog.LevelInfo),
	})
	if err != nil {
		t.Fatal(err)
	}
	bg := wait.Start(t, 10*time.Second, "ttl controller Run", tc.Run)
	stop := make(chan struct{})
	inf.Start(stop)
	t.Cleanup(func() { bg.Stop(); close(stop); inf.Shutdown() })

	exists := func(name string) bool {
		_, err := client.BatchV1().Jobs("default").Get(context.Background(), name, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return err == nil
	}
	// Wait for the controller to have queued the job for later.
	wait.For(t, 10*time.Second, "job queued for its TTL", func() (bool, string) {
		return tc.queue.Len() == 0 && clk.HasWaiters(), "not yet"
	})
	if !exists("done") {
		t.Fatal("job deleted before its TTL")
	}
	clk.Step(61 * time.Second)
	wait.For(t, 10*time.Second, "job deleted", func() (bool, string) { return !exists("done"), "still there" })
	if !exists("keep") {
		t.Error("job without a TTL deleted")
	}
	var policy *metav1.DeletionPropagation
	for _, a := range client.Actions() {
		if d, ok := a.(interface{ GetDeleteOptions() metav1.DeleteOptions }); ok && a.GetVerb() == "delete" {
			policy = d.GetDeleteOptions().PropagationPolicy
		}
	}
	if policy == nil || *policy != metav1.DeletePropagationBackground {
		t.Errorf("deleted with propagation %v, want Background", policy)
	}
}
