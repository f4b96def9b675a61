package endpointslice

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/outpost-mesh/outpost/hub/controllers"
)

// Component is the name the controller's events carry.
const Component = "endpointslice-controller"

// workers is how many services are synced at once, as upstream's
// --concurrent-service-endpoint-syncs default.
const workers = 5

// errStale is returned by sync when the informer cache lacks the
// controller's own writes; the service is retried with back-off.
var errStale = errors.New("endpointslice informer cache is out of date")

// Controller keeps the EndpointSlices of services with a selector.
type Controller struct {
	client   kubernetes.Interface
	services corelisters.ServiceLister
	pods     corelisters.PodLister
	podIndex cache.Indexer
	nodes    corelisters.NodeLister
	slices   discoverylisters.EndpointSliceLister
	synced   []cache.InformerSynced
	queue    workqueue.TypedRateLimitingInterface[string]
	tracker  *tracker
	events   record.EventRecorder
	log      *slog.Logger
	// maxPerSlice caps the endpoints of one slice.
	maxPerSlice int
}

// podsByNode indexes pods by spec.nodeName.
const podsByNode = "outpost.dev/endpointslice-node"

// New registers the informers (services, pods, nodes, endpointslices) and
// their handlers on c.Informers; it starts nothing.
func New(c controllers.Context) (*Controller, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	svcInf := c.Informers.Core().V1().Services()
	podInf := c.Informers.Core().V1().Pods()
	nodeInf := c.Informers.Core().V1().Nodes()
	sliceInf := c.Informers.Discovery().V1().EndpointSlices()
	ctl := &Controller{
		client:   c.Client,
		services: svcInf.Lister(),
		pods:     podInf.Lister(),
		podIndex: podInf.Informer().GetIndexer(),
		nodes:    nodeInf.Lister(),
		slices:   sliceInf.Lister(),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "endpointslice", Clock: c.Clock}),
		tracker:     newTracker(),
		events:      c.Events(Component),
		log:         c.Logger,
		maxPerSlice: MaxEndpointsPerSlice,
	}
	if err := podInf.Informer().AddIndexers(cache.Indexers{podsByNode: func(obj any) ([]string, error) {
		if p, ok := obj.(*corev1.Pod); ok && p.Spec.NodeName != "" {
			return []string{p.Spec.NodeName}, nil
		}
		return nil, nil
	}}); err != nil {
		return nil, fmt.Errorf("endpointslice: index pods by node: %w", err)
	}
	regs := []struct {
		inf cache.SharedIndexInformer
		h   cache.ResourceEventHandler
	}{
		{svcInf.Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    ctl.enqueueObject,
			UpdateFunc: func(_, obj any) { ctl.enqueueObject(obj) },
			DeleteFunc: ctl.enqueueObject,
		}},
		{podInf.Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { ctl.podChanged(nil, obj) },
			UpdateFunc: ctl.podChanged,
			DeleteFunc: func(obj any) { ctl.podChanged(nil, obj) },
		}},
		{nodeInf.Informer(), cache.ResourceEventHandlerFuncs{UpdateFunc: ctl.nodeChanged}},
		{sliceInf.Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    ctl.sliceChanged,
			UpdateFunc: func(_, obj any) { ctl.sliceChanged(obj) },
			DeleteFunc: ctl.sliceDeleted,
		}},
	}
	for _, r := range regs {
		reg, err := r.inf.AddEventHandler(r.h)
		if err != nil {
			return nil, fmt.Errorf("endpointslice: add event handler: %w", err)
		}
		ctl.synced = append(ctl.synced, reg.HasSynced)
	}
	return ctl, nil
}

// Run syncs services until ctx ends, and returns once its workers have
// exited.
func (c *Controller) Run(ctx context.Context) error {
	return controllers.Work(ctx, controllers.Workers[string]{
		Queue: c.queue, Count: workers, Synced: c.synced, Sync: c.sync, Log: c.log,
		What: "service", Started: "started", Failed: "sync service",
		// A stale cache is no failure: the retry will have caught up.
		Level: func(err error) slog.Level {
			if errors.Is(err, errStale) {
				return slog.LevelDebug
			}
			return slog.LevelWarn
		},
	})
}

func (c *Controller) enqueueObject(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err == nil {
		c.queue.Add(key)
	}
}

// podChanged enqueues the services that select the pod, before and after.
func (c *Controller) podChanged(old, obj any) {
	pod := asPod(obj)
	if pod == nil {
		return
	}
	if o := asPod(old); o != nil && o.ResourceVersion == pod.ResourceVersion {
		return // a resync
	}
	keys := c.servicesOf(pod)
	if o := asPod(old); o != nil {
		for k := range c.servicesOf(o) {
			keys[k] = true
		}
	}
	for k := range keys {
		c.queue.Add(k)
	}
}

func asPod(obj any) *corev1.Pod {
	p, _ := controllers.Object[*corev1.Pod](obj)
	return p
}

// servicesOf returns the keys of the services whose selector matches pod.
func (c *Controller) servicesOf(pod *corev1.Pod) map[string]bool {
	keys := map[string]bool{}
	svcs, err := c.services.Services(pod.Namespace).List(labels.Everything())
	if err != nil {
		return keys
	}
	for _, s := range svcs {
		if len(s.Spec.Selector) > 0 && labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(pod.Labels)) {
			keys[s.Namespace+"/"+s.Name] = true
		}
	}
	return keys
}

// nodeChanged enqueues the services of the node's pods when its zone or
// site changes.
func (c *Controller) nodeChanged(old, obj any) {
	o, ok1 := old.(*corev1.Node)
	n, ok2 := obj.(*corev1.Node)
	if !ok1 || !ok2 || (o.Labels[corev1.LabelTopologyZone] == n.Labels[corev1.LabelTopologyZone] && o.Labels[LabelSite] == n.Labels[LabelSite]) {
		return
	}
	pods, err := c.podIndex.ByIndex(podsByNode, n.Name)
	if err != nil {
		return
	}
	keys := map[string]bool{}
	for _, p := range pods {
		if pod, ok := p.(*corev1.Pod); ok {
			for k := range c.servicesOf(pod) {
				keys[k] = true
			}
		}
	}
	for k := range keys {
		c.queue.Add(k)
	}
}

func managedService(obj any) (key string, s *discoveryv1.EndpointSlice) {
	s, ok := controllers.Object[*discoveryv1.EndpointSlice](obj)
	if !ok || s.Labels[discoveryv1.LabelManagedBy] != ManagedBy || s.Labels[discoveryv1.LabelServiceName] == "" {
		return "", nil
	}
	return s.Namespace + "/" + s.Labels[discoveryv1.LabelServiceName], s
}

// sliceChanged enqueues the service of a managed slice, so that a slice
// changed by someone else is put back.
func (c *Controller) sliceChanged(obj any) {
	if key, _ := managedService(obj); key != "" {
		c.queue.Add(key)
	}
}

func (c *Controller) sliceDeleted(obj any) {
	if key, s := managedService(obj); key != "" {
		c.tracker.observedDelete(key, s.Name)
		c.queue.Add(key)
	}
}

// sync brings the slices of the service key to what its pods call for.
func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil // not a key of ours: nothing to retry
	}
	mine := labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: ManagedBy})
	existing, err := c.slices.EndpointSlices(ns).List(mine)
	if err != nil {
		return err
	}
	svc, err := c.services.Services(ns).Get(name)
	if apierrors.IsNotFound(err) {
		// The garbage collector deletes the slices it owned; deleting
		// them here too spares consumers the wait.
		c.tracker.forget(key)
		for _, s := range existing {
			if err := c.client.DiscoveryV1().EndpointSlices(ns).Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("delete slice %s of a deleted service: %w", s.Name, err)
			}
		}
		return nil
	}
	if err != nil {
		return err
	}
	if len(svc.Spec.Selector) == 0 || svc.Spec.Type == corev1.ServiceTypeExternalName {
		return nil // the user's endpoints, or none
	}
	if svc.DeletionTimestamp != nil {
		return nil
	}
	if c.tracker.stale(key, existing) {
		return errStale
	}
	pods, err := c.pods.Pods(ns).List(labels.SelectorFromSet(svc.Spec.Selector))
	if err != nil {
		return err
	}
	node := func(n string) *corev1.Node {
		nd, err := c.nodes.Get(n)
		if err != nil {
			return nil
		}
		return nd
	}
	plan := Reconcile(svc, Desired(svc, pods, node), existing, c.maxPerSlice, TriggerTime(svc, pods))
	if plan.Empty() {
		return nil
	}
	if err := c.apply(ctx, key, plan); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return err // a stale cache: retried, nothing to tell the user
		}
		c.events.Eventf(svc, corev1.EventTypeWarning, "FailedToUpdateEndpointSlices", "Error updating Endpoint Slices for Service %s/%s: %v", ns, name, err)
		return err
	}
	return nil
}

// apply writes plan: creates first, then updates, then deletes, so that
// no endpoint is missing in between (as upstream orders them).
func (c *Controller) apply(ctx context.Context, key string, plan Plan) error {
	start := time.Now()
	api := func(ns string) interface {
		Create(context.Context, *discoveryv1.EndpointSlice, metav1.CreateOptions) (*discoveryv1.EndpointSlice, error)
		Update(context.Context, *discoveryv1.EndpointSlice, metav1.UpdateOptions) (*discoveryv1.EndpointSlice, error)
		Delete(context.Context, string, metav1.DeleteOptions) error
	} {
		return c.client.DiscoveryV1().EndpointSlices(ns)
	}
	for _, s := range plan.Create {
		got, err := api(s.Namespace).Create(ctx, s, metav1.CreateOptions{})
		if err != nil {
			if apierrors.IsForbidden(err) && apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
				return nil // the namespace is going, and its slices with it
			}
			return fmt.Errorf("create slice: %w", err)
		}
		c.tracker.wrote(key, got)
	}
	for _, s := range plan.Update {
		got, err := api(s.Namespace).Update(ctx, s, metav1.UpdateOptions{})
		if err != nil {
			return fmt.Errorf("update slice %s: %w", s.Name, err)
		}
		c.tracker.wrote(key, got)
	}
	for _, s := range plan.Delete {
		if err := api(s.Namespace).Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete slice %s: %w", s.Name, err)
		}
		c.tracker.deleted(key, s.Name)
	}
	c.log.Debug("synced slices", "service", key, "created", len(plan.Create), "updated", len(plan.Update), "deleted", len(plan.Delete), "took", time.Since(start))
	return nil
}
