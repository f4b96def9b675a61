package replicaset

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	k8stesting "k8s.io/client-go/testing"
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
	client := fake.NewClientset(testRS(2))
	var n atomic.Int32
	client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		p := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
		p.Name = fmt.Sprintf("%s%d", p.GenerateName, n.Add(1)) // the fake does not generate names
		return false, nil, nil
	})
	factory := informers.NewSharedInformerFactory(client, 0)
	c, err := New(controllers.Context{
		Client:    client,
		Metadata:  metadatafake.NewSimpleMetadataClient(runtime.NewScheme()),
		Informers: factory,
		Events:    func(string) record.EventRecorder { return record.NewFakeRecorder(100) },
		Clock:     clock.RealClock{},
		Logger:    testlog.New(t, slog.LevelInfo),
	})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	factory.Start(stop)
	run := wait.Start(t, 10*time.Second, "Run", c.Run)
	wait.For(t, 10*time.Second, "pods created", func() (bool, string) {
		l, err := client.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(l.Items) == 2, ""
	})
	if err := run.Stop(); err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
	close(stop)
	factory.Shutdown()
}
