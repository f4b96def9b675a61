package replicaset

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/outpost-mesh/outpost/hub/controllers"
)

// Workers is how many ReplicaSets are synced at once, as upstream's
// --concurrent-replicaset-syncs default.
const Workers = 5

// Controller is the ReplicaSet controller's client-go shell, for the
// owners it was made for (ReplicaSets, or ReplicationControllers seen as
// ReplicaSets).
type Controller struct {
	client kubernetes.Interface
	owners Owners
	rsInf  cache.SharedIndexInformer
	podInf cache.SharedIndexInformer
	events record.EventRecorder
	clock  clock.WithTicker
	log    *slog.Logger
	exp    *Expectations

	queue workqueue.TypedRateLimitingInterface[string] // made by Run
}

// New returns the ReplicaSet controller of c. It registers the ReplicaSet
// and Pod informers (with the pods' controller index) and starts nothing.
func New(c controllers.Context) (*Controller, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return NewFor(c, ReplicaSets(c))
}

// NewFor returns the controller of c that keeps the pods of owners. It
// registers the Pod informer (with the pods' controller index) and starts
// nothing; owners.Informer is registered by whoever made it.
func NewFor(c controllers.Context, owners Owners) (*Controller, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if err := owners.validate(); err != nil {
		return nil, err
	}
	pods := c.Informers.Core().V1().Pods()
	if err := AddPodIndex(pods.Informer()); err != nil {
		return nil, err
	}
	return &Controller{
		client: c.Client,
		owners: owners,
		rsInf:  owners.Informer,
		podInf: pods.Informer(),
		events: c.Events(owners.Component),
		clock:  c.Clock,
		log:    c.Logger,
		exp:    NewExpectations(c.Clock),
	}, nil
}

// Run syncs ReplicaSets until ctx ends, then returns nil once its workers
// have stopped.
func (c *Controller) Run(ctx context.Context) error {
	c.queue = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: c.owners.Component, Clock: c.clock})
	defer c.queue.ShutDown()

	rsReg, err := c.rsInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.addRS,
		UpdateFunc: c.updateRS,
		DeleteFunc: c.deleteRS,
	})
	if err != nil {
		return fmt.Errorf("%s handler: %w", c.owners.Kind.Kind, err)
	}
	defer c.rsInf.RemoveEventHandler(rsReg)
	podReg, err := c.podInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.addPod,
		UpdateFunc: c.updatePod,
		DeleteFunc: c.deletePod,
	})
	if err != nil {
		return fmt.Errorf("pod handler: %w", err)
	}
	defer c.podInf.RemoveEventHandler(podReg)

	return controllers.Work(ctx, controllers.Workers[string]{
		Queue: c.queue, Count: Workers, Synced: []cache.InformerSynced{rsReg.HasSynced, podReg.HasSynced},
		Sync: c.sync, Log: c.log, What: strings.ToLower(c.owners.Kind.Kind), Started: "started",
		// A conflict is a cache behind our own last write: the usual case.
		Level: func(err error) slog.Level { return min(controllers.Quiet(err), slog.LevelInfo) },
	})
}

func (c *Controller) enqueue(rs *appsv1.ReplicaSet) {
	if key, err := cache.MetaNamespaceKeyFunc(rs); err == nil {
		c.queue.Add(key)
	}
}

// sync brings the ReplicaSet of key to its spec: claim pods, create or
// delete, write status.
func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil // never queued by us
	}
	rs, err := c.owners.get(ns, name)
	if apierrors.IsNotFound(err) {
		c.exp.Delete(key)
		return nil
	}
	if err != nil {
		return err
	}
	needsSync := c.exp.Satisfied(key)
	selector, err := metav1.LabelSelectorAsSelector(rs.Spec.Selector)
	if err != nil {
		// The API refuses such selectors; an old object may hold one.
		// Nothing to do until it changes, which requeues it.
		c.events.Eventf(c.owners.ref(rs), corev1.EventTypeWarning, "InvalidSelector", "Invalid selector: %v", err)
		return nil
	}

	pods, err := c.candidates(rs)
	if err != nil {
		return err
	}
	var active, terminating []*corev1.Pod
	for _, p := range pods {
		if IsActive(p) {
			active = append(active, p)
		} else if IsTerminating(p) {
			terminating = append(terminating, p)
		}
	}
	claimer := &Claimer[*corev1.Pod]{
		Controller: rs,
		Kind:       c.owners.Kind,
		Selector:   selector,
		Recheck: RecheckDeletion(rs.UID, func(ctx context.Context) (metav1.Object, error) {
			return c.owners.Get(ctx, ns, name)
		}),
		Patch: func(ctx context.Context, p *corev1.Pod, patch []byte) error {
			_, err := c.client.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
			return err
		},
	}
	active, err = claimer.Claim(ctx, active)
	if err != nil {
		return err
	}

	var manageErr error
	if needsSync && rs.DeletionTimestamp == nil {
		manageErr = c.manage(ctx, key, rs, active)
	}
	st, recheck := Status(rs, active, Owned(rs, selector, terminating), manageErr, c.clock.Now())
	if !c.owners.TerminatingReplicas {
		st.TerminatingReplicas = nil
	}
	if StatusChanged(rs, st) {
		if err := c.updateStatus(ctx, rs, st); err != nil {
			return errors.Join(manageErr, err)
		}
	}
	if manageErr == nil && recheck > 0 {
		c.queue.AddAfter(key, recheck)
	}
	return manageErr
}

// candidates returns the pods rs may hold: those it controls and the
// orphans of its namespace.
func (c *Controller) candidates(rs *appsv1.ReplicaSet) ([]*corev1.Pod, error) {
	idx := c.podInf.GetIndexer()
	owned, err := idx.ByIndex(PodIndex, string(rs.UID))
	if err != nil {
		return nil, err
	}
	orphans, err := idx.ByIndex(PodIndex, orphanKey(rs.Namespace))
	if err != nil {
		return nil, err
	}
	pods := make([]*corev1.Pod, 0, len(owned)+len(orphans))
	for _, o := range append(owned, orphans...) {
		if p, ok := o.(*corev1.Pod); ok && p.Namespace == rs.Namespace {
			pods = append(pods, p)
		}
	}
	return pods, nil
}

// related returns the active pods of every ReplicaSet with the same
// controller as rs (rs included), which rank pods for deletion.
func (c *Controller) related(rs *appsv1.ReplicaSet) []*corev1.Pod {
	ref := metav1.GetControllerOfNoCopy(rs)
	if ref == nil {
		return nil
	}
	all, err := c.owners.list(rs.Namespace)
	if err != nil {
		return nil
	}
	var pods []*corev1.Pod
	for _, other := range all {
		if r := metav1.GetControllerOfNoCopy(other); r == nil || r.UID != ref.UID {
			continue
		}
		objs, _ := c.podInf.GetIndexer().ByIndex(PodIndex, string(other.UID))
		for _, o := range objs {
			if p, ok := o.(*corev1.Pod); ok && IsActive(p) {
				pods = append(pods, p)
			}
		}
	}
	return pods
}

// manage creates or deletes pods as Manage plans.
func (c *Controller) manage(ctx context.Context, key string, rs *appsv1.ReplicaSet, active []*corev1.Pod) error {
	plan := Manage(rs, active, c.related(rs), c.clock.Now())
	switch {
	case plan.Create > 0:
		c.exp.ExpectCreations(key, plan.Create)
		c.log.Debug("too few replicas", "replicaset", key, "need", replicas(rs), "creating", plan.Create)
		done, err := c.createPods(ctx, rs, plan.Create)
		// The informer will never show what was not created.
		for range plan.Create - done {
			c.exp.CreationObserved(key)
		}
		return err
	case len(plan.Delete) > 0:
		keys := make([]string, len(plan.Delete))
		for i, p := range plan.Delete {
			keys[i] = podKey(p)
		}
		c.exp.ExpectDeletions(key, keys)
		c.log.Debug("too many replicas", "replicaset", key, "need", replicas(rs), "deleting", len(plan.Delete))
		var wg sync.WaitGroup
		errs := make([]error, len(plan.Delete))
		for i, p := range plan.Delete {
			wg.Go(func() {
				if err := c.deletePodOf(ctx, rs, p); err != nil {
					c.exp.DeletionObserved(key, podKey(p))
					if !apierrors.IsNotFound(err) {
						errs[i] = err
					}
				}
			})
		}
		wg.Wait()
		return errors.Join(errs...)
	}
	return nil
}

// createPods creates n pods of rs in slow-start batches and returns how
// many it created, with the first error of the batch that stopped it.
func (c *Controller) createPods(ctx context.Context, rs *appsv1.ReplicaSet, n int) (int, error) {
	done := 0
	for _, size := range Batches(n) {
		errs := make([]error, size)
		var wg sync.WaitGroup
		for i := range size {
			wg.Go(func() { errs[i] = c.createPod(ctx, rs) })
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				return done + countNil(errs), err
			}
		}
		done += size
	}
	return done, nil
}

func countNil(errs []error) int {
	n := 0
	for _, e := range errs {
		if e == nil {
			n++
		}
	}
	return n
}

func (c *Controller) createPod(ctx context.Context, rs *appsv1.ReplicaSet) error {
	pod, err := PodFromTemplate(rs, c.owners.Kind)
	if err != nil {
		c.events.Eventf(c.owners.ref(rs), corev1.EventTypeWarning, FailedCreate, "Error creating: %v", err)
		return err
	}
	created, err := c.client.CoreV1().Pods(rs.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
			return nil // every creation fails until the namespace is gone
		}
		c.events.Eventf(c.owners.ref(rs), corev1.EventTypeWarning, FailedCreate, "Error creating: %v", err)
		return err
	}
	c.events.Eventf(c.owners.ref(rs), corev1.EventTypeNormal, SuccessfulCreate, "Created pod: %v", created.Name)
	return nil
}

func (c *Controller) deletePodOf(ctx context.Context, rs *appsv1.ReplicaSet, p *corev1.Pod) error {
	err := c.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return err
	case err != nil:
		c.events.Eventf(c.owners.ref(rs), corev1.EventTypeWarning, FailedDelete, "Error deleting: %v", err)
		return fmt.Errorf("unable to delete pods: %w", err)
	}
	c.events.Eventf(c.owners.ref(rs), corev1.EventTypeNormal, SuccessfulDelete, "Deleted pod: %v", p.Name)
	return nil
}

// updateStatus writes st as rs's status, once more on a fresh copy if the
// first write fails.
func (c *Controller) updateStatus(ctx context.Context, rs *appsv1.ReplicaSet, st appsv1.ReplicaSetStatus) error {
	rs = rs.DeepCopy()
	var err error
	for try := 0; try < 2; try++ {
		rs.Status = st
		if err = c.owners.UpdateStatus(ctx, rs); err == nil {
			return nil
		}
		if apierrors.IsNotFound(err) {
			return nil
		}
		fresh, gerr := c.owners.Get(ctx, rs.Namespace, rs.Name)
		if gerr != nil {
			return errors.Join(err, gerr)
		}
		st.ObservedGeneration = fresh.Generation
		rs = fresh
	}
	return fmt.Errorf("update status of %s %s/%s: %w", c.owners.Kind.Kind, rs.Namespace, rs.Name, err)
}

func podKey(p *corev1.Pod) string { return p.Namespace + "/" + p.Name }

// Informer event handlers, as upstream's.

func (c *Controller) addRS(obj any) {
	if rs, ok := c.owners.Convert(obj); ok {
		c.enqueue(rs)
	}
}

func (c *Controller) updateRS(old, cur any) {
	o, ok1 := c.owners.Convert(old)
	n, ok2 := c.owners.Convert(cur)
	if !ok1 || !ok2 {
		return
	}
	if o.UID != n.UID {
		c.deleteRS(cache.DeletedFinalStateUnknown{Key: keyOf(o), Obj: o})
	}
	// Any change requeues: a resync revives a ReplicaSet whose creations
	// failed, and those whose expectations are pending do not act anyway.
	c.enqueue(n)
}

func (c *Controller) deleteRS(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	rs, ok := c.owners.Convert(obj)
	if !ok {
		return
	}
	key := keyOf(rs)
	c.exp.Delete(key)
	c.queue.Add(key)
}

func keyOf(obj metav1.Object) string {
	if obj.GetNamespace() == "" {
		return obj.GetName()
	}
	return obj.GetNamespace() + "/" + obj.GetName()
}

// resolve returns the ReplicaSet ref names in ns, nil if there is none of
// that uid.
func (c *Controller) resolve(ns string, ref *metav1.OwnerReference) *appsv1.ReplicaSet {
	if ref.Kind != c.owners.Kind.Kind || ref.APIVersion != c.owners.Kind.GroupVersion().String() {
		return nil
	}
	rs, err := c.owners.get(ns, ref.Name)
	if err != nil || rs.UID != ref.UID {
		return nil
	}
	return rs
}

// selecting returns the ReplicaSets of p's namespace that select p.
func (c *Controller) selecting(p *corev1.Pod) []*appsv1.ReplicaSet {
	all, err := c.owners.list(p.Namespace)
	if err != nil {
		return nil
	}
	var out []*appsv1.ReplicaSet
	for _, rs := range all {
		s, err := metav1.LabelSelectorAsSelector(rs.Spec.Selector)
		if err != nil || s.Empty() || !Selects(s, p) {
			continue
		}
		out = append(out, rs)
	}
	return out
}

func (c *Controller) addPod(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	if p.DeletionTimestamp != nil {
		// Seen first already being deleted (a restart): not a creation.
		c.deletePod(p)
		return
	}
	if ref := metav1.GetControllerOfNoCopy(p); ref != nil {
		if rs := c.resolve(p.Namespace, ref); rs != nil {
			key := keyOf(rs)
			c.exp.CreationObserved(key)
			c.queue.Add(key)
		}
		return
	}
	// An orphan: whoever selects it may adopt it. No creation observed,
	// since no controller made it.
	for _, rs := range c.selecting(p) {
		c.enqueue(rs)
	}
}

func (c *Controller) updatePod(old, cur any) {
	o, ok1 := old.(*corev1.Pod)
	n, ok2 := cur.(*corev1.Pod)
	if !ok1 || !ok2 || o.ResourceVersion == n.ResourceVersion {
		return
	}
	labelsChanged := !labels.Equals(o.Labels, n.Labels)
	if n.DeletionTimestamp != nil {
		// A graceful deletion: replace the pod now, not once it is gone.
		c.deletePod(n)
		if labelsChanged {
			c.deletePod(o)
		}
		return
	}
	nref, oref := metav1.GetControllerOfNoCopy(n), metav1.GetControllerOfNoCopy(o)
	refChanged := !refsEqual(nref, oref)
	if refChanged && oref != nil {
		if rs := c.resolve(o.Namespace, oref); rs != nil {
			c.enqueue(rs)
		}
	}
	if nref != nil {
		rs := c.resolve(n.Namespace, nref)
		if rs == nil {
			return
		}
		c.enqueue(rs)
		if !IsReady(o) && IsReady(n) && rs.Spec.MinReadySeconds > 0 {
			// Counted available minReadySeconds later; a second more for
			// the whole seconds of the ready time.
			c.queue.AddAfter(keyOf(rs), time.Duration(rs.Spec.MinReadySeconds)*time.Second+time.Second)
		}
		return
	}
	if labelsChanged || refChanged {
		for _, rs := range c.selecting(n) {
			c.enqueue(rs)
		}
	}
}

func refsEqual(a, b *metav1.OwnerReference) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.UID == b.UID && a.Name == b.Name && a.Kind == b.Kind && a.APIVersion == b.APIVersion &&
		ptrBool(a.Controller) == ptrBool(b.Controller) && ptrBool(a.BlockOwnerDeletion) == ptrBool(b.BlockOwnerDeletion)
}

func ptrBool(b *bool) bool { return b != nil && *b }

func (c *Controller) deletePod(obj any) {
	p, ok := controllers.Object[*corev1.Pod](obj)
	if !ok {
		return
	}
	ref := metav1.GetControllerOfNoCopy(p)
	if ref == nil {
		return
	}
	rs := c.resolve(p.Namespace, ref)
	if rs == nil {
		return
	}
	key := keyOf(rs)
	c.exp.DeletionObserved(key, podKey(p))
	c.queue.Add(key)
}
