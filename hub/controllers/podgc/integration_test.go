package podgc_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/outpost-mesh/outpost/hub/controllers"
	"github.com/outpost-mesh/outpost/hub/controllers/podgc"
	"github.com/outpost-mesh/outpost/hub/hubd"
	"github.com/outpost-mesh/outpost/internal/testlog"
	"github.com/outpost-mesh/outpost/internal/wait"
	"github.com/outpost-mesh/outpost/test/hubtest"
)

func startCollector(t *testing.T, cfg podgc.Config) *hubtest.Hub {
	t.Helper()
	h := hubtest.Start(t, func(c *hubd.Config) { c.Controllers = false })
	inf := informers.NewSharedInformerFactory(h.Client, 0)
	events := record.NewBroadcaster()
	t.Cleanup(events.Shutdown)
	events.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: h.Client.CoreV1().Events("")})
	gc, err := podgc.New(controllers.Context{
		Client: h.Client, Metadata: h.Metadata, Informers: inf, Clock: clock.RealClock{},
		Events: func(component string) record.EventRecorder {
			return events.NewRecorder(scheme.Scheme, corev1.EventSource{Component: component})
		},
		Logger: testlog.New(t, slog.LevelInfo),
	}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	bg := wait.Start(t, 30*time.Second, "podgc Run", gc.Run)
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

func newPod(name, node string, finalizers ...string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Finalizers: finalizers},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
}

// TestPodGC: against a real hub, pods of a deleted node, terminated pods
// over the threshold and unbound terminating pods are collected; pods of
// live nodes stay.
func TestPodGC(t *testing.T) {
	cfg := podgc.DefaultConfig()
	cfg.TerminatedPodThreshold = 2
	cfg.Period = 100 * time.Millisecond
	cfg.Quarantine = 300 * time.Millisecond
	h := startCollector(t, cfg)
	ctx := context.Background()
	pods := h.Client.CoreV1().Pods("default")
	create := func(p *corev1.Pod) *corev1.Pod {
		t.Helper()
		p, err := pods.Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	gone := func(name string) {
		t.Helper()
		wait.For(t, 30*time.Second, "pod "+name+" collected", func() (bool, string) {
			p, err := pods.Get(ctx, name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), fmt.Sprintf("%v %v", err, p.Status.Phase)
		})
	}
	if _, err := h.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	create(newPod("on-n1", "n1"))
	create(newPod("on-ghost", "ghost"))
	gone("on-ghost")
	if _, err := pods.Get(ctx, "on-n1", metav1.GetOptions{}); err != nil {
		t.Fatalf("pod of a live node: %v, want it kept", err)
	}
	if err := h.Client.CoreV1().Nodes().Delete(ctx, "n1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	gone("on-n1")

	// Terminated pods over the threshold of 2: the oldest goes.
	for _, name := range []string{"t-a", "t-b", "t-c"} {
		p := create(newPod(name, ""))
		p.Status.Phase = corev1.PodSucceeded
		if _, err := pods.UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	gone("t-a")
	for _, name := range []string{"t-b", "t-c"} {
		if _, err := pods.Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Errorf("terminated pod %s within the threshold: %v, want it kept", name, err)
		}
	}

	// An unbound pod held by a finalizer while deleted: no kubelet will
	// finish it, so the collector marks it Failed and force-deletes it.
	create(newPod("stuck", "", "example.com/hold"))
	if err := pods.Delete(ctx, "stuck", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 30*time.Second, "unbound terminating pod marked Failed", func() (bool, string) {
		p, err := pods.Get(ctx, "stuck", metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodFailed, fmt.Sprintf("%v", err)
	})
	p, err := pods.Get(ctx, "stuck", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Finalizers = nil
	if _, err := pods.Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	gone("stuck")
}
