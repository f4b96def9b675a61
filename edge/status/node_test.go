package status

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestNodeNeedsReport(t *testing.T) {
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	addrs := []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.168.1.5"}}
	c := Capacity{CPUMillis: 1000, MemoryBytes: 1 << 30, Pods: 10}.ResourceList()
	f := nodeFacts{capacity: c, allocatable: c, runtimeVersion: "fake://", addresses: addrs}
	first := nodeObject("gw-1", "store-1", f, nil, t0)
	sent := nodeObject("gw-1", "store-1", f, first, t0.Add(time.Minute+300*time.Millisecond))
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

func TestNodeObjectMachine(t *testing.T) {
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	capacity := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("4Gi"),
		corev1.ResourceEphemeralStorage: resource.MustParse("100Gi"), corev1.ResourcePods: resource.MustParse("110"),
	}
	alloc := capacity.DeepCopy()
	alloc[corev1.ResourceMemory] = resource.MustParse("3Gi")
	imgs := []corev1.ContainerImage{{Names: []string{"docker.io/library/busybox@sha256:aa", "docker.io/library/busybox:1"}, SizeBytes: 2 << 20}}
	f := nodeFacts{capacity: capacity, allocatable: alloc, pressureKnown: true, images: imgs, runtimeVersion: "containerd://2.1.0",
		info: machineInfo{kernelVersion: "6.1.0", osImage: "Debian GNU/Linux 12 (bookworm)", machineID: "m1", bootID: "b1"}}
	n := nodeObject("gw-1", "", f, nil, t0)
	if !equality.Semantic.DeepEqual(n.Status.Capacity, capacity) || !equality.Semantic.DeepEqual(n.Status.Allocatable, alloc) {
		t.Errorf("capacity %v, allocatable %v; want %v, %v", n.Status.Capacity, n.Status.Allocatable, capacity, alloc)
	}
	if !equality.Semantic.DeepEqual(n.Status.Images, imgs) {
		t.Errorf("images = %v, want %v", n.Status.Images, imgs)
	}
	info := n.Status.NodeInfo
	if info.ContainerRuntimeVersion != "containerd://2.1.0" || info.KernelVersion != "6.1.0" || info.MachineID != "m1" || info.BootID != "b1" || info.OSImage == "" || info.Architecture == "" {
		t.Errorf("node info = %+v", info)
	}
	conds := func(n *corev1.Node) string {
		var out []string
		for _, c := range n.Status.Conditions {
			out = append(out, fmt.Sprintf("%s=%s@%s", c.Type, c.Status, c.LastTransitionTime.Sub(t0)))
		}
		return strings.Join(out, " ")
	}
	if got, want := conds(n), "MemoryPressure=False@0s DiskPressure=False@0s PIDPressure=False@0s Ready=True@0s"; got != want {
		t.Errorf("conditions = %s, want %s", got, want)
	}
	f.pressure = []corev1.NodeConditionType{corev1.NodeMemoryPressure}
	n2 := nodeObject("gw-1", "", f, n, t0.Add(time.Minute))
	if got, want := conds(n2), "MemoryPressure=True@1m0s DiskPressure=False@0s PIDPressure=False@0s Ready=True@0s"; got != want {
		t.Errorf("conditions under memory pressure = %s, want %s", got, want)
	}
	if c := nodeCondition(n2, corev1.NodeMemoryPressure); c.Reason != "KubeletHasInsufficientMemory" || !c.LastHeartbeatTime.Equal(&metav1.Time{Time: t0.Add(time.Minute)}) {
		t.Errorf("MemoryPressure = %+v", c)
	}
	if !nodeNeedsReport(n2, n) {
		t.Error("nodeNeedsReport(hub with pressure, sent without) = false, want true")
	}
	// Unknown pressure: Ready alone, as the fake runtime's nodes report.
	f.pressureKnown = false
	if got, want := conds(nodeObject("gw-1", "", f, n2, t0.Add(2*time.Minute))), "Ready=True@0s"; got != want {
		t.Errorf("conditions without readings = %s, want %s", got, want)
	}
}

func TestContainerImages(t *testing.T) {
	recs := []ImageRecord{
		{Name: "docker.io/library/busybox:1", Digest: "sha256:b", Size: 2 << 20},
		{Name: "docker.io/library/busybox:latest", Digest: "sha256:b", Size: 2 << 20},
		{Name: "docker.io/library/busybox@sha256:b", Digest: "sha256:b", Size: 2 << 20},
		{Name: "registry.local:5000/app:v2", Digest: "sha256:a", Size: 90 << 20},
		{Name: "registry.local:5000/nodigest", Size: 1},
	}
	got := ContainerImages(recs)
	want := []corev1.ContainerImage{
		{Names: []string{"registry.local:5000/app@sha256:a", "registry.local:5000/app:v2"}, SizeBytes: 90 << 20},
		{Names: []string{"docker.io/library/busybox@sha256:b", "docker.io/library/busybox:1", "docker.io/library/busybox:latest"}, SizeBytes: 2 << 20},
		{Names: []string{"registry.local:5000/nodigest"}, SizeBytes: 1},
	}
	if !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("ContainerImages = %v, want %v", got, want)
	}

	// Kubelet's caps: 50 images, the largest; 5 names each.
	recs = nil
	for i := range 60 {
		recs = append(recs, ImageRecord{Name: fmt.Sprintf("r/i%d:1", i), Digest: fmt.Sprintf("sha256:%d", i), Size: int64(i)})
	}
	for i := range 7 {
		recs = append(recs, ImageRecord{Name: fmt.Sprintf("r/i59:t%d", i), Digest: "sha256:59", Size: 59})
	}
	got = ContainerImages(recs)
	if len(got) != MaxImages || got[0].SizeBytes != 59 || got[MaxImages-1].SizeBytes != 10 {
		t.Fatalf("ContainerImages of 60 = %d images, first %v, last %v; want 50 from size 59 down to 10", len(got), got[0], got[len(got)-1])
	}
	if len(got[0].Names) != MaxNamesPerImage {
		t.Errorf("names of an image with 9 = %v, want %d", got[0].Names, MaxNamesPerImage)
	}
	if got := ContainerImages(nil); len(got) != 0 {
		t.Errorf("ContainerImages(nil) = %v", got)
	}
}

// A pod bridge's address, of this node or of another agent's on the same
// machine, is not the node's InternalIP.
func TestInternalIP(t *testing.T) {
	not := []netip.Prefix{netip.MustParsePrefix("10.42.0.0/16"), netip.MustParsePrefix("10.43.0.0/16")}
	for _, tc := range []struct {
		ips  []string
		want string
	}{
		{[]string{"127.0.0.1", "10.42.0.1", "192.168.1.20"}, "192.168.1.20"},
		{[]string{"10.42.1.1", "10.42.0.1"}, "127.0.0.1"},
		{[]string{"fe80::1", "10.0.3.15"}, "10.0.3.15"},
		{nil, "127.0.0.1"},
	} {
		var ips []net.IP
		for _, s := range tc.ips {
			ips = append(ips, net.ParseIP(s))
		}
		if got := internalIP(ips, not); got != tc.want {
			t.Errorf("internalIP(%v) = %s, want %s", tc.ips, got, tc.want)
		}
	}
}
