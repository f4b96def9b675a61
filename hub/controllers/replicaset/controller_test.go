package replicaset

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/outpost-mesh/outpost/hub/controllers"
	"github.com/outpost-mesh/outpost/internal/testlog"
)

// fakeShell is a Controller on a fake clientset whose informers are not
// running: the test fills their caches, as a lagging watch would.
type fakeShell struct {
	c       *Controller
	client  *fake.Clientset
	events  *record.FakeRecorder
	mu      sync.Mutex
	creates int
	deletes []string
}

// newFakeShell returns a shell whose pod creations fail from the failAt-th
// on (0: never).
func newFakeShell(t *testing.T, failAt int, objs ...runtime.Object) *fakeShell {
	t.Helper()
	f := &fakeShell{client: fake.NewClientset(objs...), events: record.NewFakeRecorder(1000)}
	f.client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.creates++
		if failAt > 0 && f.creates >= failAt {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", fmt.Errorf("exceeded quota: pods=%d", f.creates))
		}
		p := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
		p.Name = fmt.Sprintf("%s%d", p.GenerateName, f.creates)
		return false, nil, nil
	})
	f.client.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.deletes = append(f.deletes, a.(k8stesting.DeleteAction).GetName())
		return false, nil, nil
	})
	c, err := New(controllers.Context{
		Client:    f.client,
		Metadata:  metadatafake.NewSimpleMetadataClient(runtime.NewScheme()),
		Informers: informers.NewSharedInformerFactory(f.client, 0),
		Events:    func(string) record.EventRecorder { return f.events },
		Clock:     clocktesting.NewFakeClock(t0),
		Logger:    testlog.New(t, slog.LevelInfo),
	})
	if err != nil {
		t.Fatal(err)
	}
	c.queue = workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	t.Cleanup(c.queue.ShutDown)
	f.c = c
	for _, o := range objs {
		switch o := o.(type) {
		case *appsv1.ReplicaSet:
			c.rsInf.GetIndexer().Add(o)
		case *corev1.Pod:
			c.podInf.GetIndexer().Add(o)
		}
	}
	return f
}

func (f *fakeShell) drainEvents() []string {
	var out []string
	for {
		select {
		case e := <-f.events.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func (f *fakeShell) pods(t *testing.T) []corev1.Pod {
	t.Helper()
	l, err := f.client.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l.Items
}

func TestSlowStart(t *testing.T) {
	rs := testRS(7)
	f := newFakeShell(t, 3, rs) // the 3rd creation fails
	done, err := f.c.createPods(context.Background(), rs, 7)
	// Batches 1, 2, 4: the second batch has one failure, so the third is
	// never tried.
	if done != 2 || err == nil || f.creates != 3 {
		t.Errorf("createPods(7) with the 3rd refused = %d created, err %v, %d tried; want 2, an error, 3", done, err, f.creates)
	}
	var failed, created int
	for _, e := range f.drainEvents() {
		switch {
		case strings.HasPrefix(e, "Warning FailedCreate Error creating: "):
			failed++
		case strings.HasPrefix(e, "Normal SuccessfulCreate Created pod: web-abc-"):
			created++
		default:
			t.Errorf("unexpected event %q", e)
		}
	}
	if failed != 1 || created != 2 {
		t.Errorf("events: %d FailedCreate, %d SuccessfulCreate; want 1, 2", failed, created)
	}
}

func TestSyncCreatesOnceDespiteLag(t *testing.T) {
	rs := testRS(3)
	f := newFakeShell(t, 0, rs)
	ctx := context.Background()
	const key = "default/web-abc"
	if err := f.c.sync(ctx, key); err != nil {
		t.Fatal(err)
	}
	// The pod cache has not seen them: the expectations hold the next sync.
	if err := f.c.sync(ctx, key); err != nil {
		t.Fatal(err)
	}
	pods := f.pods(t)
	if f.creates != 3 || len(pods) != 3 {
		t.Fatalf("two syncs with a lagging cache: %d creations, %d pods; want 3, 3", f.creates, len(pods))
	}
	for i := range pods {
		p := &pods[i]
		if ref := metav1.GetControllerOf(p); ref == nil || ref.UID != rs.UID {
			t.Errorf("pod %s controller = %+v, want %s", p.Name, ref, rs.Name)
		}
		f.c.podInf.GetIndexer().Add(p)
		f.c.addPod(p)
	}
	if !f.c.exp.Satisfied(key) {
		t.Fatalf("expectations unsatisfied after all 3 pods were seen")
	}
	if err := f.c.sync(ctx, key); err != nil {
		t.Fatal(err)
	}
	if f.creates != 3 {
		t.Errorf("sync with 3 pods seen: %d creations in all, want 3", f.creates)
	}
	got, err := f.client.AppsV1().ReplicaSets("default").Get(ctx, rs.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Replicas != 3 || got.Status.FullyLabeledReplicas != 3 || got.Status.ObservedGeneration != rs.Generation {
		t.Errorf("status = %+v, want 3 replicas, fully labeled, generation observed", got.Status)
	}
}

func TestSyncDeletesNotReadyFirst(t *testing.T) {
	rs := testRS(2)
	a := pod("a", ownedBy(rs.UID), ready(t0.Add(-time.Hour)))
	b := pod("b", ownedBy(rs.UID))
	c := pod("c", ownedBy(rs.UID), ready(t0.Add(-time.Hour)))
	f := newFakeShell(t, 0, rs, a, b, c)
	if err := f.c.sync(context.Background(), "default/web-abc"); err != nil {
		t.Fatal(err)
	}
	if strings.Join(f.deletes, ",") != "b" {
		t.Errorf("deleted %v, want [b], the not ready one", f.deletes)
	}
	if evs := f.drainEvents(); len(evs) != 1 || evs[0] != "Normal SuccessfulDelete Deleted pod: b" {
		t.Errorf("events = %q, want the deletion of b", evs)
	}
	if f.c.exp.Satisfied("default/web-abc") {
		t.Errorf("expectations satisfied before the deletion was seen")
	}
	f.c.deletePod(b)
	if !f.c.exp.Satisfied("default/web-abc") {
		t.Errorf("expectations unsatisfied after the deletion was seen")
	}
}

func TestSyncReportsFailure(t *testing.T) {
	rs := testRS(3)
	f := newFakeShell(t, 1, rs) // every creation refused
	err := f.c.sync(context.Background(), "default/web-abc")
	if err == nil || f.creates != 1 {
		t.Fatalf("sync with creations refused = %v after %d tries, want an error after 1", err, f.creates)
	}
	got, gerr := f.client.AppsV1().ReplicaSets("default").Get(context.Background(), rs.Name, metav1.GetOptions{})
	if gerr != nil {
		t.Fatal(gerr)
	}
	c := condition(got.Status.Conditions, appsv1.ReplicaSetReplicaFailure)
	if c == nil || c.Reason != FailedCreate || !strings.Contains(c.Message, "exceeded quota") {
		t.Errorf("ReplicaFailure condition = %+v, want FailedCreate with the error", c)
	}
	if !f.c.exp.Satisfied("default/web-abc") {
		t.Errorf("expectations still wait for creations that failed")
	}
}

func TestSyncDeletedRSForgetsExpectations(t *testing.T) {
	f := newFakeShell(t, 0)
	f.c.exp.ExpectCreations("default/gone", 3)
	if err := f.c.sync(context.Background(), "default/gone"); err != nil {
		t.Fatal(err)
	}
	if !f.c.exp.Satisfied("default/gone") {
		t.Errorf("a deleted ReplicaSet's expectations are kept")
	}
}
