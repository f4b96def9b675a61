package status

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestNodeNeedsReport(t *testing.T) {
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	addrs := []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.168.1.5"}}
	first := nodeObject("gw-1", "store-1", Capacity{CPUMillis: 1000, MemoryBytes: 1 << 30, Pods: 10}, "fake://", addrs, nil, t0)
	sent := nodeObject("gw-1", "store-1", Capacity{CPUMillis: 1000, MemoryBytes: 1 << 30, Pods: 10}, "fake://", addrs, first, t0.Add(time.Minute+300*time.Millisecond))
	unknown := func(n *corev1.Node, types ...corev1.NodeConditionType) {
		for _, typ := range types {
			c := nodeCondition(n, typ)
			if c == nil {
				n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: typ, LastHeartbeatTime: n.CreationTimestamp})
				c = &n.Status.Conditions[len(n.Status.Conditions)-1]
			}
			c.Status, c.Reason, c.Message = corev1.ConditionUnknown, "NodeStatusUnknown", "Kubelet stopped posting node status."
		}
	}
	tests := []struct {
		name string
		hub  func(*corev1.Node) // changes the hub's copy of sent
		want bool
	}{
		{"as sent", func(*corev1.Node) {}, false},
		{"heartbeat to the second", func(n *corev1.Node) {
			c := nodeCondition(n, corev1.NodeReady)
			c.LastHeartbeatTime = metav1.NewTime(c.LastHeartbeatTime.Truncate(time.Second))
		}, false},
		{"Ready's reason and message changed", func(n *corev1.Node) {
			c := nodeCondition(n, corev1.NodeReady)
			c.Reason, c.Message = "KubeletReady", "Node is back"
		}, false},
		{"Ready Unknown", func(n *corev1.Node) { unknown(n, corev1.NodeReady) }, true},
		{"Ready Unknown and pressure Unknown", func(n *corev1.Node) {
			unknown(n, corev1.NodeReady, corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure)
		}, true},
		{"Ready True again, pressure still Unknown", func(n *corev1.Node) { unknown(n, corev1.NodeMemoryPressure) }, true},
		{"Ready gone", func(n *corev1.Node) {
			n.Status.Conditions = slices.DeleteFunc(n.Status.Conditions, func(c corev1.NodeCondition) bool { return c.Type == corev1.NodeReady })
		}, false},
		{"a condition others post", func(n *corev1.Node) {
			n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionUnknown})
		}, false},
		{"Unknown, but older than the report", func(n *corev1.Node) {
			unknown(n, corev1.NodeReady, corev1.NodeMemoryPressure)
			nodeCondition(n, corev1.NodeReady).LastHeartbeatTime = metav1.NewTime(t0)
		}, false},
		{"Unknown, from the report's second", func(n *corev1.Node) {
			unknown(n, corev1.NodeReady)
			nodeCondition(n, corev1.NodeReady).LastHeartbeatTime = metav1.NewTime(t0.Add(time.Minute))
		}, true},
	}
	for _, tt := range tests {
		hub := sent.DeepCopy()
		tt.hub(hub)
		if got := nodeNeedsReport(hub, sent); got != tt.want {
			t.Errorf("nodeNeedsReport(%s) = %v, want %v", tt.name, got, tt.want)
		}
	}
	if nodeNeedsReport(sent, nil) {
		t.Errorf("nodeNeedsReport(nothing sent) = true, want false")
	}
}
