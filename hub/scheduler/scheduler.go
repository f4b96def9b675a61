// Package scheduler places pods on nodes as kube-scheduler's default
// profile does. It watches pods and nodes through the shared informers,
// takes the pods with no spec.nodeName whose schedulerName is Name (or
// empty), asks the pure core (hub/scheduler/core) for a node, assumes
// the pod there in its cache so the next pod sees it, and binds through
// the pods/binding subresource in the background. Pods no node fits get
// a FailedScheduling event and the PodScheduled=False condition with
// upstream's message, and wait until the cluster changes in a way that
// may help them (hub/scheduler/queue).
//
// There is no preemption: a pod that fits nowhere waits, whatever its
// priority, and priority only orders the queue. A pod whose nodeName the
// user set, or that names another scheduler, is never touched.
package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"

	"github.com/outpost-mesh/outpost/hub/controllers"
	"github.com/outpost-mesh/outpost/hub/scheduler/core"
	"github.com/outpost-mesh/outpost/hub/scheduler/queue"
)

// Name is the scheduler's name, which pods choose it by in
// spec.schedulerName and which its events come from.
const Name = corev1.DefaultSchedulerName

// bindConcurrency bounds the bindings and status writes in flight; the
// scheduling loop waits when they are all busy.
const bindConcurrency = 32

// noteLengthLimit is the longest event message, as upstream truncates it.
const noteLengthLimit = 1024

// Scheduler is the scheduler's I/O shell. Build it with New, then Run it.
type Scheduler struct {
	client kubernetes.Interface
	events record.EventRecorder
	clock  clock.WithTicker
	log    *slog.Logger

	pods       corelisters.PodLister
	namespaces namespaces
	synced     []cache.InformerSynced

	queue *queue.Queue
	sem   chan struct{} // bindConcurrency slots
	wg    sync.WaitGroup

	mu    sync.Mutex // guards cache and algo; a scheduling cycle holds it
	cache *core.Cache
	algo  *core.Scheduler
}

// New builds the scheduler from c, whose client acts as
// system:kube-scheduler, and registers its handlers on the shared pod,
// node and namespace informers. It starts nothing.
func New(c controllers.Context) (*Scheduler, error) {
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("scheduler: %w", err)
	}
	s := &Scheduler{
		client: c.Client,
		events: c.Events(Name),
		clock:  c.Clock,
		log:    c.Logger.With("component", Name),
		queue:  queue.New(queue.DefaultConfig(), c.Clock),
		sem:    make(chan struct{}, bindConcurrency),
		cache:  core.NewCache(),
		algo:   core.New(core.Options{}),
	}
	podInf := c.Informers.Core().V1().Pods()
	nodeInf := c.Informers.Core().V1().Nodes()
	nsInf := c.Informers.Core().V1().Namespaces()
	if err := podInf.Informer().SetTransform(trimBound); err != nil {
		return nil, fmt.Errorf("scheduler: pod cache: %w", err)
	}
	s.pods = podInf.Lister()
	s.namespaces = namespaces{nsInf.Lister()}
	for _, h := range []struct {
		inf cache.SharedIndexInformer
		h   cache.ResourceEventHandlerFuncs
	}{
		{podInf.Informer(), cache.ResourceEventHandlerFuncs{AddFunc: s.addPod, UpdateFunc: s.updatePod, DeleteFunc: s.deletePod}},
		{nodeInf.Informer(), cache.ResourceEventHandlerFuncs{AddFunc: s.addNode, UpdateFunc: s.updateNode, DeleteFunc: s.deleteNode}},
		{nsInf.Informer(), cache.ResourceEventHandlerFuncs{AddFunc: s.addNamespace, UpdateFunc: s.updateNamespace}},
	} {
		reg, err := h.inf.AddEventHandler(h.h)
		if err != nil {
			return nil, fmt.Errorf("scheduler: register handler: %w", err)
		}
		s.synced = append(s.synced, reg.HasSynced)
	}
	return s, nil
}

// Run schedules pods until ctx ends, and returns once every binding and
// status write it started has finished.
func (s *Scheduler) Run(ctx context.Context) error {
	if !cache.WaitForCacheSync(ctx.Done(), s.synced...) {
		return nil // ctx ended first
	}
	s.log.Info("scheduler started")
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.queue.Run(ctx)
	}()
	for {
		pod, _, err := s.queue.Pop(ctx)
		if err != nil {
			break
		}
		s.scheduleOne(ctx, pod)
	}
	wg.Wait()
	s.wg.Wait()
	return nil
}

// scheduleOne runs one scheduling cycle for pod and starts its binding.
func (s *Scheduler) scheduleOne(ctx context.Context, pod *corev1.Pod) {
	s.mu.Lock()
	if _, ok := s.cache.NodeOf(string(pod.UID)); ok {
		// Assigned since it was queued.
		s.mu.Unlock()
		s.queue.Done(pod.UID)
		return
	}
	res, err := s.algo.Schedule(pod, s.cache.Snapshot(s.namespaces))
	if err == nil {
		err = s.cache.AssumePod(res.Info, res.Node)
	}
	s.mu.Unlock()
	if err != nil {
		s.failed(ctx, pod, err)
		return
	}
	s.log.Debug("assumed pod", "pod", klogRef(pod), "node", res.Node, "evaluated", res.Evaluated, "feasible", res.Feasible)
	s.async(ctx, func() { s.bind(ctx, pod, res.Node) })
}

// async runs f in the background in one of the bounded slots, waiting
// for one to free.
func (s *Scheduler) async(ctx context.Context, f func()) {
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return
	}
	s.wg.Add(1)
	go func() {
		defer func() { <-s.sem; s.wg.Done() }()
		f()
	}()
}

// bind posts the binding of pod to node, and takes the assumption back
// if it fails.
func (s *Scheduler) bind(ctx context.Context, pod *corev1.Pod, node string) {
	b := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: node},
	}
	err := s.client.CoreV1().Pods(pod.Namespace).Bind(ctx, b, metav1.CreateOptions{})
	if err == nil {
		s.queue.Done(pod.UID)
		s.events.Eventf(pod, corev1.EventTypeNormal, "Scheduled", "Successfully assigned %v/%v to %v", pod.Namespace, pod.Name, node)
		return
	}
	s.mu.Lock()
	_ = s.cache.ForgetPod(string(pod.UID))
	s.mu.Unlock()
	// What the assumed pod held is free again.
	s.queue.Move(core.AssignedPodDelete)
	if ctx.Err() != nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		// Stopping, or the pod is gone, bound elsewhere or being deleted.
		s.log.Debug("binding abandoned", "pod", klogRef(pod), "node", node, "err", err)
		s.queue.Done(pod.UID)
		return
	}
	s.log.Info("binding failed", "pod", klogRef(pod), "node", node, "err", err)
	s.queue.Error(pod.UID)
	// Reported here, in this binding's own slot: waiting for another
	// slot would deadlock once every slot holds a failed binding.
	s.reportNow(ctx, pod, corev1.PodReasonSchedulerError, fmt.Sprintf("binding rejected: running Bind plugin %q: %v", "DefaultBinder", err))
}

// failed requeues a pod whose cycle found no node, and reports why.
func (s *Scheduler) failed(ctx context.Context, pod *corev1.Pod, err error) {
	var fe *core.FitError
	switch {
	case errors.As(err, &fe):
		s.queue.Unschedulable(pod.UID, fe.Plugins.WakingEvents())
		s.log.Debug("pod unschedulable", "pod", klogRef(pod), "reason", err)
		s.report(ctx, pod, corev1.PodReasonUnschedulable, err.Error())
	case errors.Is(err, core.ErrNoNodesAvailable):
		s.queue.Unschedulable(pod.UID, core.NodeAdd)
		s.report(ctx, pod, corev1.PodReasonUnschedulable, err.Error())
	default:
		// The pod cannot be evaluated (a selector that does not parse):
		// say so, and try again after the back-off.
		s.queue.Error(pod.UID)
		s.log.Info("scheduling pod failed", "pod", klogRef(pod), "err", err)
		s.report(ctx, pod, corev1.PodReasonSchedulerError, err.Error())
	}
}

// report records the FailedScheduling event and sets the PodScheduled
// condition to False with reason and msg, as upstream does; the status
// write runs in a slot of its own, so that the scheduling loop goes on.
func (s *Scheduler) report(ctx context.Context, pod *corev1.Pod, reason, msg string) {
	s.events.Event(pod, corev1.EventTypeWarning, "FailedScheduling", truncate(msg))
	s.async(ctx, func() { s.writeUnscheduled(ctx, pod, reason, msg) })
}

// reportNow is report writing the status in the caller's slot (a
// binding's).
func (s *Scheduler) reportNow(ctx context.Context, pod *corev1.Pod, reason, msg string) {
	s.events.Event(pod, corev1.EventTypeWarning, "FailedScheduling", truncate(msg))
	s.writeUnscheduled(ctx, pod, reason, msg)
}

// writeUnscheduled is setUnscheduled, logging a failure.
func (s *Scheduler) writeUnscheduled(ctx context.Context, pod *corev1.Pod, reason, msg string) {
	if err := s.setUnscheduled(ctx, pod, reason, msg); err != nil && ctx.Err() == nil {
		s.log.Info("updating pod condition failed", "pod", klogRef(pod), "err", err)
	}
}

func truncate(msg string) string {
	const suffix = " ..."
	if len(msg) <= noteLengthLimit {
		return msg
	}
	return msg[:noteLengthLimit-len(suffix)] + suffix
}

// setUnscheduled writes PodScheduled=False through pods/status, unless
// the pod already carries that condition or is gone or assigned.
func (s *Scheduler) setUnscheduled(ctx context.Context, pod *corev1.Pod, reason, msg string) error {
	cond := corev1.PodCondition{
		Type:    corev1.PodScheduled,
		Status:  corev1.ConditionFalse,
		Reason:  reason,
		Message: msg,
	}
	first := true
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var cur *corev1.Pod
		var err error
		if first {
			first = false
			cur, err = s.pods.Pods(pod.Namespace).Get(pod.Name)
		} else {
			cur, err = s.client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		}
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if cur.UID != pod.UID || cur.Spec.NodeName != "" {
			return nil
		}
		cur = cur.DeepCopy()
		c := cond
		c.ObservedGeneration = cur.Generation
		if !setCondition(&cur.Status, c, metav1.NewTime(s.clock.Now())) {
			return nil
		}
		_, err = s.client.CoreV1().Pods(cur.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
}

// setCondition puts c into st as upstream's podutil.UpdatePodCondition
// does: the transition time moves only when the status changes. It
// reports whether anything changed.
func setCondition(st *corev1.PodStatus, c corev1.PodCondition, now metav1.Time) bool {
	c.LastTransitionTime = now
	for i := range st.Conditions {
		old := &st.Conditions[i]
		if old.Type != c.Type {
			continue
		}
		if old.Status == c.Status {
			c.LastTransitionTime = old.LastTransitionTime
		}
		same := old.Status == c.Status && old.Reason == c.Reason && old.Message == c.Message &&
			old.LastProbeTime.Equal(&c.LastProbeTime) && old.LastTransitionTime.Equal(&c.LastTransitionTime) &&
			old.ObservedGeneration == c.ObservedGeneration
		*old = c
		return !same
	}
	st.Conditions = append(st.Conditions, c)
	return true
}

// responsible reports whether pod is this scheduler's to place.
func responsible(pod *corev1.Pod) bool {
	return pod.Spec.NodeName == "" &&
		(pod.Spec.SchedulerName == Name || pod.Spec.SchedulerName == "") &&
		pod.DeletionTimestamp == nil && !terminal(pod)
}

func terminal(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

func (s *Scheduler) addPod(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	switch {
	case pod.Spec.NodeName != "":
		if !terminal(pod) {
			s.mu.Lock()
			s.cache.SetPod(pod)
			s.mu.Unlock()
			s.queue.Move(core.AssignedPodAdd)
		}
	case responsible(pod):
		s.queue.Add(pod)
	}
}

func (s *Scheduler) updatePod(oldObj, newObj any) {
	old, ok1 := oldObj.(*corev1.Pod)
	pod, ok2 := newObj.(*corev1.Pod)
	if !ok1 || !ok2 {
		return
	}
	if pod.Spec.NodeName == "" {
		if responsible(pod) {
			s.queue.Update(pod)
		} else {
			s.queue.Delete(pod.UID)
		}
		return
	}
	if old.Spec.NodeName == "" {
		s.queue.Delete(pod.UID)
	}
	if terminal(pod) {
		// An ended pod holds nothing, as upstream's informer, which
		// leaves out ended pods, sees it deleted.
		s.mu.Lock()
		_, had := s.cache.NodeOf(string(pod.UID))
		s.cache.RemovePod(string(pod.UID))
		s.mu.Unlock()
		if had {
			s.queue.Move(core.AssignedPodDelete)
		}
		return
	}
	s.mu.Lock()
	s.cache.SetPod(pod)
	s.mu.Unlock()
	switch {
	case old.Spec.NodeName == "":
		s.queue.Move(core.AssignedPodAdd)
	case !maps.Equal(old.Labels, pod.Labels):
		s.queue.Move(core.AssignedPodUpdate)
	}
}

func (s *Scheduler) deletePod(obj any) {
	pod, ok := controllers.Object[*corev1.Pod](obj)
	if !ok {
		return
	}
	s.queue.Delete(pod.UID)
	s.mu.Lock()
	_, had := s.cache.NodeOf(string(pod.UID))
	s.cache.RemovePod(string(pod.UID))
	s.mu.Unlock()
	if had {
		s.queue.Move(core.AssignedPodDelete)
	}
}

func (s *Scheduler) addNode(obj any) {
	node, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	s.mu.Lock()
	s.cache.SetNode(node)
	s.mu.Unlock()
	s.queue.Move(core.NodeAdd)
}

func (s *Scheduler) updateNode(oldObj, newObj any) {
	old, ok1 := oldObj.(*corev1.Node)
	node, ok2 := newObj.(*corev1.Node)
	if !ok1 || !ok2 {
		return
	}
	s.mu.Lock()
	s.cache.SetNode(node)
	s.mu.Unlock()
	if ev := nodeChange(old, node); ev != 0 {
		s.queue.Move(ev)
	}
}

// nodeChange returns the events a node update amounts to; none for a
// heartbeat that changes only conditions.
func nodeChange(old, node *corev1.Node) core.ClusterEvent {
	var ev core.ClusterEvent
	if !equality.Semantic.DeepEqual(old.Status.Allocatable, node.Status.Allocatable) {
		ev |= core.NodeAllocatableChange
	}
	if !maps.Equal(old.Labels, node.Labels) {
		ev |= core.NodeLabelChange
	}
	if old.Spec.Unschedulable != node.Spec.Unschedulable || !equality.Semantic.DeepEqual(old.Spec.Taints, node.Spec.Taints) {
		ev |= core.NodeTaintChange
	}
	return ev
}

func (s *Scheduler) deleteNode(obj any) {
	node, ok := controllers.Object[*corev1.Node](obj)
	if !ok {
		return
	}
	s.mu.Lock()
	s.cache.RemoveNode(node.Name)
	s.mu.Unlock()
	s.queue.Move(core.NodeDelete)
}

func (s *Scheduler) addNamespace(any) { s.queue.Move(core.NamespaceChange) }

func (s *Scheduler) updateNamespace(oldObj, newObj any) {
	old, ok1 := oldObj.(*corev1.Namespace)
	ns, ok2 := newObj.(*corev1.Namespace)
	if ok1 && ok2 && !maps.Equal(old.Labels, ns.Labels) {
		s.queue.Move(core.NamespaceChange)
	}
}

// namespaces adapts the namespace lister to what the core asks.
type namespaces struct{ lister corelisters.NamespaceLister }

var _ core.Namespaces = namespaces{}

func (n namespaces) Labels(name string) labels.Set {
	ns, err := n.lister.Get(name)
	if err != nil {
		return nil
	}
	return ns.Labels
}

func (n namespaces) Select(sel labels.Selector) []string {
	list, err := n.lister.List(sel)
	if err != nil {
		return nil
	}
	names := make([]string, len(list))
	for i, ns := range list {
		names[i] = ns.Name
	}
	return names
}

func klogRef(pod *corev1.Pod) string { return pod.Namespace + "/" + pod.Name }

// trimBound is the pod cache's transform: of a pod already bound to a
// node the scheduler needs the spec (what it takes of the node), labels
// (affinity and spread) and phase (a finished pod takes nothing), not its
// status, which kubelets rewrite often and which makes the largest part
// of a decoded pod. An unbound pod is kept whole: its status is written
// back with PodScheduled. The cache owns the object it is given.
func trimBound(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.Spec.NodeName == "" {
		return obj, nil
	}
	pod.ManagedFields = nil
	pod.Status = corev1.PodStatus{Phase: pod.Status.Phase}
	return pod, nil
}
