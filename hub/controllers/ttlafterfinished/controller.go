// Package ttlafterfinished is the hub's TTL-after-finished controller, as
// upstream's kube-controller-manager runs it: it deletes a Job, with its
// pods in the background, ttlSecondsAfterFinished after it finished. It
// waits through its work queue on the Context's clock, never by polling.
package ttlafterfinished

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	batchlisters "k8s.io/client-go/listers/batch/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/outpost-mesh/outpost/hub/controllers"
)

// Workers is how many jobs are checked at once.
const Workers = 5

// Controller deletes finished jobs after their TTL. Make one with New.
type Controller struct {
	client kubernetes.Interface
	jobs   batchlisters.JobLister
	synced cache.InformerSynced
	clock  clock.WithTicker
	log    *slog.Logger
	queue  workqueue.TypedRateLimitingInterface[string]
}

// New builds the controller from c and registers its handlers on the job
// informer. It starts nothing.
func New(c controllers.Context) (*Controller, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	inf := c.Informers.Batch().V1().Jobs()
	tc := &Controller{
		client: c.Client,
		jobs:   inf.Lister(),
		synced: inf.Informer().HasSynced,
		clock:  c.Clock,
		log:    c.Logger,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "ttl_jobs_to_delete", Clock: c.Clock}),
	}
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    tc.maybeEnqueue,
		UpdateFunc: func(_, cur any) { tc.maybeEnqueue(cur) },
	}); err != nil {
		return nil, fmt.Errorf("job informer: %w", err)
	}
	return tc, nil
}

// Run deletes expired jobs until ctx ends, and returns once its workers
// have stopped. The informers' owner starts them.
func (tc *Controller) Run(ctx context.Context) error {
	return controllers.Work(ctx, controllers.Workers[string]{
		Queue: tc.queue, Count: Workers, Synced: []cache.InformerSynced{tc.synced}, Sync: tc.sync, Log: tc.log,
		What: "job", Failed: "clean up job", Level: controllers.Loud,
	})
}

func (tc *Controller) maybeEnqueue(obj any) {
	j, ok := obj.(*batchv1.Job)
	if !ok || !needsCleanup(j) {
		return
	}
	tc.queue.Add(j.Namespace + "/" + j.Name)
}

// needsCleanup reports whether j has a TTL and has finished.
func needsCleanup(j *batchv1.Job) bool {
	return j.Spec.TTLSecondsAfterFinished != nil && j.DeletionTimestamp == nil && !finishedAt(j).IsZero()
}

// finishedAt is when j finished: the transition of its Complete or Failed
// condition, or the zero time while it runs.
func finishedAt(j *batchv1.Job) time.Time {
	for _, c := range j.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}

// timeLeft is how long after now j is to be deleted; <= 0 when due. ok
// is false for a job that is not to be deleted (no TTL, not finished).
func timeLeft(j *batchv1.Job, now time.Time) (left time.Duration, ok bool) {
	if !needsCleanup(j) {
		return 0, false
	}
	expire := finishedAt(j).Add(time.Duration(*j.Spec.TTLSecondsAfterFinished) * time.Second)
	return expire.Sub(now), true
}

func (tc *Controller) sync(ctx context.Context, k string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(k)
	if err != nil {
		return nil
	}
	j, err := tc.jobs.Jobs(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return err
	}
	if left, ok := timeLeft(j, tc.clock.Now()); !ok {
		return nil
	} else if left > 0 {
		tc.queue.AddAfter(k, left)
		return nil
	}
	// The cache may be behind (the TTL changed): check a fresh read.
	fresh, err := tc.client.BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return err
	}
	if left, ok := timeLeft(fresh, tc.clock.Now()); !ok {
		return nil
	} else if left > 0 {
		tc.queue.AddAfter(k, left)
		return nil
	}
	tc.log.Info("deleting finished job after its TTL", "job", k)
	err = tc.client.BatchV1().Jobs(ns).Delete(ctx, name, metav1.DeleteOptions{
		PropagationPolicy: ptr.To(metav1.DeletePropagationBackground),
		Preconditions:     &metav1.Preconditions{UID: &fresh.UID},
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
