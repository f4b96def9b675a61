package scheduler_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/outpost-mesh/outpost/hub/controllers"
	"github.com/outpost-mesh/outpost/hub/hubd"
	"github.com/outpost-mesh/outpost/hub/scheduler"
	"github.com/outpost-mesh/outpost/internal/testlog"
	"github.com/outpost-mesh/outpost/internal/wait"
	"github.com/outpost-mesh/outpost/test/hubtest"
)

// startScheduler runs a scheduler against the hub h until the test ends.
func startScheduler(t *testing.T, h *hubtest.Hub) {
	t.Helper()
	factory := informers.NewSharedInformerFactory(h.Client, 0)
	broadcaster := record.NewBroadcaster()
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: h.Client.CoreV1().Events("")})
	t.Cleanup(broadcaster.Shutdown)
	c := controllers.Context{
		Client:    h.Client,
		Metadata:  h.Metadata,
		Informers: factory,
		Events: func(component string) record.EventRecorder {
			return broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: component})
		},
		Clock:  clock.RealClock{},
		Logger: testlog.New(t, slog.LevelInfo),
	}
	s, err := scheduler.New(c)
	if err != nil {
		t.Fatal(err)
	}
	bg := wait.Start(t, 30*time.Second, "scheduler Run", s.Run)
	stop := make(chan struct{})
	factory.Start(stop)
	t.Cleanup(func() {
		if err := bg.Stop(); err != nil {
			t.Errorf("scheduler Run returned %v, want nil", err)
		}
		close(stop)
		factory.Shutdown()
	})
}

func createNode(t *testing.T, client kubernetes.Interface, name, cpu string) {
	t.Helper()
	ctx := context.Background()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		corev1.LabelHostname:        name,
		"topology.outpost.dev/site": "site-a",
	}}}
	n, err := client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create node %s: %v", name, err)
	}
	n.Status = corev1.NodeStatus{
		Capacity: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("4Gi"), corev1.ResourcePods: resource.MustParse("110"),
		},
		Allocatable: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("4Gi"), corev1.ResourcePods: resource.MustParse("110"),
		},
		Conditions: []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(),
		}},
	}
	if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update status of node %s: %v", name, err)
	}
}

func newPod(name, cpu string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "web", Image: "nginx",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}},
		}}},
	}
}

func TestSchedulesAgainstARealHub(t *testing.T) {
	h := hubtest.Start(t, func(c *hubd.Config) { c.Controllers = false })
	ctx := context.Background()
	pods := h.Client.CoreV1().Pods("default")
	startScheduler(t, h)
	for i := range 3 {
		createNode(t, h.Client, fmt.Sprintf("node-%d", i), "2")
	}

	// Six small pods spread over the three equal nodes, beside one the
	// user placed: the spread counts it too.
	for i := range 6 {
		if _, err := pods.Create(ctx, newPod(fmt.Sprintf("web-%d", i), "100m"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// A pod the user placed and one for another scheduler are left alone.
	own := newPod("placed", "100m")
	own.Spec.NodeName = "node-0"
	other := newPod("other", "100m")
	other.Spec.SchedulerName = "other-scheduler"
	for _, p := range []*corev1.Pod{own, other} {
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	wait.ForEvery(t, 50*time.Millisecond, 30*time.Second, "six pods bound", func() (bool, string) {
		list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			return false, err.Error()
		}
		for _, p := range list.Items {
			if p.Name != "other" && p.Spec.NodeName == "" {
				return false, p.Name + " not bound"
			}
		}
		return true, ""
	})
	list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil {
		t.Fatal(err)
	}
	perNode := map[string]int{}
	for _, p := range list.Items {
		switch p.Name {
		case "placed":
			if p.Spec.NodeName != "node-0" {
				t.Errorf("pod placed by the user moved to %q", p.Spec.NodeName)
			}
			perNode[p.Spec.NodeName]++
			continue
		case "other":
			if p.Spec.NodeName != "" {
				t.Errorf("pod of another scheduler bound to %q", p.Spec.NodeName)
			}
			continue
		}
		perNode[p.Spec.NodeName]++
	}
	least, most := 7, 0
	for i := range 3 {
		n := perNode[fmt.Sprintf("node-%d", i)]
		least, most = min(least, n), max(most, n)
	}
	if least < 2 || most-least > 1 {
		t.Errorf("pods per node = %v, want them spread evenly (2 or 3 each)", perNode)
	}
	wait.ForEvery(t, 50*time.Millisecond, 10*time.Second, "Scheduled event", func() (bool, string) {
		evs, err := h.Client.CoreV1().Events("default").List(ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("involvedObject.name", "web-0").String()})
		if err != nil {
			return false, err.Error()
		}
		for _, e := range evs.Items {
			if e.Reason == "Scheduled" && e.Type == corev1.EventTypeNormal && e.Source.Component == scheduler.Name {
				return true, ""
			}
		}
		return false, fmt.Sprintf("events: %v", evs.Items)
	})

	// A pod no node has room for stays pending, says why, and waits.
	if _, err := pods.Create(ctx, newPod("big", "3"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const wantMsg = "0/3 nodes are available: 3 Insufficient cpu."
	wait.ForEvery(t, 50*time.Millisecond, 10*time.Second, "PodScheduled=False", func() (bool, string) {
		p, err := pods.Get(ctx, "big", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled {
				if c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable && c.Message == wantMsg {
					return true, ""
				}
				return false, fmt.Sprintf("condition %+v", c)
			}
		}
		return false, "no PodScheduled condition"
	})
	wait.ForEvery(t, 50*time.Millisecond, 10*time.Second, "FailedScheduling event", func() (bool, string) {
		evs, err := h.Client.CoreV1().Events("default").List(ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("involvedObject.name", "big").String()})
		if err != nil {
			return false, err.Error()
		}
		for _, e := range evs.Items {
			if e.Reason == "FailedScheduling" && e.Type == corev1.EventTypeWarning && e.Message == wantMsg {
				return true, ""
			}
		}
		return false, fmt.Sprintf("events: %v", evs.Items)
	})
	if p, err := pods.Get(ctx, "big", metav1.GetOptions{}); err != nil || p.Spec.NodeName != "" {
		t.Fatalf("big pod: %v, node %q; want pending", err, p.Spec.NodeName)
	}

	// A node big enough joins: the pod is bound at once, well before the
	// five-minute flush, since the node's arrival wakes it (after at most
	// its one-second back-off).
	added := time.Now()
	createNode(t, h.Client, "node-big", "8")
	wait.For(t, 5*time.Second, "big pod bound after the node joined", func() (bool, string) {
		p, err := pods.Get(ctx, "big", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if p.Spec.NodeName != "node-big" {
			return false, fmt.Sprintf("on %q", p.Spec.NodeName)
		}
		return true, ""
	})
	t.Logf("big pod bound %v after its node joined", time.Since(added).Round(time.Millisecond))
}
