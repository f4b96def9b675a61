package agent

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/outpost-mesh/outpost/edge/eviction"
	"github.com/outpost-mesh/outpost/edge/pods"
	"github.com/outpost-mesh/outpost/edge/status"
)

// nodeResources returns the node's capacity, allocatable and what the
// pods' cgroup may hold: Capacity's cpu, memory and pods and, on a node
// that measures the machine, the size of the data directory's file
// system as ephemeral-storage; allocatable less the system reserve and
// the hard eviction thresholds, the pods' cgroup less the reserve alone,
// as kubelet's.
func (a *Agent) nodeResources() (capacity, allocatable, reserved corev1.ResourceList) {
	capacity = a.cfg.Capacity.ResourceList()
	if a.cfg.Eviction != nil {
		if fs, err := eviction.StatFs(a.cfg.DataDir); err == nil {
			capacity[corev1.ResourceEphemeralStorage] = *resource.NewQuantity(fs.CapacityBytes, resource.BinarySI)
		} else {
			a.log.Warn("no ephemeral-storage capacity", "err", err)
		}
	}
	var sys corev1.ResourceList
	if a.cfg.Pods != nil {
		sys = a.cfg.Pods.SystemReserved
	}
	thresholds := eviction.DefaultThresholds()
	if a.cfg.Eviction != nil {
		thresholds = a.cfg.Eviction.Thresholds
	}
	return capacity, eviction.Allocatable(capacity, sys, nil, thresholds), eviction.Reserved(capacity, sys, nil)
}

// pressure is node-pressure eviction as the agent wires it: the eviction
// Monitor, fed the pods of the workers' latest round, carrying out its
// evictions through the workers and the event recorder, and telling the
// status reporter of the machine (status.Machine).
type pressure struct {
	a                     *Agent
	monitor               *eviction.Monitor
	capacity, allocatable corev1.ResourceList
	images                *nodeImages // nil without an image service

	round    atomic.Pointer[status.Round] // the pod workers' latest
	reported atomic.Pointer[[]corev1.NodeConditionType]
}

// buildPressure builds the eviction Monitor of cfg.Eviction; it starts
// nothing.
func (a *Agent) buildPressure(capacity, allocatable corev1.ResourceList) (*pressure, error) {
	p := &pressure{a: a, capacity: capacity, allocatable: allocatable}
	ec := *a.cfg.Eviction
	for _, t := range ec.Thresholds {
		if t.GracePeriod > 0 {
			return nil, fmt.Errorf("eviction threshold %v: soft thresholds are not supported; the agent evicts at hard thresholds only", t)
		}
	}
	ec.DataDir = a.cfg.DataDir
	ec.MaxPods = a.cfg.Capacity.Pods
	if a.cfg.Pods != nil {
		ec.SystemReserved = a.cfg.Pods.SystemReserved
	}
	if a.images != nil {
		p.images = &nodeImages{a: a}
		if root := a.imagesRoot; root != "" {
			ec.ImageFsDir, ec.ImageGC = root, imageGC{a}
		}
	}
	ec.Evictor, ec.OnRound = p, p.onRound
	ec.Logger = a.log.With("component", "eviction")
	m, err := eviction.New(ec, p)
	if err != nil {
		return nil, fmt.Errorf("eviction: %w", err)
	}
	p.monitor = m
	return p, nil
}

// run runs the Monitor and the image list until ctx ends.
func (p *pressure) run(ctx context.Context) {
	var wg sync.WaitGroup
	if p.images != nil {
		wg.Go(func() { p.images.run(ctx) })
	}
	p.monitor.Run(ctx)
	wg.Wait()
}

// onRound has the node's status reported at once when the pressure
// conditions changed.
func (p *pressure) onRound(s eviction.Snapshot) {
	now := s.Decision.Pressure
	if last := p.reported.Swap(&now); last == nil || !slices.Equal(*last, now) {
		p.a.status.NodeDue()
	}
}

// Resources implements status.Machine.
func (p *pressure) Resources() (capacity, allocatable corev1.ResourceList) {
	return p.capacity, p.allocatable
}

// Pressure implements status.Machine.
func (p *pressure) Pressure() ([]corev1.NodeConditionType, bool) { return p.monitor.Pressure() }

// Images implements status.Machine.
func (p *pressure) Images() []corev1.ContainerImage {
	if p.images == nil {
		return nil
	}
	return p.images.get()
}

// ActivePods implements eviction.PodSource: the pods the workers admitted
// that have not ended nor are being deleted, with their pod cgroups' use
// and the disk their logs and volumes take, on a node of real pods.
func (p *pressure) ActivePods(context.Context) ([]eviction.PodUsage, error) {
	rd := p.round.Load()
	if rd == nil {
		return nil, nil // no pod known yet
	}
	var out []eviction.PodUsage
	for _, pod := range rd.Desired {
		rec, ok := rd.Records[string(pod.UID)]
		if !ok || rec.Terminal || rec.Rejected != nil || pod.DeletionTimestamp != nil ||
			pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		out = append(out, p.usage(pod))
	}
	return out, nil
}

// usage measures pod; HasStats false when its cgroup cannot be read (the
// fake runtime's pods have none).
func (p *pressure) usage(pod *corev1.Pod) eviction.PodUsage {
	u := eviction.PodUsage{Pod: pod}
	rp := p.a.real
	if rp == nil {
		return u
	}
	st, err := rp.cgroups.PodStats(pod.UID)
	if err != nil {
		return u
	}
	u.HasStats, u.MemoryWorkingSet, u.Processes = true, st.MemoryWorkingSet, st.Pids
	// A pod's logs and volumes are what it holds of nodefs beside its
	// containers' writable layers, which are containerd's to measure.
	uid := string(pod.UID)
	for _, dir := range []string{
		filepath.Join(p.a.cfg.DataDir, LogsDir, pod.Namespace+"_"+pod.Name+"_"+uid),
		filepath.Join(p.a.cfg.DataDir, VolumesDir, uid),
	} {
		if b, n, err := eviction.DirUsage(dir); err == nil {
			u.VolumeBytes += b
			u.VolumeInodes += n
		}
	}
	return u
}

// NodeEvent implements eviction.Evictor.
func (p *pressure) NodeEvent(e eviction.Event) { p.a.events.Node(e.Type, e.Reason, e.Message) }

// Evict implements eviction.Evictor: the pod's worker kills it at once
// and marks it Failed with reason Evicted.
func (p *pressure) Evict(_ context.Context, e *eviction.Eviction) error {
	pod := e.Pod
	if !p.a.pods.Evict(string(pod.UID), pods.Rejection{Reason: eviction.Reason, Message: e.Message}) {
		return fmt.Errorf("pod %s/%s: not running on the node", pod.Namespace, pod.Name)
	}
	p.a.events.AnnotatedPod(refOf(pod), pod, "", e.Event.Annotations, e.Event.Type, e.Event.Reason, e.Event.Message)
	return nil
}

// PodCleanedUp implements eviction.Evictor: the pod ended, as the latest
// round of the workers has it, or is gone.
func (p *pressure) PodCleanedUp(uid string) bool {
	rd := p.round.Load()
	if rd == nil {
		return false
	}
	rec, ok := rd.Records[uid]
	return !ok || rec.Terminal
}

// admitUnderPressure is the eviction manager's admission: nil, or why
// pod may not start while the node is under pressure.
func (p *pressure) admitUnderPressure(pod *corev1.Pod) *pods.Rejection {
	conds, _ := p.monitor.Pressure()
	r := eviction.AdmitUnderPressure(pod, conds)
	if r.Admit {
		return nil
	}
	return &pods.Rejection{Reason: r.Reason, Message: r.Message}
}

// roundTee is the status reporter as the pod workers' podworker.Status,
// keeping each round for the eviction Monitor.
type roundTee struct {
	*status.Reporter
	p *pressure
}

// Observe keeps rd and hands it to the reporter; nobody modifies a
// round once handed over, so it is shared.
func (t roundTee) Observe(rd status.Round) {
	t.p.round.Store(&rd)
	t.Reporter.Observe(rd)
}

// imageGC is the images Service as the eviction Monitor's ImageGC.
type imageGC struct{ a *Agent }

func (g imageGC) DeleteUnusedImages(ctx context.Context) error {
	inUse, err := g.a.imagesInUse(ctx)
	if err != nil {
		return err
	}
	_, err = g.a.images.DeleteUnused(ctx, inUse)
	return err
}

// imageListEvery is how often the node's image list is read again, as
// kubelet's image cache.
const imageListEvery = 30 * time.Second

// nodeImages keeps the node's images as its status lists them.
type nodeImages struct {
	a      *Agent
	latest atomic.Pointer[[]corev1.ContainerImage]
}

func (n *nodeImages) get() []corev1.ContainerImage {
	if l := n.latest.Load(); l != nil {
		return *l
	}
	return nil
}

// run lists the images at once and every imageListEvery until ctx ends,
// having the node's status reported when they changed.
func (n *nodeImages) run(ctx context.Context) {
	t := time.NewTicker(imageListEvery)
	defer t.Stop()
	for {
		lctx, cancel := context.WithTimeout(ctx, imageListEvery)
		imgs, err := n.a.images.List(lctx)
		cancel()
		if err == nil {
			recs := make([]status.ImageRecord, len(imgs))
			for i, im := range imgs {
				recs[i] = status.ImageRecord{Name: im.Name, Digest: im.Digest, Size: im.Size}
			}
			l := status.ContainerImages(recs)
			if old := n.latest.Swap(&l); old == nil || !equality.Semantic.DeepEqual(*old, l) {
				n.a.status.NodeDue()
			}
		} else if ctx.Err() == nil {
			n.a.log.Warn("list the node's images", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

var (
	_ eviction.PodSource = (*pressure)(nil)
	_ eviction.Evictor   = (*pressure)(nil)
	_ status.Machine     = (*pressure)(nil)
)
