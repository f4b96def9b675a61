// Package cronjob is the hub's CronJob controller, as upstream's
// kube-controller-manager runs it: it creates each cronjob's Job at its
// scheduled times (in spec.timeZone), under concurrencyPolicy and
// startingDeadlineSeconds, keeps status.active, lastScheduleTime and
// lastSuccessfulTime, and deletes finished jobs beyond the history limits.
// It wakes up for the next scheduled time through its work queue, on the
// Context's clock, never by polling. The decisions are pure (core.go).
package cronjob

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	batchlisters "k8s.io/client-go/listers/batch/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/outpost-mesh/outpost/hub/controllers"
)

// Component is the name the controller records Events as.
const Component = "cronjob-controller"

// Workers is how many cronjobs are synced at once.
const Workers = 5

var cronJobKind = batchv1.SchemeGroupVersion.WithKind("CronJob")

// Controller runs cronjobs. Make one with New.
type Controller struct {
	client   kubernetes.Interface
	cronJobs batchlisters.CronJobLister
	jobs     batchlisters.JobLister
	synced   []cache.InformerSynced
	events   record.EventRecorder
	clock    clock.WithTicker
	log      *slog.Logger
	queue    workqueue.TypedRateLimitingInterface[string]
}

// New builds the controller from c and registers its handlers on the
// cronjob and job informers. It starts nothing.
func New(c controllers.Context) (*Controller, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	cjInf := c.Informers.Batch().V1().CronJobs()
	jobInf := c.Informers.Batch().V1().Jobs()
	jm := &Controller{
		client:   c.Client,
		cronJobs: cjInf.Lister(),
		jobs:     jobInf.Lister(),
		events:   c.Events(Component),
		clock:    c.Clock,
		log:      c.Logger,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "cronjob", Clock: c.Clock}),
	}
	if _, err := cjInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { jm.enqueue(obj, 0) },
		UpdateFunc: jm.updateCronJob,
		DeleteFunc: func(obj any) { jm.enqueue(obj, 0) },
	}); err != nil {
		return nil, fmt.Errorf("cronjob informer: %w", err)
	}
	if _, err := jobInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: jm.jobChanged,
		UpdateFunc: func(old, cur any) {
			if o, j := old.(*batchv1.Job), cur.(*batchv1.Job); o.ResourceVersion != j.ResourceVersion {
				jm.jobChanged(old)
				jm.jobChanged(cur)
			}
		},
		DeleteFunc: jm.jobChanged,
	}); err != nil {
		return nil, fmt.Errorf("job informer: %w", err)
	}
	jm.synced = []cache.InformerSynced{cjInf.Informer().HasSynced, jobInf.Informer().HasSynced}
	return jm, nil
}

// Run syncs cronjobs until ctx ends, and returns once its workers have
// stopped. The informers' owner starts them.
func (jm *Controller) Run(ctx context.Context) error {
	return controllers.Work(ctx, controllers.Workers[string]{
		Queue: jm.queue, Count: Workers, Synced: jm.synced, Log: jm.log,
		What: "cronjob", Started: "cronjob controller running", Failed: "sync cronjob", Level: controllers.Loud,
		Sync: func(ctx context.Context, k string) error {
			requeue, err := jm.sync(ctx, k)
			if err == nil && requeue > 0 {
				jm.queue.AddAfter(k, requeue) // when the schedule next fires
			}
			return err
		},
	})
}

func (jm *Controller) enqueue(obj any, after time.Duration) {
	k, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	jm.queue.AddAfter(k, after)
}

// updateCronJob syncs a cronjob at once, or, when its schedule or zone
// changed, when the new schedule next fires.
func (jm *Controller) updateCronJob(old, cur any) {
	o, cj := old.(*batchv1.CronJob), cur.(*batchv1.CronJob)
	if o.Spec.Schedule == cj.Spec.Schedule && ptr.Equal(o.Spec.TimeZone, cj.Spec.TimeZone) {
		jm.enqueue(cj, 0)
		return
	}
	sched, _, err := parseSchedule(cj)
	if err != nil {
		jm.events.Eventf(cj, corev1.EventTypeWarning, "UnparseableSchedule", "unparseable schedule for cronjob: %s", cj.Spec.Schedule)
		return
	}
	jm.enqueue(cj, untilNext(cj, sched, jm.clock.Now()))
}

// jobChanged syncs the cronjob controlling a job that changed.
func (jm *Controller) jobChanged(obj any) {
	j, ok := controllers.Object[*batchv1.Job](obj)
	if !ok {
		return
	}
	ref := metav1.GetControllerOf(j)
	if ref == nil || ref.Kind != cronJobKind.Kind || ref.APIVersion != batchv1.SchemeGroupVersion.String() {
		return
	}
	cj, err := jm.cronJobs.CronJobs(j.Namespace).Get(ref.Name)
	if err != nil || cj.UID != ref.UID {
		return
	}
	jm.enqueue(cj, 0)
}

// sync brings one cronjob up to date and returns when it is to be synced
// again (0: when something changes).
func (jm *Controller) sync(ctx context.Context, k string) (time.Duration, error) {
	ns, name, err := cache.SplitMetaNamespaceKey(k)
	if err != nil {
		return 0, nil
	}
	shared, err := jm.cronJobs.CronJobs(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return 0, nil
	} else if err != nil {
		return 0, err
	}
	cj := shared.DeepCopy()
	all, err := jm.jobs.Jobs(ns).List(labels.Everything())
	if err != nil {
		return 0, err
	}
	var jobs []*batchv1.Job
	for _, j := range all {
		if ref := metav1.GetControllerOf(j); ref != nil && ref.UID == cj.UID {
			jobs = append(jobs, j)
		}
	}

	requeue, changed, syncErr := jm.syncCronJob(ctx, cj, jobs)
	if jm.cleanup(ctx, cj, jobs) {
		changed = true
	}
	if changed {
		if _, err := jm.client.BatchV1().CronJobs(ns).UpdateStatus(ctx, cj, metav1.UpdateOptions{}); err != nil {
			return 0, fmt.Errorf("update status: %w", err)
		}
	}
	if requeue > 0 {
		return requeue, nil
	}
	return 0, syncErr
}

func (jm *Controller) record(cj *batchv1.CronJob, evs []event) {
	for _, e := range evs {
		typ := corev1.EventTypeNormal
		if e.warning {
			typ = corev1.EventTypeWarning
		}
		jm.events.Eventf(cj, typ, e.reason, e.format, e.args...)
	}
}

// syncCronJob reconciles cj's status with its jobs and starts the run
// that is due, changing cj's status in place.
func (jm *Controller) syncCronJob(ctx context.Context, cj *batchv1.CronJob, jobs []*batchv1.Job) (time.Duration, bool, error) {
	changed, evs := reconcile(cj, jobs)
	jm.record(cj, evs)
	// Active jobs the cache does not show: gone, or too new for it.
	have := map[string]bool{}
	for _, j := range jobs {
		have[string(j.UID)] = true
	}
	for _, a := range append([]corev1.ObjectReference(nil), cj.Status.Active...) {
		if have[string(a.UID)] {
			continue
		}
		switch _, err := jm.client.BatchV1().Jobs(a.Namespace).Get(ctx, a.Name, metav1.GetOptions{}); {
		case apierrors.IsNotFound(err):
			jm.events.Eventf(cj, corev1.EventTypeNormal, "MissingJob", "Active job went missing: %v", a.Name)
			removeActive(cj, a.UID)
			changed = true
		case err != nil:
			return 0, changed, err
		}
	}
	if cj.DeletionTimestamp != nil {
		return 0, changed, nil
	}
	if tz := cj.Spec.TimeZone; tz != nil {
		if _, err := time.LoadLocation(*tz); err != nil {
			jm.events.Eventf(cj, corev1.EventTypeWarning, "UnknownTimeZone", "invalid timeZone: %q: %s", *tz, err)
			return 0, changed, nil
		}
	}
	if cj.Spec.Suspend != nil && *cj.Spec.Suspend {
		return 0, changed, nil
	}
	sched, zoned, err := parseSchedule(cj)
	if err != nil {
		// The API refuses such schedules: wait for the spec to change.
		jm.events.Eventf(cj, corev1.EventTypeWarning, "UnparseableSchedule", "unparseable schedule: %q : %s", cj.Spec.Schedule, err)
		return 0, changed, nil
	}
	if zoned {
		jm.events.Eventf(cj, corev1.EventTypeWarning, "UnsupportedSchedule",
			"CRON_TZ or TZ used in schedule %q is not officially supported, see https://kubernetes.io/docs/concepts/workloads/controllers/cron-jobs/ for more details", cj.Spec.Schedule)
	}
	now := jm.clock.Now()
	d := decide(cj, sched, now)
	jm.record(cj, d.events)
	if d.run == nil {
		return d.requeue, changed, nil
	}
	for _, a := range d.replace {
		j, err := jm.client.BatchV1().Jobs(a.Namespace).Get(ctx, a.Name, metav1.GetOptions{})
		if err != nil {
			jm.events.Eventf(cj, corev1.EventTypeWarning, "FailedGet", "Get job: %v", err)
			return 0, changed, err
		}
		if err := jm.deleteJob(ctx, cj, j); err != nil {
			return 0, changed, fmt.Errorf("replace job %s/%s: %w", j.Namespace, j.Name, err)
		}
		changed = true
	}
	want, err := jobFor(cj, *d.run)
	if err != nil {
		return 0, changed, err
	}
	got, err := jm.client.BatchV1().Jobs(cj.Namespace).Create(ctx, want, metav1.CreateOptions{})
	switch {
	case apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
		return 0, changed, err
	case apierrors.IsAlreadyExists(err):
		// Created before, by this controller or someone else.
		if got, err = jm.client.BatchV1().Jobs(cj.Namespace).Get(ctx, want.Name, metav1.GetOptions{}); err != nil {
			return 0, changed, err
		}
		if !metav1.IsControlledBy(got, cj) || inActive(cj, got.UID) {
			return 0, changed, nil
		}
		jm.log.Info("job already exists", "cronjob", cj.Namespace+"/"+cj.Name, "job", got.Name)
	case err != nil:
		jm.events.Eventf(cj, corev1.EventTypeWarning, "FailedCreate", "Error creating job: %v", err)
		return 0, changed, err
	default:
		jm.events.Eventf(cj, corev1.EventTypeNormal, "SuccessfulCreate", "Created job %v", got.Name)
	}
	cj.Status.Active = append(cj.Status.Active, corev1.ObjectReference{
		APIVersion: batchv1.SchemeGroupVersion.String(), Kind: "Job",
		Namespace: got.Namespace, Name: got.Name, UID: got.UID, ResourceVersion: got.ResourceVersion,
	})
	cj.Status.LastScheduleTime = &metav1.Time{Time: *d.run}
	return untilNext(cj, sched, now), true, nil
}

// deleteJob deletes j in the background and takes it off cj's active
// list.
func (jm *Controller) deleteJob(ctx context.Context, cj *batchv1.CronJob, j *batchv1.Job) error {
	err := jm.client.BatchV1().Jobs(j.Namespace).Delete(ctx, j.Name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
	if err != nil && !apierrors.IsNotFound(err) {
		jm.events.Eventf(cj, corev1.EventTypeWarning, "FailedDelete", "Deleted job: %v", err)
		return err
	}
	removeActive(cj, j.UID)
	jm.events.Eventf(cj, corev1.EventTypeNormal, "SuccessfulDelete", "Deleted job %v", j.Name)
	return nil
}

// cleanup deletes the finished jobs beyond cj's history limits and
// reports whether cj's status changed.
func (jm *Controller) cleanup(ctx context.Context, cj *batchv1.CronJob, jobs []*batchv1.Job) bool {
	changed := false
	for _, j := range oldFinished(cj, jobs) {
		if jm.deleteJob(ctx, cj, j) == nil {
			changed = true
		}
	}
	return changed
}
