package resourcequota

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/outpost-mesh/outpost/hub/controllers"
	"github.com/outpost-mesh/outpost/hub/quota"
)

// Config is the controller's configuration.
type Config struct {
	// Resync is how often every quota is recounted, to catch what no
	// event tells (a pod whose deletion grace has passed); upstream's
	// 5 minutes by default.
	Resync time.Duration
	// Workers is how many quotas are counted at once; upstream's 5.
	Workers int
}

// DefaultConfig returns upstream's defaults.
func DefaultConfig() Config {
	return Config{
		Resync:  5 * time.Minute, // upstream's --resource-quota-sync-period
		Workers: 5,               // upstream's --concurrent-resource-quota-syncs
	}
}

// Controller is the resource quota controller's client-go shell.
type Controller struct {
	cfg      Config
	client   kubernetes.Interface
	quotaInf cache.SharedIndexInformer
	quotas   corelisters.ResourceQuotaLister
	// counted are the informers of the objects quotas count, by resource.
	counted map[schema.GroupResource]countedInformer
	clock   clock.WithTicker
	log     *slog.Logger

	queue workqueue.TypedRateLimitingInterface[string] // quota keys; made by Run
}

// countedInformer is the shared informer of one counted resource.
type countedInformer struct {
	informer cache.SharedIndexInformer
	lister   cache.GenericLister
}

// New returns the resource quota controller of c. It registers the
// informers of quotas and of every resource quota.Resources counts, and
// starts nothing.
func New(c controllers.Context, cfg Config) (*Controller, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if cfg.Resync <= 0 || cfg.Workers < 1 {
		return nil, fmt.Errorf("resourcequota: Resync %v and Workers %d must be positive", cfg.Resync, cfg.Workers)
	}
	rqs := c.Informers.Core().V1().ResourceQuotas()
	ctl := &Controller{
		cfg:      cfg,
		client:   c.Client,
		quotaInf: rqs.Informer(),
		quotas:   rqs.Lister(),
		counted:  map[schema.GroupResource]countedInformer{},
		clock:    c.Clock,
		log:      c.Logger,
	}
	for _, gr := range quota.Resources() {
		gi, err := c.Informers.ForResource(gr.WithVersion("v1"))
		if err != nil {
			return nil, fmt.Errorf("resourcequota: informer of %v: %w", gr, err)
		}
		ctl.counted[gr] = countedInformer{informer: gi.Informer(), lister: gi.Lister()}
	}
	return ctl, nil
}

// Run keeps the quotas' status until ctx ends, then returns nil once its
// workers have stopped.
func (c *Controller) Run(ctx context.Context) error {
	c.queue = workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "resourcequota_primary", Clock: c.clock})
	defer c.queue.ShutDown()
	reg, err := c.quotaInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: c.enqueueQuota,
		UpdateFunc: func(_, cur any) {
			if q, ok := cur.(*corev1.ResourceQuota); ok && NeedsCount(q) {
				c.enqueueQuota(q)
			}
		},
	})
	if err != nil {
		return fmt.Errorf("resourcequota handler: %w", err)
	}
	defer c.quotaInf.RemoveEventHandler(reg)
	synced := []cache.InformerSynced{reg.HasSynced}
	for gr, ci := range c.counted {
		reg, err := ci.informer.AddEventHandler(c.replenish(gr))
		if err != nil {
			return fmt.Errorf("%v handler: %w", gr, err)
		}
		defer ci.informer.RemoveEventHandler(reg)
		synced = append(synced, reg.HasSynced)
	}
	done := make(chan struct{})
	defer func() { <-done }()
	go func() {
		defer close(done)
		c.resyncLoop(ctx)
	}()
	return controllers.Work(ctx, controllers.Workers[string]{
		Queue: c.queue, Count: c.cfg.Workers, Synced: synced,
		Sync: c.sync, Log: c.log, What: "resourcequota", Started: "started",
	})
}

// resyncLoop queues every quota each Resync until ctx ends.
func (c *Controller) resyncLoop(ctx context.Context) {
	t := c.clock.NewTicker(c.cfg.Resync)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			qs, _ := c.quotas.List(labels.Everything())
			for _, q := range qs {
				c.enqueueQuota(q)
			}
		}
	}
}

// replenish returns the handlers that queue the quotas of an object's
// namespace when the object of gr is deleted or an update frees some of
// what it used.
func (c *Controller) replenish(gr schema.GroupResource) cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(old, cur any) {
			o, ok1 := old.(runtime.Object)
			n, ok2 := cur.(runtime.Object)
			if ok1 && ok2 && Frees(gr, o, n, c.clock.Now()) {
				c.enqueueNamespaceOf(cur)
			}
		},
		DeleteFunc: c.enqueueNamespaceOf,
	}
}

// enqueueNamespaceOf queues the quotas of the namespace of obj, which
// may be a tombstone.
func (c *Controller) enqueueNamespaceOf(obj any) {
	m, ok := controllers.Object[metav1.Object](obj)
	if !ok {
		return
	}
	qs, err := c.quotas.ResourceQuotas(m.GetNamespace()).List(labels.Everything())
	if err != nil {
		return
	}
	for _, q := range qs {
		c.enqueueQuota(q)
	}
}

// enqueueQuota queues the quota obj, which may be a tombstone.
func (c *Controller) enqueueQuota(obj any) {
	if q, ok := controllers.Object[*corev1.ResourceQuota](obj); ok {
		c.queue.Add(q.Namespace + "/" + q.Name)
	}
}

// sync counts the quota of key and writes its status if it changed.
func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil // never queued by us
	}
	q, err := c.quotas.ResourceQuotas(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	counted, err := c.count(q)
	if err != nil {
		return err
	}
	st := Status(q, counted)
	if quota.Equal(st.Hard, q.Status.Hard) && quota.Equal(st.Used, q.Status.Used) {
		return nil
	}
	q = q.DeepCopy()
	q.Status = st
	_, err = c.client.CoreV1().ResourceQuotas(ns).UpdateStatus(ctx, q, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// count returns what the objects of q's namespace use of the resources
// of q's spec.hard that are counted here, from the informers' caches.
func (c *Controller) count(q *corev1.ResourceQuota) (corev1.ResourceList, error) {
	names := quota.Names(q.Spec.Hard)
	scopes := quota.Scopes(q)
	now := c.clock.Now()
	used := corev1.ResourceList{}
	for gr, ci := range c.counted {
		if len(quota.Matching(gr, names)) == 0 {
			continue
		}
		objs, err := ci.lister.ByNamespace(q.Namespace).List(labels.Everything())
		if err != nil {
			return nil, fmt.Errorf("list %v: %w", gr, err)
		}
		u, err := quota.Used(gr, names, scopes, objs, now)
		if err != nil {
			return nil, fmt.Errorf("count %v: %w", gr, err)
		}
		used = quota.Add(used, u)
	}
	return used, nil
}
