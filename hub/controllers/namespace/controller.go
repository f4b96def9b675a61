// Package namespace deletes the content of namespaces being deleted, as
// upstream's namespace controller does: it deletes every namespaced object
// of every resource discovery lists, reports what blocks with upstream's
// Namespace conditions, and removes the "kubernetes" finalizer through
// the finalize subresource once nothing is left, which lets the namespace
// go. The decisions are pure (Settle, PodEstimate, Evaluate,
// UpdateConditions); the rest is a client-go shell.
package namespace

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/outpost-mesh/outpost/hub/controllers"
)

// workers is how many namespaces are worked on at once (upstream's
// --concurrent-namespace-syncs is 10).
const workers = 2

// Controller is the namespace controller.
type Controller struct {
	c      controllers.Context
	log    *slog.Logger
	lister corelisters.NamespaceLister
	synced cache.InformerSynced
	queue  workqueue.TypedRateLimitingInterface[string]

	mu sync.Mutex
	// unsupported remembers resources whose deletecollection or list the
	// server refused as unsupported.
	unsupported map[opKey]bool
}

type opKey struct {
	verb string
	gvr  schema.GroupVersionResource
}

// errRemaining says content remains that is expected to go within
// Estimate seconds.
type errRemaining struct{ estimate int64 }

func (e *errRemaining) Error() string {
	return fmt.Sprintf("some content remains in the namespace, estimate %d seconds before it is removed", e.estimate)
}

// New returns the namespace controller, registering its namespace
// informer with c.Informers. It starts nothing.
func New(c controllers.Context) (*Controller, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	inf := c.Informers.Core().V1().Namespaces()
	ctl := &Controller{
		c:      c,
		log:    c.Logger,
		lister: inf.Lister(),
		synced: inf.Informer().HasSynced,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			// Upstream's: exponential from 5ms to 60s, per namespace.
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](5*time.Millisecond, 60*time.Second),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "namespace", Clock: c.Clock}),
		unsupported: map[opKey]bool{},
	}
	enqueue := func(obj any) {
		if ns, ok := obj.(*corev1.Namespace); ok && ns.DeletionTimestamp != nil {
			ctl.queue.Add(ns.Name)
		}
	}
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	}); err != nil {
		return nil, fmt.Errorf("namespace informer: %w", err)
	}
	return ctl, nil
}

// Run works until ctx ends and returns nil once its workers have exited.
func (c *Controller) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer func() {
		c.queue.ShutDown()
		wg.Wait()
	}()
	if !cache.WaitForCacheSync(ctx.Done(), c.synced) {
		return nil
	}
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c.work(ctx) {
			}
		}()
	}
	<-ctx.Done()
	return nil
}

func (c *Controller) work(ctx context.Context) bool {
	name, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(name)
	err := c.sync(ctx, name)
	var rem *errRemaining
	switch {
	case err == nil:
		c.queue.Forget(name)
	case errors.As(err, &rem):
		c.log.Info("content remains", "namespace", name, "estimate", rem.estimate)
		c.queue.AddAfter(name, time.Duration(rem.estimate/2+1)*time.Second)
	default:
		c.log.Warn("delete namespace content", "namespace", name, "err", err)
		c.queue.AddRateLimited(name)
	}
	return true
}

// sync moves a namespace being deleted on, as upstream's
// namespacedResourcesDeleter.Delete: Terminating, content deleted,
// conditions set, then the kubernetes finalizer removed.
func (c *Controller) sync(ctx context.Context, name string) error {
	nss := c.c.Client.CoreV1().Namespaces()
	ns, err := nss.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if ns.DeletionTimestamp == nil {
		return nil
	}
	if ns.Status.Phase != corev1.NamespaceTerminating {
		ns = ns.DeepCopy()
		ns.Status.Phase = corev1.NamespaceTerminating
		if ns, err = nss.UpdateStatus(ctx, ns, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("mark Terminating: %w", err)
		}
	}
	if !slices.Contains(ns.Spec.Finalizers, corev1.FinalizerKubernetes) {
		return nil // finalized by us; other finalizers are others' work
	}
	estimate, err := c.deleteContent(ctx, ns)
	if err != nil {
		return err
	}
	if estimate > 0 {
		return &errRemaining{estimate: estimate}
	}
	for i := 0; ; i++ {
		fs, found := withoutFinalizer(ns.Spec.Finalizers, corev1.FinalizerKubernetes)
		if !found {
			return nil
		}
		fin := ns.DeepCopy()
		fin.Spec.Finalizers = fs
		_, err = nss.Finalize(ctx, fin, metav1.UpdateOptions{})
		switch {
		case err == nil:
			c.log.Info("namespace content deleted; finalized", "namespace", name)
			return nil
		case apierrors.IsNotFound(err):
			return nil
		case !apierrors.IsConflict(err) || i >= 5:
			return fmt.Errorf("finalize: %w", err)
		}
		if ns, err = nss.Get(ctx, name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			return nil
		} else if err != nil {
			return err
		}
	}
}

// deleteContent deletes every namespaced object in ns, sets the
// conditions, and returns how long what remains is expected to take.
func (c *Controller) deleteContent(ctx context.Context, ns *corev1.Namespace) (int64, error) {
	lists, derr := c.c.Client.Discovery().ServerPreferredNamespacedResources()
	deletable := discovery.FilteredBy(discovery.SupportsAllVerbs{Verbs: []string{"delete"}}, lists)
	gvrs, perr := discovery.GroupVersionResources(deletable)
	verbs := map[schema.GroupVersionResource]metav1.Verbs{}
	for _, l := range deletable {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			continue
		}
		for _, r := range l.APIResources {
			verbs[gv.WithResource(r.Name)] = r.Verbs
		}
	}
	order := make([]schema.GroupVersionResource, 0, len(gvrs))
	for gvr := range gvrs {
		order = append(order, gvr)
	}
	slices.SortFunc(order, func(a, b schema.GroupVersionResource) int {
		return strings.Compare(a.String(), b.String())
	})
	var contents []Content
	for _, gvr := range order {
		contents = append(contents, c.deleteResource(ctx, ns, gvr, verbs[gvr]))
	}
	res := Evaluate(derr, perr, contents)
	st := ns.DeepCopy()
	if UpdateConditions(&st.Status, res.Failing, metav1.NewTime(c.c.Clock.Now())) {
		if _, err := c.c.Client.CoreV1().Namespaces().UpdateStatus(ctx, st, metav1.UpdateOptions{}); err != nil {
			c.log.Warn("update namespace conditions", "namespace", ns.Name, "err", err)
		}
	}
	return res.Estimate, res.Err
}

// deleteResource deletes the objects of gvr in ns (deletecollection when
// served, else one by one, always with background propagation so that the
// garbage collector adds no orphan finalizer) and lists what remains.
func (c *Controller) deleteResource(ctx context.Context, ns *corev1.Namespace, gvr schema.GroupVersionResource, verbs metav1.Verbs) Content {
	var estimate int64
	if gvr.GroupResource() == (schema.GroupResource{Resource: "pods"}) {
		pods, err := c.c.Client.CoreV1().Pods(ns.Name).List(ctx, metav1.ListOptions{})
		if err != nil {
			return Content{Resource: gvr, Err: fmt.Errorf("list pods to estimate their termination: %w", err)}
		}
		estimate = PodEstimate(pods.Items, ns.DeletionTimestamp.Time, c.c.Clock.Now())
	}
	client := c.c.Metadata.Resource(gvr).Namespace(ns.Name)
	bg := metav1.DeletePropagationBackground
	opts := metav1.DeleteOptions{PropagationPolicy: &bg}
	each := true
	if c.supported("deletecollection", gvr, verbs) {
		err := client.DeleteCollection(ctx, opts, metav1.ListOptions{})
		switch {
		case err == nil:
			each = false
		case apierrors.IsMethodNotSupported(err) || apierrors.IsNotFound(err):
			c.setUnsupported("deletecollection", gvr)
		default:
			return Content{Resource: gvr, Estimate: estimate, Err: err}
		}
	}
	if !c.supported("list", gvr, verbs) {
		return Content{Resource: gvr, Estimate: estimate}
	}
	list, err := client.List(ctx, metav1.ListOptions{})
	if apierrors.IsMethodNotSupported(err) || apierrors.IsNotFound(err) {
		c.setUnsupported("list", gvr)
		return Content{Resource: gvr, Estimate: estimate}
	}
	if err != nil {
		return Content{Resource: gvr, Estimate: estimate, Err: err}
	}
	if each {
		for _, it := range list.Items {
			if err := client.Delete(ctx, it.Name, opts); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsMethodNotSupported(err) {
				return Content{Resource: gvr, Estimate: estimate, Err: err}
			}
		}
		if list, err = client.List(ctx, metav1.ListOptions{}); err != nil {
			return Content{Resource: gvr, Estimate: estimate, Err: err}
		}
	}
	finalizers := make([][]string, len(list.Items))
	for i, it := range list.Items {
		finalizers[i] = it.Finalizers
	}
	return Settle(gvr, ns.Name, estimate, finalizers)
}

func (c *Controller) supported(verb string, gvr schema.GroupVersionResource, verbs metav1.Verbs) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Contains(verbs, verb) && !c.unsupported[opKey{verb, gvr}]
}

func (c *Controller) setUnsupported(verb string, gvr schema.GroupVersionResource) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.unsupported[opKey{verb, gvr}] = true
}
