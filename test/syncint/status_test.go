package syncint

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/edge/runtime/fake"
	"github.com/outpost-mesh/outpost/hub/hubd"
	"github.com/outpost-mesh/outpost/internal/netem"
	"github.com/outpost-mesh/outpost/internal/testlog"
	"github.com/outpost-mesh/outpost/internal/wait"
)

func podCondition(p *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == t {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

func nodeCondition(n *corev1.Node, t corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == t {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// TestPodStatusReconciled: a condition the agent does not own, added on
// the hub by another writer, stays; the pod's Ready condition set False by
// such a writer (as the node lifecycle controller marks the pods of a node
// it thinks unreachable) is set True again by the agent within seconds;
// and the agent's report, once the hub shows it back, is not sent again.
func TestPodStatusReconciled(t *testing.T) {
	ctx := context.Background()
	h := startHub(t, t.TempDir())
	tok := h.token(t, "", time.Hour)
	cfg := agentConfig(t, h, "edge-1", tok, fake.New(fake.Config{}))
	logs := testlog.NewRecorder(t, slog.LevelInfo)
	cfg.Logger = slog.New(logs).With("node", "edge-1")
	runAgent(t, cfg)
	pods := h.client.CoreV1().Pods("default")
	if _, err := pods.Create(ctx, pod("web", "edge-1", "nginx"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	check := func(name string, ready corev1.ConditionStatus, disruption bool) func() (bool, string) {
		return func() (bool, string) {
			p, err := pods.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			c, d := podCondition(p, corev1.PodReady), podCondition(p, corev1.DisruptionTarget)
			ok := p.Status.Phase == corev1.PodRunning && c != nil && c.Status == ready && (d != nil && d.Reason == "TestDisruption") == disruption
			return ok, fmt.Sprint(p.Status.Phase, " ", p.Status.Conditions)
		}
	}
	wait.For(t, 20*time.Second, "web Running and Ready", check("web", corev1.ConditionTrue, false))

	// As a controller writes, unconditionally: first a condition of its
	// own, then Ready False with its reason and message kept.
	update := func(change func(*corev1.Pod)) {
		t.Helper()
		p, err := pods.Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		change(p)
		p.ResourceVersion = ""
		if _, err := pods.UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	update(func(p *corev1.Pod) {
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{
			Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
			Reason: "TestDisruption", Message: "set by the test", LastTransitionTime: metav1.Now(),
		})
	})
	update(func(p *corev1.Pod) {
		c := podCondition(p, corev1.PodReady)
		c.Status, c.LastTransitionTime = corev1.ConditionFalse, metav1.Now()
	})
	wait.For(t, 10*time.Second, "web Ready again, with the test's condition", check("web", corev1.ConditionTrue, true))

	// The hub shows the report back, and that is the end of it: a change
	// of the pod that is not its status brings no report. A second pod
	// Running on the hub marks when the agent has seen the change (the
	// view comes in order) and any report on it would be in (the outbox
	// goes in order).
	p, err := pods.Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Labels = map[string]string{"app": "web"}
	if _, err := pods.Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := pods.Create(ctx, pod("marker", "edge-1", "nginx"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 20*time.Second, "marker Running and Ready", check("marker", corev1.ConditionTrue, false))
	if ok, why := check("web", corev1.ConditionTrue, true)(); !ok {
		t.Errorf("web after the label: %s", why)
	}
	if n := logs.Count(resentMessage); n != 1 {
		t.Errorf("the agent reported a status again %d times, want once (after Ready was set False)", n)
	}
}

// resentMessage is what the agent logs when it reports a pod's status
// again because the hub's copy differs.
const resentMessage = "pod status on the hub differs from the agent's; reporting it again"

// TestNodeStatusAtReconnect: a node's conditions set Unknown on the hub
// while it was away (as the node lifecycle controller sets them) are
// replaced by its report as soon as it is back, not at its next periodic
// report; and so are they when set Unknown while it is connected.
func TestNodeStatusAtReconnect(t *testing.T) {
	ctx := context.Background()
	// Without the hub's controllers, only the agent sets Ready again.
	h := startHubWith(t, t.TempDir(), func(c *hubd.Config) { c.Controllers = false })
	relay, err := netem.Listen(h.h.SyncAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Close()
	tok := h.token(t, "", time.Hour)
	cfg := agentConfig(t, h, "edge-1", tok, fake.New(fake.Config{}))
	cfg.HubAddr = relay.Addr()
	cfg.NodeStatusInterval = time.Hour
	cfg.Sync.IdleTimeout, cfg.Sync.KeepAlive = 2*time.Second, time.Second
	logs := testlog.NewRecorder(t, slog.LevelInfo)
	cfg.Logger = slog.New(logs).With("node", "edge-1")
	a, _ := runAgent(t, cfg)
	nodes := h.client.CoreV1().Nodes()
	readyTrue := func() (bool, string) {
		n, err := nodes.Get(ctx, "edge-1", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		c := nodeCondition(n, corev1.NodeReady)
		for _, c := range n.Status.Conditions {
			if c.Status == corev1.ConditionUnknown {
				return false, fmt.Sprint(n.Status.Conditions)
			}
		}
		return c != nil && c.Status == corev1.ConditionTrue, fmt.Sprint(n.Status.Conditions)
	}
	wait.For(t, 20*time.Second, "edge-1 Ready", readyTrue)

	relay.Set(netem.Conditions{Blackhole: true})
	wait.For(t, 20*time.Second, "edge-1 notices the link is down", func() (bool, string) { return !a.Connected(), "still connected" })
	// As the node lifecycle controller does, unconditionally: the
	// conditions kubelet posts Unknown, their heartbeats kept.
	setUnknown := func() {
		t.Helper()
		n, err := nodes.Get(ctx, "edge-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		now := metav1.Now()
		for _, typ := range []corev1.NodeConditionType{corev1.NodeReady, corev1.NodeMemoryPressure} {
			c := nodeCondition(n, typ)
			if c == nil {
				n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: typ, LastHeartbeatTime: n.CreationTimestamp})
				c = &n.Status.Conditions[len(n.Status.Conditions)-1]
			}
			c.Status, c.Reason, c.Message, c.LastTransitionTime = corev1.ConditionUnknown, "NodeStatusUnknown", "Kubelet stopped posting node status.", now
		}
		n.ResourceVersion = ""
		if _, err := nodes.UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	setUnknown()
	relay.Set(netem.Conditions{})
	// Within seconds of the return, not the hour of NodeStatusInterval:
	// the report made at the connection, and no other, as the agent
	// takes the Unknown copy the hub sends it on its return for one
	// older than that report.
	wait.For(t, 15*time.Second, "edge-1 back and Ready", readyTrue)
	if n := logs.Count(nodeResentMessage); n != 0 {
		t.Errorf("the agent reported its node again %d times after its return, want none but the report at the connection", n)
	}

	// Set Unknown again while the node is connected, as the controller
	// may just after its return, before it has seen its Lease renewed:
	// the agent sees it in its view and reports again.
	setUnknown()
	wait.For(t, 10*time.Second, "edge-1 Ready again", readyTrue)
	if n := logs.Count(nodeResentMessage); n != 1 {
		t.Errorf("the agent reported its node again %d times, want once", n)
	}
}

// nodeResentMessage is what the agent logs when it reports its node's
// status again because the hub's copy differs.
const nodeResentMessage = "node status on the hub differs from the agent's; reporting it again"
