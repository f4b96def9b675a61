// Package crd is the hub's CustomResourceDefinition controller, as
// upstream's apiextensions-apiserver runs it: it accepts a CRD's names
// when no other CRD of its group holds them (the naming controller; the
// hub marks it Established once it serves it), and, when a CRD is deleted,
// deletes its custom resources, waits for them to go, and removes the
// cleanup finalizer so the CRD goes too (the finalizing controller).
// Status is its pure core.
package crd

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	apiextensionshelpers "k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apiextensionsinformers "k8s.io/apiextensions-apiserver/pkg/client/informers/externalversions"
	apiextensionslisters "k8s.io/apiextensions-apiserver/pkg/client/listers/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/outpost-mesh/outpost/hub/controllers"
)

// Workers is how many CRDs are synced at once; one, as names are
// decided across the CRDs of a group.
const Workers = 1

// PollInterval is how often a deleted CRD's custom resources are listed
// again while some, held by finalizers of their own, remain.
const PollInterval = time.Second

// cleanupFinalizer is the finalizer a delete of a CRD adds.
const cleanupFinalizer = apiextensionsv1.CustomResourceCleanupFinalizer

// Controller keeps CRDs' names and conditions and finalizes deleted
// CRDs. Make one with New.
type Controller struct {
	crds      apiextensionsclient.Interface
	dynamic   dynamic.Interface
	informers apiextensionsinformers.SharedInformerFactory
	lister    apiextensionslisters.CustomResourceDefinitionLister
	synced    cache.InformerSynced
	log       *slog.Logger
	queue     workqueue.TypedRateLimitingInterface[string]
	// written holds the CRDs as this controller last wrote their status,
	// by name, until the informer has caught up: the names a CRD was
	// just given must count against the next CRD synced, as upstream's
	// mutation cache makes them. Only the worker uses it.
	written map[string]*apiextensionsv1.CustomResourceDefinition
}

// New builds the controller from c, crds (a client of the
// apiextensions.k8s.io API) and dyn (which deletes the custom resources),
// and registers its handlers on its own CRD informer, which Run starts.
// It starts nothing.
func New(c controllers.Context, crds apiextensionsclient.Interface, dyn dynamic.Interface) (*Controller, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if crds == nil || dyn == nil {
		return nil, fmt.Errorf("crd controller: nil apiextensions or dynamic client")
	}
	factory := apiextensionsinformers.NewSharedInformerFactory(crds, 0)
	inf := factory.Apiextensions().V1().CustomResourceDefinitions()
	cc := &Controller{
		crds:      crds,
		dynamic:   dyn,
		informers: factory,
		lister:    inf.Lister(),
		synced:    inf.Informer().HasSynced,
		log:       c.Logger,
		written:   make(map[string]*apiextensionsv1.CustomResourceDefinition),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "crd", Clock: c.Clock}),
	}
	// A change of one CRD's names may free or take names another of its
	// group asked for: look at the whole group again.
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    cc.enqueueGroup,
		UpdateFunc: func(_, cur any) { cc.enqueueGroup(cur) },
		DeleteFunc: cc.enqueueGroup,
	}); err != nil {
		return nil, fmt.Errorf("crd informer: %w", err)
	}
	return cc, nil
}

// Run starts the CRD informer and syncs CRDs until ctx ends, and returns
// once its worker and informer have stopped.
func (cc *Controller) Run(ctx context.Context) error {
	cc.informers.Start(ctx.Done())
	defer cc.informers.Shutdown()
	return controllers.Work(ctx, controllers.Workers[string]{
		Queue: cc.queue, Count: Workers, Synced: []cache.InformerSynced{cc.synced}, Sync: cc.sync, Log: cc.log,
		What: "customresourcedefinition", Failed: "sync customresourcedefinition", Level: controllers.Quiet,
	})
}

// enqueueGroup adds obj, a CRD or its tombstone, and every CRD of its
// group.
func (cc *Controller) enqueueGroup(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	crd, ok := obj.(*apiextensionsv1.CustomResourceDefinition)
	if !ok {
		return
	}
	cc.queue.Add(crd.Name)
	all, err := cc.lister.List(labels.Everything())
	if err != nil {
		return
	}
	for _, c := range all {
		if c.Spec.Group == crd.Spec.Group && c.Name != crd.Name {
			cc.queue.Add(c.Name)
		}
	}
}

func (cc *Controller) sync(ctx context.Context, name string) error {
	crd, err := cc.lister.Get(name)
	if apierrors.IsNotFound(err) {
		delete(cc.written, name)
		return nil
	} else if err != nil {
		return err
	}
	if crd.DeletionTimestamp != nil {
		if apiextensionshelpers.CRDHasFinalizer(crd, cleanupFinalizer) {
			return cc.finalize(ctx, crd.DeepCopy())
		}
		return nil
	}
	all, err := cc.lister.List(labels.Everything())
	if err != nil {
		return err
	}
	for i, c := range all {
		all[i] = cc.latest(c)
	}
	out, changed := Status(cc.latest(crd), all)
	if !changed {
		return nil
	}
	updated, err := cc.crds.ApiextensionsV1().CustomResourceDefinitions().UpdateStatus(ctx, out, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err // a conflict too: retried on a fresher cache
	}
	cc.written[name] = updated
	return nil
}

// latest returns the newer of c, as the informer has it, and the CRD as
// this controller last wrote it, dropping the written one once the
// informer has caught up.
func (cc *Controller) latest(c *apiextensionsv1.CustomResourceDefinition) *apiextensionsv1.CustomResourceDefinition {
	w, ok := cc.written[c.Name]
	if !ok {
		return c
	}
	if w.UID != c.UID || revision(c) >= revision(w) {
		delete(cc.written, c.Name)
		return c
	}
	return w
}

// revision returns c's resourceVersion as the number the hub's store
// makes it, or 0.
func revision(c *apiextensionsv1.CustomResourceDefinition) int64 {
	n, _ := strconv.ParseInt(c.ResourceVersion, 10, 64)
	return n
}

// finalize deletes crd's custom resources and, once none remain, removes
// the cleanup finalizer, recording the progress in the Terminating
// condition as upstream does. While custom resources held by their own
// finalizers remain, it looks again after PollInterval.
func (cc *Controller) finalize(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition) error {
	crd, err := cc.setTerminating(ctx, crd, apiextensionsv1.ConditionTrue, "InstanceDeletionInProgress", "CustomResource deletion is in progress")
	if err != nil || crd == nil {
		return err
	}
	if !apiextensionshelpers.IsCRDConditionTrue(crd, apiextensionsv1.Established) {
		crd, err = cc.setTerminating(ctx, crd, apiextensionsv1.ConditionFalse, "NeverEstablished", "resource was never established")
	} else {
		var remaining bool
		remaining, err = cc.deleteInstances(ctx, crd)
		if err != nil {
			_, _ = cc.setTerminating(ctx, crd, apiextensionsv1.ConditionTrue, "InstanceDeletionFailed", err.Error())
			return err
		}
		if remaining {
			cc.queue.AddAfter(crd.Name, PollInterval)
			return nil
		}
		crd, err = cc.setTerminating(ctx, crd, apiextensionsv1.ConditionFalse, "InstanceDeletionCompleted", "removed all instances")
	}
	if err != nil || crd == nil {
		return err
	}
	apiextensionshelpers.CRDRemoveFinalizer(crd, cleanupFinalizer)
	_, err = cc.crds.ApiextensionsV1().CustomResourceDefinitions().Update(ctx, crd, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// setTerminating sets crd's Terminating condition unless it has it
// already and returns the CRD as written, or nil when it changed or went
// in the meantime (the informer brings that, and requeues it).
func (cc *Controller) setTerminating(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition, status apiextensionsv1.ConditionStatus, reason, msg string) (*apiextensionsv1.CustomResourceDefinition, error) {
	cond := apiextensionsv1.CustomResourceDefinitionCondition{Type: apiextensionsv1.Terminating, Status: status, Reason: reason, Message: msg}
	if apiextensionshelpers.IsCRDConditionEquivalent(&cond, apiextensionshelpers.FindCRDCondition(crd, apiextensionsv1.Terminating)) {
		return crd, nil
	}
	apiextensionshelpers.SetCRDCondition(crd, cond)
	out, err := cc.crds.ApiextensionsV1().CustomResourceDefinitions().UpdateStatus(ctx, crd, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil, nil
	}
	return out, err
}

// deleteInstances deletes the custom resources of crd, in all namespaces,
// that are not being deleted yet, and reports whether any remain.
func (cc *Controller) deleteInstances(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition) (remaining bool, err error) {
	gvr, ok := listVersion(crd)
	if !ok {
		return false, nil
	}
	res := cc.dynamic.Resource(gvr)
	list, err := res.List(ctx, metav1.ListOptions{})
	if err != nil {
		return false, fmt.Errorf("could not list instances: %w", err)
	}
	for _, item := range list.Items {
		if item.GetDeletionTimestamp() != nil {
			continue
		}
		err := res.Namespace(item.GetNamespace()).Delete(ctx, item.GetName(), metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("could not issue all deletes: %w", err)
		}
	}
	if len(list.Items) == 0 {
		return false, nil
	}
	list, err = res.List(ctx, metav1.ListOptions{})
	if err != nil {
		return false, fmt.Errorf("could not confirm zero CustomResources remaining: %w", err)
	}
	return len(list.Items) > 0, nil
}

// listVersion returns the resource crd's custom resources are listed
// through: its storage version if served, else its first served one.
func listVersion(crd *apiextensionsv1.CustomResourceDefinition) (schema.GroupVersionResource, bool) {
	version := ""
	for _, v := range crd.Spec.Versions {
		if v.Served && (version == "" || v.Storage) {
			version = v.Name
		}
	}
	gvr := schema.GroupVersionResource{Group: crd.Spec.Group, Version: version, Resource: crd.Status.AcceptedNames.Plural}
	return gvr, version != "" && gvr.Resource != ""
}
