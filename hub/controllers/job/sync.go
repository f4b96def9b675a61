package job

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// sync brings the job of key one step toward its spec, as upstream's
// syncJob: decide how it ends (if it does), create or delete pods, account
// for finished pods and write the status.
func (jm *Controller) sync(ctx context.Context, k string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(k)
	if err != nil {
		return nil
	}
	shared, err := jm.jobs.Jobs(ns).Get(name)
	if apierrors.IsNotFound(err) {
		jm.exp.forget(k)
		jm.backoffs.forget(k)
		return nil
	} else if err != nil {
		return err
	}
	if !managedHere(shared) {
		return nil
	}
	if isFinished(shared) {
		jm.backoffs.forget(k)
		return nil
	}
	j := shared.DeepCopy()
	if m := j.Spec.CompletionMode; m != nil && *m != batchv1.NonIndexedCompletion && *m != batchv1.IndexedCompletion {
		jm.events.Event(j, corev1.EventTypeWarning, "UnknownCompletionMode", "Skipped Job sync because completion mode is unknown")
		return nil
	}
	if j.Spec.Parallelism == nil || j.Spec.BackoffLimit == nil || (isIndexed(j) && j.Spec.Completions == nil) {
		// The API defaults these; a job without them was not stored by it.
		jm.events.Event(j, corev1.EventTypeWarning, "InvalidJob", "Skipped Job sync because parallelism, backoffLimit or (when Indexed) completions is unset")
		return nil
	}

	// Expectations are read before the pods, so that a pod the cache
	// shows after this read is seen by the next sync.
	satisfied := jm.exp.satisfied(k)
	pods, err := jm.claimPods(ctx, j)
	if err != nil {
		return err
	}
	now := jm.clock.Now()
	s := newSyncState(j, pods, jm.exp.pendingRemovals(k), jm.backoffs.get(k), now)
	if d := s.decideFinished(); d > 0 {
		jm.queue.AddAfter(k, d)
	}

	active := int32(len(s.active))
	var manageErr error
	suspendChanged := false
	if s.finished != nil {
		// Pods still running are deleted, their finalizers kept so that
		// they are counted as they go.
		deletedReady, deleted, err := jm.deletePods(ctx, j, s.active, false)
		if deleted != active || !satisfied {
			s.finished = nil // not all gone, or pods the cache does not show yet
		}
		active -= deleted
		s.terminating += deleted
		s.ready -= deletedReady
		manageErr = err
	} else {
		manageCalled := false
		if satisfied && j.DeletionTimestamp == nil {
			active, manageErr = jm.manage(ctx, s)
			manageCalled = true
		}
		switch {
		case s.complete(active):
			s.finished = newCondition(batchv1.JobSuccessCriteriaMet, batchv1.JobReasonCompletionsReached, completionsReachedMessage, now)
		case manageCalled:
			if ev := s.setSuspended(); ev != "" {
				suspendChanged = true
				msg := "Job suspended"
				if ev == "Resumed" {
					msg = "Job resumed"
				}
				jm.events.Event(j, corev1.EventTypeNormal, ev, msg)
			}
		}
	}

	st := &s.job.Status
	needsFlush := suspendChanged || active != st.Active || st.Ready == nil || *st.Ready != s.ready ||
		st.Terminating == nil || *st.Terminating != s.terminating
	st.Active, st.Ready, st.Terminating = active, new(s.ready), new(s.terminating)
	if err := jm.trackStatus(ctx, k, s, needsFlush); err != nil {
		return fmt.Errorf("track status: %w", err)
	}
	return manageErr
}

// manage carries out s's plan for a running job and returns how many
// pods are active after it.
func (jm *Controller) manage(ctx context.Context, s *syncState) (int32, error) {
	j, k := s.job, key(s.job)
	active := int32(len(s.active))
	p := s.plan()
	switch {
	case len(p.delete) > 0:
		jm.exp.expect(k, 0, len(p.delete))
		deletedReady, deleted, err := jm.deletePods(ctx, j, p.delete, true)
		s.terminating += deleted
		s.ready -= deletedReady
		return active - deleted, err
	case p.wait > 0:
		jm.queue.AddAfter(k, max(p.wait, syncBatchPeriod))
		return active, nil
	case len(p.create) == 0:
		return active, nil
	}
	jm.exp.expect(k, len(p.create), 0)
	created, err := jm.createPods(ctx, s, p.create)
	return active + created, err
}

// createPods creates a pod for each of indexes in batches that start at
// one and double while they succeed (upstream's slow start, so that a job
// that cannot create pods does not flood the API), and returns how many it
// created.
func (jm *Controller) createPods(ctx context.Context, s *syncState, indexes []int) (int32, error) {
	j, k := s.job, key(s.job)
	var (
		mu      sync.Mutex
		created int32
		errs    []error
	)
	for batch := 1; len(indexes) > 0; batch *= 2 {
		n := min(batch, len(indexes))
		var wg sync.WaitGroup
		failed := false
		for _, ix := range indexes[:n] {
			var counted, ignored int32
			if ix != noIndex && perIndex(j) {
				counted, ignored = s.replacementFailures(s.delayed[ix])
			}
			pod := newPod(j, ix, counted, ignored)
			wg.Go(func() {
				got, err := jm.client.CoreV1().Pods(j.Namespace).Create(ctx, pod, metav1.CreateOptions{})
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					jm.exp.created(k) // the cache will never show it
					if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
						return // everything fails while the namespace goes
					}
					failed = true
					errs = append(errs, err)
					jm.events.Eventf(j, corev1.EventTypeWarning, "FailedCreate", "Error creating: %v", err)
					return
				}
				created++
				jm.events.Eventf(j, corev1.EventTypeNormal, "SuccessfulCreate", "Created pod: %v", got.Name)
			})
		}
		wg.Wait()
		indexes = indexes[n:]
		if failed {
			for range indexes {
				jm.exp.created(k) // skipped: a later sync tries again
			}
			break
		}
	}
	return created, errors.Join(errs...)
}

// deletePods deletes pods of j, first removing their tracking finalizers
// when rmFinalizer (pods the job no longer wants, not counted as failed),
// and returns how many it deleted and how many of those were ready.
func (jm *Controller) deletePods(ctx context.Context, j *batchv1.Job, pods []*corev1.Pod, rmFinalizer bool) (ready, deleted int32, err error) {
	k := key(j)
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	for _, p := range pods {
		wg.Go(func() {
			var err error
			if rmFinalizer {
				err = jm.removeFinalizer(ctx, p)
			}
			if err == nil {
				err = jm.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{})
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil && !apierrors.IsNotFound(err) {
				if rmFinalizer {
					jm.exp.deleted(k)
				}
				errs = append(errs, err)
				jm.events.Eventf(j, corev1.EventTypeWarning, "FailedDelete", "Error deleting: %v", err)
				return
			}
			if err == nil {
				jm.events.Eventf(j, corev1.EventTypeNormal, "SuccessfulDelete", "Deleted pod: %v", p.Name)
			}
			deleted++
			if isReady(p) {
				ready++
			}
		})
	}
	wg.Wait()
	return ready, deleted, errors.Join(errs...)
}

// trackStatus accounts for finished pods as upstream's
// trackJobStatusAndRemoveFinalizers: it writes them into
// status.uncountedTerminatedPods, removes their finalizers, moves them
// into the counters, and finishes the job once nothing is left to count.
func (jm *Controller) trackStatus(ctx context.Context, k string, s *syncState, needsFlush bool) error {
	rm, withFinalizer, changed, reachedMax := s.track()
	needsFlush = needsFlush || changed
	if needsFlush {
		if err := jm.writeStatus(ctx, s); err != nil {
			return fmt.Errorf("add uncounted pods to status: %w", err)
		}
		jm.backoffs.set(k, s.backoff)
		needsFlush = false
	}
	var rmErr error
	if len(rm) > 0 {
		uids := make([]types.UID, len(rm))
		for i, p := range rm {
			uids[i] = p.UID
		}
		jm.exp.expectRemoved(k, uids)
		var mu sync.Mutex
		var wg sync.WaitGroup
		var errs []error
		for _, p := range rm {
			wg.Go(func() {
				err := jm.removeFinalizer(ctx, p)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					jm.exp.removed(k, p.UID)
					errs = append(errs, fmt.Errorf("remove tracking finalizer of %s: %w", p.Name, err))
					return
				}
				withFinalizer.Delete(p.UID)
			})
		}
		wg.Wait()
		rmErr = errors.Join(errs...)
	}
	if countUncounted(&s.job.Status, withFinalizer) {
		needsFlush = true
	}
	if rmErr != nil {
		if needsFlush {
			if err := jm.writeStatus(ctx, s); err != nil {
				return fmt.Errorf("remove uncounted pods from status: %w", err)
			}
		}
		return rmErr
	}
	finished := !reachedMax && s.enactFinished()
	if !needsFlush && !finished {
		return nil
	}
	if err := jm.writeStatus(ctx, s); err != nil {
		return fmt.Errorf("remove uncounted pods from status: %w", err)
	}
	if finished {
		jm.recordFinished(s.job, s.finished)
	}
	return nil
}

func (jm *Controller) writeStatus(ctx context.Context, s *syncState) error {
	got, err := jm.client.BatchV1().Jobs(s.job.Namespace).UpdateStatus(ctx, s.job, metav1.UpdateOptions{})
	if err != nil {
		return err
	}
	s.job = got
	return nil
}

func (jm *Controller) recordFinished(j *batchv1.Job, c *batchv1.JobCondition) {
	if c.Type == batchv1.JobComplete {
		if j.Spec.Completions != nil && j.Status.Succeeded > *j.Spec.Completions {
			jm.events.Event(j, corev1.EventTypeWarning, "TooManySucceededPods", "Too many succeeded pods running after completion count reached")
		}
		jm.events.Event(j, corev1.EventTypeNormal, "Completed", "Job completed")
		return
	}
	jm.events.Event(j, corev1.EventTypeWarning, c.Reason, c.Message)
}

// claimPods returns the pods j controls, as upstream's ClaimPods: pods it
// controls that match its selector, and orphans that match, which it
// adopts (with the tracking finalizer); pods it controls that no longer
// match are released. A job being deleted adopts nothing.
func (jm *Controller) claimPods(ctx context.Context, j *batchv1.Job) ([]*corev1.Pod, error) {
	sel, err := metav1.LabelSelectorAsSelector(j.Spec.Selector)
	if err != nil {
		return nil, fmt.Errorf("job selector: %w", err)
	}
	all, err := jm.pods.Pods(j.Namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	var out []*corev1.Pod
	var errs []error
	for _, p := range all {
		ref := metav1.GetControllerOf(p)
		matches := !sel.Empty() && sel.Matches(labels.Set(p.Labels))
		switch {
		case ref != nil && ref.UID == j.UID && matches:
			out = append(out, p)
		case ref != nil && ref.UID == j.UID && p.DeletionTimestamp == nil:
			// Released: as an orphan it loses its finalizer uncounted.
			if err := jm.patchPod(ctx, p, map[string]any{"ownerReferences": []map[string]any{{"$patch": "delete", "uid": j.UID}}}); err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, err)
			}
		case ref == nil && matches && j.DeletionTimestamp == nil && p.DeletionTimestamp == nil:
			cref := metav1.NewControllerRef(j, jobKind)
			if err := jm.patchPod(ctx, p, map[string]any{
				"ownerReferences": []metav1.OwnerReference{*cref},
				"finalizers":      []string{batchv1.JobTrackingFinalizer},
			}); err != nil {
				if !apierrors.IsNotFound(err) {
					errs = append(errs, err)
				}
				continue
			}
			adopted := p.DeepCopy()
			adopted.OwnerReferences = append(adopted.OwnerReferences, *cref)
			if !hasTrackingFinalizer(adopted) {
				adopted.Finalizers = append(adopted.Finalizers, batchv1.JobTrackingFinalizer)
			}
			out = append(out, adopted)
		}
	}
	return out, errors.Join(errs...)
}

// patchPod applies a strategic merge patch to p's metadata, guarded by its
// uid so that a pod recreated under the name is left alone.
func (jm *Controller) patchPod(ctx context.Context, p *corev1.Pod, metadata map[string]any) error {
	metadata["uid"] = p.UID
	body, err := json.Marshal(map[string]any{"metadata": metadata})
	if err != nil {
		return err
	}
	_, err = jm.client.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.StrategicMergePatchType, body, metav1.PatchOptions{})
	return err
}
