package status

import (
	"bufio"
	"bytes"
	"cmp"
	"fmt"
	"io"
	"maps"
	"net"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/edge/eviction"
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

// ResourceList returns c as a resource list: cpu, memory and pods.
func (c Capacity) ResourceList() corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewMilliQuantity(c.CPUMillis, resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(c.MemoryBytes, resource.BinarySI),
		corev1.ResourcePods:   *resource.NewQuantity(c.Pods, resource.DecimalSI),
	}
}

// Machine is what the node's status reads of the machine at each report,
// on a node that measures it. Its methods must not block: they return
// what was measured last.
type Machine interface {
	// Resources returns the node's capacity and allocatable.
	Resources() (capacity, allocatable corev1.ResourceList)
	// Pressure returns the pressure conditions the node is under
	// (MemoryPressure, DiskPressure, PIDPressure), and ok false until
	// that is known, when no pressure condition is reported.
	Pressure() (conds []corev1.NodeConditionType, ok bool)
	// Images returns the node's images as its status lists them.
	Images() []corev1.ContainerImage
}

// nodeFacts is what a node status is made of.
type nodeFacts struct {
	capacity, allocatable corev1.ResourceList
	// pressure is reported when pressureKnown.
	pressure       []corev1.NodeConditionType
	pressureKnown  bool
	images         []corev1.ContainerImage
	runtimeVersion string
	addresses      []corev1.NodeAddress
	info           machineInfo
}

// facts returns what the node's status is made of now: from the Machine,
// or, without one, Capacity as both capacity and allocatable.
func (r *Reporter) facts(addrs []corev1.NodeAddress) nodeFacts {
	f := nodeFacts{runtimeVersion: r.cfg.RuntimeVersion, addresses: addrs, info: readMachineInfo()}
	if m := r.cfg.Machine; m != nil {
		f.capacity, f.allocatable = m.Resources()
		f.pressure, f.pressureKnown = m.Pressure()
		f.images = m.Images()
	} else {
		f.capacity = r.cfg.Capacity.ResourceList()
		f.allocatable = f.capacity.DeepCopy()
	}
	return f
}

// nodeObject returns the node's Node as the agent reports it: labels,
// capacity, allocatable, node info, addresses, images, the pressure
// conditions when known and the Ready condition, with prev's transition
// times kept where a condition did not change.
func nodeObject(name, site string, f nodeFacts, prev *corev1.Node, now time.Time) *corev1.Node {
	labels := map[string]string{
		corev1.LabelHostname:   name,
		corev1.LabelOSStable:   runtime.GOOS,
		corev1.LabelArchStable: runtime.GOARCH,
	}
	if site != "" {
		labels[wire.SiteLabel] = site
	}
	ready := corev1.NodeCondition{
		Type:               corev1.NodeReady,
		Status:             corev1.ConditionTrue,
		Reason:             "KubeletReady",
		Message:            "outpost edge agent is posting ready status",
		LastHeartbeatTime:  metav1.NewTime(now),
		LastTransitionTime: metav1.NewTime(now),
	}
	var prevConds []corev1.NodeCondition
	if prev != nil {
		prevConds = prev.Status.Conditions
	}
	for _, c := range prevConds {
		if c.Type == corev1.NodeReady && c.Status == ready.Status {
			ready.LastTransitionTime = c.LastTransitionTime
		}
	}
	var conds []corev1.NodeCondition
	if f.pressureKnown {
		// In kubelet's order: the pressure conditions, then Ready.
		conds = eviction.NodeConditions(f.pressure, prevConds, now)
	}
	conds = append(conds, ready)
	return &corev1.Node{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Status: corev1.NodeStatus{
			Capacity:    f.capacity.DeepCopy(),
			Allocatable: f.allocatable.DeepCopy(),
			Conditions:  conds,
			Addresses:   f.addresses,
			Images:      f.images,
			NodeInfo: corev1.NodeSystemInfo{
				MachineID:               f.info.machineID,
				SystemUUID:              f.info.systemUUID,
				BootID:                  f.info.bootID,
				OperatingSystem:         runtime.GOOS,
				Architecture:            runtime.GOARCH,
				KernelVersion:           f.info.kernelVersion,
				OSImage:                 f.info.osImage,
				ContainerRuntimeVersion: f.runtimeVersion,
				KubeletVersion:          "v1.33.0-outpost+" + version.Version,
				KubeProxyVersion:        "v1.33.0-outpost+" + version.Version,
			},
		},
	}
}

// MaxImages is the most images a node's status lists, and
// MaxNamesPerImage the most names of each, as kubelet's
// nodeStatusMaxImages and MaxNamesPerImageInNodeStatus.
const (
	MaxImages        = 50
	MaxNamesPerImage = 5
)

// ImageRecord is one name of an image the node holds.
type ImageRecord struct {
	Name   string // such as docker.io/library/busybox:1, or a repo@digest
	Digest string // of what the name points to
	Size   int64
}

// ContainerImages returns the node's status.images for records, as
// kubelet lists them: one entry per image (the records of one digest),
// named by its repo digests (repo@digest) then its tags, at most
// MaxNamesPerImage of them, the largest MaxImages images, largest first.
// No I/O; records is not modified.
func ContainerImages(records []ImageRecord) []corev1.ContainerImage {
	type image struct {
		digests, tags []string
		size          int64
	}
	byDigest := map[string]*image{}
	var all []*image
	for _, rec := range records {
		key := rec.Digest
		if key == "" {
			key = "name:" + rec.Name
		}
		im := byDigest[key]
		if im == nil {
			im = &image{}
			byDigest[key] = im
			all = append(all, im)
		}
		im.size = max(im.size, rec.Size)
		repo, isDigest := imageRepo(rec.Name)
		if isDigest {
			im.digests = appendNew(im.digests, rec.Name)
			continue
		}
		im.tags = appendNew(im.tags, rec.Name)
		if rec.Digest != "" {
			im.digests = appendNew(im.digests, repo+"@"+rec.Digest)
		}
	}
	out := make([]corev1.ContainerImage, 0, min(len(all), MaxImages))
	for _, im := range all {
		names := append(im.digests, im.tags...)
		out = append(out, corev1.ContainerImage{Names: names[:min(len(names), MaxNamesPerImage)], SizeBytes: im.size})
	}
	slices.SortStableFunc(out, func(a, b corev1.ContainerImage) int {
		return cmp.Or(cmp.Compare(b.SizeBytes, a.SizeBytes), strings.Compare(a.Names[0], b.Names[0]))
	})
	return out[:min(len(out), MaxImages)]
}

// imageRepo returns the repository of an image name, without its tag or
// digest, and whether the name is a digest reference (repo@digest).
func imageRepo(name string) (repo string, isDigest bool) {
	if r, _, ok := strings.Cut(name, "@"); ok {
		return r, true
	}
	if i := strings.LastIndexByte(name, ':'); i > strings.LastIndexByte(name, '/') {
		return name[:i], false
	}
	return name, false
}

func appendNew(l []string, s string) []string {
	if slices.Contains(l, s) {
		return l
	}
	return append(l, s)
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

// hostAddresses returns the node's hostname and its first IPv4 address
// that is neither loopback nor in one of the ranges of not, or 127.0.0.1
// when it has none.
func hostAddresses(name string, not []netip.Prefix) []corev1.NodeAddress {
	addrs := []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: name}}
	var ips []net.IP
	if ifaces, err := net.InterfaceAddrs(); err == nil {
		for _, a := range ifaces {
			if n, ok := a.(*net.IPNet); ok {
				ips = append(ips, n.IP)
			}
		}
	}
	return append(addrs, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: internalIP(ips, not)})
}

// internalIP returns the first of ips that is IPv4, not loopback and not
// in a range of not; 127.0.0.1 if none is.
func internalIP(ips []net.IP, not []netip.Prefix) string {
next:
	for _, ip := range ips {
		a, ok := netip.AddrFromSlice(ip.To4())
		if !ok || a.IsLoopback() {
			continue
		}
		for _, p := range not {
			if p.Contains(a) {
				continue next
			}
		}
		return a.String()
	}
	return "127.0.0.1"
}

// machineInfo is what the node's info says of the machine.
type machineInfo struct {
	kernelVersion, osImage        string
	machineID, systemUUID, bootID string
}

// readMachineInfo reads the machine's info, as kubelet's cAdvisor does;
// what cannot be read is left empty.
func readMachineInfo() machineInfo {
	return machineInfo{
		kernelVersion: readTrimmed("/proc/sys/kernel/osrelease"),
		osImage:       osImage(),
		machineID:     readTrimmed("/etc/machine-id"),
		systemUUID:    readTrimmed("/sys/class/dmi/id/product_uuid"),
		bootID:        readTrimmed("/proc/sys/kernel/random/boot_id"),
	}
}

// readTrimmed returns the first line of a small file, "" if it cannot be
// read.
func readTrimmed(p string) string {
	f, err := os.Open(p)
	if err != nil {
		return ""
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return ""
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return strings.TrimSpace(line)
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
	if r.node != nil && !maps.Equal(r.annotations(), r.node.Annotations) {
		due = true // what the agent says of itself changed
	}
	if !due && r.node != nil && now.Sub(r.nodeSent) < r.cfg.NodeStatusInterval {
		if !r.nodeChanged(now) {
			return r.nodeNext()
		}
		r.log.Info("node status on the hub differs from the agent's; reporting it again")
	}
	addrs := hostAddresses(r.cfg.NodeName, r.cfg.NotNodeAddresses)
	r.addrs.Store(&addrs)
	n := nodeObject(r.cfg.NodeName, r.cfg.Site, r.facts(addrs), r.node, now)
	n.Annotations = r.annotations()
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

// annotations returns the Node annotations the agent sets, nil for none.
func (r *Reporter) annotations() map[string]string {
	if r.cfg.Annotations == nil {
		return nil
	}
	a := r.cfg.Annotations()
	if len(a) == 0 {
		return nil
	}
	return a
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
