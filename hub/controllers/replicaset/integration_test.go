package replicaset_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/outpost-mesh/outpost/hub/controllers"
	"github.com/outpost-mesh/outpost/hub/controllers/replicaset"
	"github.com/outpost-mesh/outpost/hub/hubd"
	"github.com/outpost-mesh/outpost/internal/testlog"
	"github.com/outpost-mesh/outpost/internal/wait"
	"github.com/outpost-mesh/outpost/test/hubtest"
)

// onlyOurs keeps the hub from running its own controllers, so that the
// ones under test are the only ones acting.
func onlyOurs(c *hubd.Config) { c.Controllers = false }

func startController(t *testing.T, h *hubtest.Hub) {
	t.Helper()
	factory := informers.NewSharedInformerFactory(h.Client, 0)
	bc := record.NewBroadcaster()
	bc.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: h.Client.CoreV1().Events("")})
	c, err := replicaset.New(controllers.Context{
		Client:    h.Client,
		Metadata:  h.Metadata,
		Informers: factory,
		Events: func(component string) record.EventRecorder {
			return bc.NewRecorder(scheme.Scheme, corev1.EventSource{Component: component})
		},
		Clock:  clock.RealClock{},
		Logger: testlog.New(t, slog.LevelInfo),
	})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	factory.Start(stop)
	run := wait.Start(t, 30*time.Second, "replicaset Run", c.Run)
	t.Cleanup(func() {
		if err := run.Stop(); err != nil {
			t.Errorf("replicaset Run = %v, want nil", err)
		}
		close(stop)
		factory.Shutdown()
		bc.Shutdown()
	})
}

func orphan(name string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: labels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}
}

func podsOf(t *testing.T, h *hubtest.Hub, sel string) (owned map[string]types.UID, all int) {
	t.Helper()
	l, err := h.Client.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		t.Fatal(err)
	}
	owned = map[string]types.UID{}
	for i := range l.Items {
		p := &l.Items[i]
		if p.DeletionTimestamp != nil {
			continue
		}
		all++
		if ref := metav1.GetControllerOf(p); ref != nil {
			owned[p.Name] = ref.UID
		} else {
			owned[p.Name] = ""
		}
	}
	return owned, all
}

func TestAdoptReleaseScale(t *testing.T) {
	h := hubtest.Start(t, onlyOurs)
	startController(t, h)
	ctx := context.Background()
	pods := h.Client.CoreV1().Pods("default")
	labels := map[string]string{"app": "cache"}
	if _, err := pods.Create(ctx, orphan("stray", labels), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rs, err := h.Client.AppsV1().ReplicaSets("default").Create(ctx, &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: "cache", Namespace: "default"},
		Spec: appsv1.ReplicaSetSpec{
			Replicas: ptr.To(int32(3)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "redis"}}},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The stray pod is adopted and counts: two more are made.
	wait.For(t, 20*time.Second, "adoption", func() (bool, string) {
		owned, n := podsOf(t, h, "app=cache")
		for _, uid := range owned {
			if uid != rs.UID {
				return false, fmt.Sprint(owned)
			}
		}
		return n == 3 && owned["stray"] == rs.UID, fmt.Sprint(owned)
	})

	// Relabelled out of the selector, it is released and replaced.
	patch := `{"metadata":{"labels":{"app":"elsewhere"}}}`
	if _, err := pods.Patch(ctx, "stray", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 20*time.Second, "release", func() (bool, string) {
		p, err := pods.Get(ctx, "stray", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		_, n := podsOf(t, h, "app=cache")
		return len(p.OwnerReferences) == 0 && n == 3, fmt.Sprintf("stray refs %v, %d cache pods", p.OwnerReferences, n)
	})

	// Scaled to 1: two deleted, status follows.
	if _, err := h.Client.AppsV1().ReplicaSets("default").Patch(ctx, "cache", types.MergePatchType, []byte(`{"spec":{"replicas":1}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 20*time.Second, "scale down", func() (bool, string) {
		_, n := podsOf(t, h, "app=cache")
		got, err := h.Client.AppsV1().ReplicaSets("default").Get(ctx, "cache", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		st := got.Status
		return n == 1 && st.Replicas == 1 && st.ObservedGeneration == got.Generation, fmt.Sprintf("%d pods, status %+v", n, st)
	})
	wait.For(t, 10*time.Second, "events", func() (bool, string) {
		l, err := h.Client.CoreV1().Events("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		var reasons []string
		seen := map[string]bool{}
		for _, e := range l.Items {
			if e.InvolvedObject.Name == "cache" && e.Source.Component == "replicaset-controller" {
				seen[e.Reason] = true
				reasons = append(reasons, e.Reason+": "+e.Message)
			}
		}
		return seen["SuccessfulCreate"] && seen["SuccessfulDelete"], strings.Join(reasons, "; ")
	})
}

func TestNoAdoptionWhileDeleting(t *testing.T) {
	h := hubtest.Start(t, onlyOurs)
	startController(t, h)
	ctx := context.Background()
	labels := map[string]string{"app": "doomed"}
	sets := h.Client.AppsV1().ReplicaSets("default")
	_, err := sets.Create(ctx, &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: "doomed", Namespace: "default", Finalizers: []string{"test.outpost.dev/hold"}},
		Spec: appsv1.ReplicaSetSpec{
			Replicas: ptr.To(int32(0)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "redis"}}},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := sets.Delete(ctx, "doomed", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sets.Patch(context.Background(), "doomed", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	})
	if _, err := h.Client.CoreV1().Pods("default").Create(ctx, orphan("stray", labels), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A change after the pod's creation, for the controller to show it
	// has synced since: its status is still written (observedGeneration),
	// but the pod stays an orphan.
	if _, err := sets.Patch(ctx, "doomed", types.MergePatchType, []byte(`{"spec":{"minReadySeconds":1}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 20*time.Second, "status of the deleted replicaset", func() (bool, string) {
		got, err := sets.Get(ctx, "doomed", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		// Marking it deleted bumped the generation too, as upstream.
		return got.DeletionTimestamp != nil && got.Generation == 3 && got.Status.ObservedGeneration == 3, fmt.Sprintf("generation %d, %+v", got.Generation, got.Status)
	})
	p, err := h.Client.CoreV1().Pods("default").Get(ctx, "stray", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.OwnerReferences) != 0 {
		t.Errorf("a ReplicaSet being deleted adopted %s: %v", p.Name, p.OwnerReferences)
	}
}
