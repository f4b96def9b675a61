// Package clusterroleaggregation is the hub's ClusterRole aggregation
// controller, as upstream's kube-controller-manager runs it: a ClusterRole
// with an aggregationRule holds the rules of every ClusterRole its label
// selectors match, kept up to date as those change (admin, edit and view
// are built this way, and charts extend them by labelling their own
// roles). AggregatedRules is its pure core.
package clusterroleaggregation

import (
	"context"
	"fmt"
	"log/slog"

	rbacv1 "k8s.io/api/rbac/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	rbaclisters "k8s.io/client-go/listers/rbac/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/outpost-mesh/outpost/hub/controllers"
)

// Workers is how many ClusterRoles are aggregated at once; one, as
// upstream runs it: aggregated roles may feed one another.
const Workers = 1

// Controller keeps aggregated ClusterRoles' rules. Make one with New.
type Controller struct {
	client kubernetes.Interface
	roles  rbaclisters.ClusterRoleLister
	synced cache.InformerSynced
	log    *slog.Logger
	queue  workqueue.TypedRateLimitingInterface[string]
}

// New builds the controller from c and registers its handlers on the
// ClusterRole informer. It starts nothing.
func New(c controllers.Context) (*Controller, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	inf := c.Informers.Rbac().V1().ClusterRoles()
	ac := &Controller{
		client: c.Client,
		roles:  inf.Lister(),
		synced: inf.Informer().HasSynced,
		log:    c.Logger,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "clusterrole_aggregation", Clock: c.Clock}),
	}
	// Any change of any ClusterRole may change what an aggregated one
	// selects: look at every aggregated role again, as upstream does.
	enqueueAll := func(any) { ac.enqueueAggregated() }
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueueAll,
		UpdateFunc: func(_, cur any) { enqueueAll(cur) },
		DeleteFunc: enqueueAll,
	}); err != nil {
		return nil, fmt.Errorf("clusterrole informer: %w", err)
	}
	return ac, nil
}

// Run aggregates until ctx ends, and returns once its worker has stopped.
// The informers' owner starts them.
func (ac *Controller) Run(ctx context.Context) error {
	return controllers.Work(ctx, controllers.Workers[string]{
		Queue: ac.queue, Count: Workers, Synced: []cache.InformerSynced{ac.synced}, Sync: ac.sync, Log: ac.log,
		What: "clusterrole", Failed: "aggregate clusterrole", Level: controllers.Quiet,
	})
}

func (ac *Controller) enqueueAggregated() {
	roles, err := ac.roles.List(labels.Everything())
	if err != nil {
		return
	}
	for _, r := range roles {
		if r.AggregationRule != nil {
			ac.queue.Add(r.Name)
		}
	}
}

func (ac *Controller) sync(ctx context.Context, name string) error {
	role, err := ac.roles.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return err
	}
	if role.AggregationRule == nil {
		return nil
	}
	listed, err := ac.roles.List(labels.Everything())
	if err != nil {
		return err
	}
	all := make([]rbacv1.ClusterRole, len(listed))
	for i, r := range listed {
		all[i] = *r
	}
	rules, err := AggregatedRules(role, all)
	if err != nil {
		// A selector that does not parse: validation keeps them out, so
		// this is a role from before it; nothing to retry.
		ac.log.Warn("clusterrole has an aggregation rule that cannot be applied", "clusterrole", name, "err", err)
		return nil
	}
	if apiequality.Semantic.DeepEqual(rules, role.Rules) {
		return nil
	}
	upd := role.DeepCopy()
	upd.Rules = rules
	_, err = ac.client.RbacV1().ClusterRoles().Update(ctx, upd, metav1.UpdateOptions{})
	return err
}
