package storageversionmigrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	svmv1 "k8s.io/api/storagemigration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsv1client "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset/typed/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	svmlisters "k8s.io/client-go/listers/storagemigration/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/outpost-mesh/outpost/hub/controllers"
)

// FieldManager is the manager of the controller's patches, as upstream's
// controller name.
const FieldManager = "storage-version-migrator-controller"

// listPage is how many objects one list request of a migration reads.
const listPage = 500

// Controller is the StorageVersionMigration controller's client-go shell.
type Controller struct {
	client    kubernetes.Interface
	discovery discovery.DiscoveryInterface
	dynamic   dynamic.Interface
	crds      apiextensionsv1client.CustomResourceDefinitionInterface
	inf       cache.SharedIndexInformer
	lister    svmlisters.StorageVersionMigrationLister
	clock     clock.WithTicker
	log       *slog.Logger

	queue workqueue.TypedRateLimitingInterface[string] // made by Run
}

// New returns the StorageVersionMigration controller of c, which needs
// c.Dynamic and c.Extensions. It registers the migrations' informer and
// starts nothing.
func New(c controllers.Context) (*Controller, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if c.Dynamic == nil || c.Extensions == nil {
		return nil, errors.New("storageversionmigrator: nil Dynamic or Extensions")
	}
	svms := c.Informers.Storagemigration().V1().StorageVersionMigrations()
	return &Controller{
		client:    c.Client,
		discovery: c.Client.Discovery(),
		dynamic:   c.Dynamic,
		crds:      c.Extensions.ApiextensionsV1().CustomResourceDefinitions(),
		inf:       svms.Informer(),
		lister:    svms.Lister(),
		clock:     c.Clock,
		log:       c.Logger,
	}, nil
}

// Run works on migrations until ctx ends, then returns nil once its
// worker has stopped.
func (c *Controller) Run(ctx context.Context) error {
	c.queue = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "storageversionmigrator", Clock: c.clock})
	defer c.queue.ShutDown()
	reg, err := c.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueue,
		UpdateFunc: func(_, cur any) { c.enqueue(cur) },
	})
	if err != nil {
		return fmt.Errorf("storageversionmigration handler: %w", err)
	}
	defer c.inf.RemoveEventHandler(reg)
	// One migration at a time: each rewrites a whole resource.
	return controllers.Work(ctx, controllers.Workers[string]{
		Queue: c.queue, Count: 1, Synced: []cache.InformerSynced{reg.HasSynced},
		Sync: c.sync, Log: c.log, What: "storageversionmigration", Started: "started",
	})
}

// enqueue queues the migration obj and the others of its resource, which
// may start once it has ended.
func (c *Controller) enqueue(obj any) {
	m, ok := obj.(*svmv1.StorageVersionMigration)
	if !ok {
		return
	}
	c.queue.Add(m.Name)
	all, err := c.lister.List(labels.Everything())
	if err != nil {
		return
	}
	for _, o := range all {
		if o.Spec.Resource == m.Spec.Resource {
			c.queue.Add(o.Name)
		}
	}
}

// sync takes the migration of name one step further.
func (c *Controller) sync(ctx context.Context, name string) error {
	m, err := c.lister.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if NeedsCleanup(m) {
		return c.cleanup(ctx, m)
	}
	step := Next(m)
	if step == Finished {
		return nil
	}
	if step == Start {
		all, err := c.lister.List(labels.Everything())
		if err != nil {
			return err
		}
		if !Promotable(m, all) {
			return nil // queued again when the one before it changes
		}
	}
	res, ok, err := c.resolve(m.Spec.Resource)
	if err != nil {
		return err
	}
	now := c.clock.Now()
	switch {
	case !ok:
		if wait := m.CreationTimestamp.Add(DiscoveryGrace).Sub(now); wait > 0 {
			// Perhaps a custom resource not served yet: look again later.
			c.queue.AddAfter(name, wait)
			return nil
		}
		return c.writeStatus(ctx, Failed(m, "resource does not exist in discovery", now))
	case !res.Migratable():
		return c.writeStatus(ctx, Failed(m, fmt.Sprintf("resource %q does not support discovery operations: %v", res.GVR.String(), migrationVerbs), now))
	case step == Start:
		return c.start(ctx, m, res)
	}
	return c.migrate(ctx, m, res)
}

// resolve returns the served resource gr names, in its group's preferred
// version; false if the hub does not serve it.
func (c *Controller) resolve(gr metav1.GroupResource) (Resource, bool, error) {
	groups, err := c.discovery.ServerGroups()
	if err != nil {
		return Resource{}, false, fmt.Errorf("discover groups: %w", err)
	}
	version, ok := PreferredVersion(groups, gr.Group)
	if !ok {
		return Resource{}, false, nil
	}
	gv := metav1.GroupVersion{Group: gr.Group, Version: version}.String()
	list, err := c.discovery.ServerResourcesForGroupVersion(gv)
	if apierrors.IsNotFound(err) {
		return Resource{}, false, nil
	}
	if err != nil {
		return Resource{}, false, fmt.Errorf("discover %s: %w", gv, err)
	}
	res, ok := FindResource(list, gr.Resource)
	return res, ok, nil
}

// start records the resource's current resourceVersion, that of a list
// of it, in m's status and marks m Running. Lists read whole objects
// (the dynamic client), as upstream's migrator reads them from the
// garbage collector's caches.
func (c *Controller) start(ctx context.Context, m *svmv1.StorageVersionMigration, res Resource) error {
	l, err := c.dynamic.Resource(res.GVR).List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return fmt.Errorf("list %s: %w", res.GVR, err)
	}
	rv := l.GetResourceVersion()
	if _, err := ToRewrite(rv, rv); err != nil {
		return c.writeStatus(ctx, Failed(m, fmt.Sprintf("latest resourceVersion for %s is not valid: %v", res.GVR, err), c.clock.Now()))
	}
	if err := c.markCRD(ctx, m); err != nil {
		return err
	}
	return c.writeStatus(ctx, Started(m, rv, c.clock.Now()))
}

// migrate rewrites the objects of res no newer than m's resourceVersion
// and marks m Succeeded; or Failed if an object cannot be rewritten.
func (c *Controller) migrate(ctx context.Context, m *svmv1.StorageVersionMigration, res Resource) error {
	gvk := res.GVR.GroupVersion().WithKind(res.Kind)
	total := 0
	opts := metav1.ListOptions{Limit: listPage}
	for {
		l, err := c.dynamic.Resource(res.GVR).List(ctx, opts)
		if err != nil {
			return fmt.Errorf("list %s: %w", res.GVR, err)
		}
		for i := range l.Items {
			o := &l.Items[i]
			total++
			rewrite, err := ToRewrite(o.GetResourceVersion(), m.Status.ResourceVersion)
			if err != nil {
				return c.writeStatus(ctx, Failed(m, err.Error(), c.clock.Now()))
			}
			if !rewrite {
				continue
			}
			if err := c.rewrite(ctx, res, gvk, o); err != nil {
				if retriable(err) {
					return err
				}
				return c.writeStatus(ctx, Failed(m, err.Error(), c.clock.Now()))
			}
		}
		if opts.Continue = l.GetContinue(); opts.Continue == "" {
			break
		}
	}
	return c.writeStatus(ctx, Succeeded(m, total, c.clock.Now()))
}

// rewrite patches o unchanged, so that the hub stores it again in its
// current storage version. An object written or deleted since the list
// needs no rewrite: its conflict or absence is no error.
func (c *Controller) rewrite(ctx context.Context, res Resource, gvk schema.GroupVersionKind, o *unstructured.Unstructured) error {
	_, err := c.dynamic.Resource(res.GVR).Namespace(o.GetNamespace()).Patch(ctx, o.GetName(), types.MergePatchType,
		PatchBody(gvk, o.GetResourceVersion()), metav1.PatchOptions{FieldManager: FieldManager})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("migrate %s %s/%s: %w", res.GVR.Resource, o.GetNamespace(), o.GetName(), err)
	}
	return nil
}

// retriable reports whether err is worth the migration trying again
// later rather than failing, as upstream's: the API was busy or away.
func retriable(err error) bool {
	return apierrors.IsTooManyRequests(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) ||
		apierrors.IsInternalError(err) || apierrors.IsServiceUnavailable(err) || errors.Is(err, context.DeadlineExceeded)
}

// writeStatus writes m's status. A conflict (the cache was behind) is
// retried through the queue with the fresh migration.
func (c *Controller) writeStatus(ctx context.Context, m *svmv1.StorageVersionMigration) error {
	_, err := c.client.StoragemigrationV1().StorageVersionMigrations().UpdateStatus(ctx, m, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("update status of migration %s: %w", m.Name, err)
	}
	return nil
}

// markCRD gives the CRD of m's resource, if it is a custom resource, the
// StorageMigrating condition.
func (c *Controller) markCRD(ctx context.Context, m *svmv1.StorageVersionMigration) error {
	crd, err := c.crds.Get(ctx, CRDName(m.Spec.Resource), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	return c.patchCRDStatus(ctx, crd, MigratingCondition(crd, m, c.clock.Now()), nil)
}

// cleanup ends migration m, which succeeded or failed: its CRD, if any,
// loses the StorageMigrating condition and, on success, the stored
// versions migrated off; then m's Running condition turns False.
func (c *Controller) cleanup(ctx context.Context, m *svmv1.StorageVersionMigration) error {
	crd, err := c.crds.Get(ctx, CRDName(m.Spec.Resource), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return err
	default:
		cond, stored := FinishedCRD(crd, isTrue(m, svmv1.MigrationSucceeded), c.clock.Now())
		if err := c.patchCRDStatus(ctx, crd, cond, stored); err != nil {
			return err
		}
	}
	return c.writeStatus(ctx, Completed(m))
}

// patchCRDStatus sets cond among crd's conditions and, unless nil, its
// stored versions, with crd's resourceVersion as precondition: a CRD
// changed since it was read is read again through the queue's retry.
func (c *Controller) patchCRDStatus(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition, cond apiextensionsv1.CustomResourceDefinitionCondition, stored []string) error {
	conds := slices.DeleteFunc(slices.Clone(crd.Status.Conditions), func(o apiextensionsv1.CustomResourceDefinitionCondition) bool {
		return o.Type == cond.Type
	})
	status := map[string]any{"conditions": append(conds, cond)}
	if stored != nil {
		status["storedVersions"] = stored
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": crd.ResourceVersion},
		"status":   status,
	})
	if err != nil {
		return err
	}
	_, err = c.crds.Patch(ctx, crd.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager}, "status")
	if err != nil {
		return fmt.Errorf("update status of %s: %w", crd.Name, err)
	}
	return nil
}
