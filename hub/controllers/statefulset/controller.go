// Package statefulset is the hub's StatefulSet controller, as upstream's
// in kube-controller-manager: pods with stable names <set>-<ordinal>,
// their identity labels and hostname under the set's service, created
// in order (OrderedReady, each once the one before is Running and Ready)
// or all at once (Parallel), removed from the highest ordinal down, and
// updated by RollingUpdate (from the highest ordinal down to the
// partition, one healthy pod at a time) or OnDelete, over
// ControllerRevisions. Claim templates are refused by the API until the
// hub has storage. core.go decides; this file does the I/O.
package statefulset

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
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
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/outpost-mesh/outpost/hub/controllers"
	"github.com/outpost-mesh/outpost/hub/controllers/history"
)

// Component is the name the controller's events carry.
const Component = "statefulset-controller"

// workers is how many sets sync at once.
const workers = 2

const (
	reasonInvalidSelector = "InvalidSelector"
	reasonSelectingAll    = "SelectingAll"
)

// conditionReplicaFailure is the condition the controller sets on a set
// whose pods it could not create, delete or update; it goes once a sync
// succeeds.
const conditionReplicaFailure appsv1.StatefulSetConditionType = "ReplicaFailure"

// Controller runs statefulsets. Build it with New, then Run it.
type Controller struct {
	client kubernetes.Interface
	events record.EventRecorder
	clock  clock.WithTicker
	log    *slog.Logger
	sets   appslisters.StatefulSetLister
	pods   corelisters.PodLister
	revs   appslisters.ControllerRevisionLister
	synced []cache.InformerSynced
	queue  workqueue.TypedRateLimitingInterface[string]
}

// New returns a controller of c's statefulsets, their pods and
// controller revisions, with its event handlers registered on c's
// informers. It starts nothing.
func New(c controllers.Context) (*Controller, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	sets := c.Informers.Apps().V1().StatefulSets()
	pods := c.Informers.Core().V1().Pods()
	revs := c.Informers.Apps().V1().ControllerRevisions()
	ctl := &Controller{
		client: c.Client,
		events: c.Events(Component),
		clock:  c.Clock,
		log:    c.Logger,
		sets:   sets.Lister(),
		pods:   pods.Lister(),
		revs:   revs.Lister(),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "statefulset", Clock: c.Clock}),
	}
	for _, reg := range []struct {
		inf cache.SharedIndexInformer
		h   cache.ResourceEventHandler
	}{
		{sets.Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    ctl.enqueue,
			UpdateFunc: func(_, obj any) { ctl.enqueue(obj) },
			DeleteFunc: ctl.enqueue,
		}},
		{pods.Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    ctl.podChanged,
			UpdateFunc: func(old, obj any) { ctl.podChanged(old); ctl.podChanged(obj) },
			DeleteFunc: ctl.podChanged,
		}},
		{revs.Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    ctl.enqueueOwner,
			DeleteFunc: ctl.enqueueOwner,
		}},
	} {
		if _, err := reg.inf.AddEventHandler(reg.h); err != nil {
			return nil, fmt.Errorf("statefulset controller: %w", err)
		}
		ctl.synced = append(ctl.synced, reg.inf.HasSynced)
	}
	return ctl, nil
}

// Run syncs statefulsets until ctx ends, and returns once its workers
// have.
func (c *Controller) Run(ctx context.Context) error {
	return controllers.Work(ctx, controllers.Workers[string]{
		Queue: c.queue, Count: workers, Synced: c.synced, Sync: c.sync, Log: c.log,
		What: "statefulset", Started: "started", Level: quiet,
	})
}

// quiet logs at Debug the errors of a sync made on a cache behind the
// last write (a conflict, or a pod that exists already), which the retry
// will have seen.
func quiet(err error) slog.Level {
	if apierrors.IsAlreadyExists(err) {
		return slog.LevelDebug
	}
	return controllers.Quiet(err)
}

func (c *Controller) enqueue(obj any) {
	if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
		c.queue.Add(key)
	}
}

// owner returns the set that controls obj (in the cache), if any.
func (c *Controller) owner(obj metav1.Object) *appsv1.StatefulSet {
	ref := metav1.GetControllerOfNoCopy(obj)
	if ref == nil || ref.Kind != controllerKind.Kind {
		return nil
	}
	set, err := c.sets.StatefulSets(obj.GetNamespace()).Get(ref.Name)
	if err != nil || set.UID != ref.UID {
		return nil
	}
	return set
}

func (c *Controller) enqueueOwner(obj any) {
	if m, ok := controllers.Object[metav1.Object](obj); ok {
		if set := c.owner(m); set != nil {
			c.enqueue(set)
		}
	}
}

// podChanged enqueues the set that controls the pod, or, for an orphan,
// the sets that may adopt it.
func (c *Controller) podChanged(obj any) {
	pod, ok := controllers.Object[*corev1.Pod](obj)
	if !ok {
		return
	}
	if set := c.owner(pod); set != nil {
		c.enqueue(set)
		return
	}
	if metav1.GetControllerOfNoCopy(pod) != nil || pod.DeletionTimestamp != nil {
		return
	}
	sets, _ := c.sets.StatefulSets(pod.Namespace).List(labels.Everything())
	for _, set := range sets {
		sel, err := metav1.LabelSelectorAsSelector(set.Spec.Selector)
		if err == nil && !sel.Empty() && sel.Matches(labels.Set(pod.Labels)) && Ordinal(set.Name, pod) >= 0 {
			c.enqueue(set)
		}
	}
}

// sync brings the set of key to what its spec asks.
func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	set, err := c.sets.StatefulSets(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	sel, err := metav1.LabelSelectorAsSelector(set.Spec.Selector)
	if err != nil {
		// The API validates selectors; one that fails here is not retried.
		c.events.Eventf(set, corev1.EventTypeWarning, reasonInvalidSelector, "Invalid selector: %v", err)
		return nil
	}
	if sel.Empty() {
		c.events.Event(set, corev1.EventTypeWarning, reasonSelectingAll, "This statefulset is selecting all pods. A non-empty selector is required.")
		return nil
	}
	pods, err := c.claimPods(ctx, set, sel)
	if err != nil {
		return err
	}
	current, update, all, count, err := c.revisions(ctx, set, sel)
	if err != nil {
		return err
	}
	in := Input{Set: set, Pods: pods, Now: c.clock.Now()}
	if in.Current, err = revision(set, current); err != nil {
		return err
	}
	if in.Updated, err = revision(set, update); err != nil {
		return err
	}
	acts, status := Plan(in)
	status.CollisionCount = &count
	failed := c.apply(ctx, set, acts)
	serr := c.updateStatus(ctx, key, set, status, failed)
	var terr error
	if failed == nil && serr == nil {
		terr = c.truncate(ctx, set, pods, all, current, update)
	}
	return errors.Join(failed, serr, terr)
}

func revision(set *appsv1.StatefulSet, rev *appsv1.ControllerRevision) (Revision, error) {
	s, err := ApplyRevision(set, rev.Data.Raw)
	if err != nil {
		return Revision{}, fmt.Errorf("revision %s: %w", rev.Name, err)
	}
	return Revision{Name: rev.Name, Set: s}, nil
}

// claimPods returns the pods set controls, adopting the orphans of its
// name that its selector matches and releasing those it no longer
// matches, as upstream's ControllerRefManager does.
func (c *Controller) claimPods(ctx context.Context, set *appsv1.StatefulSet, sel labels.Selector) ([]*corev1.Pod, error) {
	all, err := c.pods.Pods(set.Namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	var out []*corev1.Pod
	for _, pod := range all {
		ref := metav1.GetControllerOfNoCopy(pod)
		member := sel.Matches(labels.Set(pod.Labels)) && Ordinal(set.Name, pod) >= 0
		switch {
		case ref != nil && ref.UID == set.UID && member:
			out = append(out, pod)
		case ref != nil && ref.UID == set.UID:
			patch, _ := history.ReleasePatch(set.UID, pod.UID)
			if _, err := c.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return nil, fmt.Errorf("release pod %s: %w", pod.Name, err)
			}
		case ref == nil && member && pod.DeletionTimestamp == nil && set.DeletionTimestamp == nil:
			patch, err := history.AdoptPatch(set, controllerKind, pod.UID)
			if err != nil {
				return nil, err
			}
			adopted, err := c.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
			switch {
			case apierrors.IsNotFound(err) || apierrors.IsInvalid(err) || apierrors.IsConflict(err):
			case err != nil:
				return nil, fmt.Errorf("adopt pod %s: %w", pod.Name, err)
			default:
				out = append(out, adopted)
			}
		}
	}
	return out, nil
}

// revisions returns set's current and update revisions, creating the
// update revision or renumbering an equal older one (a rollback) as
// upstream does, all revisions the set owns, and the collision count.
func (c *Controller) revisions(ctx context.Context, set *appsv1.StatefulSet, sel labels.Selector) (current, update *appsv1.ControllerRevision, all []*appsv1.ControllerRevision, count int32, err error) {
	list, err := c.revs.ControllerRevisions(set.Namespace).List(labels.Everything())
	if err != nil {
		return nil, nil, nil, 0, err
	}
	owned, orphans := history.Claim(list, set.UID, sel)
	if set.DeletionTimestamp == nil {
		for _, r := range orphans {
			if adopted, err := history.Adopt(ctx, c.client.AppsV1(), set, controllerKind, r); err == nil {
				owned = append(owned, adopted)
			}
		}
	}
	history.Sort(owned)
	if set.Status.CollisionCount != nil {
		count = *set.Status.CollisionCount
	}
	data, err := history.TemplatePatch(&set.Spec.Template)
	if err != nil {
		return nil, nil, nil, 0, err
	}
	want := history.New(set, controllerKind, set.Spec.Template.Labels, data, history.Next(owned), &count)
	var equal []*appsv1.ControllerRevision
	for _, r := range owned {
		if history.Equal(r, want) {
			equal = append(equal, r)
		}
	}
	switch {
	case len(equal) > 0 && equal[len(equal)-1] == owned[len(owned)-1]:
		update = owned[len(owned)-1]
	case len(equal) > 0:
		// A rollback: the older revision becomes the newest.
		if update, err = history.SetRevision(ctx, c.client.AppsV1(), equal[len(equal)-1], want.Revision); err != nil {
			return nil, nil, nil, 0, err
		}
		owned = slices.DeleteFunc(owned, func(r *appsv1.ControllerRevision) bool { return r.Name == update.Name })
		owned = append(owned, update)
	default:
		if update, err = history.Create(ctx, c.client.AppsV1(), set, want, &count); err != nil {
			return nil, nil, nil, 0, err
		}
		owned = append(owned, update)
	}
	current = update
	for _, r := range owned {
		if r.Name == set.Status.CurrentRevision {
			current = r
		}
	}
	return current, update, owned, count, nil
}

// truncate deletes the oldest revisions beyond the set's
// revisionHistoryLimit, but never the current or update revision or one
// a pod still runs.
func (c *Controller) truncate(ctx context.Context, set *appsv1.StatefulSet, pods []*corev1.Pod, all []*appsv1.ControllerRevision, current, update *appsv1.ControllerRevision) error {
	live := map[string]bool{current.Name: true, update.Name: true}
	for _, p := range pods {
		live[revisionOf(p)] = true
	}
	var old []*appsv1.ControllerRevision
	for _, r := range all {
		if !live[r.Name] {
			old = append(old, r)
		}
	}
	limit := 10
	if set.Spec.RevisionHistoryLimit != nil {
		limit = int(*set.Spec.RevisionHistoryLimit)
	}
	drop := history.ToDelete(old, limit, func(*appsv1.ControllerRevision) bool { return false })
	return history.Delete(ctx, c.client.AppsV1(), drop)
}

// errFailed marks the errors of apply, for the ReplicaFailure condition.
var errFailed = errors.New("pod action failed")

// apply takes acts in order, recording upstream's events, and stops at
// the first that fails.
func (c *Controller) apply(ctx context.Context, set *appsv1.StatefulSet, acts []Action) error {
	for _, a := range acts {
		var err error
		switch a.Verb {
		case Create:
			_, err = c.client.CoreV1().Pods(set.Namespace).Create(ctx, a.Pod, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				return err // the cache is behind; the next sync sees it
			}
			if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
				return nil
			}
		case Delete:
			uid := a.Pod.UID
			err = c.client.CoreV1().Pods(set.Namespace).Delete(ctx, a.Pod.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
			if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
				continue
			}
		case Fix:
			err = c.fix(ctx, set, a.Pod)
		}
		c.record(set, a, err)
		if err != nil {
			return fmt.Errorf("%w: %s: %w", errFailed, a, err)
		}
	}
	return nil
}

// fix gives pod the identity of its ordinal, retrying once on a fresh
// copy if the cache's is stale.
func (c *Controller) fix(ctx context.Context, set *appsv1.StatefulSet, pod *corev1.Pod) error {
	api := c.client.CoreV1().Pods(set.Namespace)
	_, err := api.Update(ctx, WithIdentity(set, pod), metav1.UpdateOptions{})
	if apierrors.IsConflict(err) {
		fresh, gerr := api.Get(ctx, pod.Name, metav1.GetOptions{})
		if gerr != nil {
			return errors.Join(err, gerr)
		}
		if identityMatches(set, fresh) {
			return nil
		}
		_, err = api.Update(ctx, WithIdentity(set, fresh), metav1.UpdateOptions{})
	}
	return err
}

// record records upstream's event for a, as "create Pod db-0 in
// StatefulSet db successful".
func (c *Controller) record(set *appsv1.StatefulSet, a Action, err error) {
	verb := string(a.Verb)
	if err != nil {
		c.events.Eventf(set, corev1.EventTypeWarning, "Failed"+verb, "%s Pod %s in StatefulSet %s failed error: %v", strings.ToLower(verb), a.Pod.Name, set.Name, err)
		return
	}
	c.events.Eventf(set, corev1.EventTypeNormal, "Successful"+verb, "%s Pod %s in StatefulSet %s successful", strings.ToLower(verb), a.Pod.Name, set.Name)
}

// updateStatus stores status, with the ReplicaFailure condition while
// pod actions fail, and requeues the set while pods wait out
// minReadySeconds.
func (c *Controller) updateStatus(ctx context.Context, key string, set *appsv1.StatefulSet, s appsv1.StatefulSetStatus, failed error) error {
	s.Conditions = slices.DeleteFunc(slices.Clone(set.Status.Conditions), func(c appsv1.StatefulSetCondition) bool {
		return c.Type == conditionReplicaFailure
	})
	if failed != nil && !apierrors.IsAlreadyExists(failed) {
		cond := appsv1.StatefulSetCondition{Type: conditionReplicaFailure, Status: corev1.ConditionTrue,
			Reason: "FailedPodAction", Message: failed.Error(), LastTransitionTime: metav1.NewTime(c.clock.Now())}
		if i := slices.IndexFunc(set.Status.Conditions, func(c appsv1.StatefulSetCondition) bool { return c.Type == conditionReplicaFailure }); i >= 0 && set.Status.Conditions[i].Message == cond.Message {
			cond.LastTransitionTime = set.Status.Conditions[i].LastTransitionTime
		}
		s.Conditions = append(s.Conditions, cond)
	}
	if len(s.Conditions) == 0 {
		s.Conditions = nil
	}
	if set.Spec.MinReadySeconds > 0 && s.ReadyReplicas != s.AvailableReplicas {
		c.queue.AddAfter(key, time.Duration(set.Spec.MinReadySeconds)*time.Second)
	}
	if equality.Semantic.DeepEqual(s, set.Status) {
		return nil
	}
	up := set.DeepCopy()
	up.Status = s
	api := c.client.AppsV1().StatefulSets(set.Namespace)
	_, err := api.UpdateStatus(ctx, up, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) {
		// The cache lags behind the last write, often our own: retry
		// once on a fresh copy, as upstream does.
		fresh, gerr := api.Get(ctx, set.Name, metav1.GetOptions{})
		if gerr != nil || fresh.UID != set.UID {
			return errors.Join(err, gerr)
		}
		fresh.Status = s
		_, err = api.UpdateStatus(ctx, fresh, metav1.UpdateOptions{})
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("update status: %w", err)
	}
	return nil
}
