// Package daemonset is the hub's DaemonSet controller, as upstream's in
// kube-controller-manager: one pod per eligible node (node name, selector,
// required affinity, taints and the default daemon tolerations), created
// with a node affinity on the node's name for the scheduler to bind,
// rolled out by RollingUpdate (maxUnavailable or maxSurge) or OnDelete
// over ControllerRevisions, with the status `kubectl rollout status`
// reads. Edge rule: an offline node keeps its old pod, and the rollout
// neither deletes it nor waits on it; the pod is updated once the node is
// back. core.go decides; this file does the I/O.
package daemonset

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/outpost-mesh/outpost/hub/controllers"
	"github.com/outpost-mesh/outpost/hub/controllers/history"
)

// Component is the name the controller's events carry.
const Component = "daemonset-controller"

// workers is how many daemonsets sync at once, as upstream's default.
const workers = 2

// Event reasons, as upstream's.
const (
	reasonSuccessfulCreate = "SuccessfulCreate"
	reasonFailedCreate     = "FailedCreate"
	reasonSuccessfulDelete = "SuccessfulDelete"
	reasonFailedDelete     = "FailedDelete"
	reasonFailedDaemonPod  = "FailedDaemonPod"
	reasonSelectingAll     = "SelectingAll"
	reasonInvalidSelector  = "InvalidSelector"
)

// conditionReplicaFailure is the condition the controller sets on a
// daemonset whose pods it could not create or delete, as the replicaset
// controller does; it goes once a sync succeeds.
const conditionReplicaFailure appsv1.DaemonSetConditionType = "ReplicaFailure"

// errCreate and errDelete mark the errors of apply, to name the
// ReplicaFailure condition's reason.
var (
	errCreate = errors.New("create pod")
	errDelete = errors.New("delete pod")
)

// Controller runs daemonsets. Build it with New, then Run it.
type Controller struct {
	client  kubernetes.Interface
	events  record.EventRecorder
	clock   clock.WithTicker
	log     *slog.Logger
	sets    appslisters.DaemonSetLister
	pods    corelisters.PodLister
	nodes   corelisters.NodeLister
	revs    appslisters.ControllerRevisionLister
	synced  []cache.InformerSynced
	queue   workqueue.TypedRateLimitingInterface[string]
	expect  *expectations
	backoff *flowcontrol.Backoff // of failed pods, per daemonset and node
}

// New returns a controller of c's daemonsets, their pods, the nodes and
// the controller revisions, with its event handlers registered on c's
// informers. It starts nothing.
func New(c controllers.Context) (*Controller, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	ds := c.Informers.Apps().V1().DaemonSets()
	pods := c.Informers.Core().V1().Pods()
	nodes := c.Informers.Core().V1().Nodes()
	revs := c.Informers.Apps().V1().ControllerRevisions()
	ctl := &Controller{
		client: c.Client,
		events: c.Events(Component),
		clock:  c.Clock,
		log:    c.Logger,
		sets:   ds.Lister(),
		pods:   pods.Lister(),
		nodes:  nodes.Lister(),
		revs:   revs.Lister(),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "daemonset", Clock: c.Clock}),
		expect:  newExpectations(),
		backoff: flowcontrol.NewFakeBackOff(time.Second, 15*time.Minute, c.Clock),
	}
	for _, reg := range []struct {
		inf cache.SharedIndexInformer
		h   cache.ResourceEventHandler
	}{
		{ds.Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    ctl.enqueue,
			UpdateFunc: func(_, obj any) { ctl.enqueue(obj) },
			DeleteFunc: ctl.deleteSet,
		}},
		{pods.Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    ctl.addPod,
			UpdateFunc: ctl.updatePod,
			DeleteFunc: ctl.deletePod,
		}},
		{nodes.Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc: func(any) { ctl.enqueueAll() },
			UpdateFunc: func(old, obj any) {
				if nodeChanged(old.(*corev1.Node), obj.(*corev1.Node)) {
					ctl.enqueueAll()
				}
			},
			DeleteFunc: func(any) { ctl.enqueueAll() },
		}},
		{revs.Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    ctl.enqueueOwner,
			DeleteFunc: ctl.enqueueOwner,
		}},
	} {
		if _, err := reg.inf.AddEventHandler(reg.h); err != nil {
			return nil, fmt.Errorf("daemonset controller: %w", err)
		}
		ctl.synced = append(ctl.synced, reg.inf.HasSynced)
	}
	return ctl, nil
}

// Run syncs daemonsets until ctx ends, and returns once its workers have.
func (c *Controller) Run(ctx context.Context) error {
	return controllers.Work(ctx, controllers.Workers[string]{
		Queue: c.queue, Count: workers, Synced: c.synced, Sync: c.sync, Log: c.log,
		What: "daemonset", Started: "started",
	})
}

func (c *Controller) enqueue(obj any) {
	if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
		c.queue.Add(key)
	}
}

func (c *Controller) enqueueAll() {
	sets, _ := c.sets.List(labels.Everything())
	for _, ds := range sets {
		c.enqueue(ds)
	}
}

func (c *Controller) deleteSet(obj any) {
	if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
		c.expect.forget(key)
		c.queue.Add(key)
	}
}

// owner returns the daemonset that controls obj (in the cache), if any.
func (c *Controller) owner(obj metav1.Object) *appsv1.DaemonSet {
	ref := metav1.GetControllerOfNoCopy(obj)
	if ref == nil || ref.Kind != controllerKind.Kind {
		return nil
	}
	ds, err := c.sets.DaemonSets(obj.GetNamespace()).Get(ref.Name)
	if err != nil || ds.UID != ref.UID {
		return nil
	}
	return ds
}

func (c *Controller) enqueueOwner(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if m, err := metaOf(obj); err == nil {
		if ds := c.owner(m); ds != nil {
			c.enqueue(ds)
		}
	}
}

func metaOf(obj any) (metav1.Object, error) {
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil, fmt.Errorf("%T is not an object", obj)
	}
	return m, nil
}

// enqueueMatching enqueues the daemonsets whose selector matches the
// orphan pod, which one of them may adopt.
func (c *Controller) enqueueMatching(pod *corev1.Pod) {
	sets, _ := c.sets.DaemonSets(pod.Namespace).List(labels.Everything())
	for _, ds := range sets {
		sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
		if err == nil && !sel.Empty() && sel.Matches(labels.Set(pod.Labels)) {
			c.enqueue(ds)
		}
	}
}

func (c *Controller) addPod(obj any) {
	pod := obj.(*corev1.Pod)
	if ds := c.owner(pod); ds != nil {
		c.enqueue(ds)
		return
	}
	if metav1.GetControllerOfNoCopy(pod) == nil && pod.DeletionTimestamp == nil {
		c.enqueueMatching(pod)
	}
}

func (c *Controller) updatePod(old, obj any) {
	o, pod := old.(*corev1.Pod), obj.(*corev1.Pod)
	if o.ResourceVersion == pod.ResourceVersion {
		return // a resync
	}
	if ds := c.owner(o); ds != nil && !equality.Semantic.DeepEqual(metav1.GetControllerOfNoCopy(o), metav1.GetControllerOfNoCopy(pod)) {
		c.enqueue(ds)
	}
	c.addPod(pod)
}

func (c *Controller) deletePod(obj any) {
	pod, ok := controllers.Object[*corev1.Pod](obj)
	if !ok {
		return
	}
	if ds := c.owner(pod); ds != nil {
		if key, err := cache.MetaNamespaceKeyFunc(ds); err == nil {
			c.expect.gone(key, pod)
			c.queue.Add(key)
		}
	}
}

// nodeChanged reports whether a node update can change where daemon
// pods run, ignoring the heartbeats that make up most node updates.
func nodeChanged(old, cur *corev1.Node) bool {
	ready := func(n *corev1.Node) corev1.ConditionStatus {
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status
			}
		}
		return ""
	}
	return !maps.Equal(old.Labels, cur.Labels) ||
		!equality.Semantic.DeepEqual(old.Spec.Taints, cur.Spec.Taints) ||
		old.Spec.Unschedulable != cur.Spec.Unschedulable ||
		ready(old) != ready(cur)
}

// sync brings the daemonset of key to what its spec asks.
func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil // not a key of ours; retrying would not help
	}
	ds, err := c.sets.DaemonSets(ns).Get(name)
	if apierrors.IsNotFound(err) {
		c.expect.forget(key)
		return nil
	}
	if err != nil {
		return err
	}
	if ds.DeletionTimestamp != nil {
		return nil // the garbage collector removes its pods
	}
	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil {
		// The API validates selectors; one that fails here is not retried.
		c.events.Eventf(ds, corev1.EventTypeWarning, reasonInvalidSelector, "Invalid selector: %v", err)
		return nil
	}
	if sel.Empty() {
		c.events.Event(ds, corev1.EventTypeWarning, reasonSelectingAll, "This daemon set is selecting all pods. A non-empty selector is required.")
		return nil
	}
	nodes, err := c.nodes.List(labels.Everything())
	if err != nil {
		return err
	}
	cur, old, err := c.revisions(ctx, ds, sel)
	if err != nil {
		return err
	}
	pods, err := c.claimPods(ctx, ds, sel)
	if err != nil {
		return err
	}
	in := Input{DS: ds, Nodes: nodes, Pods: byNode(pods, false), Hash: cur.Labels[history.HashLabel], Now: c.clock.Now()}

	satisfied := c.expect.satisfied(key, c.pods, in.Now)
	var failed error
	if satisfied {
		plan := Manage(in)
		if plan.Empty() {
			plan = Rollout(in)
		}
		failed = c.apply(ctx, key, ds, plan, in.Hash)
		if err := c.truncate(ctx, ds, old, byNode(pods, true)); err != nil {
			return errors.Join(failed, err)
		}
	}
	return errors.Join(failed, c.updateStatus(ctx, key, ds, in, satisfied, failed))
}

// byNode groups pods by the node they target; terminal pods being
// deleted count only with all.
func byNode(pods []*corev1.Pod, all bool) map[string][]*corev1.Pod {
	m := make(map[string][]*corev1.Pod)
	for _, pod := range pods {
		terminal := pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
		if !all && terminal && pod.DeletionTimestamp != nil {
			continue
		}
		if n := TargetNode(pod); n != "" {
			m[n] = append(m[n], pod)
		}
	}
	return m
}

// claimPods returns the pods ds controls, adopting the orphans its
// selector matches and releasing those it no longer matches, as
// upstream's ControllerRefManager does.
func (c *Controller) claimPods(ctx context.Context, ds *appsv1.DaemonSet, sel labels.Selector) ([]*corev1.Pod, error) {
	all, err := c.pods.Pods(ds.Namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	var out []*corev1.Pod
	for _, pod := range all {
		ref := metav1.GetControllerOfNoCopy(pod)
		matches := sel.Matches(labels.Set(pod.Labels))
		switch {
		case ref != nil && ref.UID == ds.UID && matches:
			out = append(out, pod)
		case ref != nil && ref.UID == ds.UID:
			patch, _ := history.ReleasePatch(ds.UID, pod.UID)
			if _, err := c.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return nil, fmt.Errorf("release pod %s: %w", pod.Name, err)
			}
		case ref == nil && matches && pod.DeletionTimestamp == nil:
			patch, err := history.AdoptPatch(ds, controllerKind, pod.UID)
			if err != nil {
				return nil, err
			}
			adopted, err := c.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
			switch {
			case apierrors.IsNotFound(err) || apierrors.IsInvalid(err) || apierrors.IsConflict(err):
				// Gone, or taken by another since the cache saw it.
			case err != nil:
				return nil, fmt.Errorf("adopt pod %s: %w", pod.Name, err)
			default:
				out = append(out, adopted)
			}
		}
	}
	return out, nil
}

// revisions returns ds's current revision, creating it if need be, and
// its older ones, as upstream's constructHistory.
func (c *Controller) revisions(ctx context.Context, ds *appsv1.DaemonSet, sel labels.Selector) (*appsv1.ControllerRevision, []*appsv1.ControllerRevision, error) {
	all, err := c.revs.ControllerRevisions(ds.Namespace).List(labels.Everything())
	if err != nil {
		return nil, nil, err
	}
	owned, orphans := history.Claim(all, ds.UID, sel)
	for _, r := range orphans {
		adopted, err := history.Adopt(ctx, c.client.AppsV1(), ds, controllerKind, r)
		if err == nil {
			owned = append(owned, adopted)
		}
	}
	data, err := history.TemplatePatch(&ds.Spec.Template)
	if err != nil {
		return nil, nil, err
	}
	want := &appsv1.ControllerRevision{}
	want.Data.Raw = data
	var current, old []*appsv1.ControllerRevision
	for _, r := range owned {
		if history.Equal(r, want) {
			current = append(current, r)
		} else {
			old = append(old, r)
		}
	}
	next := history.Next(old)
	if len(current) == 0 {
		var count int32
		if ds.Status.CollisionCount != nil {
			count = *ds.Status.CollisionCount
		}
		before := count
		rev := history.New(ds, controllerKind, ds.Spec.Template.Labels, data, next, &count)
		cur, err := history.Create(ctx, c.client.AppsV1(), ds, rev, &count)
		if count != before {
			up := ds.DeepCopy()
			up.Status.CollisionCount = &count
			if _, uerr := c.client.AppsV1().DaemonSets(ds.Namespace).UpdateStatus(ctx, up, metav1.UpdateOptions{}); uerr != nil {
				return nil, nil, errors.Join(err, fmt.Errorf("store collision count: %w", uerr))
			}
		}
		if err != nil {
			return nil, nil, err
		}
		return cur, old, nil
	}
	cur, err := c.dedup(ctx, ds, current)
	if err != nil {
		return nil, nil, err
	}
	if cur.Revision < next {
		if cur, err = history.SetRevision(ctx, c.client.AppsV1(), cur, next); err != nil {
			return nil, nil, err
		}
	}
	return cur, old, nil
}

// dedup keeps the newest of revisions that hold the same template,
// relabelling the pods of the others to it, and deletes the others.
func (c *Controller) dedup(ctx context.Context, ds *appsv1.DaemonSet, same []*appsv1.ControllerRevision) (*appsv1.ControllerRevision, error) {
	if len(same) == 1 {
		return same[0], nil
	}
	same = slices.Clone(same)
	history.Sort(same)
	keep, drop := same[len(same)-1], same[:len(same)-1]
	hash := keep.Labels[history.HashLabel]
	pods, err := c.pods.Pods(ds.Namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	dropped := make(map[string]bool, len(drop))
	for _, r := range drop {
		dropped[r.Labels[history.HashLabel]] = true
	}
	for _, pod := range pods {
		if ref := metav1.GetControllerOfNoCopy(pod); ref == nil || ref.UID != ds.UID || !dropped[pod.Labels[history.HashLabel]] {
			continue
		}
		patch := fmt.Appendf(nil, `{"metadata":{"labels":{%q:%q}}}`, history.HashLabel, hash)
		if _, err := c.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("relabel pod %s: %w", pod.Name, err)
		}
	}
	return keep, history.Delete(ctx, c.client.AppsV1(), drop)
}

// truncate deletes the oldest of ds's old revisions beyond its
// revisionHistoryLimit, but none that a pod still runs.
func (c *Controller) truncate(ctx context.Context, ds *appsv1.DaemonSet, old []*appsv1.ControllerRevision, pods map[string][]*corev1.Pod) error {
	limit := 10
	if ds.Spec.RevisionHistoryLimit != nil {
		limit = int(*ds.Spec.RevisionHistoryLimit)
	}
	if len(old) <= limit {
		return nil
	}
	liveHashes := make(map[string]bool)
	for _, ps := range pods {
		for _, p := range ps {
			if h := p.Labels[history.HashLabel]; h != "" {
				liveHashes[h] = true
			}
		}
	}
	drop := history.ToDelete(old, limit, func(r *appsv1.ControllerRevision) bool { return liveHashes[r.Labels[history.HashLabel]] })
	return history.Delete(ctx, c.client.AppsV1(), drop)
}

// apply carries out plan, recording events as upstream does. It returns
// what failed.
func (c *Controller) apply(ctx context.Context, key string, ds *appsv1.DaemonSet, plan Plan, hash string) error {
	now := c.clock.Now()
	deletes := slices.Clone(plan.Delete)
	for _, pod := range plan.Failed {
		bk := string(ds.UID) + "/" + TargetNode(pod)
		if c.backoff.IsInBackOffSinceUpdate(bk, now) {
			c.queue.AddAfter(key, c.backoff.Get(bk))
			continue
		}
		c.backoff.Next(bk, now)
		c.events.Eventf(ds, corev1.EventTypeWarning, reasonFailedDaemonPod, "Found failed daemon pod %s/%s on node %s, will try to kill it", pod.Namespace, pod.Name, TargetNode(pod))
		deletes = append(deletes, pod)
	}
	var errs []error
	for _, pod := range deletes {
		uid := pod.UID
		err := c.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		switch {
		case err == nil:
			c.expect.deleted(key, pod, now)
			c.events.Eventf(ds, corev1.EventTypeNormal, reasonSuccessfulDelete, "Deleted pod: %s", pod.Name)
		case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
			// Already gone, or another pod of that name now.
		default:
			c.events.Eventf(ds, corev1.EventTypeWarning, reasonFailedDelete, "Error deleting: %v", err)
			errs = append(errs, fmt.Errorf("%w %s: %w", errDelete, pod.Name, err))
		}
	}
	// Slow start, as upstream: batches of 1, 2, 4, ... so that a template
	// the API refuses costs one failed create, not one per node.
	nodes := plan.Create
	for batch := 1; len(nodes) > 0; batch *= 2 {
		n := min(batch, len(nodes))
		var wg sync.WaitGroup
		var mu sync.Mutex
		failed := 0
		for _, node := range nodes[:n] {
			wg.Go(func() {
				if err := c.create(ctx, key, ds, node, hash); err != nil {
					mu.Lock()
					failed++
					errs = append(errs, err)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if failed > 0 {
			break
		}
		nodes = nodes[n:]
	}
	return errors.Join(errs...)
}

func (c *Controller) create(ctx context.Context, key string, ds *appsv1.DaemonSet, node, hash string) error {
	pod, err := c.client.CoreV1().Pods(ds.Namespace).Create(ctx, NewPod(ds, node, hash), metav1.CreateOptions{})
	switch {
	case err == nil:
		c.expect.created(key, pod, c.clock.Now())
		c.events.Eventf(ds, corev1.EventTypeNormal, reasonSuccessfulCreate, "Created pod: %s", pod.Name)
		return nil
	case apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
		return nil // the namespace goes, and the daemonset with it
	default:
		c.events.Eventf(ds, corev1.EventTypeWarning, reasonFailedCreate, "Error creating: %v", err)
		return fmt.Errorf("%w on node %s: %w", errCreate, node, err)
	}
}

// updateStatus stores ds's status from in, with observedGeneration when
// the sync acted on a current cache, and the ReplicaFailure condition
// while creations or deletions fail.
func (c *Controller) updateStatus(ctx context.Context, key string, ds *appsv1.DaemonSet, in Input, observed bool, failed error) error {
	s := Status(in)
	s.ObservedGeneration = ds.Status.ObservedGeneration
	if observed {
		s.ObservedGeneration = ds.Generation
	}
	s.CollisionCount = ds.Status.CollisionCount
	s.Conditions = slices.DeleteFunc(slices.Clone(ds.Status.Conditions), func(c appsv1.DaemonSetCondition) bool {
		return c.Type == conditionReplicaFailure
	})
	if failed != nil {
		reason := reasonFailedDelete
		if errors.Is(failed, errCreate) {
			reason = reasonFailedCreate
		}
		cond := appsv1.DaemonSetCondition{Type: conditionReplicaFailure, Status: corev1.ConditionTrue,
			Reason: reason, Message: failed.Error(), LastTransitionTime: metav1.NewTime(in.Now)}
		if i := slices.IndexFunc(ds.Status.Conditions, func(c appsv1.DaemonSetCondition) bool { return c.Type == conditionReplicaFailure }); i >= 0 && ds.Status.Conditions[i].Message == cond.Message {
			cond.LastTransitionTime = ds.Status.Conditions[i].LastTransitionTime
		}
		s.Conditions = append(s.Conditions, cond)
	}
	if len(s.Conditions) == 0 {
		s.Conditions = nil
	}
	if ds.Spec.MinReadySeconds > 0 && s.NumberReady != s.NumberAvailable {
		c.queue.AddAfter(key, time.Duration(ds.Spec.MinReadySeconds)*time.Second)
	}
	if equality.Semantic.DeepEqual(s, ds.Status) {
		return nil
	}
	up := ds.DeepCopy()
	up.Status = s
	api := c.client.AppsV1().DaemonSets(ds.Namespace)
	_, err := api.UpdateStatus(ctx, up, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) {
		// The cache lags behind the last write, often our own: retry
		// once on a fresh copy, as upstream does.
		fresh, gerr := api.Get(ctx, ds.Name, metav1.GetOptions{})
		if gerr != nil || fresh.UID != ds.UID {
			return errors.Join(err, gerr)
		}
		s.CollisionCount = fresh.Status.CollisionCount
		fresh.Status = s
		_, err = api.UpdateStatus(ctx, fresh, metav1.UpdateOptions{})
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("update status: %w", err)
	}
	return nil
}
