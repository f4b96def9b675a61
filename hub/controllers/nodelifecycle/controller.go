package nodelifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	coordinationlisters "k8s.io/client-go/listers/coordination/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/outpost-mesh/outpost/hub/controllers"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// Component is the source of the controller's Events, as upstream's.
const Component = "node-controller"

// podsByNode indexes the pods cache by spec.nodeName; the name is the
// package's own, so that other controllers' indexes do not clash with it.
const podsByNode = "nodelifecycle.outpost.dev/nodeName"

// nodesBySite indexes the nodes cache by their site (wire.SiteLabel).
const nodesBySite = "nodelifecycle.outpost.dev/site"

// Controller watches the Nodes, their Leases and their pods, and carries
// out what Decide says of each node: it is the I/O shell of Decide. Each
// node is decided again when it, its Lease or one of its pods changes,
// when a Node of its site changes its site or its mesh report or a Lease
// of its site starts or stops being current, and at the next deadline
// Decide names (AddAfter); no ticker polls.
type Controller struct {
	cfg    Config
	client kubernetes.Interface
	clock  clock.WithTicker
	log    *slog.Logger
	events record.EventRecorder

	nodes  corelisters.NodeLister
	bySite cache.Indexer // the nodes cache, indexed by nodesBySite
	leases coordinationlisters.LeaseLister
	pods   cache.Indexer
	synced []cache.InformerSynced
	queue  workqueue.TypedRateLimitingInterface[string]

	since time.Time // set by Run before any work

	mu      sync.Mutex
	warned  map[string]string    // node: the bad offline tolerance last warned of
	untimed map[string]time.Time // node: when its untimed NoExecute taints were first seen
	held    map[string]bool      // node: its eviction is held, and this was said
}

// New returns a Controller of c and cfg. It registers the Node, Lease and
// Pod informers of c.Informers and their handlers, and starts nothing.
func New(c controllers.Context, cfg Config) (*Controller, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	nodes := c.Informers.Core().V1().Nodes()
	leases := c.Informers.Coordination().V1().Leases()
	pods := c.Informers.Core().V1().Pods()
	err := pods.Informer().AddIndexers(cache.Indexers{podsByNode: func(obj any) ([]string, error) {
		if p, ok := obj.(*corev1.Pod); ok && p.Spec.NodeName != "" {
			return []string{p.Spec.NodeName}, nil
		}
		return nil, nil
	}})
	if err != nil {
		return nil, fmt.Errorf("nodelifecycle: index pods by node: %w", err)
	}
	err = nodes.Informer().AddIndexers(cache.Indexers{nodesBySite: func(obj any) ([]string, error) {
		if n, ok := obj.(*corev1.Node); ok && siteOf(n) != "" {
			return []string{siteOf(n)}, nil
		}
		return nil, nil
	}})
	if err != nil {
		return nil, fmt.Errorf("nodelifecycle: index nodes by site: %w", err)
	}
	ctl := &Controller{
		cfg: cfg, client: c.Client, clock: c.Clock,
		log:    c.Logger,
		events: c.Events(Component),
		nodes:  nodes.Lister(), bySite: nodes.Informer().GetIndexer(),
		leases: leases.Lister(), pods: pods.Informer().GetIndexer(),
		synced: []cache.InformerSynced{nodes.Informer().HasSynced, leases.Informer().HasSynced, pods.Informer().HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "nodelifecycle", Clock: c.Clock}),
		warned:  map[string]string{},
		untimed: map[string]time.Time{},
		held:    map[string]bool{},
	}
	// Each handler names the nodes to decide again for a change of one
	// object (key), and those of its site when the change matters to
	// their SiteReachable (site, given old nil on an add and cur nil on a
	// delete).
	handlers := []struct {
		inf  cache.SharedIndexInformer
		key  func(obj any) []string
		site func(old, cur any) []string
	}{
		{nodes.Informer(), func(obj any) []string {
			if n, ok := obj.(*corev1.Node); ok {
				return []string{n.Name}
			}
			return nil
		}, ctl.nodeSiteChanged},
		{leases.Informer(), func(obj any) []string {
			if l, ok := obj.(*coordinationv1.Lease); ok && l.Namespace == corev1.NamespaceNodeLease {
				return []string{l.Name}
			}
			return nil
		}, ctl.leaseSiteChanged},
		{pods.Informer(), func(obj any) []string {
			if p, ok := obj.(*corev1.Pod); ok && p.Spec.NodeName != "" {
				return []string{p.Spec.NodeName}
			}
			return nil
		}, nil},
	}
	for _, h := range handlers {
		enqueue := func(old, cur any) {
			for _, obj := range []any{old, cur} {
				for _, k := range h.key(obj) {
					ctl.queue.Add(k)
				}
			}
			if h.site != nil {
				for _, k := range h.site(old, cur) {
					ctl.queue.Add(k)
				}
			}
		}
		_, err := h.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: func(obj any) { enqueue(nil, obj) },
			UpdateFunc: func(old, cur any) {
				enqueue(old, cur) // old: a pod bound anew, say
			},
			DeleteFunc: func(obj any) {
				if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
					obj = d.Obj
				}
				enqueue(obj, nil)
			},
		})
		if err != nil {
			return nil, fmt.Errorf("nodelifecycle: add event handler: %w", err)
		}
	}
	return ctl, nil
}

// Run waits for the caches, then works on the nodes until ctx ends, and
// returns nil once its workers have stopped.
func (c *Controller) Run(ctx context.Context) error {
	c.since = c.clock.Now()
	return controllers.Work(ctx, controllers.Workers[string]{
		Queue: c.queue, Count: c.cfg.Workers, Synced: c.synced, Sync: c.sync, Log: c.log,
		What: "node", Failed: "sync node",
	})
}

// sync decides on node name and carries out the decision.
func (c *Controller) sync(ctx context.Context, name string) error {
	node, err := c.nodes.Get(name)
	if apierrors.IsNotFound(err) {
		c.mu.Lock()
		delete(c.warned, name)
		delete(c.untimed, name)
		delete(c.held, name)
		c.mu.Unlock()
		return nil
	}
	if err != nil {
		return err
	}
	lease, err := c.leases.Leases(corev1.NamespaceNodeLease).Get(name)
	if apierrors.IsNotFound(err) {
		lease, err = nil, nil
	}
	if err != nil {
		return err
	}
	objs, err := c.pods.ByIndex(podsByNode, name)
	if err != nil {
		return err
	}
	pods := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok {
			pods = append(pods, p)
		}
	}
	site, err := c.sitePeers(node)
	if err != nil {
		return err
	}
	now := c.clock.Now()
	d := Decide(Input{Node: node, Lease: lease, Pods: pods, Now: now, Since: c.since, UntimedSince: c.untimedSince(node, now), Site: site}, c.cfg)
	if d.After > 0 {
		c.queue.AddAfter(name, d.After)
	}
	c.warnTolerance(node, d.BadTolerance)
	c.sayHeld(node, d.EvictionHeld)
	return c.apply(ctx, node, d)
}

// sitePeers returns the other Nodes of node's site with their Leases, nil
// if it is in none.
func (c *Controller) sitePeers(node *corev1.Node) ([]SitePeer, error) {
	site := siteOf(node)
	if site == "" {
		return nil, nil
	}
	objs, err := c.bySite.ByIndex(nodesBySite, site)
	if err != nil {
		return nil, err
	}
	peers := make([]SitePeer, 0, len(objs))
	for _, o := range objs {
		n, ok := o.(*corev1.Node)
		if !ok || n.Name == node.Name {
			continue
		}
		l, err := c.leases.Leases(corev1.NamespaceNodeLease).Get(n.Name)
		switch {
		case apierrors.IsNotFound(err):
			l = nil
		case err != nil:
			return nil, err
		}
		peers = append(peers, SitePeer{Node: n, Lease: l})
	}
	return peers, nil
}

// siteNodes returns the names of the nodes of site, none for "".
func (c *Controller) siteNodes(site string) []string {
	if site == "" {
		return nil
	}
	names, err := c.bySite.IndexKeys(nodesBySite, site)
	if err != nil {
		return nil // the index is registered in New: not reached
	}
	return names
}

// nodeSiteChanged returns the nodes whose SiteReachable a change of a
// Node from old to cur may change: those of its old and new site when it
// came, went, moved, or its mesh report changed; none otherwise, so that
// the nodes' frequent status reports do not wake their whole site.
func (c *Controller) nodeSiteChanged(old, cur any) []string {
	o, _ := old.(*corev1.Node)
	n, _ := cur.(*corev1.Node)
	if o != nil && n != nil {
		oa, ook := o.Annotations[wire.AnnotationMeshAlive]
		na, nok := n.Annotations[wire.AnnotationMeshAlive]
		if siteOf(o) == siteOf(n) && ook == nok && oa == na {
			return nil
		}
	}
	var names []string
	if o != nil {
		names = c.siteNodes(siteOf(o))
	}
	if n != nil && (o == nil || siteOf(n) != siteOf(o)) {
		names = append(names, c.siteNodes(siteOf(n))...)
	}
	return names
}

// leaseSiteChanged returns the nodes of the site of a Lease's node when
// the Lease changed from old to cur so that the node starts or stops
// being counted as connected (a renewal of a current Lease changes
// nothing). A Lease that lapses without a change is seen by its site
// peers' next decision, which Decide times for it.
func (c *Controller) leaseSiteChanged(old, cur any) []string {
	o, _ := old.(*coordinationv1.Lease)
	l, _ := cur.(*coordinationv1.Lease)
	if l == nil {
		l = o
	}
	if l == nil || l.Namespace != corev1.NamespaceNodeLease {
		return nil
	}
	if o != nil && cur != nil {
		now := c.clock.Now()
		was, _ := leaseCurrent(o, now, c.cfg)
		is, _ := leaseCurrent(l, now, c.cfg)
		if was == is {
			return nil
		}
	}
	node, err := c.nodes.Get(l.Name)
	if err != nil {
		return nil // no Node (yet): no site to tell
	}
	return c.siteNodes(siteOf(node))
}

// apply carries out d on node: conditions, taints, then pods.
func (c *Controller) apply(ctx context.Context, node *corev1.Node, d Decision) error {
	nodes := c.client.CoreV1().Nodes()
	if d.Conditions != nil {
		n := node.DeepCopy()
		n.Status.Conditions = d.Conditions
		updated, err := nodes.UpdateStatus(ctx, n, metav1.UpdateOptions{})
		if err != nil {
			return fmt.Errorf("update conditions of node %s: %w", node.Name, err)
		}
		if was, is := siteStatus(node.Status.Conditions), siteStatus(d.Conditions); was != is {
			c.log.Info("node site reachability changed", "node", node.Name, "from", was, "to", is)
		}
		node = updated
		if d.StatusEvent != "" {
			c.log.Info("node status changed", "node", node.Name, "status", d.StatusEvent)
			c.events.Eventf(node, corev1.EventTypeNormal, d.StatusEvent, "Node %s status is now: %s", node.Name, d.StatusEvent)
		}
	}
	if d.TaintsChanged {
		n := node.DeepCopy()
		n.Spec.Taints = d.Taints
		if _, err := nodes.Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("update taints of node %s: %w", node.Name, err)
		}
	}
	var errs []error
	for _, p := range d.NotReady {
		_, err := c.client.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			errs = append(errs, fmt.Errorf("mark pod %s/%s not ready: %w", p.Namespace, p.Name, err))
		default:
			c.events.Event(p, corev1.EventTypeWarning, EventNodeNotReady, "Node is not ready")
		}
	}
	for _, p := range d.Evict {
		if err := c.evict(ctx, p); err != nil {
			errs = append(errs, fmt.Errorf("evict pod %s/%s: %w", p.Namespace, p.Name, err))
		}
	}
	return errors.Join(errs...)
}

// evict deletes pod as upstream's taint manager does: the
// DisruptionTarget condition, an Event, then the deletion with the pod's
// grace. (The Event comes once the condition is written, so that a
// decision on a stale cache, which the write refuses, records none.)
func (c *Controller) evict(ctx context.Context, pod *corev1.Pod) error {
	pods := c.client.CoreV1().Pods(pod.Namespace)
	p := pod.DeepCopy()
	cond := disruptionTarget(c.clock.Now())
	if i := slices.IndexFunc(p.Status.Conditions, func(pc corev1.PodCondition) bool { return pc.Type == cond.Type }); i >= 0 {
		p.Status.Conditions[i] = cond
	} else {
		p.Status.Conditions = append(p.Status.Conditions, cond)
	}
	_, err := pods.UpdateStatus(ctx, p, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	c.log.Info("evict pod", "pod", pod.Namespace+"/"+pod.Name, "node", pod.Spec.NodeName)
	c.events.Eventf(pod, corev1.EventTypeNormal, EventTaintManagerEviction, "Marking for deletion Pod %s/%s", pod.Namespace, pod.Name)
	err = pods.Delete(ctx, pod.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pod.UID}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // gone, or another pod of that name
	}
	return err
}

// warnTolerance records a Warning on node for bad, once for each bad
// value of its annotation.
func (c *Controller) warnTolerance(node *corev1.Node, bad error) {
	v := node.Annotations[AnnotationOfflineTolerance]
	c.mu.Lock()
	old, warned := c.warned[node.Name]
	if bad == nil {
		delete(c.warned, node.Name)
	} else {
		c.warned[node.Name] = v
	}
	c.mu.Unlock()
	if bad != nil && (!warned || old != v) {
		c.log.Warn("bad offline tolerance", "node", node.Name, "err", bad)
		c.events.Event(node, corev1.EventTypeWarning, EventInvalidOfflineTolerance, bad.Error())
	}
}

// sayHeld logs and records on node, once until it is no longer so, that
// its eviction is held as its site holds it alive.
func (c *Controller) sayHeld(node *corev1.Node, held bool) {
	c.mu.Lock()
	said := c.held[node.Name]
	if held {
		c.held[node.Name] = true
	} else {
		delete(c.held, node.Name)
	}
	c.mu.Unlock()
	if held && !said {
		c.log.Info("eviction held: the node's site peers hold it alive", "node", node.Name)
		c.events.Eventf(node, corev1.EventTypeNormal, EventEvictionHeld,
			"Node %s is unreachable past its offline tolerance, but its site peers hold it alive: its pods are running and are not evicted", node.Name)
	}
}

// untimedSince returns when node's NoExecute taints without timeAdded
// were first seen, zero if it has none.
func (c *Controller) untimedSince(node *corev1.Node, now time.Time) time.Time {
	has := slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoExecute && t.TimeAdded == nil
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	if !has {
		delete(c.untimed, node.Name)
		return time.Time{}
	}
	if t, ok := c.untimed[node.Name]; ok {
		return t
	}
	c.untimed[node.Name] = now
	return now
}
