package nodeipam_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
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
	"github.com/outpost-mesh/outpost/hub/controllers/nodeipam"
	"github.com/outpost-mesh/outpost/hub/hubd"
	"github.com/outpost-mesh/outpost/internal/testlog"
	"github.com/outpost-mesh/outpost/internal/wait"
	"github.com/outpost-mesh/outpost/test/hubtest"
)

// onlyThis runs the hub without its own controllers: only the one under
// test acts.
func onlyThis(c *hubd.Config) { c.Controllers = false }

// startController runs a node IPAM controller of cfg against h until the
// returned stop is called or the test ends.
func startController(t *testing.T, h *hubtest.Hub, cfg nodeipam.Config) (stop func()) {
	t.Helper()
	factory := informers.NewSharedInformerFactory(h.Client, 0)
	broadcaster := record.NewBroadcaster()
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: h.Client.CoreV1().Events("")})
	c := controllers.Context{
		Client: h.Client, Metadata: h.Metadata, Informers: factory,
		Events: func(component string) record.EventRecorder {
			return broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: component})
		},
		Clock:  clock.RealClock{},
		Logger: testlog.New(t, slog.LevelInfo),
	}
	ctl, err := nodeipam.New(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	run := wait.Start(t, 20*time.Second, "controller Run", func(ctx context.Context) error {
		factory.Start(ctx.Done())
		defer factory.Shutdown()
		return ctl.Run(ctx)
	})
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		if err := run.Stop(); err != nil {
			t.Errorf("controller Run = %v, want nil", err)
		}
		broadcaster.Shutdown()
	}
	t.Cleanup(stop)
	return stop
}

// createNode creates a Node named name holding cidrs (none for nil).
func createNode(t *testing.T, client kubernetes.Interface, name string, cidrs ...string) {
	t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if len(cidrs) > 0 {
		n.Spec.PodCIDR, n.Spec.PodCIDRs = cidrs[0], cidrs
	}
	if _, err := client.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func deleteNode(t *testing.T, client kubernetes.Interface, name string) {
	t.Helper()
	if err := client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// podCIDR waits for node name to have a pod CIDR and returns it, having
// checked that podCIDR and podCIDRs agree.
func podCIDR(t *testing.T, client kubernetes.Interface, name string) string {
	t.Helper()
	var got string
	wait.For(t, 20*time.Second, "a pod CIDR for node "+name, func() (bool, string) {
		n, err := client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if n.Spec.PodCIDR == "" {
			return false, "none"
		}
		if !slices.Equal(n.Spec.PodCIDRs, []string{n.Spec.PodCIDR}) {
			t.Fatalf("node %s: podCIDR %q, podCIDRs %q; want the one in both", name, n.Spec.PodCIDR, n.Spec.PodCIDRs)
		}
		got = n.Spec.PodCIDR
		return true, ""
	})
	return got
}

// events waits for an Event on node that has reason, and returns the
// messages of all such.
func events(t *testing.T, client kubernetes.Interface, node, reason string) []string {
	t.Helper()
	var msgs []string
	wait.ForEvery(t, 50*time.Millisecond, 20*time.Second, fmt.Sprintf("a %s event on node %s", reason, node), func() (bool, string) {
		list, err := client.CoreV1().Events(metav1.NamespaceDefault).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		msgs = msgs[:0]
		var seen []string
		for _, ev := range list.Items {
			if ev.InvolvedObject.Kind == "Node" && ev.InvolvedObject.Name == node && ev.Reason == reason {
				if ev.Type != corev1.EventTypeWarning || ev.Source.Component != nodeipam.Component {
					t.Fatalf("event %s on %s: type %s from %q, want a Warning from %s", reason, node, ev.Type, ev.Source.Component, nodeipam.Component)
				}
				msgs = append(msgs, ev.Message)
			}
			seen = append(seen, fmt.Sprintf("%s %s/%s", ev.Reason, ev.InvolvedObject.Kind, ev.InvolvedObject.Name))
		}
		return len(msgs) > 0, fmt.Sprintf("events: %v", seen)
	})
	return msgs
}

// TestHubDistinctCIDRs: nodes get distinct /24s of the cluster range;
// nodes that held one before the controller started keep theirs, even
// outside the range, and no new node gets theirs, before or after the
// controller restarts.
func TestHubDistinctCIDRs(t *testing.T) {
	h := hubtest.Start(t, onlyThis)
	createNode(t, h.Client, "held", "10.42.0.0/24")
	createNode(t, h.Client, "held-too", "10.42.2.0/24")
	createNode(t, h.Client, "outside", "192.168.7.0/24")
	cfg := nodeipam.DefaultConfig()
	stop := startController(t, h, cfg)

	cidrs := map[string]string{"held": "10.42.0.0/24", "held-too": "10.42.2.0/24", "outside": "192.168.7.0/24"}
	byCIDR := map[string]string{}
	for n, c := range cidrs {
		byCIDR[c] = n
	}
	check := func(name string) {
		t.Helper()
		c := podCIDR(t, h.Client, name)
		p, err := netip.ParsePrefix(c)
		if err != nil || p.Bits() != cfg.NodeMaskSize || !cfg.ClusterCIDR.Contains(p.Addr()) || p.Masked() != p {
			t.Fatalf("node %s got pod CIDR %q, want a /%d block of %v", name, c, cfg.NodeMaskSize, cfg.ClusterCIDR)
		}
		if other, ok := byCIDR[c]; ok {
			t.Fatalf("node %s got pod CIDR %s, which node %s holds", name, c, other)
		}
		cidrs[name], byCIDR[c] = c, name
	}
	for i := range 6 {
		createNode(t, h.Client, fmt.Sprintf("edge-%d", i))
	}
	for i := range 6 {
		check(fmt.Sprintf("edge-%d", i))
	}

	// A new controller knows the blocks given by the last.
	stop()
	startController(t, h, cfg)
	for i := 6; i < 10; i++ {
		createNode(t, h.Client, fmt.Sprintf("edge-%d", i))
	}
	for i := 6; i < 10; i++ {
		check(fmt.Sprintf("edge-%d", i))
	}
	for name, want := range cidrs {
		if got := podCIDR(t, h.Client, name); got != want {
			t.Errorf("node %s: pod CIDR %s after the restart, want %s as before", name, got, want)
		}
	}
	t.Logf("pod CIDRs: %v", cidrs)
}

// TestHubExhaustedConflictFreed runs a range of two blocks: a block two
// nodes hold is reported on both and given to no other node until both
// are gone, a node the range has no block for gets a CIDRNotAvailable
// event and the next block freed, and a deleted node's block goes to a
// new node.
func TestHubExhaustedConflictFreed(t *testing.T) {
	h := hubtest.Start(t, onlyThis)
	const first, second = "10.42.0.0/30", "10.42.0.4/30"
	createNode(t, h.Client, "x", first)
	createNode(t, h.Client, "y", first)
	cfg := nodeipam.DefaultConfig()
	cfg.ClusterCIDR, cfg.NodeMaskSize = netip.MustParsePrefix("10.42.0.0/29"), 30
	cfg.Workers = 1 // nodes are synced in the order their changes come
	startController(t, h, cfg)

	for _, n := range []string{"x", "y"} {
		msgs := events(t, h.Client, n, nodeipam.EventCIDRConflict)
		t.Logf("%s on %s: %q", nodeipam.EventCIDRConflict, n, msgs)
	}

	createNode(t, h.Client, "z")
	if got := podCIDR(t, h.Client, "z"); got != second {
		t.Fatalf("node z got %s, want %s, the only block x and y do not hold", got, second)
	}
	createNode(t, h.Client, "w")
	msgs := events(t, h.Client, "w", nodeipam.EventCIDRNotAvailable)
	t.Logf("%s on w: %q", nodeipam.EventCIDRNotAvailable, msgs)

	// x goes, but y still holds the first block: z's, freed next, is
	// the one w gets.
	deleteNode(t, h.Client, "x")
	deleteNode(t, h.Client, "z")
	if got := podCIDR(t, h.Client, "w"); got != second {
		t.Fatalf("node w got %s once x and z were gone, want %s (y still holds %s)", got, second, first)
	}

	// With y gone too, the first block is free for a new node.
	deleteNode(t, h.Client, "y")
	createNode(t, h.Client, "v")
	if got := podCIDR(t, h.Client, "v"); got != first {
		t.Fatalf("node v got %s, want %s, freed by x and y", got, first)
	}
}

// TestHubImmutable: once set, a node's pod CIDR cannot be changed, as
// upstream's validation says, so the controller's writes never move one.
func TestHubImmutable(t *testing.T) {
	h := hubtest.Start(t, onlyThis)
	startController(t, h, nodeipam.DefaultConfig())
	createNode(t, h.Client, "fixed")
	c := podCIDR(t, h.Client, "fixed")
	n, err := h.Client.CoreV1().Nodes().Get(context.Background(), "fixed", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Spec.PodCIDR, n.Spec.PodCIDRs = "10.42.200.0/24", []string{"10.42.200.0/24"}
	if _, err := h.Client.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
		t.Fatalf("changing pod CIDR %s of node fixed: %v, want Invalid", c, err)
	}
}
