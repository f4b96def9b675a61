package deployment

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"go.uber.org/goleak"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/outpost-mesh/outpost/hub/controllers"
	"github.com/outpost-mesh/outpost/internal/testlog"
	"github.com/outpost-mesh/outpost/internal/wait"
)

// TestRunStops checks that Run works the queue and, once its context
// ends, returns having stopped everything it started.
func TestRunStops(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	client := fake.NewClientset(deploy(3, "", ""))
	factory := informers.NewSharedInformerFactory(client, 0)
	events := record.NewFakeRecorder(100)
	c, err := New(controllers.Context{
		Client:    client,
		Metadata:  metadatafake.NewSimpleMetadataClient(runtime.NewScheme()),
		Informers: factory,
		Events:    func(string) record.EventRecorder { return events },
		Clock:     clock.RealClock{},
		Logger:    testlog.New(t, slog.LevelInfo),
	})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	factory.Start(stop)
	run := wait.Start(t, 10*time.Second, "Run", c.Run)
	wait.For(t, 10*time.Second, "replica set created", func() (bool, string) {
		l, err := client.AppsV1().ReplicaSets("default").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(l.Items) == 1 && *l.Items[0].Spec.Replicas == 3, ""
	})
	if err := run.Stop(); err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
	close(stop)
	factory.Shutdown()
	select {
	case e := <-events.Events:
		if want := "Normal ScalingReplicaSet Scaled up replica set web-"; len(e) < len(want) || e[:len(want)] != want {
			t.Errorf("first event %q, want %q...", e, want)
		}
	default:
		t.Errorf("no ScalingReplicaSet event")
	}
}
