package nodelifecycle_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/outpost-mesh/outpost/hub/controllers"
	"github.com/outpost-mesh/outpost/hub/controllers/nodelifecycle"
	"github.com/outpost-mesh/outpost/hub/hubd"
	"github.com/outpost-mesh/outpost/internal/testlog"
	"github.com/outpost-mesh/outpost/internal/wait"
	"github.com/outpost-mesh/outpost/sync/wire"
	"github.com/outpost-mesh/outpost/test/hubtest"
)

// onlyThis runs the hub without its own controllers: only the one under
// test acts.
func onlyThis(c *hubd.Config) { c.Controllers = false }

// startController runs a node lifecycle controller of cfg against h until
// the test ends.
func startController(t *testing.T, h *hubtest.Hub, cfg nodelifecycle.Config) {
	t.Helper()
	factory := informers.NewSharedInformerFactory(h.Client, 0)
	broadcaster := record.NewBroadcaster()
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: h.Client.CoreV1().Events("")})
	t.Cleanup(broadcaster.Shutdown)
	c := controllers.Context{
		Client: h.Client, Metadata: h.Metadata, Informers: factory,
		Events: func(component string) record.EventRecorder {
			return broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: component})
		},
		Clock:  clock.RealClock{},
		Logger: testlog.New(t, slog.LevelInfo),
	}
	ctl, err := nodelifecycle.New(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	run := wait.Start(t, 20*time.Second, "controller Run", func(ctx context.Context) error {
		factory.Start(ctx.Done())
		defer factory.Shutdown()
		return ctl.Run(ctx)
	})
	t.Cleanup(func() {
		if err := run.Stop(); err != nil {
			t.Errorf("controller Run = %v, want nil", err)
		}
	})
}

// startPresence runs a Presence that renews the Leases of the nodes
// connected every renew, until the test ends.
func startPresence(t *testing.T, h *hubtest.Hub, renew time.Duration) *nodelifecycle.Presence {
	t.Helper()
	cfg := nodelifecycle.DefaultPresenceConfig()
	cfg.Client, cfg.Logger = h.Client, testlog.New(t, slog.LevelInfo)
	cfg.AsNode = func(ctx context.Context, _ string) context.Context { return ctx } // as the admin
	cfg.RenewInterval = renew
	p, err := nodelifecycle.NewPresence(cfg)
	if err != nil {
		t.Fatal(err)
	}
	wait.Start(t, 20*time.Second, "Presence Run", p.Run)
	return p
}

// edge simulates what an edge agent writes of one node.
type edge struct {
	t      *testing.T
	client kubernetes.Interface
	name   string
}

// join creates the node, Ready, with annotations.
func join(t *testing.T, client kubernetes.Interface, name string, annotations map[string]string) *edge {
	t.Helper()
	ctx := context.Background()
	n, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hb := metav1.Now()
	n.Status.Conditions = []corev1.NodeCondition{
		{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "kubelet is posting ready status", LastHeartbeatTime: hb, LastTransitionTime: hb},
		{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientMemory", LastHeartbeatTime: hb, LastTransitionTime: hb},
	}
	if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return &edge{t: t, client: client, name: name}
}

// renewed returns when the node's Lease was last renewed, zero if it has
// none.
func (e *edge) renewed() time.Time {
	e.t.Helper()
	l, err := e.client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(context.Background(), e.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return time.Time{}
	}
	if err != nil {
		e.t.Fatal(err)
	}
	if l.Spec.RenewTime == nil {
		return time.Time{}
	}
	return l.Spec.RenewTime.Time
}

// run creates a pod bound to the node, Running and Ready as the node
// would report it.
func (e *edge) run(name string, tols ...corev1.Toleration) {
	e.t.Helper()
	ctx := context.Background()
	pods := e.client.CoreV1().Pods("default")
	p, err := pods.Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			NodeName:    e.name,
			Containers:  []corev1.Container{{Name: "c", Image: "nginx"}},
			Tolerations: tols,
		},
	}, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	now := metav1.Now()
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
	}
	if _, err := pods.UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// node returns what the hub has of the node: its Ready status and reason,
// and its taints as key:effect.
func (e *edge) node() (ready corev1.ConditionStatus, reason string, taints []string, err error) {
	n, err := e.client.CoreV1().Nodes().Get(context.Background(), e.name, metav1.GetOptions{})
	if err != nil {
		return "", "", nil, err
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			ready, reason = c.Status, c.Reason
		}
	}
	for _, t := range n.Spec.Taints {
		taints = append(taints, t.Key+":"+string(t.Effect))
	}
	return ready, reason, taints, nil
}

// pod returns the pod's Ready status and whether it is being deleted or
// gone.
func pod(t *testing.T, client kubernetes.Interface, name string) (ready corev1.ConditionStatus, deleted bool, node string) {
	t.Helper()
	p, err := client.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", true, ""
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			ready = c.Status
		}
	}
	return ready, p.DeletionTimestamp != nil, p.Spec.NodeName
}

const (
	unreachableNoSchedule = corev1.TaintNodeUnreachable + ":NoSchedule"
	unreachableNoExecute  = corev1.TaintNodeUnreachable + ":NoExecute"
)

// TestHubNodeAway is the edge node lifecycle against a real hub: a node
// whose Lease lapses goes Unknown and tainted and keeps its pods, which
// go not ready; renewed, it is Ready again and untainted.
func TestHubNodeAway(t *testing.T) {
	h := hubtest.Start(t, onlyThis)
	cfg := nodelifecycle.DefaultConfig()
	cfg.GracePeriod, cfg.StartupGracePeriod = 2*time.Second, 2*time.Second
	startController(t, h, cfg)
	presence := startPresence(t, h, cfg.GracePeriod/4)
	e := join(t, h.Client, "edge-away", nil)
	e.run("web")
	presence.Connected(e.name)

	// Renewed, it stays Ready for longer than its grace.
	wait.For(t, 20*time.Second, "the first renewal", func() (bool, string) { return !e.renewed().IsZero(), "no lease" })
	first := e.renewed()
	wait.For(t, 20*time.Second, "renewals for three grace periods", func() (bool, string) {
		ready, _, taints, err := e.node()
		if err != nil {
			return false, err.Error()
		}
		if ready != corev1.ConditionTrue || len(taints) != 0 {
			t.Fatalf("renewed node: Ready %s, taints %v; want True and none", ready, taints)
		}
		last := e.renewed()
		return last.Sub(first) >= 3*cfg.GracePeriod, fmt.Sprintf("renewed %v after the first", last.Sub(first))
	})

	// Not renewed: Unknown, tainted, its pod bound and not ready.
	presence.Disconnected(e.name)
	wait.For(t, 20*time.Second, "the node Unknown and tainted", func() (bool, string) {
		ready, reason, taints, err := e.node()
		if err != nil {
			return false, err.Error()
		}
		return ready == corev1.ConditionUnknown && reason == nodelifecycle.ReasonNodeStatusUnknown && slices.Equal(taints, []string{unreachableNoSchedule}),
			fmt.Sprintf("Ready %s (%s), taints %v", ready, reason, taints)
	})
	wait.For(t, 20*time.Second, "pod web not ready", func() (bool, string) {
		ready, deleted, node := pod(t, h.Client, "web")
		if deleted || node != e.name {
			t.Fatalf("pod web: deleted %v, node %q; want kept, bound to %s", deleted, node, e.name)
		}
		return ready == corev1.ConditionFalse, fmt.Sprintf("Ready %s", ready)
	})
	n, err := h.Client.CoreV1().Nodes().Get(context.Background(), e.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range n.Status.Conditions {
		if c.Status != corev1.ConditionUnknown {
			t.Errorf("condition %s of the node away = %s, want Unknown", c.Type, c.Status)
		}
	}

	// Renewed again: Ready, untainted, and the pod as it was.
	presence.Connected(e.name)
	wait.For(t, 20*time.Second, "the node back", func() (bool, string) {
		ready, _, taints, err := e.node()
		if err != nil {
			return false, err.Error()
		}
		return ready == corev1.ConditionTrue && len(taints) == 0, fmt.Sprintf("Ready %s, taints %v", ready, taints)
	})
	if ready, deleted, node := pod(t, h.Client, "web"); deleted || node != e.name || ready != corev1.ConditionFalse {
		t.Errorf("pod web once the node is back: Ready %s, deleted %v, node %q; want False (the node reports it), kept, bound", ready, deleted, node)
	}
	events(t, h.Client, "default", func(ev corev1.Event) bool {
		return ev.InvolvedObject.Kind == "Node" && ev.InvolvedObject.Name == e.name && ev.Reason == nodelifecycle.EventNodeNotReady
	})
}

// TestHubOfflineTolerance: a node that opted in to eviction has its pods
// evicted once it has been away for its tolerance, but for those that
// tolerate it forever.
func TestHubOfflineTolerance(t *testing.T) {
	h := hubtest.Start(t, onlyThis)
	cfg := nodelifecycle.DefaultConfig()
	cfg.GracePeriod, cfg.StartupGracePeriod = 2*time.Second, 2*time.Second
	startController(t, h, cfg)
	presence := startPresence(t, h, cfg.GracePeriod/4)
	e := join(t, h.Client, "edge-tolerant", map[string]string{nodelifecycle.AnnotationOfflineTolerance: "1s"})
	e.run("plain")
	e.run("forever", corev1.Toleration{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute})
	bad := join(t, h.Client, "edge-bad", map[string]string{nodelifecycle.AnnotationOfflineTolerance: "a while"})
	// edge-tolerant was there once, edge-bad never.
	presence.Connected(e.name)
	wait.For(t, 20*time.Second, "the first renewal", func() (bool, string) { return !e.renewed().IsZero(), "no lease" })
	presence.Disconnected(e.name)

	wait.For(t, 20*time.Second, "the node tainted NoExecute", func() (bool, string) {
		_, _, taints, err := e.node()
		if err != nil {
			return false, err.Error()
		}
		return slices.Equal(taints, []string{unreachableNoSchedule, unreachableNoExecute}), fmt.Sprint(taints)
	})
	wait.For(t, 20*time.Second, "pod plain evicted", func() (bool, string) {
		_, deleted, _ := pod(t, h.Client, "plain")
		return deleted, "not deleted"
	})
	events(t, h.Client, "default", func(ev corev1.Event) bool {
		return ev.InvolvedObject.Name == "plain" && ev.Reason == nodelifecycle.EventTaintManagerEviction && ev.Message == "Marking for deletion Pod default/plain"
	})
	if _, deleted, node := pod(t, h.Client, "forever"); deleted || node != e.name {
		t.Errorf("pod forever: deleted %v, node %q; want kept, bound to %s", deleted, node, e.name)
	}

	// A bad tolerance is a Warning, and no NoExecute.
	events(t, h.Client, "default", func(ev corev1.Event) bool {
		return ev.InvolvedObject.Name == bad.name && ev.Type == corev1.EventTypeWarning && ev.Reason == nodelifecycle.EventInvalidOfflineTolerance
	})
	wait.For(t, 20*time.Second, "edge-bad unreachable", func() (bool, string) {
		ready, _, taints, err := bad.node()
		if err != nil {
			return false, err.Error()
		}
		return ready == corev1.ConditionUnknown && slices.Equal(taints, []string{unreachableNoSchedule}), fmt.Sprintf("Ready %s, taints %v", ready, taints)
	})

	// Back: the NoExecute taint goes too.
	presence.Connected(e.name)
	wait.For(t, 20*time.Second, "the node back", func() (bool, string) {
		ready, _, taints, err := e.node()
		if err != nil {
			return false, err.Error()
		}
		return ready == corev1.ConditionTrue && len(taints) == 0, fmt.Sprintf("Ready %s, taints %v", ready, taints)
	})
}

// siteReachable returns the node's SiteReachable condition as "Status
// Reason: message", "" if it has none.
func (e *edge) siteReachable() (string, error) {
	n, err := e.client.CoreV1().Nodes().Get(context.Background(), e.name, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	for _, c := range n.Status.Conditions {
		if c.Type == nodelifecycle.ConditionSiteReachable {
			return string(c.Status) + " " + c.Reason + ": " + c.Message, nil
		}
	}
	return "", nil
}

// meshReports sets the site and the mesh peers the node holds alive, as
// the hub (its site, at join) and its status reports would.
func (e *edge) meshReports(site string, alive ...string) {
	e.t.Helper()
	ctx := context.Background()
	n, err := e.client.CoreV1().Nodes().Get(ctx, e.name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	n.Labels[wire.SiteLabel] = site
	n.Annotations[wire.AnnotationMeshAlive] = strings.Join(alive, ",")
	if _, err := e.client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// waitSite waits until the node's SiteReachable is want.
func (e *edge) waitSite(want string) {
	e.t.Helper()
	wait.For(e.t, 20*time.Second, e.name+" SiteReachable "+want, func() (bool, string) {
		got, err := e.siteReachable()
		if err != nil {
			return false, err.Error()
		}
		return got == want, fmt.Sprintf("SiteReachable %q", got)
	})
}

// TestHubSiteReachable: against a real hub, a node whose session is lost
// while its site peers hold it alive is Ready Unknown and SiteReachable
// True; once they lose it too, False; a node in no site has none.
func TestHubSiteReachable(t *testing.T) {
	h := hubtest.Start(t, onlyThis)
	cfg := nodelifecycle.DefaultConfig()
	cfg.GracePeriod, cfg.StartupGracePeriod = 2*time.Second, 2*time.Second
	startController(t, h, cfg)
	presence := startPresence(t, h, cfg.GracePeriod/4)
	a := join(t, h.Client, "site-a", nil)
	b := join(t, h.Client, "site-b", nil)
	c := join(t, h.Client, "site-c", nil)
	lone := join(t, h.Client, "lone", nil)
	a.meshReports("store-1", "site-b", "site-c")
	b.meshReports("store-1", "site-a", "site-c")
	c.meshReports("store-1", "site-a", "site-b")
	for _, e := range []*edge{a, b, c, lone} {
		presence.Connected(e.name)
	}
	a.waitSite("True " + nodelifecycle.ReasonSitePeersSeeIt + ": alive per 2 of 2 site peers")

	// site-a's uplink is cut.
	presence.Disconnected(a.name)
	wait.For(t, 20*time.Second, "site-a Unknown", func() (bool, string) {
		ready, _, _, err := a.node()
		if err != nil {
			return false, err.Error()
		}
		return ready == corev1.ConditionUnknown, fmt.Sprintf("Ready %s", ready)
	})
	a.waitSite("True " + nodelifecycle.ReasonUplinkDown + ": uplink down; alive per 2 of 2 site peers")

	// site-a is dead: its peers drop it.
	b.meshReports("store-1", "site-c")
	c.meshReports("store-1", "site-b")
	a.waitSite("False " + nodelifecycle.ReasonSitePeersLostIt + ": site peers lost it too")
	if got, err := lone.siteReachable(); err != nil || got != "" {
		t.Errorf("lone node in no site: SiteReachable %q (%v), want none", got, err)
	}
}

// events waits for an Event in ns that match says is the one.
func events(t *testing.T, client kubernetes.Interface, ns string, match func(corev1.Event) bool) {
	t.Helper()
	wait.ForEvery(t, 100*time.Millisecond, 20*time.Second, "the event", func() (bool, string) {
		list, err := client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, ev := range list.Items {
			if match(ev) {
				return true, ""
			}
			seen = append(seen, fmt.Sprintf("%s %s/%s: %s", ev.Reason, ev.InvolvedObject.Kind, ev.InvolvedObject.Name, ev.Message))
		}
		return false, fmt.Sprintf("events: %v", seen)
	})
}
