// Package job is the hub's Job controller, as upstream's
// kube-controller-manager runs it: it creates a job's pods up to its
// parallelism until its completions succeed (Indexed or not), replaces
// failed pods with back-off up to backoffLimit (and backoffLimitPerIndex),
// applies podFailurePolicy, activeDeadlineSeconds and suspend, and counts
// finished pods through the batch.kubernetes.io/job-tracking finalizer and
// status.uncountedTerminatedPods. The decisions are pure (core.go and the
// files it uses); sync.go carries them out through the API.
package job

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	batchlisters "k8s.io/client-go/listers/batch/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/outpost-mesh/outpost/hub/controllers"
)

// Component is the name the controller records Events as.
const Component = "job-controller"

// controllerName is the spec.managedBy value of the jobs this controller
// manages (also those with none).
const controllerName = "kubernetes.io/job-controller"

// syncBatchPeriod gathers the pod updates of a job into one sync, as
// upstream's.
const syncBatchPeriod = time.Second

// Retries of a job whose sync failed back off from 1s to 1m, as upstream.
const (
	retryBase = time.Second
	retryMax  = time.Minute
)

// Workers is how many jobs are synced at once.
const Workers = 5

var jobKind = batchv1.SchemeGroupVersion.WithKind("Job")

// Controller runs jobs' pods. Make one with New.
type Controller struct {
	client kubernetes.Interface
	jobs   batchlisters.JobLister
	pods   corelisters.PodLister
	synced []cache.InformerSynced
	events record.EventRecorder
	clock  clock.WithTicker
	log    *slog.Logger

	queue   workqueue.TypedRateLimitingInterface[string] // job keys
	orphans workqueue.TypedRateLimitingInterface[string] // pod keys whose finalizer may have to go

	exp      *expectations
	backoffs backoffs
}

// New builds the controller from c and registers its handlers on the job
// and pod informers. It starts nothing.
func New(c controllers.Context) (*Controller, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	jobInf := c.Informers.Batch().V1().Jobs()
	podInf := c.Informers.Core().V1().Pods()
	jm := &Controller{
		client: c.Client,
		jobs:   jobInf.Lister(),
		pods:   podInf.Lister(),
		events: c.Events(Component),
		clock:  c.Clock,
		log:    c.Logger,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](retryBase, retryMax),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "job", Clock: c.Clock}),
		orphans: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](retryBase, retryMax),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "job_orphan_pod", Clock: c.Clock}),
		exp: newExpectations(c.Clock),
	}
	if _, err := jobInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    jm.addJob,
		UpdateFunc: jm.updateJob,
		DeleteFunc: jm.deleteJob,
	}); err != nil {
		return nil, fmt.Errorf("job informer: %w", err)
	}
	if _, err := podInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    jm.addPod,
		UpdateFunc: jm.updatePod,
		DeleteFunc: jm.deletePod,
	}); err != nil {
		return nil, fmt.Errorf("pod informer: %w", err)
	}
	jm.synced = []cache.InformerSynced{jobInf.Informer().HasSynced, podInf.Informer().HasSynced}
	return jm, nil
}

// Run syncs jobs until ctx ends, and returns once its workers have
// stopped. The informers' owner starts them.
func (jm *Controller) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	var orphans error
	wg.Go(func() {
		orphans = controllers.Work(ctx, controllers.Workers[string]{
			Queue: jm.orphans, Count: 1, Synced: jm.synced, Sync: jm.syncOrphan, Log: jm.log,
			What: "pod", Failed: "release orphan pod", Level: controllers.Loud,
		})
	})
	err := controllers.Work(ctx, controllers.Workers[string]{
		Queue: jm.queue, Count: Workers, Synced: jm.synced, Sync: jm.sync, Log: jm.log,
		What: "job", Started: "job controller running", Failed: "sync job", Level: controllers.Loud,
	})
	wg.Wait()
	return errors.Join(err, orphans)
}

func key(obj metav1.Object) string {
	return obj.GetNamespace() + "/" + obj.GetName()
}

// managedHere reports whether this controller runs j (managedBy unset or
// its own).
func managedHere(j *batchv1.Job) bool {
	return j.Spec.ManagedBy == nil || *j.Spec.ManagedBy == controllerName
}

func (jm *Controller) enqueue(j *batchv1.Job, after time.Duration) {
	if !managedHere(j) {
		return
	}
	jm.queue.AddAfter(key(j), after)
}

func (jm *Controller) addJob(obj any) {
	j := obj.(*batchv1.Job)
	jm.enqueue(j, 0)
	jm.requeueForDeadline(nil, j)
}

func (jm *Controller) updateJob(old, cur any) {
	o, j := old.(*batchv1.Job), cur.(*batchv1.Job)
	if o.UID != j.UID {
		// Recreated under the same name: the old one's pods go too.
		jm.deleteJob(cache.DeletedFinalStateUnknown{Key: key(o), Obj: o})
	}
	// A status update is often this controller's own: batch it with pod
	// updates. A spec change acts at once.
	after := syncBatchPeriod
	if o.Generation != j.Generation || o.UID != j.UID {
		after = 0
	}
	jm.enqueue(j, after)
	jm.requeueForDeadline(o, j)
}

// requeueForDeadline syncs a started job again when a changed (or new)
// activeDeadlineSeconds falls.
func (jm *Controller) requeueForDeadline(old, j *batchv1.Job) {
	ads := j.Spec.ActiveDeadlineSeconds
	if ads == nil || j.Status.StartTime == nil || isFinished(j) {
		return
	}
	if old != nil && old.Spec.ActiveDeadlineSeconds != nil && *old.Spec.ActiveDeadlineSeconds == *ads {
		return
	}
	left := time.Duration(*ads)*time.Second - jm.clock.Since(j.Status.StartTime.Time)
	jm.enqueue(j, max(left, 0))
}

func (jm *Controller) deleteJob(obj any) {
	j, ok := controllers.Object[*batchv1.Job](obj)
	if !ok {
		return
	}
	jm.queue.Add(key(j))
	// Release the finalizers of the pods it leaves behind.
	pods, err := jm.pods.Pods(j.Namespace).List(labels.Everything())
	if err != nil {
		return
	}
	for _, p := range pods {
		if ref := metav1.GetControllerOf(p); ref != nil && ref.UID == j.UID && hasTrackingFinalizer(p) {
			jm.orphans.Add(key(p))
		}
	}
}

// controllerOf returns the job that controls p, if the cache holds it.
func (jm *Controller) controllerOf(p *corev1.Pod) (*batchv1.Job, *metav1.OwnerReference) {
	ref := metav1.GetControllerOf(p)
	if ref == nil || ref.Kind != jobKind.Kind || ref.APIVersion != batchv1.SchemeGroupVersion.String() {
		return nil, ref
	}
	j, err := jm.jobs.Jobs(p.Namespace).Get(ref.Name)
	if err != nil || j.UID != ref.UID {
		return nil, ref
	}
	return j, ref
}

func (jm *Controller) addPod(obj any) {
	p := obj.(*corev1.Pod)
	if p.DeletionTimestamp != nil {
		// Restarted controller: a pod being deleted counts as deleted.
		jm.podGone(p, false)
		return
	}
	if j, ref := jm.controllerOf(p); j != nil {
		jm.exp.created(key(j))
		jm.enqueue(j, syncBatchPeriod)
		return
	} else if ref != nil {
		if hasTrackingFinalizer(p) {
			jm.orphans.Add(key(p))
		}
		return
	}
	jm.enqueueSelecting(p)
}

// enqueueSelecting syncs the jobs whose selector matches the orphan p, to
// adopt it; and releases its finalizer if none does.
func (jm *Controller) enqueueSelecting(p *corev1.Pod) {
	matched := false
	if len(p.Labels) > 0 {
		jobs, _ := jm.jobs.Jobs(p.Namespace).List(labels.Everything())
		for _, j := range jobs {
			sel, err := metav1.LabelSelectorAsSelector(j.Spec.Selector)
			if err != nil || sel.Empty() || !sel.Matches(labels.Set(p.Labels)) {
				continue
			}
			matched = true
			jm.enqueue(j, syncBatchPeriod)
		}
	}
	if !matched && hasTrackingFinalizer(p) {
		jm.orphans.Add(key(p))
	}
}

func (jm *Controller) updatePod(old, cur any) {
	o, p := old.(*corev1.Pod), cur.(*corev1.Pod)
	if o.ResourceVersion == p.ResourceVersion {
		return
	}
	if p.DeletionTimestamp != nil && o.DeletionTimestamp == nil {
		jm.podGone(p, false)
	}
	finalizerGone := hasTrackingFinalizer(o) && !hasTrackingFinalizer(p)
	oj, _ := jm.controllerOf(o)
	j, ref := jm.controllerOf(p)
	if oj != nil && (j == nil || oj.UID != j.UID) {
		if finalizerGone {
			jm.exp.removed(key(oj), p.UID)
		}
		jm.enqueue(oj, syncBatchPeriod)
	}
	switch {
	case j != nil:
		if finalizerGone {
			jm.exp.removed(key(j), p.UID)
		}
		// A pod that failed is replaced, with back-off, without waiting
		// for the batch.
		jm.enqueue(j, syncBatchPeriod)
	case ref != nil:
		if hasTrackingFinalizer(p) {
			jm.orphans.Add(key(p))
		}
	default:
		jm.enqueueSelecting(p)
	}
}

func (jm *Controller) deletePod(obj any) {
	p, ok := controllers.Object[*corev1.Pod](obj)
	if !ok {
		return
	}
	jm.podGone(p, true)
}

// podGone notes that p is deleted (final: gone from the store, else only
// being deleted).
func (jm *Controller) podGone(p *corev1.Pod, final bool) {
	j, _ := jm.controllerOf(p)
	if j == nil {
		return
	}
	k := key(j)
	jm.exp.deleted(k)
	if final {
		jm.exp.removed(k, p.UID)
	}
	jm.enqueue(j, syncBatchPeriod)
}

// syncOrphan removes the tracking finalizer of a pod no unfinished job of
// this controller's controls any more.
func (jm *Controller) syncOrphan(ctx context.Context, k string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(k)
	if err != nil {
		return nil
	}
	p, err := jm.pods.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return err
	}
	if ref := metav1.GetControllerOf(p); ref != nil {
		if ref.Kind != jobKind.Kind || ref.APIVersion != batchv1.SchemeGroupVersion.String() {
			return nil // not a job's: not this controller's finalizer to remove
		}
		if j, _ := jm.controllerOf(p); j != nil && (!managedHere(j) || !isFinished(j)) {
			return nil
		}
	}
	return jm.removeFinalizer(ctx, p)
}

// removeFinalizerPatch is the strategic merge patch that removes the
// tracking finalizer and leaves the others.
var removeFinalizerPatch = []byte(`{"metadata":{"$deleteFromPrimitiveList/finalizers":["` + batchv1.JobTrackingFinalizer + `"]}}`)

func (jm *Controller) removeFinalizer(ctx context.Context, p *corev1.Pod) error {
	if !hasTrackingFinalizer(p) {
		return nil
	}
	_, err := jm.client.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.StrategicMergePatchType, removeFinalizerPatch, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
