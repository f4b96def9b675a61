package hubd

import (
	"fmt"
	"log/slog"
	"slices"

	"github.com/outpost-mesh/outpost/hub/auth"
	"github.com/outpost-mesh/outpost/hub/controllers"
	"github.com/outpost-mesh/outpost/hub/controllers/clusterroleaggregation"
	"github.com/outpost-mesh/outpost/hub/controllers/cronjob"
	"github.com/outpost-mesh/outpost/hub/controllers/daemonset"
	"github.com/outpost-mesh/outpost/hub/controllers/deployment"
	"github.com/outpost-mesh/outpost/hub/controllers/disruption"
	"github.com/outpost-mesh/outpost/hub/controllers/endpoints"
	"github.com/outpost-mesh/outpost/hub/controllers/endpointslice"
	"github.com/outpost-mesh/outpost/hub/controllers/garbagecollector"
	"github.com/outpost-mesh/outpost/hub/controllers/job"
	"github.com/outpost-mesh/outpost/hub/controllers/manager"
	"github.com/outpost-mesh/outpost/hub/controllers/namespace"
	"github.com/outpost-mesh/outpost/hub/controllers/nodeipam"
	"github.com/outpost-mesh/outpost/hub/controllers/nodelifecycle"
	"github.com/outpost-mesh/outpost/hub/controllers/podgc"
	"github.com/outpost-mesh/outpost/hub/controllers/replicaset"
	"github.com/outpost-mesh/outpost/hub/controllers/serviceaccount"
	"github.com/outpost-mesh/outpost/hub/controllers/statefulset"
	"github.com/outpost-mesh/outpost/hub/controllers/ttlafterfinished"
	"github.com/outpost-mesh/outpost/hub/scheduler"
)

// newControllerManager returns the manager of the hub's controllers and
// scheduler, each acting through the in-process API as its own identity.
func newControllerManager(handler *apiHandler, hc Config, caPEM []byte, log *slog.Logger) (*manager.Manager, error) {
	users := map[string]auth.User{
		auth.ControllerManagerUser: controllerManagerUser,
		auth.SchedulerUser:         schedulerUser,
	}
	cfg := manager.DefaultConfig()
	cfg.LeaseIdentity = auth.ControllerManagerUser
	cfg.Controllers = controllerList(hc, caPEM)
	cfg.Clients = func(identity string) (manager.Clients, error) {
		u, ok := users[identity]
		if !ok {
			return manager.Clients{}, fmt.Errorf("no in-process identity %q", identity)
		}
		cs, md, err := inprocClientsAs(handler, u, identity, log)
		if err != nil {
			return manager.Clients{}, err
		}
		return manager.Clients{Client: cs, Metadata: md}, nil
	}
	cfg.Logger = log.With("component", "controllers")
	m, err := manager.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("controller manager: %w", err)
	}
	return m, nil
}

// controllerList returns the controllers the hub runs, in the order they
// are built, as hc configures them; caPEM is the hub CA that pods are told
// to trust.
func controllerList(hc Config, caPEM []byte) []manager.Controller {
	cm := auth.ControllerManagerUser
	lifecycle := nodelifecycle.DefaultConfig()
	lifecycle.GracePeriod = hc.NodeMonitorGracePeriod
	list := []manager.Controller{
		{Name: "nodelifecycle", Identity: cm, New: func(c controllers.Context) (manager.Runner, error) { return nodelifecycle.New(c, lifecycle) }},
		{Name: "serviceaccount", Identity: cm, New: func(c controllers.Context) (manager.Runner, error) { return serviceaccount.New(c, caPEM) }},
		{Name: "garbagecollector", Identity: cm, New: runner(garbagecollector.New)},
		{Name: "namespace", Identity: cm, New: runner(namespace.New)},
		{Name: "podgc", Identity: cm, New: func(c controllers.Context) (manager.Runner, error) { return podgc.New(c, podgc.DefaultConfig()) }},
		{Name: "replicaset", Identity: cm, New: runner(replicaset.New)},
		{Name: "deployment", Identity: cm, New: runner(deployment.New)},
		{Name: "daemonset", Identity: cm, New: runner(daemonset.New)},
		{Name: "statefulset", Identity: cm, New: runner(statefulset.New)},
		{Name: "job", Identity: cm, New: runner(job.New)},
		{Name: "cronjob", Identity: cm, New: runner(cronjob.New)},
		{Name: "ttl-after-finished", Identity: cm, New: runner(ttlafterfinished.New)},
		{Name: "endpointslice", Identity: cm, New: runner(endpointslice.New)},
		{Name: "endpoints", Identity: cm, New: runner(endpoints.New)},
		{Name: "clusterrole-aggregation", Identity: cm, New: runner(clusterroleaggregation.New)},
		{Name: "disruption", Identity: cm, New: runner(disruption.New)},
		{Name: "scheduler", Identity: auth.SchedulerUser, New: runner(scheduler.New)},
	}
	if hc.AllocateNodeCIDRs {
		ipam := hc.nodeIPAM()
		list = slices.Insert(list, 1, manager.Controller{Name: "nodeipam", Identity: cm, New: func(c controllers.Context) (manager.Runner, error) { return nodeipam.New(c, ipam) }})
	}
	return list
}

// runner adapts a controller package's New to manager.Controller's.
func runner[C manager.Runner](newFn func(controllers.Context) (C, error)) func(controllers.Context) (manager.Runner, error) {
	return func(c controllers.Context) (manager.Runner, error) {
		ctl, err := newFn(c)
		if err != nil {
			return nil, err
		}
		return ctl, nil
	}
}
