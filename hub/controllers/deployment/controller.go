package deployment

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	appslisters "k8s.io/client-go/listers/apps/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/outpost-mesh/outpost/hub/controllers"
	"github.com/outpost-mesh/outpost/hub/controllers/replicaset"
)

const (
	// Workers is how many Deployments are synced at once, as upstream's
	// --concurrent-deployment-syncs default.
	Workers = 5
	// maxRetries is how often a failing Deployment is retried (with
	// back-off) before it waits for its next change, as upstream.
	maxRetries = 15
)

// Event reasons beyond the condition reasons.
const (
	ScalingReplicaSet = "ScalingReplicaSet"
	SelectingAll      = "SelectingAll"
)

// Controller is the Deployment controller's client-go shell.
type Controller struct {
	client   kubernetes.Interface
	dInf     cache.SharedIndexInformer
	rsInf    cache.SharedIndexInformer
	podInf   cache.SharedIndexInformer
	dLister  appslisters.DeploymentLister
	rsLister appslisters.ReplicaSetLister
	events   record.EventRecorder
	clock    clock.WithTicker
	log      *slog.Logger

	queue workqueue.TypedRateLimitingInterface[string] // made by Run
}

// New returns the Deployment controller of c. It registers the
// Deployment, ReplicaSet and Pod informers (with the pods' controller
// index) and starts nothing.
func New(c controllers.Context) (*Controller, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	d := c.Informers.Apps().V1().Deployments()
	rs := c.Informers.Apps().V1().ReplicaSets()
	pods := c.Informers.Core().V1().Pods()
	if err := replicaset.AddPodIndex(pods.Informer()); err != nil {
		return nil, err
	}
	return &Controller{
		client:   c.Client,
		dInf:     d.Informer(),
		rsInf:    rs.Informer(),
		podInf:   pods.Informer(),
		dLister:  d.Lister(),
		rsLister: rs.Lister(),
		events:   c.Events("deployment-controller"),
		clock:    c.Clock,
		log:      c.Logger,
	}, nil
}

// Run syncs Deployments until ctx ends, then returns nil once its
// workers have stopped.
func (c *Controller) Run(ctx context.Context) error {
	c.queue = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "deployment", Clock: c.clock})
	defer c.queue.ShutDown()

	var synced []cache.InformerSynced
	for _, h := range []struct {
		inf cache.SharedIndexInformer
		h   cache.ResourceEventHandlerFuncs
	}{
		{c.dInf, cache.ResourceEventHandlerFuncs{AddFunc: c.addDeployment, UpdateFunc: c.updateDeployment, DeleteFunc: c.deleteDeployment}},
		{c.rsInf, cache.ResourceEventHandlerFuncs{AddFunc: c.addRS, UpdateFunc: c.updateRS, DeleteFunc: c.deleteRS}},
		{c.podInf, cache.ResourceEventHandlerFuncs{DeleteFunc: c.deletePod}},
	} {
		reg, err := h.inf.AddEventHandler(h.h)
		if err != nil {
			return fmt.Errorf("deployment handler: %w", err)
		}
		defer h.inf.RemoveEventHandler(reg)
		synced = append(synced, reg.HasSynced)
	}
	return controllers.Work(ctx, controllers.Workers[string]{
		Queue: c.queue, Count: Workers, Synced: synced, Sync: c.sync, Log: c.log,
		What: "deployment", Started: "started", MaxRetries: maxRetries,
		// A conflict is a cache behind our own last write: the usual case.
		Level: func(err error) slog.Level { return min(controllers.Quiet(err), slog.LevelInfo) },
		// A namespace being deleted takes its Deployments with it.
		Ignore: func(err error) bool { return apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) },
	})
}

func (c *Controller) enqueue(d *appsv1.Deployment) {
	if key, err := cache.MetaNamespaceKeyFunc(d); err == nil {
		c.queue.Add(key)
	}
}

// syncer is one sync of one Deployment. d is the latest copy of it this
// sync has, and rss of the ReplicaSets it controls: each is replaced by
// what a write of it returns.
type syncer struct {
	c   *Controller
	key string
	d   *appsv1.Deployment
	rss []*appsv1.ReplicaSet
	now time.Time
}

func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	d, err := c.dLister.Deployments(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	s := &syncer{c: c, key: key, d: d.DeepCopy(), now: c.clock.Now()}
	return s.run(ctx)
}

// run is upstream's syncDeployment: deleted, paused, scaled or rolled out.
func (s *syncer) run(ctx context.Context) (err error) {
	d := s.d
	if selectsAll(d.Spec.Selector) {
		s.c.events.Eventf(d, corev1.EventTypeWarning, SelectingAll, "This deployment is selecting all pods. A non-empty selector is required.")
		if d.Status.ObservedGeneration < d.Generation {
			st := d.Status
			st.ObservedGeneration = d.Generation
			return s.updateStatus(ctx, st)
		}
		return nil
	}
	if s.rss, err = s.claimReplicaSets(ctx); err != nil {
		return err
	}
	if s.d.DeletionTimestamp != nil {
		return s.statusOnly(ctx)
	}
	if st, changed := PausedConditions(s.d, s.now); changed {
		if err := s.updateStatus(ctx, st); err != nil {
			return err
		}
	}
	if s.d.Spec.Paused {
		return s.scaleOnly(ctx)
	}
	newRS, old, err := s.replicaSets(ctx, false)
	if err != nil {
		return err
	}
	if IsScalingEvent(s.d, newRS, old) {
		return s.scaleOnly(ctx)
	}
	switch s.d.Spec.Strategy.Type {
	case appsv1.RecreateDeploymentStrategyType:
		return s.recreate(ctx)
	case appsv1.RollingUpdateDeploymentStrategyType:
		return s.rolling(ctx)
	}
	// The API refuses other types.
	return fmt.Errorf("unexpected deployment strategy type: %s", s.d.Spec.Strategy.Type)
}

// claimReplicaSets returns the ReplicaSets d controls, having adopted the
// orphans it selects and released those it no longer selects.
func (s *syncer) claimReplicaSets(ctx context.Context) ([]*appsv1.ReplicaSet, error) {
	d := s.d
	sel, err := selector(d)
	if err != nil {
		return nil, fmt.Errorf("deployment %s has invalid label selector: %w", s.key, err)
	}
	all, err := s.c.rsLister.ReplicaSets(d.Namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	api := s.c.client.AppsV1()
	cl := &replicaset.Claimer[*appsv1.ReplicaSet]{
		Controller: d,
		Kind:       Kind,
		Selector:   sel,
		Recheck: replicaset.RecheckDeletion(d.UID, func(ctx context.Context) (metav1.Object, error) {
			return api.Deployments(d.Namespace).Get(ctx, d.Name, metav1.GetOptions{})
		}),
		Patch: func(ctx context.Context, rs *appsv1.ReplicaSet, patch []byte) error {
			_, err := api.ReplicaSets(rs.Namespace).Patch(ctx, rs.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
			return err
		},
	}
	return cl.Claim(ctx, all)
}

// podMap returns the pods of each of d's ReplicaSets, by uid.
func (s *syncer) podMap() map[types.UID][]*corev1.Pod {
	m := make(map[types.UID][]*corev1.Pod, len(s.rss))
	for _, rs := range s.rss {
		objs, _ := replicaset.ByController(s.c.podInf, string(rs.UID))
		var pods []*corev1.Pod
		for _, o := range objs {
			if p, ok := o.(*corev1.Pod); ok {
				pods = append(pods, p)
			}
		}
		m[rs.UID] = pods
	}
	return m
}

// replicaSets returns d's new ReplicaSet, creating it if create is set
// and there is none, and its old ones; the new one's annotations and d's
// revision are brought up to date.
func (s *syncer) replicaSets(ctx context.Context, create bool) (*appsv1.ReplicaSet, []*appsv1.ReplicaSet, error) {
	d := s.d
	old := FindOld(d, s.rss)
	api := s.c.client.AppsV1().ReplicaSets(d.Namespace)
	if existing := FindNew(d, s.rss); existing != nil {
		rs, changed := SyncNewReplicaSet(d, existing, old)
		if changed {
			updated, err := api.Update(ctx, rs, metav1.UpdateOptions{})
			if err != nil {
				return nil, nil, fmt.Errorf("update new replica set %s/%s: %w", rs.Namespace, rs.Name, err)
			}
			s.replaced(updated)
			return updated, old, nil
		}
		if err := s.setRevision(ctx, rs.Annotations[RevisionAnnotation]); err != nil {
			return nil, nil, err
		}
		if st, changed := FoundCondition(s.d, rs, s.now); changed {
			if err := s.updateStatus(ctx, st); err != nil {
				return nil, nil, err
			}
		}
		return rs, old, nil
	}
	if !create {
		return nil, old, nil
	}

	rs := NewReplicaSet(d, old)
	created, err := api.Create(ctx, rs, metav1.CreateOptions{})
	exists := false
	switch {
	case apierrors.IsAlreadyExists(err):
		got, gerr := s.c.rsLister.ReplicaSets(rs.Namespace).Get(rs.Name)
		if apierrors.IsNotFound(gerr) {
			got, gerr = api.Get(ctx, rs.Name, metav1.GetOptions{})
		}
		if gerr != nil {
			return nil, nil, gerr
		}
		if ref := metav1.GetControllerOfNoCopy(got); ref != nil && ref.UID == d.UID && EqualIgnoreHash(&d.Spec.Template, &got.Spec.Template) {
			// Ours: the cache had not shown it yet.
			created, err, exists = got, nil, true
			break
		}
		// Another template hashes to the same name: count the collision,
		// which changes the hash, and try again.
		st := *s.d.Status.DeepCopy()
		st.CollisionCount = ptr.To(ptr.Deref(st.CollisionCount, 0) + 1)
		if uerr := s.updateStatus(ctx, st); uerr == nil {
			s.c.log.Info("hash collision, collisionCount bumped", "deployment", s.key, "replicaset", rs.Name, "collisionCount", *st.CollisionCount)
		}
		return nil, nil, err
	case apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
		return nil, nil, err
	case err != nil:
		if st, changed := CreatedCondition(s.d, rs, err, s.now); changed {
			// The create's error is the one to report.
			_ = s.updateStatus(ctx, st)
		}
		s.c.events.Eventf(s.d, corev1.EventTypeWarning, FailedRSCreate, "%s", FailedCreateMessage(rs, err))
		return nil, nil, err
	}
	if !exists {
		s.rss = append(s.rss, created)
	}
	if n := replicas(created.Spec.Replicas); !exists && n > 0 {
		s.c.events.Eventf(s.d, corev1.EventTypeNormal, ScalingReplicaSet, "Scaled up replica set %s from 0 to %d", created.Name, n)
	}
	if err := s.setRevision(ctx, created.Annotations[RevisionAnnotation]); err != nil {
		return created, old, err
	}
	if !exists {
		if st, changed := CreatedCondition(s.d, created, nil, s.now); changed {
			if err := s.updateStatus(ctx, st); err != nil {
				return created, old, err
			}
		}
	}
	return created, old, nil
}

// replaced puts rs in s.rss in place of its older copy.
func (s *syncer) replaced(rs *appsv1.ReplicaSet) {
	for i, o := range s.rss {
		if o.UID == rs.UID {
			s.rss[i] = rs
		}
	}
}

// setRevision records rev as d's revision annotation. Upstream writes it
// with the status; here a status update changes only the status, so it
// is a patch of the annotation alone.
func (s *syncer) setRevision(ctx context.Context, rev string) error {
	if rev == "" || s.d.Annotations[RevisionAnnotation] == rev {
		return nil
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"annotations": map[string]string{RevisionAnnotation: rev},
	}})
	d, err := s.c.client.AppsV1().Deployments(s.d.Namespace).Patch(ctx, s.d.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("set revision of deployment %s: %w", s.key, err)
	}
	s.d = d
	return nil
}

// updateStatus writes st as d's status.
func (s *syncer) updateStatus(ctx context.Context, st appsv1.DeploymentStatus) error {
	d := s.d.DeepCopy()
	d.Status = st
	got, err := s.c.client.AppsV1().Deployments(d.Namespace).UpdateStatus(ctx, d, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("update status of deployment %s: %w", s.key, err)
	}
	s.d = got
	return nil
}

// apply carries out steps in order, stopping at the first failure, and
// returns rss with each scaled ReplicaSet replaced by its update.
func (s *syncer) apply(ctx context.Context, steps []Scale, rss []*appsv1.ReplicaSet) ([]*appsv1.ReplicaSet, error) {
	rss = slices.Clone(rss)
	for _, st := range steps {
		updated, err := s.scale(ctx, st)
		if err != nil {
			return rss, err
		}
		s.replaced(updated)
		for i, rs := range rss {
			if rs != nil && rs.UID == updated.UID {
				rss[i] = updated
			}
		}
	}
	return rss, nil
}

// scale sets a ReplicaSet's replicas and the replicas annotations, and
// records a ScalingReplicaSet event when the replicas change.
func (s *syncer) scale(ctx context.Context, st Scale) (*appsv1.ReplicaSet, error) {
	d, rs := s.d, st.RS
	from := replicas(rs.Spec.Replicas)
	want := replicas(d.Spec.Replicas)
	maxReplicas := want + MaxSurge(d)
	if from == st.Replicas && !replicasAnnotationsNeedUpdate(rs, want, maxReplicas) {
		return rs, nil
	}
	c := rs.DeepCopy()
	c.Spec.Replicas = ptr.To(st.Replicas)
	setReplicasAnnotations(c, want, maxReplicas)
	updated, err := s.c.client.AppsV1().ReplicaSets(c.Namespace).Update(ctx, c, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("scale replica set %s/%s: %w", c.Namespace, c.Name, err)
	}
	if from != st.Replicas {
		op := "up"
		if st.Replicas < from {
			op = "down"
		}
		s.c.events.Eventf(d, corev1.EventTypeNormal, ScalingReplicaSet, "Scaled %s replica set %s from %d to %d", op, c.Name, from, st.Replicas)
	}
	return updated, nil
}

// cleanup deletes the old ReplicaSets beyond d's revision history.
func (s *syncer) cleanup(ctx context.Context, old []*appsv1.ReplicaSet) error {
	for _, rs := range Cleanup(s.d, old) {
		err := s.c.client.AppsV1().ReplicaSets(rs.Namespace).Delete(ctx, rs.Name, metav1.DeleteOptions{
			Preconditions: &metav1.Preconditions{UID: &rs.UID}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("delete old replica set %s/%s: %w", rs.Namespace, rs.Name, err)
		}
	}
	return nil
}

// statusOnly writes the status of a Deployment being deleted.
func (s *syncer) statusOnly(ctx context.Context) error {
	newRS, old, err := s.replicaSets(ctx, false)
	if err != nil {
		return err
	}
	return s.writeStatus(ctx, append(old, newRS), newRS)
}

// writeStatus writes the status CalculateStatus gives, if it changed.
func (s *syncer) writeStatus(ctx context.Context, all []*appsv1.ReplicaSet, newRS *appsv1.ReplicaSet) error {
	st := CalculateStatus(s.d, all, newRS, s.now)
	if reflect.DeepEqual(s.d.Status, st) {
		return nil
	}
	return s.updateStatus(ctx, st)
}

// scaleOnly scales a paused Deployment or one whose replicas changed.
func (s *syncer) scaleOnly(ctx context.Context) error {
	newRS, old, err := s.replicaSets(ctx, false)
	if err != nil {
		return err
	}
	all, err := s.apply(ctx, ScaleStep(s.d, newRS, old), append(slices.Clone(old), newRS))
	if err != nil {
		return err
	}
	newRS, old = all[len(all)-1], all[:len(all)-1]
	if s.d.Spec.Paused {
		if err := s.cleanup(ctx, old); err != nil {
			return err
		}
	}
	return s.writeStatus(ctx, all, newRS)
}

// rolling takes the next step of a rolling update.
func (s *syncer) rolling(ctx context.Context) error {
	newRS, old, err := s.replicaSets(ctx, true)
	if err != nil {
		return err
	}
	all := append(slices.Clone(old), newRS)
	if steps := RollingStep(s.d, newRS, old); len(steps) > 0 {
		all, err = s.apply(ctx, steps, all)
		if err != nil {
			return err
		}
		return s.rolloutStatus(ctx, all, all[len(all)-1])
	}
	if Complete(s.d, &s.d.Status) {
		if err := s.cleanup(ctx, old); err != nil {
			return err
		}
	}
	return s.rolloutStatus(ctx, all, newRS)
}

// recreate takes the next step of a Recreate rollout: old pods all gone,
// then the new ones.
func (s *syncer) recreate(ctx context.Context) error {
	newRS, old, err := s.replicaSets(ctx, false)
	if err != nil {
		return err
	}
	all := append(slices.Clone(old), newRS)
	if steps := RecreateScaleDown(old); len(steps) > 0 {
		all, err = s.apply(ctx, steps, all)
		if err != nil {
			return err
		}
		return s.rolloutStatus(ctx, all, newRS)
	}
	if OldPodsRunning(newRS, old, s.podMap()) {
		return s.rolloutStatus(ctx, all, newRS)
	}
	if newRS == nil {
		if newRS, old, err = s.replicaSets(ctx, true); err != nil {
			return err
		}
		all = append(slices.Clone(old), newRS)
	}
	all, err = s.apply(ctx, []Scale{{newRS, replicas(s.d.Spec.Replicas)}}, all)
	if err != nil {
		return err
	}
	newRS = all[len(all)-1]
	if Complete(s.d, &s.d.Status) {
		if err := s.cleanup(ctx, old); err != nil {
			return err
		}
	}
	return s.rolloutStatus(ctx, all, newRS)
}

// rolloutStatus writes the status RolloutStatus gives, or, unchanged,
// looks again when the progress deadline may have passed.
func (s *syncer) rolloutStatus(ctx context.Context, all []*appsv1.ReplicaSet, newRS *appsv1.ReplicaSet) error {
	st, changed, recheck := RolloutStatus(s.d, all, newRS, s.now)
	if changed {
		return s.updateStatus(ctx, st)
	}
	if recheck >= 0 {
		s.c.queue.AddAfter(s.key, recheck)
	}
	return nil
}

// Informer event handlers, as upstream's.

func (c *Controller) addDeployment(obj any) {
	if d, ok := obj.(*appsv1.Deployment); ok {
		c.enqueue(d)
	}
}

func (c *Controller) updateDeployment(_, cur any) { c.addDeployment(cur) }

func (c *Controller) deleteDeployment(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	c.addDeployment(obj)
}

// resolve returns the Deployment ref names in ns, nil if there is none of
// that uid.
func (c *Controller) resolve(ns string, ref *metav1.OwnerReference) *appsv1.Deployment {
	if ref.Kind != Kind.Kind || ref.APIVersion != Kind.GroupVersion().String() {
		return nil
	}
	d, err := c.dLister.Deployments(ns).Get(ref.Name)
	if err != nil || d.UID != ref.UID {
		return nil
	}
	return d
}

// selecting returns the Deployments of rs's namespace that select it.
func (c *Controller) selecting(rs *appsv1.ReplicaSet) []*appsv1.Deployment {
	all, err := c.dLister.Deployments(rs.Namespace).List(labels.Everything())
	if err != nil {
		return nil
	}
	var out []*appsv1.Deployment
	for _, d := range all {
		s, err := selector(d)
		if err != nil || s.Empty() || !s.Matches(labels.Set(rs.Labels)) {
			continue
		}
		out = append(out, d)
	}
	return out
}

func (c *Controller) addRS(obj any) {
	rs, ok := obj.(*appsv1.ReplicaSet)
	if !ok {
		return
	}
	if rs.DeletionTimestamp != nil {
		c.deleteRS(rs)
		return
	}
	if ref := metav1.GetControllerOfNoCopy(rs); ref != nil {
		if d := c.resolve(rs.Namespace, ref); d != nil {
			c.enqueue(d)
		}
		return
	}
	for _, d := range c.selecting(rs) {
		c.enqueue(d)
	}
}

func (c *Controller) updateRS(old, cur any) {
	o, ok1 := old.(*appsv1.ReplicaSet)
	n, ok2 := cur.(*appsv1.ReplicaSet)
	if !ok1 || !ok2 || o.ResourceVersion == n.ResourceVersion {
		return
	}
	nref, oref := metav1.GetControllerOfNoCopy(n), metav1.GetControllerOfNoCopy(o)
	refChanged := !reflect.DeepEqual(nref, oref)
	if refChanged && oref != nil {
		if d := c.resolve(o.Namespace, oref); d != nil {
			c.enqueue(d)
		}
	}
	if nref != nil {
		if d := c.resolve(n.Namespace, nref); d != nil {
			c.enqueue(d)
		}
		return
	}
	if refChanged || !labels.Equals(o.Labels, n.Labels) {
		for _, d := range c.selecting(n) {
			c.enqueue(d)
		}
	}
}

func (c *Controller) deleteRS(obj any) {
	rs, ok := controllers.Object[*appsv1.ReplicaSet](obj)
	if !ok {
		return
	}
	if ref := metav1.GetControllerOfNoCopy(rs); ref != nil {
		if d := c.resolve(rs.Namespace, ref); d != nil {
			c.enqueue(d)
		}
	}
}

// deletePod wakes a Recreate Deployment once its last pod is gone, so
// that it starts the new ones.
func (c *Controller) deletePod(obj any) {
	p, ok := controllers.Object[*corev1.Pod](obj)
	if !ok {
		return
	}
	ref := metav1.GetControllerOfNoCopy(p)
	if ref == nil || ref.Kind != replicaset.Kind.Kind {
		return
	}
	rs, err := c.rsLister.ReplicaSets(p.Namespace).Get(ref.Name)
	if err != nil || rs.UID != ref.UID {
		return
	}
	dref := metav1.GetControllerOfNoCopy(rs)
	if dref == nil {
		return
	}
	d := c.resolve(rs.Namespace, dref)
	if d == nil || d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		return
	}
	all, err := c.rsLister.ReplicaSets(d.Namespace).List(labels.Everything())
	if err != nil {
		return
	}
	for _, rs := range all {
		if metav1.IsControlledBy(rs, d) {
			if pods, _ := replicaset.ByController(c.podInf, string(rs.UID)); len(pods) > 0 {
				return
			}
		}
	}
	c.enqueue(d)
}
