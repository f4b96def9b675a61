// Package garbagecollector deletes objects whose owners are gone, as
// upstream's garbage collector does: it watches the metadata of every
// resource the API serves, keeps a graph of ownerReferences, and carries
// out background, foreground (the foregroundDeletion finalizer and
// blockOwnerDeletion) and orphan (the orphan finalizer) propagation. The
// decisions are pure (Decide, DecideWaiting); the rest is a client-go
// shell.
package garbagecollector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/outpost-mesh/outpost/hub/controllers"
)

const (
	// workers is how many objects are worked on at once in each queue
	// (upstream's --concurrent-gc-syncs is 20, for far larger clusters).
	workers = 5
	// resyncPeriod is how often discovery is read again, to watch
	// resources that appeared and stop watching those that went
	// (upstream: 30s).
	resyncPeriod = 30 * time.Second
	// conflictRetries bounds the read-modify-patch retries of one change.
	conflictRetries = 5
)

// Controller is the garbage collector.
type Controller struct {
	c      controllers.Context
	log    *slog.Logger
	events record.EventRecorder
	graph  *graph
	mapper *mapper
	// deleteQ holds uids of objects to check for deletion (upstream's
	// attemptToDelete), orphanQ those of owners whose dependents are to
	// be orphaned (attemptToOrphan).
	deleteQ workqueue.TypedRateLimitingInterface[types.UID]
	orphanQ workqueue.TypedRateLimitingInterface[types.UID]

	mu       sync.Mutex
	monitors map[schema.GroupVersionResource]*monitor
}

// monitor watches the metadata of one resource.
type monitor struct {
	informer cache.SharedIndexInformer
	stop     chan struct{}
	done     chan struct{}
}

// New returns the garbage collector. It uses c.Metadata for every
// resource discovery lists, not c.Informers, and starts nothing.
func New(c controllers.Context) (*Controller, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	q := func(name string) workqueue.TypedRateLimitingInterface[types.UID] {
		return workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[types.UID](),
			workqueue.TypedRateLimitingQueueConfig[types.UID]{Name: name, Clock: c.Clock})
	}
	return &Controller{
		c:        c,
		log:      c.Logger,
		events:   c.Events("garbage-collector-controller"),
		graph:    newGraph(),
		mapper:   &mapper{},
		deleteQ:  q("garbage_collector_attempt_to_delete"),
		orphanQ:  q("garbage_collector_attempt_to_orphan"),
		monitors: map[schema.GroupVersionResource]*monitor{},
	}, nil
}

// Run discovers the resources, watches them, waits for the graph to be
// filled, and collects garbage until ctx ends. It returns nil then, once
// every goroutine it started has exited.
func (c *Controller) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer func() {
		c.deleteQ.ShutDown()
		c.orphanQ.ShutDown()
		wg.Wait()
		c.stopMonitors(nil)
	}()
	for backoff := time.Second; ; backoff = min(2*backoff, resyncPeriod) {
		err := c.resync()
		if err == nil {
			break
		}
		c.log.Warn("discover resources; retrying", "err", err, "in", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-c.c.Clock.After(backoff):
		}
	}
	if !cache.WaitForCacheSync(ctx.Done(), c.synced) {
		return nil
	}
	c.log.Info("graph filled; collecting")
	for i := 0; i < workers; i++ {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for c.work(ctx, c.deleteQ, c.attemptToDelete) {
			}
		}()
		go func() {
			defer wg.Done()
			for c.work(ctx, c.orphanQ, c.attemptToOrphan) {
			}
		}()
	}
	tick := c.c.Clock.NewTicker(resyncPeriod)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C():
			if err := c.resync(); err != nil {
				c.log.Warn("discover resources", "err", err)
			}
		}
	}
}

// resync reads discovery and starts or stops monitors to match it. When
// discovery failed for some groups it starts monitors for what it found
// and stops none.
func (c *Controller) resync() error {
	groups, lists, err := c.c.Client.Discovery().ServerGroupsAndResources()
	if err != nil && len(lists) == 0 {
		return fmt.Errorf("discovery: %w", err)
	}
	want := map[schema.GroupVersionResource]resource{}
	for _, r := range c.mapper.set(groups, lists) {
		want[r.gvr] = r
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for gvr, r := range want {
		if _, ok := c.monitors[gvr]; !ok {
			c.monitors[gvr] = c.startMonitor(r)
		}
	}
	if err == nil {
		for gvr := range c.monitors {
			if _, ok := want[gvr]; !ok {
				c.stopMonitors(&gvr)
			}
		}
	}
	if err != nil {
		c.log.Warn("discovery failed for some groups", "err", err)
	}
	return nil
}

func (c *Controller) startMonitor(r resource) *monitor {
	inf := metadatainformer.NewFilteredMetadataInformer(c.c.Metadata, r.gvr, metav1.NamespaceAll, 0, cache.Indexers{}, nil).Informer()
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.observe(r, obj, false) },
		UpdateFunc: func(_, obj any) { c.observe(r, obj, false) },
		DeleteFunc: func(obj any) { c.observe(r, obj, true) },
	})
	m := &monitor{informer: inf, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(m.done)
		inf.Run(m.stop)
	}()
	return m
}

// stopMonitors stops the monitor of gvr, or all of them for nil, and
// waits for them. The caller holds c.mu unless gvr is nil.
func (c *Controller) stopMonitors(gvr *schema.GroupVersionResource) {
	if gvr == nil {
		c.mu.Lock()
		defer c.mu.Unlock()
	}
	for k, m := range c.monitors {
		if gvr != nil && k != *gvr {
			continue
		}
		close(m.stop)
		<-m.done
		delete(c.monitors, k)
	}
}

// synced reports whether every monitor has listed its resource.
func (c *Controller) synced() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range c.monitors {
		if !m.informer.HasSynced() {
			return false
		}
	}
	return true
}

// observe feeds a watch's event into the graph.
func (c *Controller) observe(r resource, obj any, deleted bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		c.log.Warn("watch event without metadata", "resource", r.gvr.String(), "type", fmt.Sprintf("%T", obj))
		return
	}
	c.apply(c.graph.process(event{
		deleted:    deleted,
		ref:        objectRef{APIVersion: r.gvr.GroupVersion().String(), Kind: r.kind, Namespace: m.GetNamespace(), Name: m.GetName(), UID: m.GetUID()},
		owners:     m.GetOwnerReferences(),
		deleting:   m.GetDeletionTimestamp() != nil,
		finalizers: m.GetFinalizers(),
	}))
}

// apply queues the work the graph asked for.
func (c *Controller) apply(w work) {
	for _, uid := range w.attemptToDelete {
		c.deleteQ.Add(uid)
	}
	for _, uid := range w.attemptToOrphan {
		c.orphanQ.Add(uid)
	}
	for _, bad := range w.invalid {
		c.events.Eventf(eventRef(bad.dependent), corev1.EventTypeWarning, "OwnerRefInvalidNamespace",
			"ownerRef %s does not exist in namespace %q", bad.owner, bad.dependent.Namespace)
	}
}

func eventRef(r objectRef) *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: r.Kind, APIVersion: r.APIVersion, Namespace: r.Namespace, Name: r.Name, UID: r.UID}
}

// errRequeue asks work to try the item again later without logging: a
// virtual node that exists but no watch has shown yet.
var errRequeue = errors.New("requeue")

// errNamespacedOwner is returned for a cluster-scoped object that names a
// namespaced owner, which cannot be: retrying will not help.
var errNamespacedOwner = errors.New("cluster-scoped object names a namespaced owner")

// work takes one uid off q and handles it, retrying failures with the
// queue's back-off. It returns false once q is shut down.
func (c *Controller) work(ctx context.Context, q workqueue.TypedRateLimitingInterface[types.UID], handle func(context.Context, types.UID) error) bool {
	uid, quit := q.Get()
	if quit {
		return false
	}
	defer q.Done(uid)
	err := handle(ctx, uid)
	var unknown *errUnknownKind
	switch {
	case err == nil:
		q.Forget(uid)
	case errors.Is(err, errRequeue):
		q.AddRateLimited(uid)
	case errors.As(err, &unknown):
		// A kind not served (yet): discovery may list it later.
		c.log.Info("owner of unknown kind; retrying", "uid", uid, "err", err)
		q.AddRateLimited(uid)
	default:
		c.log.Warn("collect", "uid", uid, "err", err)
		q.AddRateLimited(uid)
	}
	return true
}

// attemptToDelete decides the fate of the object of uid, as upstream's
// attemptToDeleteItem, and carries it out.
func (c *Controller) attemptToDelete(ctx context.Context, uid types.UID) error {
	v, ok := c.graph.view(uid)
	if !ok {
		return nil
	}
	if v.beingDeleted && !v.deletingDependents {
		// Deletion is one way: wait for it, then see to the dependents.
		return nil
	}
	latest, err := c.get(ctx, v.ref)
	if apierrors.IsNotFound(err) || err == nil && latest.GetUID() != v.ref.UID {
		// Absent (a virtual owner that never existed, or one deleted
		// while the watch lagged): drop it and see to its dependents.
		c.apply(c.graph.process(event{deleted: true, virtual: true, ref: v.ref}))
		return nil
	}
	if err != nil {
		return err
	}
	if v.deletingDependents {
		done, attempt := DecideWaiting(v.dependents)
		if done {
			return c.removeFinalizer(ctx, v.ref, metav1.FinalizerDeleteDependents)
		}
		for _, d := range attempt {
			c.deleteQ.Add(d)
		}
		return nil
	}
	owners := latest.GetOwnerReferences()
	if len(owners) == 0 {
		return requeueVirtual(v)
	}
	it := Item{Owners: owners, Finalizers: latest.GetFinalizers(), HasDependents: len(v.dependents) > 0}
	for _, d := range v.dependents {
		it.DependentWaiting = it.DependentWaiting || d.Waiting
	}
	for _, o := range owners {
		s, err := c.ownerState(ctx, v.ref, o)
		if errors.Is(err, errNamespacedOwner) {
			c.events.Eventf(eventRef(v.ref), corev1.EventTypeWarning, "OwnerRefInvalidNamespace",
				"ownerRef %s does not resolve to a cluster-scoped object; a cluster-scoped object cannot have a namespaced owner", refOf(o, ""))
			return nil
		}
		if err != nil {
			return err
		}
		it.States = append(it.States, s)
	}
	act := Decide(it)
	switch act.Kind {
	case RemoveOwners:
		c.log.Info("removing dangling owner references", "object", v.ref.String(), "owners", act.Owners)
		err = c.removeOwners(ctx, v.ref, act.Owners)
	case Delete:
		if act.Unblock {
			if err := c.unblock(ctx, v.ref); err != nil {
				return err
			}
		}
		c.log.Info("deleting object whose owners are gone", "object", v.ref.String(), "propagation", act.Policy)
		err = c.delete(ctx, v.ref, act.Policy)
	}
	if err != nil {
		return err
	}
	return requeueVirtual(v)
}

// requeueVirtual asks to look again at a node that exists but that no
// watch has shown yet, as upstream does, until one does.
func requeueVirtual(v view) error {
	if v.virtual {
		return errRequeue
	}
	return nil
}

// attemptToOrphan removes the owner of uid from its dependents' references
// and then its orphan finalizer, as upstream's attemptToOrphanWorker.
func (c *Controller) attemptToOrphan(ctx context.Context, uid types.UID) error {
	v, ok := c.graph.view(uid)
	if !ok {
		return nil
	}
	var errs []error
	for _, d := range v.dependentRefs {
		if err := c.removeOwners(ctx, d, []types.UID{uid}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("orphan %s: %w", d, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return c.removeFinalizer(ctx, v.ref, metav1.FinalizerOrphanDependents)
}

// ownerState looks up the owner o of item, through the absent cache or
// the API.
func (c *Controller) ownerState(ctx context.Context, item objectRef, o metav1.OwnerReference) (OwnerState, error) {
	if c.graph.isAbsent(refOf(o, "")) || c.graph.isAbsent(refOf(o, item.Namespace)) {
		return OwnerAbsent, nil
	}
	r, err := c.mapper.lookup(o.APIVersion, o.Kind)
	if err != nil {
		return 0, err
	}
	ns := ""
	if r.namespaced {
		if item.Namespace == "" {
			return 0, errNamespacedOwner
		}
		ns = item.Namespace
	}
	key := refOf(o, ns)
	owner, err := c.c.Metadata.Resource(r.gvr).Namespace(ns).Get(ctx, o.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		c.graph.markAbsent(key)
		return OwnerAbsent, nil
	case err != nil:
		return 0, fmt.Errorf("get owner %s: %w", key, err)
	case owner.UID != o.UID:
		c.graph.markAbsent(key)
		return OwnerAbsent, nil
	case owner.DeletionTimestamp != nil && containsString(owner.Finalizers, metav1.FinalizerDeleteDependents):
		return OwnerWaiting, nil
	}
	return OwnerSolid, nil
}

// get reads the metadata of r.
func (c *Controller) get(ctx context.Context, r objectRef) (*metav1.PartialObjectMetadata, error) {
	res, ns, err := c.locate(r)
	if err != nil {
		return nil, err
	}
	return c.c.Metadata.Resource(res.gvr).Namespace(ns).Get(ctx, r.Name, metav1.GetOptions{})
}

func (c *Controller) locate(r objectRef) (resource, string, error) {
	res, err := c.mapper.lookup(r.APIVersion, r.Kind)
	if err != nil {
		return resource{}, "", err
	}
	if res.namespaced {
		return res, r.Namespace, nil
	}
	return res, "", nil
}

// delete deletes r, if it is still the object of r's uid.
func (c *Controller) delete(ctx context.Context, r objectRef, policy metav1.DeletionPropagation) error {
	res, ns, err := c.locate(r)
	if err != nil {
		return err
	}
	uid := r.UID
	err = c.c.Metadata.Resource(res.gvr).Namespace(ns).Delete(ctx, r.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &uid}, PropagationPolicy: &policy})
	if err != nil {
		return fmt.Errorf("delete %s: %w", r, err)
	}
	return nil
}

// change reads r, asks edit for a merge patch (nil: nothing to do), and
// applies it, again while it conflicts with another writer. An absent r,
// or another object under its name, is nothing to do.
func (c *Controller) change(ctx context.Context, r objectRef, edit func(*metav1.PartialObjectMetadata) []byte) error {
	res, ns, err := c.locate(r)
	if err != nil {
		return err
	}
	client := c.c.Metadata.Resource(res.gvr).Namespace(ns)
	for i := 0; ; i++ {
		cur, err := client.Get(ctx, r.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || err == nil && cur.UID != r.UID {
			return nil
		}
		if err != nil {
			return err
		}
		patch := edit(cur)
		if patch == nil {
			return nil
		}
		_, err = client.Patch(ctx, r.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		if apierrors.IsConflict(err) && i < conflictRetries {
			continue
		}
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("patch %s: %w", r, err)
		}
		return nil
	}
}

func (c *Controller) removeOwners(ctx context.Context, r objectRef, uids []types.UID) error {
	return c.change(ctx, r, func(cur *metav1.PartialObjectMetadata) []byte {
		refs, changed := withoutOwners(cur.OwnerReferences, uids)
		if !changed {
			return nil
		}
		return ownersPatch(refs, cur.ResourceVersion)
	})
}

func (c *Controller) unblock(ctx context.Context, r objectRef) error {
	return c.change(ctx, r, func(cur *metav1.PartialObjectMetadata) []byte {
		refs, changed := unblocked(cur.OwnerReferences)
		if !changed {
			return nil
		}
		return ownersPatch(refs, cur.ResourceVersion)
	})
}

func (c *Controller) removeFinalizer(ctx context.Context, r objectRef, f string) error {
	return c.change(ctx, r, func(cur *metav1.PartialObjectMetadata) []byte {
		rest, found := withoutFinalizer(cur.Finalizers, f)
		if !found {
			return nil
		}
		c.log.Info("removing finalizer", "object", r.String(), "finalizer", f)
		return finalizersPatch(rest, cur.ResourceVersion)
	})
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
