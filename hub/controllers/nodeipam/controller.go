package nodeipam

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/outpost-mesh/outpost/hub/controllers"
)

// Component is the source of the controller's Events, as upstream's range
// allocator names it.
const Component = "cidrAllocator"

// The reasons of the controller's Events, all Warnings on a Node.
const (
	// EventCIDRNotAvailable: the range has no free block for the node,
	// which is tried again when a block is freed, and every
	// exhaustedRetry. Upstream's reason.
	EventCIDRNotAvailable = "CIDRNotAvailable"
	// EventCIDRAssignmentFailed: the API refused the node's pod CIDR.
	// Upstream's reason.
	EventCIDRAssignmentFailed = "CIDRAssignmentFailed"
	// EventCIDRConflict: the node's pod CIDR shares addresses with
	// another node's. Both keep theirs; the blocks are given to no other
	// node until both are gone.
	EventCIDRConflict = "CIDRConflict"
)

// exhaustedRetry is how long a node the range had no block for waits
// before it is tried again, if no block is freed before.
const exhaustedRetry = time.Minute

// Controller gives each Node without a pod CIDR a block of the cluster
// range, and keeps the Allocator equal to what the Nodes hold: it is the
// I/O shell of Allocator. Before it gives any block it records those of
// the Nodes that exist; after, it records a Node's CIDRs when they change
// and forgets them when the Node goes.
type Controller struct {
	cfg    Config
	client kubernetes.Interface
	log    *slog.Logger
	events record.EventRecorder

	nodes  corelisters.NodeLister
	synced cache.InformerSynced
	queue  workqueue.TypedRateLimitingInterface[string]

	mu    sync.Mutex
	alloc *Allocator
}

// New returns a Controller of c and cfg. It registers the Node informer
// of c.Informers and its handlers, and starts nothing.
func New(c controllers.Context, cfg Config) (*Controller, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	alloc, err := NewAllocator(cfg.ClusterCIDR, cfg.NodeMaskSize)
	if err != nil {
		return nil, err
	}
	nodes := c.Informers.Core().V1().Nodes()
	ctl := &Controller{
		cfg: cfg, client: c.Client,
		log:    c.Logger,
		events: c.Events(Component),
		nodes:  nodes.Lister(), synced: nodes.Informer().HasSynced,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "nodeipam", Clock: c.Clock}),
		alloc: alloc,
	}
	enqueue := func(obj any) {
		if n, ok := controllers.Object[*corev1.Node](obj); ok {
			ctl.queue.Add(n.Name)
		}
	}
	_, err = nodes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue,
		// Only a change of what a node holds matters: a node without
		// one is tried again by sync itself until it has one.
		UpdateFunc: func(old, cur any) {
			o, ok1 := old.(*corev1.Node)
			n, ok2 := cur.(*corev1.Node)
			if ok1 && ok2 && (o.UID != n.UID || !slices.Equal(podCIDRs(o), podCIDRs(n))) {
				ctl.queue.Add(n.Name)
			}
		},
		DeleteFunc: enqueue,
	})
	if err != nil {
		return nil, fmt.Errorf("nodeipam: add event handler: %w", err)
	}
	return ctl, nil
}

// Run waits for the Node cache and records the CIDRs of every Node in it,
// then works on the nodes until ctx ends, and returns nil once its
// workers have stopped.
func (c *Controller) Run(ctx context.Context) error {
	if !cache.WaitForCacheSync(ctx.Done(), c.synced) {
		c.queue.ShutDown()
		return nil
	}
	c.holdExisting()
	return controllers.Work(ctx, controllers.Workers[string]{
		Queue: c.queue, Count: c.cfg.Workers, Synced: []cache.InformerSynced{c.synced}, Sync: c.sync, Log: c.log,
		What: "node", Failed: "sync node",
	})
}

// holdExisting records the CIDRs of the Nodes in the cache, oldest
// first, so that no block they hold is given before its holder is seen.
func (c *Controller) holdExisting() {
	list, err := c.nodes.List(labels.Everything())
	if err != nil { // a cache lists without error
		c.log.Error("list nodes", "err", err)
	}
	slices.SortFunc(list, func(a, b *corev1.Node) int {
		return cmp.Or(a.CreationTimestamp.Compare(b.CreationTimestamp.Time), strings.Compare(a.Name, b.Name))
	})
	for _, n := range list {
		if cidrs := podCIDRs(n); len(cidrs) > 0 {
			c.hold(n, cidrs)
		}
	}
	c.mu.Lock()
	used, size := c.alloc.Used(), c.alloc.Size()
	c.mu.Unlock()
	c.log.Info("started", "clusterCIDR", c.cfg.ClusterCIDR, "nodeMaskSize", c.cfg.NodeMaskSize, "nodes", len(list), "blocksUsed", used, "blocks", size)
}

// sync brings the Allocator and node name together: it records what the
// Node holds, gives it a block if it holds none, or forgets it if it is
// gone.
func (c *Controller) sync(ctx context.Context, name string) error {
	node, err := c.nodes.Get(name)
	if apierrors.IsNotFound(err) {
		c.locked(func(a *Allocator) { a.Forget(name) })
		return nil
	}
	if err != nil {
		return err
	}
	if cidrs := podCIDRs(node); len(cidrs) > 0 {
		c.hold(node, cidrs)
		return nil
	}
	if node.DeletionTimestamp != nil {
		return nil
	}
	uid := string(node.UID)
	var p netip.Prefix
	var used, size int
	c.locked(func(a *Allocator) {
		p, err = a.Reserve(name, uid)
		used, size = a.Used(), a.Size()
	})
	if errors.Is(err, ErrExhausted) {
		c.log.Warn("no pod CIDR left for node", "node", name, "clusterCIDR", c.cfg.ClusterCIDR, "blocks", size, "retryIn", exhaustedRetry)
		c.events.Eventf(node, corev1.EventTypeWarning, EventCIDRNotAvailable,
			"Node %s status is now: CIDRNotAvailable: all %d /%d blocks of %v are in use; will retry when one is freed",
			name, size, c.cfg.NodeMaskSize, c.cfg.ClusterCIDR)
		c.queue.AddAfter(name, exhaustedRetry)
		return nil
	}
	err = c.patch(ctx, node, p)
	switch {
	case err == nil:
		c.log.Info("set node pod CIDR", "node", name, "podCIDR", p, "blocksUsed", used, "blocks", size)
		return nil
	case apierrors.IsNotFound(err):
		c.locked(func(a *Allocator) { a.Forget(name) })
		return nil
	case apierrors.IsServerTimeout(err):
		// It may yet be written: keep the block, and write the same
		// one again.
		return fmt.Errorf("set pod CIDR %v of node %s: %w", p, name, err)
	}
	c.locked(func(a *Allocator) { a.Unreserve(name, uid) })
	if apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsBadRequest(err) {
		c.events.Eventf(node, corev1.EventTypeWarning, EventCIDRAssignmentFailed, "Error setting pod CIDR %v: %v", p, err)
	}
	return fmt.Errorf("set pod CIDR %v of node %s: %w", p, name, err)
}

// patch sets node's spec.podCIDR and spec.podCIDRs to p, as upstream
// does, if the Node of that name is still node (its UID).
func (c *Controller) patch(ctx context.Context, node *corev1.Node, p netip.Prefix) error {
	body, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"uid": node.UID},
		"spec":     map[string]any{"podCIDR": p.String(), "podCIDRs": []string{p.String()}},
	})
	if err != nil {
		return err
	}
	_, err = c.client.CoreV1().Nodes().Patch(ctx, node.Name, types.StrategicMergePatchType, body, metav1.PatchOptions{})
	return err
}

// hold records what node holds, cidrs, and reports what is amiss with it
// the first time it is seen.
func (c *Controller) hold(node *corev1.Node, cidrs []string) {
	var h Held
	c.locked(func(a *Allocator) { h = a.Hold(node.Name, string(node.UID), cidrs) })
	if !h.Changed {
		return
	}
	if len(h.Outside) > 0 {
		c.log.Info("node keeps pod CIDRs outside the cluster range", "node", node.Name, "podCIDRs", h.Outside, "clusterCIDR", c.cfg.ClusterCIDR)
	}
	if len(h.Invalid) > 0 {
		c.log.Warn("node holds pod CIDRs that are not CIDRs", "node", node.Name, "podCIDRs", h.Invalid)
	}
	for _, conflict := range h.Shared {
		names := append([]string{node.Name}, conflict.Others...)
		c.log.Warn("pod CIDR held by several nodes", "podCIDR", conflict.CIDR, "nodes", names)
		msg := fmt.Sprintf("Pod CIDR %s of node %s overlaps that of node %s: each keeps its own, and no other node is given these addresses",
			conflict.CIDR, node.Name, strings.Join(conflict.Others, ", "))
		c.events.Event(node, corev1.EventTypeWarning, EventCIDRConflict, msg)
		for _, other := range conflict.Others {
			if n, err := c.nodes.Get(other); err == nil {
				c.events.Event(n, corev1.EventTypeWarning, EventCIDRConflict, msg)
			}
		}
	}
}

// locked calls f with the Allocator held, then queues the nodes waiting
// for a block if f freed one.
func (c *Controller) locked(f func(*Allocator)) {
	c.mu.Lock()
	f(c.alloc)
	retry := c.alloc.Retry()
	c.mu.Unlock()
	for _, name := range retry {
		c.queue.Add(name)
	}
}

// podCIDRs returns the pod CIDRs n's spec holds: podCIDRs, or podCIDR
// alone from a client that sets only that one (the hub keeps the two
// equal).
func podCIDRs(n *corev1.Node) []string {
	if len(n.Spec.PodCIDRs) > 0 {
		return n.Spec.PodCIDRs
	}
	if n.Spec.PodCIDR != "" {
		return []string{n.Spec.PodCIDR}
	}
	return nil
}
