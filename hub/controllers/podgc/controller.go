// Package podgc deletes pods no kubelet will ever finish, as upstream's
// pod garbage collector does: pods bound to a Node that no longer exists
// (once a live read confirms it is gone after a quarantine), terminated
// pods above a threshold (oldest first), terminating pods that were never
// bound, and terminating pods on out-of-service nodes. The choice is pure
// (Plan); the rest is a client-go shell.
package podgc

import (
	"context"
	"fmt"
	"log/slog"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/outpost-mesh/outpost/hub/controllers"
)

// Controller is the pod garbage collector.
type Controller struct {
	c      controllers.Context
	cfg    Config
	log    *slog.Logger
	pods   corelisters.PodLister
	nodes  corelisters.NodeLister
	synced []cache.InformerSynced
	// quarantine holds the names of missing nodes until cfg.Quarantine
	// has passed since they were first missed.
	quarantine workqueue.TypedDelayingInterface[string]
}

// New returns the pod garbage collector, registering its pod and node
// informers with c.Informers. It starts nothing.
func New(c controllers.Context, cfg Config) (*Controller, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	pods, nodes := c.Informers.Core().V1().Pods(), c.Informers.Core().V1().Nodes()
	return &Controller{
		c:      c,
		cfg:    cfg,
		log:    c.Logger,
		pods:   pods.Lister(),
		nodes:  nodes.Lister(),
		synced: []cache.InformerSynced{pods.Informer().HasSynced, nodes.Informer().HasSynced},
		quarantine: workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[string]{
			Name: "orphaned_pods_nodes", Clock: c.Clock}),
	}, nil
}

// Run collects every cfg.Period until ctx ends, and returns nil then.
func (c *Controller) Run(ctx context.Context) error {
	defer c.quarantine.ShutDown()
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return nil
	}
	tick := c.c.Clock.NewTicker(c.cfg.Period)
	defer tick.Stop()
	for {
		c.collect(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C():
		}
	}
}

// collect makes one pass.
func (c *Controller) collect(ctx context.Context) {
	pods, err := c.pods.List(labels.Everything())
	if err != nil {
		c.log.Warn("list pods", "err", err)
		return
	}
	nodeList, err := c.nodes.List(labels.Everything())
	if err != nil {
		c.log.Warn("list nodes", "err", err)
		return
	}
	nodes := make(map[string]*corev1.Node, len(nodeList))
	for _, n := range nodeList {
		nodes[n.Name] = n
	}
	for _, name := range MissingNodes(pods, nodes) {
		c.quarantine.AddAfter(name, c.cfg.Quarantine)
	}
	gone := c.goneNodes(ctx, nodes)
	for _, d := range Plan(pods, nodes, gone, c.cfg) {
		if ctx.Err() != nil {
			return
		}
		var cond *corev1.PodCondition
		if d.Reason == Orphaned {
			cond = &corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
				Reason: "DeletionByPodGC", Message: "PodGC: node no longer exists"}
		}
		if err := c.failAndDelete(ctx, d.Pod, cond); err != nil {
			c.log.Warn("collect pod", "pod", d.Pod.Namespace+"/"+d.Pod.Name, "reason", d.Reason.String(), "err", err)
			continue
		}
		c.log.Info("collected pod", "pod", d.Pod.Namespace+"/"+d.Pod.Name, "reason", d.Reason.String(), "node", d.Pod.Spec.NodeName)
	}
}

// goneNodes returns the quarantined nodes whose time is up and that a
// live read confirms are gone.
func (c *Controller) goneNodes(ctx context.Context, nodes map[string]*corev1.Node) map[string]bool {
	gone := map[string]bool{}
	for c.quarantine.Len() > 0 {
		name, quit := c.quarantine.Get()
		if quit {
			break
		}
		c.quarantine.Done(name)
		if nodes[name] != nil {
			continue
		}
		_, err := c.c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			gone[name] = true
		case err != nil:
			c.log.Warn("check missing node; will check again", "node", name, "err", err)
			c.quarantine.AddAfter(name, c.cfg.Quarantine)
		}
	}
	return gone
}

// failAndDelete marks a pod that has not finished Failed (with cond, if
// any), as upstream does so that its controllers count it so, then
// deletes it at once: no kubelet is left to do it gracefully.
func (c *Controller) failAndDelete(ctx context.Context, pod *corev1.Pod, cond *corev1.PodCondition) error {
	pods := c.c.Client.CoreV1().Pods(pod.Namespace)
	if pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed {
		p := pod.DeepCopy()
		p.Status.Phase = corev1.PodFailed
		if cond != nil {
			cond.LastTransitionTime = metav1.NewTime(c.c.Clock.Now())
			setCondition(&p.Status, *cond)
		}
		if _, err := pods.UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("mark failed: %w", err)
		}
	}
	uid := pod.UID
	err := pods.Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64), Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete: %w", err)
	}
	return nil
}

// setCondition sets c in status, replacing one of its type.
func setCondition(status *corev1.PodStatus, c corev1.PodCondition) {
	for i := range status.Conditions {
		if status.Conditions[i].Type == c.Type {
			status.Conditions[i] = c
			return
		}
	}
	status.Conditions = append(status.Conditions, c)
}
