package statefulset_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/outpost-mesh/outpost/hub/controllers"
	"github.com/outpost-mesh/outpost/hub/controllers/statefulset"
	"github.com/outpost-mesh/outpost/hub/hubd"
	"github.com/outpost-mesh/outpost/internal/testlog"
	"github.com/outpost-mesh/outpost/internal/wait"
	"github.com/outpost-mesh/outpost/test/hubtest"
)

// runController runs a statefulset controller against h until the test
// ends.
func runController(t *testing.T, h *hubtest.Hub) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	factory := informers.NewSharedInformerFactory(h.Client, 0)
	events := record.NewBroadcaster(record.WithContext(ctx))
	events.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: h.Client.CoreV1().Events("")})
	t.Cleanup(events.Shutdown)
	c, err := statefulset.New(controllers.Context{
		Client:    h.Client,
		Metadata:  h.Metadata,
		Informers: factory,
		Events: func(component string) record.EventRecorder {
			return events.NewRecorder(scheme.Scheme, corev1.EventSource{Component: component})
		},
		Clock:  clock.RealClock{},
		Logger: testlog.New(t, slog.LevelInfo),
	})
	if err != nil {
		t.Fatal(err)
	}
	bg := wait.Start(t, 30*time.Second, "statefulset controller", c.Run)
	factory.Start(ctx.Done())
	t.Cleanup(func() {
		if err := bg.Stop(); err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
		cancel()
		factory.Shutdown()
	})
}

func TestStatefulSetOnARealHub(t *testing.T) {
	h := hubtest.Start(t, func(c *hubd.Config) { c.Controllers = false })
	ctx := context.Background()
	if _, err := h.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	runController(t, h)
	pods := h.Client.CoreV1().Pods("default")

	set := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "default"},
		Spec: appsv1.StatefulSetSpec{
			Replicas:    new(int32(3)),
			ServiceName: "db",
			Selector:    &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "db"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "db", Image: "postgres:16"}}},
			},
		},
	}
	// Claim templates are refused until the hub has storage.
	withClaims := set.DeepCopy()
	withClaims.Spec.VolumeClaimTemplates = []corev1.PersistentVolumeClaim{{
		ObjectMeta: metav1.ObjectMeta{Name: "data"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}}
	_, err := h.Client.AppsV1().StatefulSets("default").Create(ctx, withClaims, metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.volumeClaimTemplates: Forbidden") || !strings.Contains(err.Error(), "not supported until the hub has storage") {
		t.Fatalf("create with volumeClaimTemplates = %v, want 422 spec.volumeClaimTemplates: Forbidden", err)
	}

	if _, err := h.Client.AppsV1().StatefulSets("default").Create(ctx, set, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	names := func() []string {
		list, err := pods.List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, p := range list.Items {
			out = append(out, p.Name)
		}
		slices.Sort(out)
		return out
	}
	// makeReady plays scheduler and kubelet for one pod.
	makeReady := func(name string) {
		t.Helper()
		if err := pods.Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: name}, Target: corev1.ObjectReference{Kind: "Node", Name: "n1"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
		if _, err := pods.UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	for i, want := range []string{"db-0", "db-1", "db-2"} {
		wait.For(t, 30*time.Second, want+" created", func() (bool, string) {
			got := names()
			if len(got) > i+1 {
				t.Fatalf("pods %v before %s was Ready", got, got[i])
			}
			return len(got) == i+1 && got[i] == want, fmt.Sprintf("pods %v", got)
		})
		p, err := pods.Get(ctx, want, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Labels[appsv1.StatefulSetPodNameLabel] != want || p.Labels[appsv1.PodIndexLabel] != fmt.Sprint(i) || p.Spec.Hostname != want || p.Spec.Subdomain != "db" {
			t.Errorf("%s: labels %v, hostname %q, subdomain %q", want, p.Labels, p.Spec.Hostname, p.Spec.Subdomain)
		}
		// Once the controller has seen it (its status counts it), it
		// still makes no next pod, since this one is not Ready.
		wait.For(t, 30*time.Second, "status counting "+want, func() (bool, string) {
			s, err := h.Client.AppsV1().StatefulSets("default").Get(ctx, "db", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return s.Status.Replicas == int32(i+1), fmt.Sprintf("status %+v", s.Status)
		})
		if got := names(); len(got) != i+1 {
			t.Fatalf("pods %v while %s is not Ready, want only up to it", got, want)
		}
		makeReady(want)
	}
	wait.For(t, 30*time.Second, "status of 3 ready replicas", func() (bool, string) {
		s, err := h.Client.AppsV1().StatefulSets("default").Get(ctx, "db", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		st := s.Status
		return st.ObservedGeneration == s.Generation && st.Replicas == 3 && st.ReadyReplicas == 3 && st.AvailableReplicas == 3 &&
			st.UpdatedReplicas == 3 && st.CurrentReplicas == 3 && st.CurrentRevision != "" && st.CurrentRevision == st.UpdateRevision, fmt.Sprintf("status %+v", st)
	})
	wait.For(t, 30*time.Second, "the events", func() (bool, string) {
		evs, err := h.Client.CoreV1().Events("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		var msgs []string
		for _, e := range evs.Items {
			msgs = append(msgs, e.Reason+": "+e.Message)
		}
		return slices.Contains(msgs, "SuccessfulCreate: create Pod db-2 in StatefulSet db successful"), strings.Join(msgs, "; ")
	})
}
