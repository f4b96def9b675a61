package eviction

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	resourcehelper "k8s.io/component-helpers/resource"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"

	"github.com/outpost-mesh/outpost/edge/cgroups"
)

// Wording of evictions, as kubelet's.
const (
	// Reason is an evicted pod's status reason, and its event's.
	Reason = "Evicted"
	// ReasonThresholdMet is the node event's reason when eviction starts.
	ReasonThresholdMet = "EvictionThresholdMet"

	nodeLowMessageFmt       = "The node was low on resource: %v. "
	nodeConditionMessageFmt = "The node had condition: %v. "
	thresholdMetMessageFmt  = "Threshold quantity: %v, available: %v. "
	containerMessageFmt     = "Container %s was using %s, request is %s, has larger consumption of %v. "

	// Keys of an eviction event's annotations.
	AnnotationOffendingContainers      = "offending_containers"
	AnnotationOffendingContainersUsage = "offending_containers_usage"
	AnnotationStarvedResource          = "starved_resource"
)

// PodUsage is an active pod with what it uses; HasStats false when its
// usage could not be read (such a pod is ranked first, as kubelet does).
type PodUsage struct {
	Pod      *corev1.Pod
	HasStats bool
	// MemoryWorkingSet is the pod cgroup's working set.
	MemoryWorkingSet int64
	// Containers' usage, for disk ranking and the eviction message.
	Containers []ContainerUsage
	// VolumeBytes and VolumeInodes are the pod's local volumes' use
	// (emptyDir on disk, its logs directory's volumes).
	VolumeBytes, VolumeInodes int64
	// Processes is the pod's task count.
	Processes int64
}

// ContainerUsage is one container's use.
type ContainerUsage struct {
	Name                      string
	MemoryWorkingSet          int64
	RootfsBytes, RootfsInodes int64 // its writable layer
	LogsBytes, LogsInodes     int64
}

// Event is an event to record, on the node or on a pod.
type Event struct {
	Type, Reason, Message string
	Annotations           map[string]string
}

// Eviction is the pod to evict and how to word it.
type Eviction struct {
	Pod      *corev1.Pod
	Signal   Signal
	Resource corev1.ResourceName
	// GracePeriod is the termination grace to give: 0 for a hard
	// threshold; for a soft one the pod's own, capped by
	// MaxPodGracePeriod when set.
	GracePeriod time.Duration
	// Message is the pod's status message; its phase becomes Failed and
	// its reason Reason.
	Message string
	// Condition is the DisruptionTarget condition to add to its status.
	Condition corev1.PodCondition
	// Event is the Warning event to record on the pod.
	Event Event
}

// Decision is a round's outcome.
type Decision struct {
	// Pressure are the conditions the node is under: a threshold of
	// theirs met within the transition period. Sorted.
	Pressure []corev1.NodeConditionType
	// Met are the thresholds met whose grace periods have passed.
	Met []Threshold
	// Starved is the resource eviction reclaims ("" when none), and
	// NodeEvent the node's event about it.
	Starved   corev1.ResourceName
	NodeEvent *Event
	// ReclaimImages asks for unused images to be deleted and the
	// threshold checked again (Resolved) before Evict is carried out.
	ReclaimImages bool
	// Evict is the one pod to evict this round, nil for none.
	Evict *Eviction
}

// Core is kubelet's eviction manager as a state machine: Observe takes a
// round's readings and active pods and says what the node is under and
// which pod to evict. No I/O; time passed in. Not safe for concurrent use.
type Core struct {
	thresholds        []Threshold
	transition        time.Duration
	maxGrace          time.Duration
	firstObserved     map[string]time.Time
	conditionLastSeen map[corev1.NodeConditionType]time.Time
	met               []Threshold // met with grace periods passed, last round
}

// NewCore returns a Core for cfg's thresholds and periods.
func NewCore(cfg *Config) *Core {
	return &Core{
		thresholds:        slices.Clone(cfg.Thresholds),
		transition:        cfg.PressureTransitionPeriod,
		maxGrace:          cfg.MaxPodGracePeriod,
		firstObserved:     map[string]time.Time{},
		conditionLastSeen: map[corev1.NodeConditionType]time.Time{},
	}
}

// Observe runs one round at now. pods are the node's active pods; Observe
// does not modify them.
func (c *Core) Observe(r Readings, pods []PodUsage, now time.Time) Decision {
	// Thresholds met now, and those met before not yet past their min
	// reclaim.
	met := thresholdsMet(c.thresholds, r, false)
	for _, t := range thresholdsMet(c.met, r, true) {
		if !slices.ContainsFunc(met, func(m Threshold) bool { return m.key() == t.key() }) {
			met = append(met, t)
		}
	}
	first := map[string]time.Time{}
	for _, t := range met {
		at, ok := c.firstObserved[t.key()]
		if !ok {
			at = now
		}
		first[t.key()] = at
	}
	c.firstObserved = first
	for _, t := range met {
		c.conditionLastSeen[signalResource[t.Signal].condition] = now
	}
	var d Decision
	for cond, at := range c.conditionLastSeen {
		if now.Sub(at) < c.transition || at.Equal(now) {
			d.Pressure = append(d.Pressure, cond)
		} else {
			delete(c.conditionLastSeen, cond)
		}
	}
	slices.Sort(d.Pressure)
	for _, t := range met {
		if now.Sub(first[t.key()]) >= t.GracePeriod {
			d.Met = append(d.Met, t)
		}
	}
	c.met = d.Met
	if len(d.Met) == 0 {
		return d
	}

	// Memory first, as kubelet ranks thresholds.
	reclaim := slices.Clone(d.Met)
	slices.SortStableFunc(reclaim, func(a, b Threshold) int {
		return cmp.Compare(signalOrder(a.Signal), signalOrder(b.Signal))
	})
	t := reclaim[0]
	d.Starved = signalResource[t.Signal].resource
	d.NodeEvent = &Event{Type: corev1.EventTypeWarning, Reason: ReasonThresholdMet,
		Message: fmt.Sprintf("Attempting to reclaim %s", d.Starved)}
	d.ReclaimImages = t.Signal == SignalImageFsAvailable || t.Signal == SignalImageFsInodesFree ||
		(!r.DedicatedImageFs && (t.Signal == SignalNodeFsAvailable || t.Signal == SignalNodeFsInodesFree))

	ranked := Rank(t.Signal, pods, r.DedicatedImageFs)
	for i := range ranked {
		p := &ranked[i]
		if cgroups.IsCritical(p.Pod) {
			continue
		}
		d.Evict = c.eviction(p, t, d.Starved, d.Met, r)
		break
	}
	return d
}

func signalOrder(s Signal) int {
	if s == SignalMemoryAvailable {
		return 0
	}
	return 1
}

// Resolved reports whether no threshold among met is still met past its
// min reclaim with the readings r taken after reclaiming node-level
// resources (images), in which case no pod need be evicted.
func Resolved(met []Threshold, r Readings) bool {
	return len(thresholdsMet(met, r, true)) == 0
}

func thresholdsMet(ts []Threshold, r Readings, withReclaim bool) []Threshold {
	var out []Threshold
	for _, t := range ts {
		if o, ok := r.Signals[t.Signal]; ok && t.met(o, withReclaim) {
			out = append(out, t)
		}
	}
	return out
}

func (c *Core) eviction(p *PodUsage, t Threshold, starved corev1.ResourceName, met []Threshold, r Readings) *Eviction {
	msg, ann := evictionMessage(starved, p, met, r)
	e := &Eviction{
		Pod: p.Pod, Signal: t.Signal, Resource: starved, Message: msg,
		Condition: corev1.PodCondition{
			Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
			Reason: corev1.PodReasonTerminationByKubelet, Message: msg,
		},
		Event: Event{Type: corev1.EventTypeWarning, Reason: Reason, Message: msg, Annotations: ann},
	}
	if t.GracePeriod > 0 {
		g := 30 * time.Second
		if s := p.Pod.Spec.TerminationGracePeriodSeconds; s != nil {
			g = time.Duration(*s) * time.Second
		}
		if c.maxGrace > 0 && g > c.maxGrace {
			g = c.maxGrace
		}
		e.GracePeriod = g
	}
	return e
}

// evictionMessage words an eviction as kubelet: the starved resource, the
// threshold and what was available, and each container using more than
// it requested.
func evictionMessage(starved corev1.ResourceName, p *PodUsage, met []Threshold, r Readings) (string, map[string]string) {
	msg := fmt.Sprintf(nodeLowMessageFmt, starved)
	for _, t := range met {
		if signalResource[t.Signal].resource != starved {
			continue
		}
		if o, ok := r.Signals[t.Signal]; ok {
			avail := resource.NewQuantity(o.Available, resource.BinarySI)
			if starved == ResourceInodes || starved == ResourcePids {
				avail = resource.NewQuantity(o.Available, resource.DecimalSI)
			}
			msg += fmt.Sprintf(thresholdMetMessageFmt, t.Value.Of(o.Capacity), avail)
			break
		}
	}
	ann := map[string]string{}
	if !p.HasStats {
		return msg, ann
	}
	var names, usages []string
	containers := append(slices.Clone(p.Pod.Spec.Containers), p.Pod.Spec.InitContainers...)
	for _, cu := range p.Containers {
		for i := range containers {
			c := &containers[i]
			if c.Name != cu.Name {
				continue
			}
			req := c.Resources.Requests[starved]
			var usage *resource.Quantity
			switch starved {
			case corev1.ResourceMemory:
				usage = resource.NewQuantity(cu.MemoryWorkingSet, resource.BinarySI)
			case corev1.ResourceEphemeralStorage:
				usage = resource.NewQuantity(cu.RootfsBytes+cu.LogsBytes, resource.BinarySI)
			}
			if usage != nil && usage.Cmp(req) > 0 {
				msg += fmt.Sprintf(containerMessageFmt, c.Name, usage.String(), req.String(), starved)
				names = append(names, c.Name)
				usages = append(usages, usage.String())
			}
			break
		}
	}
	ann[AnnotationOffendingContainers] = strings.Join(names, ",")
	ann[AnnotationOffendingContainersUsage] = strings.Join(usages, ",")
	ann[AnnotationStarvedResource] = string(starved)
	return msg, ann
}

// Rank returns pods in the order kubelet would evict them for signal
// (a sorted copy; pods is not modified). Memory: pods whose working set
// exceeds their memory request first, then by lower priority, then by
// more use above the request. Disk: likewise by disk use (or inodes)
// against the ephemeral-storage request, counting the writable layers,
// logs and local volumes, or, with a dedicated imagefs, only the layers
// for imagefs and only logs and volumes for nodefs. PIDs: by lower
// priority, then more processes. Pods without stats come first.
func Rank(signal Signal, pods []PodUsage, dedicatedImageFs bool) []PodUsage {
	out := slices.Clone(pods)
	var use func(p *PodUsage) int64
	var res corev1.ResourceName
	switch signal {
	case SignalMemoryAvailable:
		use, res = func(p *PodUsage) int64 { return p.MemoryWorkingSet }, corev1.ResourceMemory
	case SignalPIDAvailable:
		slices.SortStableFunc(out, func(a, b PodUsage) int {
			if c := cmpNoStats(&a, &b); c != 0 {
				return c
			}
			if c := cmp.Compare(corev1helpers.PodPriority(a.Pod), corev1helpers.PodPriority(b.Pod)); c != 0 {
				return c
			}
			return cmp.Compare(b.Processes, a.Processes)
		})
		return out
	default:
		inodes := signal == SignalNodeFsInodesFree || signal == SignalImageFsInodesFree
		layers, logsVolumes := true, true
		if dedicatedImageFs {
			imagefs := signal == SignalImageFsAvailable || signal == SignalImageFsInodesFree
			layers, logsVolumes = imagefs, !imagefs
		}
		use = func(p *PodUsage) int64 { return diskUse(p, inodes, layers, logsVolumes) }
		res = corev1.ResourceEphemeralStorage
		if inodes {
			res = ResourceInodes
		}
	}
	request := func(p *PodUsage) int64 {
		q := resourcehelper.PodRequests(cgroups.DefaultRequests(p.Pod), resourcehelper.PodResourcesOptions{})[res]
		return q.Value()
	}
	slices.SortStableFunc(out, func(a, b PodUsage) int {
		if c := cmpNoStats(&a, &b); c != 0 {
			return c
		}
		ua, ub := use(&a), use(&b)
		ra, rb := request(&a), request(&b)
		if ea, eb := ua > ra, ub > rb; ea != eb {
			if ea {
				return -1
			}
			return 1
		}
		if c := cmp.Compare(corev1helpers.PodPriority(a.Pod), corev1helpers.PodPriority(b.Pod)); c != 0 {
			return c
		}
		return cmp.Compare(ub-rb, ua-ra)
	})
	return out
}

func cmpNoStats(a, b *PodUsage) int {
	switch {
	case a.HasStats == b.HasStats:
		return 0
	case !a.HasStats:
		return -1
	}
	return 1
}

func diskUse(p *PodUsage, inodes, layers, logsVolumes bool) int64 {
	var n int64
	for _, c := range p.Containers {
		if layers {
			n += pick(inodes, c.RootfsInodes, c.RootfsBytes)
		}
		if logsVolumes {
			n += pick(inodes, c.LogsInodes, c.LogsBytes)
		}
	}
	if logsVolumes {
		n += pick(inodes, p.VolumeInodes, p.VolumeBytes)
	}
	return n
}

func pick(inodes bool, i, b int64) int64 {
	if inodes {
		return i
	}
	return b
}

// NodeConditions returns the node's MemoryPressure, DiskPressure and
// PIDPressure conditions for pressure, worded as kubelet's, heartbeat at
// now, with prev's transition times kept where a status did not change.
func NodeConditions(pressure []corev1.NodeConditionType, prev []corev1.NodeCondition, now time.Time) []corev1.NodeCondition {
	words := []struct {
		t                                  corev1.NodeConditionType
		okReason, okMsg, badReason, badMsg string
	}{
		{corev1.NodeMemoryPressure, "KubeletHasSufficientMemory", "kubelet has sufficient memory available",
			"KubeletHasInsufficientMemory", "kubelet has insufficient memory available"},
		{corev1.NodeDiskPressure, "KubeletHasNoDiskPressure", "kubelet has no disk pressure",
			"KubeletHasDiskPressure", "kubelet has disk pressure"},
		{corev1.NodePIDPressure, "KubeletHasSufficientPID", "kubelet has sufficient PID available",
			"KubeletHasInsufficientPID", "kubelet has insufficient PID available"},
	}
	out := make([]corev1.NodeCondition, 0, len(words))
	for _, w := range words {
		c := corev1.NodeCondition{Type: w.t, Status: corev1.ConditionFalse, Reason: w.okReason, Message: w.okMsg,
			LastHeartbeatTime: metav1.NewTime(now), LastTransitionTime: metav1.NewTime(now)}
		if slices.Contains(pressure, w.t) {
			c.Status, c.Reason, c.Message = corev1.ConditionTrue, w.badReason, w.badMsg
		}
		for _, p := range prev {
			if p.Type == w.t && p.Status == c.Status {
				c.LastTransitionTime = p.LastTransitionTime
			}
		}
		out = append(out, c)
	}
	return out
}
