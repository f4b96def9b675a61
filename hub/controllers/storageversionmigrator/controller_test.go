package storageversionmigrator

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	svmv1 "k8s.io/api/storagemigration/v1"
	apiextensionsfake "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset/fake"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	fakediscovery "k8s.io/client-go/discovery/fake"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/outpost-mesh/outpost/hub/controllers"
	"github.com/outpost-mesh/outpost/internal/testlog"
	"github.com/outpost-mesh/outpost/internal/wait"
)

// TestFailsUnmigratable runs the controller on a fake API: a migration of
// a resource that is not served, past the grace for discovery, fails, and
// so does one of a resource without the verbs a migration needs, each
// with upstream's reason and message; one of an unserved resource still
// within the grace waits.
func TestFailsUnmigratable(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	old := metav1.NewTime(t0.Add(-2 * DiscoveryGrace))
	gone := migration(func(m *svmv1.StorageVersionMigration) {
		m.Name, m.CreationTimestamp = "gone", old
		m.Spec.Resource = metav1.GroupResource{Group: "none.outpost.dev", Resource: "nothings"}
	})
	readonly := migration(func(m *svmv1.StorageVersionMigration) {
		m.Name, m.CreationTimestamp = "readonly", old
		m.Spec.Resource = metav1.GroupResource{Group: "svm.outpost.dev", Resource: "readonlies"}
	})
	fresh := migration(func(m *svmv1.StorageVersionMigration) {
		m.Name, m.CreationTimestamp = "fresh", metav1.NewTime(t0)
		m.Spec.Resource = metav1.GroupResource{Group: "none.outpost.dev", Resource: "nothings"}
	})
	client := fake.NewClientset(gone, readonly, fresh)
	client.Discovery().(*fakediscovery.FakeDiscovery).Resources = []*metav1.APIResourceList{{
		GroupVersion: "svm.outpost.dev/v1",
		APIResources: []metav1.APIResource{{Name: "readonlies", Kind: "ReadOnly", Verbs: []string{"get", "list"}}},
	}}
	factory := informers.NewSharedInformerFactory(client, 0)
	c, err := New(controllers.Context{
		Client:     client,
		Metadata:   metadatafake.NewSimpleMetadataClient(runtime.NewScheme()),
		Dynamic:    dynamicfake.NewSimpleDynamicClient(runtime.NewScheme()),
		Extensions: apiextensionsfake.NewClientset(),
		Informers:  factory,
		Events:     func(string) record.EventRecorder { return record.NewFakeRecorder(10) },
		Clock:      clocktesting.NewFakeClock(t0),
		Logger:     testlog.New(t, slog.LevelInfo),
	})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	factory.Start(stop)
	run := wait.Start(t, 10*time.Second, "Run", c.Run)
	defer func() {
		if err := run.Stop(); err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
		close(stop)
		factory.Shutdown()
	}()
	svms := client.StoragemigrationV1().StorageVersionMigrations()
	failed := func(name, message string) {
		t.Helper()
		wait.For(t, 10*time.Second, name+" failed", func() (bool, string) {
			m, err := svms.Get(context.Background(), name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			f := meta.FindStatusCondition(m.Status.Conditions, string(svmv1.MigrationFailed))
			return f != nil && f.Status == metav1.ConditionTrue && f.Reason == ReasonFailed && strings.Contains(f.Message, message),
				fmt.Sprintf("%+v", m.Status)
		})
	}
	failed("gone", "resource does not exist in discovery")
	failed("readonly", "does not support discovery operations")
	// Synced by the same single worker before or between the two above,
	// the fresh one was requeued for later (a fake clock's later), not
	// failed.
	m, err := svms.Get(context.Background(), "fresh", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Status.Conditions) != 0 {
		t.Errorf("fresh migration of an unserved resource: status %+v, want none yet", m.Status)
	}
}
