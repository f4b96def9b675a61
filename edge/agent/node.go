package agent

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/internal/version"

	"github.com/outpost-mesh/outpost/sync/wire"
)

// Capacity is what the node offers to pods.
type Capacity struct {
	CPUMillis   int64
	MemoryBytes int64
	Pods        int64
}

// hostCapacity reads this machine's CPUs and memory; pods default to 110,
// kubelet's default.
func hostCapacity() Capacity {
	c := Capacity{CPUMillis: int64(runtime.NumCPU()) * 1000, Pods: 110}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) >= 2 && f[0] == "MemTotal:" {
				if kb, err := strconv.ParseInt(f[1], 10, 64); err == nil {
					c.MemoryBytes = kb * 1024
				}
			}
		}
	}
	return c
}

// nodeObject returns the node's Node as the agent reports it: labels,
// capacity, allocatable, node info, addresses and the Ready condition, with
// prev's transition times kept where the condition did not change.
func nodeObject(name, site string, capacity Capacity, runtimeVersion string, addresses []corev1.NodeAddress, prev *corev1.Node, now time.Time) *corev1.Node {
	labels := map[string]string{
		corev1.LabelHostname:   name,
		corev1.LabelOSStable:   runtime.GOOS,
		corev1.LabelArchStable: runtime.GOARCH,
	}
	if site != "" {
		labels[wire.SiteLabel] = site
	}
	res := corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewMilliQuantity(capacity.CPUMillis, resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(capacity.MemoryBytes, resource.BinarySI),
		corev1.ResourcePods:   *resource.NewQuantity(capacity.Pods, resource.DecimalSI),
	}
	ready := corev1.NodeCondition{
		Type:               corev1.NodeReady,
		Status:             corev1.ConditionTrue,
		Reason:             "KubeletReady",
		Message:            "outpost edge agent is posting ready status",
		LastHeartbeatTime:  metav1.NewTime(now),
		LastTransitionTime: metav1.NewTime(now),
	}
	if prev != nil {
		for _, c := range prev.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == ready.Status {
				ready.LastTransitionTime = c.LastTransitionTime
			}
		}
	}
	return &corev1.Node{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Status: corev1.NodeStatus{
			Capacity:    res,
			Allocatable: res.DeepCopy(),
			Conditions:  []corev1.NodeCondition{ready},
			Addresses:   addresses,
			NodeInfo: corev1.NodeSystemInfo{
				OperatingSystem:         runtime.GOOS,
				Architecture:            runtime.GOARCH,
				KernelVersion:           kernelVersion(),
				OSImage:                 osImage(),
				ContainerRuntimeVersion: runtimeVersion,
				KubeletVersion:          "v1.33.0-outpost+" + version.Version,
				KubeProxyVersion:        "v1.33.0-outpost+" + version.Version,
			},
		},
	}
}

// postedConditions are the node conditions kubelet posts, which the hub's
// node lifecycle controller sets Unknown when it stops hearing of a node.
var postedConditions = []corev1.NodeConditionType{
	corev1.NodeReady, corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure,
}

// nodeNeedsReport reports whether hub, the hub's copy of the node, shows
// that another writer changed the status the agent reported last as
// sent: a condition of sent with another status there, or one of
// postedConditions Unknown, which the agent's report would set or remove
// (the hub replaces a node's status with its report). A copy older than
// sent, whose Ready heartbeat (which only the node sets) is older, is no
// reason: the hub has not applied sent yet. Conditions others post
// (NetworkUnavailable, a site mesh's) are not the agent's to fight over.
func nodeNeedsReport(hub, sent *corev1.Node) bool {
	if sent == nil {
		return false
	}
	ready := func(n *corev1.Node) *corev1.NodeCondition { return nodeCondition(n, corev1.NodeReady) }
	h, s := ready(hub), ready(sent)
	if h == nil || s == nil || h.LastHeartbeatTime.Unix() < s.LastHeartbeatTime.Unix() {
		return false
	}
	for _, c := range sent.Status.Conditions {
		if hc := nodeCondition(hub, c.Type); hc == nil || hc.Status != c.Status {
			return true
		}
	}
	for _, t := range postedConditions {
		if hc := nodeCondition(hub, t); hc != nil && hc.Status == corev1.ConditionUnknown {
			return true
		}
	}
	return false
}

func nodeCondition(n *corev1.Node, t corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == t {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// hostAddresses returns the node's hostname and its first non-loopback
// IPv4 address, or 127.0.0.1 when it has none.
func hostAddresses(name string) []corev1.NodeAddress {
	addrs := []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: name}}
	ip := "127.0.0.1"
	if ifaces, err := net.InterfaceAddrs(); err == nil {
		for _, a := range ifaces {
			if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
				ip = n.IP.String()
				break
			}
		}
	}
	return append(addrs, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip})
}

func kernelVersion() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func osImage() string {
	b, err := os.ReadFile("/etc/os-release")
	if err != nil {
		return runtime.GOOS
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "PRETTY_NAME="); ok {
			if s, err := strconv.Unquote(v); err == nil {
				return s
			}
			return v
		}
	}
	return fmt.Sprint(runtime.GOOS)
}
