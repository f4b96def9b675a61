package endpoints

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/outpost-mesh/outpost/hub/controllers"
	"github.com/outpost-mesh/outpost/hub/controllers/endpointslice"
)

// Component is the name the controller's events carry.
const Component = "endpoint-controller"

// workers is how many services are synced at once, as upstream's
// --concurrent-endpoint-syncs default.
const workers = 5

// errStale is returned by sync when the cache lacks the controller's own
// last write of an Endpoints; the service is retried with back-off.
var errStale = errors.New("endpoints informer cache is out of date")

// Controller keeps the Endpoints of services with a selector.
type Controller struct {
	client    kubernetes.Interface
	services  corelisters.ServiceLister
	pods      corelisters.PodLister
	endpoints corelisters.EndpointsLister
	synced    []cache.InformerSynced
	queue     workqueue.TypedRateLimitingInterface[string]
	events    record.EventRecorder
	log       *slog.Logger

	mu sync.Mutex
	// written is the resourceVersion of the controller's last write of
	// each service's Endpoints (the hub's revisions only grow).
	written map[string]int64
}

// New registers the informers (services, pods, endpoints) and their
// handlers on c.Informers; it starts nothing.
func New(c controllers.Context) (*Controller, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	svcInf := c.Informers.Core().V1().Services()
	podInf := c.Informers.Core().V1().Pods()
	epInf := c.Informers.Core().V1().Endpoints()
	ctl := &Controller{
		client:    c.Client,
		services:  svcInf.Lister(),
		pods:      podInf.Lister(),
		endpoints: epInf.Lister(),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "endpoint", Clock: c.Clock}),
		events:  c.Events(Component),
		log:     c.Logger,
		written: map[string]int64{},
	}
	regs := []struct {
		inf cache.SharedIndexInformer
		h   cache.ResourceEventHandler
	}{
		{svcInf.Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    ctl.enqueue,
			UpdateFunc: func(_, obj any) { ctl.enqueue(obj) },
			DeleteFunc: ctl.enqueue,
		}},
		{podInf.Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { ctl.podChanged(nil, obj) },
			UpdateFunc: ctl.podChanged,
			DeleteFunc: func(obj any) { ctl.podChanged(nil, obj) },
		}},
		// An Endpoints deleted or changed by someone else is put back.
		{epInf.Informer(), cache.ResourceEventHandlerFuncs{
			UpdateFunc: func(_, obj any) { ctl.enqueue(obj) },
			DeleteFunc: ctl.enqueue,
		}},
	}
	for _, r := range regs {
		reg, err := r.inf.AddEventHandler(r.h)
		if err != nil {
			return nil, fmt.Errorf("endpoints: add event handler: %w", err)
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

func (c *Controller) enqueue(obj any) {
	if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
		c.queue.Add(key)
	}
}

func asPod(obj any) *corev1.Pod {
	p, _ := controllers.Object[*corev1.Pod](obj)
	return p
}

// podChanged enqueues the services that select the pod, before and after.
func (c *Controller) podChanged(old, obj any) {
	pod := asPod(obj)
	if pod == nil {
		return
	}
	o := asPod(old)
	if o != nil && o.ResourceVersion == pod.ResourceVersion {
		return // a resync
	}
	for _, p := range []*corev1.Pod{o, pod} {
		if p == nil {
			continue
		}
		svcs, err := c.services.Services(p.Namespace).List(labels.Everything())
		if err != nil {
			continue
		}
		for _, s := range svcs {
			if len(s.Spec.Selector) > 0 && labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(p.Labels)) {
				c.queue.Add(s.Namespace + "/" + s.Name)
			}
		}
	}
}

func rv(m metav1.Object) int64 {
	n, _ := strconv.ParseInt(m.GetResourceVersion(), 10, 64)
	return n
}

// stale reports whether the cached Endpoints (nil when absent) predate
// the controller's last write of them.
func (c *Controller) stale(key string, cur *corev1.Endpoints) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	w, ok := c.written[key]
	if !ok {
		return false
	}
	if cur != nil && rv(cur) >= w {
		delete(c.written, key)
		return false
	}
	return true
}

func (c *Controller) wrote(key string, v int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.written[key] = v
}

// sync brings the Endpoints of the service key to what its pods call for.
func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	cur, err := c.endpoints.Endpoints(ns).Get(name)
	if apierrors.IsNotFound(err) {
		cur = nil
	} else if err != nil {
		return err
	}
	svc, err := c.services.Services(ns).Get(name)
	if apierrors.IsNotFound(err) {
		// As upstream: the Endpoints of a deleted service go with it.
		c.mu.Lock()
		delete(c.written, key)
		c.mu.Unlock()
		if cur == nil {
			return nil
		}
		if err := c.client.CoreV1().Endpoints(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete endpoints of a deleted service: %w", err)
		}
		return nil
	}
	if err != nil {
		return err
	}
	if len(svc.Spec.Selector) == 0 || svc.DeletionTimestamp != nil {
		return nil // the user's Endpoints
	}
	if c.stale(key, cur) {
		return errStale
	}
	pods, err := c.pods.Pods(ns).List(labels.SelectorFromSet(svc.Spec.Selector))
	if err != nil {
		return err
	}
	subsets, cut := Truncate(Desired(svc, pods))
	lbls := Labels(svc)
	if cur != nil && !NeedsUpdate(cur, subsets, lbls, cut) {
		return nil
	}
	ep := &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	if cur != nil {
		ep = cur.DeepCopy()
	}
	ep.Labels = lbls
	ep.Subsets = subsets
	ep.Annotations = maps.Clone(ep.Annotations)
	if ep.Annotations == nil {
		ep.Annotations = map[string]string{}
	}
	if t := endpointslice.TriggerTime(svc, pods); !t.IsZero() {
		ep.Annotations[corev1.EndpointsLastChangeTriggerTime] = t.UTC().Format(time.RFC3339Nano)
	} else {
		delete(ep.Annotations, corev1.EndpointsLastChangeTriggerTime)
	}
	if cut {
		ep.Annotations[OverCapacity] = truncated
	} else {
		delete(ep.Annotations, OverCapacity)
	}
	var got *corev1.Endpoints
	if cur == nil {
		got, err = c.client.CoreV1().Endpoints(ns).Create(ctx, ep, metav1.CreateOptions{})
	} else {
		got, err = c.client.CoreV1().Endpoints(ns).Update(ctx, ep, metav1.UpdateOptions{})
	}
	switch {
	case err == nil:
		c.wrote(key, rv(got))
		return nil
	case apierrors.IsConflict(err), apierrors.IsAlreadyExists(err), apierrors.IsNotFound(err):
		return err // a stale cache: retried, nothing to tell the user
	case apierrors.IsForbidden(err) && apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
		return nil // the namespace is going, and its Endpoints with it
	}
	c.events.Eventf(svc, corev1.EventTypeWarning, "FailedToUpdateEndpoint", "Failed to update endpoint %s/%s: %v", ns, name, err)
	return fmt.Errorf("write endpoints: %w", err)
}
