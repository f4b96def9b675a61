package status

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

	"github.com/outpost-mesh/outpost/edge/objects"
	"github.com/outpost-mesh/outpost/internal/version"

	"github.com/outpost-mesh/outpost/sync/wire"
)

// Capacity is what the node offers to pods.
type Capacity struct {
	CPUMillis   int64
	MemoryBytes int64
	Pods        int64
}

// HostCapacity reads this machine's CPUs and memory; pods default to 110,
// kubelet's default.
func HostCapacity() Capacity {
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

// reportNode queues the node's status when it is due: at the first round,
// at the first after each connection to the hub (which sets the
// conditions of a node it lost Unknown, and has them back from the
// report within seconds of the return rather than at the next interval),
// then every NodeStatusInterval, or when the hub's copy drifted. What the
// status holds is looked up only then, so between two reports it cannot
// have changed. It returns when the next report is due.
func (r *Reporter) reportNode(now time.Time) time.Time {
	due := r.nodeDue.Swap(false)
	if !due && r.node != nil && now.Sub(r.nodeSent) < r.cfg.NodeStatusInterval {
		if !r.nodeChanged(now) {
			return r.nodeNext()
		}
		r.log.Info("node status on the hub differs from the agent's; reporting it again")
	}
	addrs := hostAddresses(r.cfg.NodeName)
	r.addrs.Store(&addrs)
	n := nodeObject(r.cfg.NodeName, r.cfg.Site, r.cfg.Capacity, r.cfg.RuntimeVersion, addrs, r.node, now)
	raw, err := objects.Encode(n)
	if err != nil {
		r.log.Warn("encode node status", "err", err)
		return r.nodeNext()
	}
	if _, err := r.cfg.Store.Enqueue(wire.KindNodeStatus, wire.Key{Resource: wire.ResourceNodes, Name: r.cfg.NodeName}, raw); err != nil {
		r.log.Warn("queue node status", "err", err)
		if due {
			r.nodeDue.Store(true) // at the next round, then
		}
		return now.Add(time.Second)
	}
	r.node, r.nodeSent = n, now
	return r.nodeNext()
}

// nodeNext returns when the node's status is next due: an interval after
// the last report, or sooner if a drift found too soon after the last
// report made again waits for StatusResync.
func (r *Reporter) nodeNext() time.Time {
	next := r.nodeSent.Add(r.cfg.NodeStatusInterval)
	if r.nodeViewed.Load() && !r.nodeResent.IsZero() {
		if t := r.nodeResent.Add(r.cfg.StatusResync); t.Before(next) {
			next = t
		}
	}
	return next
}

// nodeChanged reports whether the hub's copy of the node, as the view has
// it, shows that another writer changed what the agent reported last
// (nodeNeedsReport), as kubelet compares its node's status with the API's
// copy: the hub's node lifecycle controller sets a node's conditions
// Unknown when it thinks it unreachable, and may yet do so just after the
// node's return, before it has seen the node's Lease renewed. A report so
// made is made at most once per StatusResync, so that a writer that keeps
// setting them back is not answered in a loop.
func (r *Reporter) nodeChanged(now time.Time) bool {
	if !r.nodeViewed.Load() {
		return false
	}
	if !r.nodeResent.IsZero() && now.Sub(r.nodeResent) < r.cfg.StatusResync {
		return false // and look again when nodeNext says
	}
	r.nodeViewed.Store(false)
	o, ok, err := r.cfg.Store.Get(wire.Key{Resource: wire.ResourceNodes, Name: r.cfg.NodeName})
	if err != nil || !ok {
		return false
	}
	var hub corev1.Node
	if err := objects.Decode(o.Raw, o.Revision, &hub); err != nil {
		return false
	}
	if !nodeNeedsReport(&hub, r.node) {
		return false
	}
	r.nodeResent = now
	return true
}
