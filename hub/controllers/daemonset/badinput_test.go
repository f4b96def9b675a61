package daemonset

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	metafake "k8s.io/client-go/metadata/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/outpost-mesh/outpost/hub/controllers"
	"github.com/outpost-mesh/outpost/internal/testlog"
	"github.com/outpost-mesh/outpost/internal/wait"
)

// TestRefusedPodsAreRetriedByTheRateLimiter: pods the API refuses give a
// FailedCreate event and the ReplicaFailure condition, one attempt per
// sync (slow start), and retries once the rate limiter's delay has passed
// on the controller's clock: no hot loop.
func TestRefusedPodsAreRetriedByTheRateLimiter(t *testing.T) {
	ds := daemonSet()
	ds.Generation = 1
	client := fake.NewClientset(ds, node("n1"), node("n2"), node("n3"))
	var attempts atomic.Int32
	client.PrependReactor("create", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		attempts.Add(1)
		return true, nil, apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, "", field.ErrorList{field.Invalid(field.NewPath("spec", "containers").Index(0).Child("image"), "", "must be set")})
	})
	clk := clocktesting.NewFakeClock(t0)
	recorder := record.NewFakeRecorder(100)
	factory := informers.NewSharedInformerFactory(client, 0)
	c, err := New(controllers.Context{
		Client: client, Metadata: metafake.NewSimpleMetadataClient(runtime.NewScheme()), Informers: factory,
		Events: func(string) record.EventRecorder { return recorder },
		Clock:  clk, Logger: testlog.New(t, slog.LevelInfo),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	bg := wait.Start(t, 10*time.Second, "controller", c.Run)
	factory.Start(ctx.Done())
	defer func() {
		bg.Stop()
		cancel()
		factory.Shutdown()
	}()

	status := func() appsv1.DaemonSetStatus {
		d, err := client.AppsV1().DaemonSets("default").Get(ctx, "agent", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return d.Status
	}
	wait.For(t, 10*time.Second, "the ReplicaFailure condition", func() (bool, string) {
		s := status()
		return len(s.Conditions) == 1 && s.Conditions[0].Type == conditionReplicaFailure && s.Conditions[0].Reason == reasonFailedCreate, s.String()
	})
	select {
	case e := <-recorder.Events:
		if !strings.HasPrefix(e, "Warning FailedCreate Error creating:") {
			t.Errorf("event %q, want Warning FailedCreate Error creating: ...", e)
		}
	default:
		t.Errorf("no FailedCreate event")
	}
	// The set is synced once on its creation, and again for the events
	// of its own status write and revision; slow start makes one attempt
	// of each, not one per node.
	if n := attempts.Load(); n > 3 {
		t.Fatalf("%d pod creations for 3 syncs, want at most 3 (slow start)", n)
	}
	// Further retries wait for the rate limiter's delay on the
	// controller's clock.
	before := attempts.Load()
	clk.Step(time.Second)
	wait.For(t, 10*time.Second, "a retry once the delay has passed", func() (bool, string) {
		return attempts.Load() > before, "no retry"
	})
}
