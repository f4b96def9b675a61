package daemonset_test

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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/outpost-mesh/outpost/hub/controllers"
	"github.com/outpost-mesh/outpost/hub/controllers/daemonset"
	"github.com/outpost-mesh/outpost/hub/controllers/history"
	"github.com/outpost-mesh/outpost/hub/hubd"
	"github.com/outpost-mesh/outpost/internal/testlog"
	"github.com/outpost-mesh/outpost/internal/wait"
	"github.com/outpost-mesh/outpost/test/hubtest"
)

// runController runs a daemonset controller against h until the test ends.
func runController(t *testing.T, h *hubtest.Hub) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	factory := informers.NewSharedInformerFactory(h.Client, 0)
	events := record.NewBroadcaster(record.WithContext(ctx))
	events.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: h.Client.CoreV1().Events("")})
	t.Cleanup(events.Shutdown)
	c, err := daemonset.New(controllers.Context{
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
	bg := wait.Start(t, 30*time.Second, "daemonset controller", c.Run)
	factory.Start(ctx.Done())
	t.Cleanup(func() {
		if err := bg.Stop(); err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
		cancel()
		factory.Shutdown()
	})
}

// cluster plays the scheduler and the kubelets for the test: it binds
// daemon pods to the node their affinity names, confirms deletions on
// nodes that are online, and marks pods Running, and Ready when asked.
type cluster struct {
	t      *testing.T
	client kubernetes.Interface
	ns     string
	down   map[string]bool // nodes whose kubelet does nothing
}

func (c *cluster) addNode(name string, taints ...corev1.Taint) {
	c.t.Helper()
	ctx := context.Background()
	n, err := c.client.CoreV1().Nodes().Create(ctx, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}},
		Spec:       corev1.NodeSpec{Taints: taints},
	}, metav1.CreateOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	c.setReady(n.Name, corev1.ConditionTrue)
}

// setReady sets node's Ready condition, and the unreachable taint the
// node lifecycle adds while it is Unknown.
func (c *cluster) setReady(name string, status corev1.ConditionStatus) {
	c.t.Helper()
	ctx := context.Background()
	n, err := c.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	if n, err = c.client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		c.t.Fatal(err)
	}
	n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == corev1.TaintNodeUnreachable })
	if status == corev1.ConditionUnknown {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoSchedule})
	}
	if _, err := c.client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		c.t.Fatal(err)
	}
	c.down[name] = status == corev1.ConditionUnknown
}

// step does one round of scheduler and kubelet work, marking pods
// Ready on the nodes in readyOn, and returns the daemon pods as it left
// them.
func (c *cluster) step(readyOn ...string) ([]corev1.Pod, error) {
	ctx := context.Background()
	list, err := c.client.CoreV1().Pods(c.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		target := daemonset.TargetNode(&p)
		if c.down[target] {
			out = append(out, p)
			continue
		}
		switch {
		case p.DeletionTimestamp != nil:
			err = c.client.CoreV1().Pods(c.ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64(0))})
			continue
		case p.Spec.NodeName == "":
			err = c.client.CoreV1().Pods(c.ns).Bind(ctx, &corev1.Binding{
				ObjectMeta: metav1.ObjectMeta{Name: p.Name},
				Target:     corev1.ObjectReference{Kind: "Node", Name: target},
			}, metav1.CreateOptions{})
			p.Spec.NodeName = target
		case p.Status.Phase == corev1.PodPending || (slices.Contains(readyOn, target) && !daemonset.Ready(&p)):
			p.Status.Phase = corev1.PodRunning
			if slices.Contains(readyOn, target) {
				p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
			}
			var up *corev1.Pod
			if up, err = c.client.CoreV1().Pods(c.ns).UpdateStatus(ctx, &p, metav1.UpdateOptions{}); err == nil {
				p = *up
			}
		}
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// image returns the image of the live pod on node, "" for none, and
// whether it is being deleted.
func image(pods []corev1.Pod, node string) (img string, deleting bool) {
	for _, p := range pods {
		if daemonset.TargetNode(&p) == node {
			if p.DeletionTimestamp != nil {
				deleting = true
				continue
			}
			img = p.Spec.Containers[0].Image
		}
	}
	return img, deleting
}

func summary(pods []corev1.Pod) string {
	var s []string
	for _, p := range pods {
		s = append(s, fmt.Sprintf("%s@%s:%s ready=%v deleting=%v", p.Name, daemonset.TargetNode(&p), p.Spec.Containers[0].Image, daemonset.Ready(&p), p.DeletionTimestamp != nil))
	}
	slices.Sort(s)
	return strings.Join(s, "; ")
}

// rolledOut is what `kubectl rollout status ds` waits for.
func rolledOut(ds *appsv1.DaemonSet) bool {
	s := ds.Status
	return s.ObservedGeneration >= ds.Generation && s.UpdatedNumberScheduled >= s.DesiredNumberScheduled && s.NumberAvailable >= s.DesiredNumberScheduled
}

func TestDaemonSetOnARealHub(t *testing.T) {
	h := hubtest.Start(t, func(c *hubd.Config) { c.Controllers = false })
	ctx := context.Background()
	c := &cluster{t: t, client: h.Client, ns: "default", down: map[string]bool{}}
	c.addNode("n1")
	c.addNode("n2")
	c.addNode("n3")
	c.addNode("tainted", corev1.Taint{Key: "dedicated", Value: "db", Effect: corev1.TaintEffectNoSchedule})
	runController(t, h)

	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "default"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "agent"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "agent"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "agent:1"}}},
			},
		},
	}
	ds, err := h.Client.AppsV1().DaemonSets("default").Create(ctx, ds, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nodes := []string{"n1", "n2", "n3"}
	getDS := func() *appsv1.DaemonSet {
		d, err := h.Client.AppsV1().DaemonSets("default").Get(ctx, "agent", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}

	// A pod on each node but the tainted one, and the rollout completes.
	wait.For(t, 30*time.Second, "a ready pod on each untainted node", func() (bool, string) {
		pods, err := c.step(nodes...)
		if err != nil {
			return false, err.Error()
		}
		d := getDS()
		for _, n := range nodes {
			if img, _ := image(pods, n); img != "agent:1" {
				return false, summary(pods)
			}
		}
		if img, _ := image(pods, "tainted"); img != "" {
			t.Fatalf("a pod on the tainted node: %s", summary(pods))
		}
		return rolledOut(d) && d.Status.DesiredNumberScheduled == 3, fmt.Sprintf("status %+v; pods %s", d.Status, summary(pods))
	})
	pods, _ := c.step()
	for _, p := range pods {
		if p.Labels[history.HashLabel] == "" || !slices.ContainsFunc(p.Spec.Tolerations, func(t corev1.Toleration) bool { return t.Key == corev1.TaintNodeUnreachable }) {
			t.Errorf("pod %s lacks the revision label or the default tolerations: %v %v", p.Name, p.Labels, p.Spec.Tolerations)
		}
	}

	// rollout updates node by node: the pods become Ready only when the
	// test says, and until then no other node loses its pod.
	rollout := func(img string, nodes []string, keep string) {
		t.Helper()
		d := getDS()
		d.Spec.Template.Spec.Containers[0].Image = img
		if _, err := h.Client.AppsV1().DaemonSets("default").Update(ctx, d, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		var done []string
		for len(done) < len(nodes) {
			wait.For(t, 30*time.Second, fmt.Sprintf("a node updated to %s after %v", img, done), func() (bool, string) {
				pods, err := c.step(done...)
				if err != nil {
					return false, err.Error()
				}
				// Nodes without a live Ready pod: at most one at a time.
				var down []string
				for _, n := range nodes {
					if !slices.ContainsFunc(pods, func(p corev1.Pod) bool {
						return daemonset.TargetNode(&p) == n && p.DeletionTimestamp == nil && daemonset.Ready(&p)
					}) {
						down = append(down, n)
					}
				}
				if len(down) > 1 {
					t.Fatalf("rolling to %s: %v down at once (maxUnavailable 1): %s", img, down, summary(pods))
				}
				if keep != "" {
					if cur, deleting := image(pods, keep); cur == img || deleting {
						t.Fatalf("offline node %s lost its old pod: %s", keep, summary(pods))
					}
				}
				for _, n := range nodes {
					if cur, deleting := image(pods, n); !slices.Contains(done, n) && cur == img && !deleting {
						done = append(done, n)
						return true, ""
					}
				}
				return false, summary(pods)
			})
		}
		wait.For(t, 30*time.Second, "rollout status complete", func() (bool, string) {
			pods, err := c.step(append(done, keep)...)
			if err != nil {
				return false, err.Error()
			}
			d := getDS()
			if keep != "" {
				return d.Status.UpdatedNumberScheduled == int32(len(nodes)) && d.Status.DesiredNumberScheduled == int32(len(nodes)+1) && d.Status.NumberAvailable == int32(len(nodes)+1),
					fmt.Sprintf("status %+v; pods %s", d.Status, summary(pods))
			}
			return rolledOut(d), fmt.Sprintf("status %+v; pods %s", d.Status, summary(pods))
		})
	}
	rollout("agent:2", nodes, "")

	// With n1 offline, n2 and n3 update, and n1 keeps its old pod.
	c.setReady("n1", corev1.ConditionUnknown)
	rollout("agent:3", []string{"n2", "n3"}, "n1")
	if pods, _ := c.step(); !strings.Contains(summary(pods), "@n1:agent:2 ready=true deleting=false") {
		t.Fatalf("offline n1 lost its pod: %s", summary(pods))
	}
	// Back online, it is updated too.
	c.setReady("n1", corev1.ConditionTrue)
	wait.For(t, 30*time.Second, "n1 updated once back", func() (bool, string) {
		pods, err := c.step(nodes...)
		if err != nil {
			return false, err.Error()
		}
		d := getDS()
		img, _ := image(pods, "n1")
		return img == "agent:3" && rolledOut(d) && d.Status.DesiredNumberScheduled == 3, fmt.Sprintf("status %+v; pods %s", d.Status, summary(pods))
	})

	revs, err := h.Client.AppsV1().ControllerRevisions("default").List(ctx, metav1.ListOptions{})
	if err != nil || len(revs.Items) != 3 {
		t.Errorf("revisions = %d (%v), want 3", len(revs.Items), err)
	}
	wait.For(t, 30*time.Second, "upstream's events", func() (bool, string) {
		evs, err := h.Client.CoreV1().Events("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		reasons := map[string]bool{}
		for _, e := range evs.Items {
			if e.InvolvedObject.Name == "agent" {
				reasons[e.Reason] = true
			}
		}
		return reasons["SuccessfulCreate"] && reasons["SuccessfulDelete"], fmt.Sprintf("reasons %v", reasons)
	})
}
