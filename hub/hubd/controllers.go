package hubd

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/firmware/artifacts"
	"github.com/outpost-mesh/outpost/hub/auth"
	"github.com/outpost-mesh/outpost/hub/controllers"
	"github.com/outpost-mesh/outpost/hub/controllers/clusterroleaggregation"
	"github.com/outpost-mesh/outpost/hub/controllers/crd"
	"github.com/outpost-mesh/outpost/hub/controllers/cronjob"
	"github.com/outpost-mesh/outpost/hub/controllers/csrsigning"
	"github.com/outpost-mesh/outpost/hub/controllers/daemonset"
	"github.com/outpost-mesh/outpost/hub/controllers/deployment"
	"github.com/outpost-mesh/outpost/hub/controllers/disruption"
	"github.com/outpost-mesh/outpost/hub/controllers/endpoints"
	"github.com/outpost-mesh/outpost/hub/controllers/endpointslice"
	"github.com/outpost-mesh/outpost/hub/controllers/firmwarerelease"
	"github.com/outpost-mesh/outpost/hub/controllers/firmwarerollout"
	"github.com/outpost-mesh/outpost/hub/controllers/garbagecollector"
	"github.com/outpost-mesh/outpost/hub/controllers/job"
	"github.com/outpost-mesh/outpost/hub/controllers/manager"
	"github.com/outpost-mesh/outpost/hub/controllers/namespace"
	"github.com/outpost-mesh/outpost/hub/controllers/nodeipam"
	"github.com/outpost-mesh/outpost/hub/controllers/nodelifecycle"
	"github.com/outpost-mesh/outpost/hub/controllers/podgc"
	"github.com/outpost-mesh/outpost/hub/controllers/replicaset"
	"github.com/outpost-mesh/outpost/hub/controllers/replication"
	"github.com/outpost-mesh/outpost/hub/controllers/resourcequota"
	"github.com/outpost-mesh/outpost/hub/controllers/serviceaccount"
	"github.com/outpost-mesh/outpost/hub/controllers/statefulset"
	"github.com/outpost-mesh/outpost/hub/controllers/storageversionmigrator"
	"github.com/outpost-mesh/outpost/hub/controllers/ttlafterfinished"
	"github.com/outpost-mesh/outpost/hub/scheduler"
)

// newControllerManager returns the manager of the hub's controllers and
// scheduler, each acting through the in-process API as its own identity,
// authorized by RBAC like any other client: the manager as
// system:kube-controller-manager, the scheduler as system:kube-scheduler,
// and each controller as its service account in kube-system, bound to its
// system:controller: role, as upstream's kube-controller-manager runs
// them with --use-service-account-credentials.
func newControllerManager(handler *apiHandler, hc Config, caPEM []byte, signer csrsigning.Signer, fw *artifacts.Store, log *slog.Logger) (*manager.Manager, error) {
	cfg := manager.DefaultConfig()
	cfg.LeaseIdentity = auth.ControllerManagerUser
	cfg.Controllers = controllerList(hc, caPEM, signer, fw)
	cfg.Clients = func(identity string) (manager.Clients, error) {
		u, ok := controllerUser(identity)
		if !ok {
			return manager.Clients{}, fmt.Errorf("no in-process identity %q", identity)
		}
		return inprocAllClientsAs(handler, u, identity, log)
	}
	cfg.Logger = log.With("component", "controllers")
	m, err := manager.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("controller manager: %w", err)
	}
	return m, nil
}

// controllerUser returns the in-process user of identity: the controller
// manager, the scheduler, or a service account of kube-system.
func controllerUser(identity string) (auth.User, bool) {
	switch identity {
	case auth.ControllerManagerUser:
		return controllerManagerUser, true
	case auth.SchedulerUser:
		return schedulerUser, true
	}
	name, ok := strings.CutPrefix(identity, auth.ServiceAccountUserPrefix+metav1.NamespaceSystem+":")
	if !ok || name == "" || strings.Contains(name, ":") {
		return auth.User{}, false
	}
	return auth.ServiceAccountUser(metav1.NamespaceSystem, name), true
}

// sa is the identity of a controller's service account in kube-system,
// named as upstream names it (deployment-controller, ...), which its
// bootstrap system:controller: role is bound to.
func sa(name string) string {
	return auth.ServiceAccountUserPrefix + metav1.NamespaceSystem + ":" + name
}

// controllerList returns the controllers the hub runs, in the order they
// are built, as hc configures them, each with the identity upstream runs
// it as; caPEM is the hub CA that pods are told to trust, and signer
// issues the client certificates that certificate signing requests for
// kubernetes.io/kube-apiserver-client are approved for.
func controllerList(hc Config, caPEM []byte, signer csrsigning.Signer, fw *artifacts.Store) []manager.Controller {
	lifecycle := nodelifecycle.DefaultConfig()
	lifecycle.GracePeriod = hc.NodeMonitorGracePeriod
	list := []manager.Controller{
		{Name: "nodelifecycle", Identity: sa("node-controller"), New: func(c controllers.Context) (manager.Runner, error) { return nodelifecycle.New(c, lifecycle) }},
		// Service accounts, and the kube-root-ca.crt ConfigMaps that
		// upstream's root-ca-cert-publisher writes.
		{Name: "serviceaccount", Identity: sa("service-account-controller"), New: func(c controllers.Context) (manager.Runner, error) { return serviceaccount.New(c, caPEM) }},
		{Name: "garbagecollector", Identity: sa("generic-garbage-collector"), New: runner(garbagecollector.New)},
		{Name: "namespace", Identity: sa("namespace-controller"), New: runner(namespace.New)},
		{Name: "podgc", Identity: sa("pod-garbage-collector"), New: func(c controllers.Context) (manager.Runner, error) { return podgc.New(c, podgc.DefaultConfig()) }},
		{Name: "replicaset", Identity: sa("replicaset-controller"), New: runner(replicaset.New)},
		{Name: "replicationcontroller", Identity: sa("replication-controller"), New: runner(replication.New)},
		{Name: "deployment", Identity: sa("deployment-controller"), New: runner(deployment.New)},
		{Name: "daemonset", Identity: sa("daemon-set-controller"), New: runner(daemonset.New)},
		{Name: "statefulset", Identity: sa("statefulset-controller"), New: runner(statefulset.New)},
		{Name: "job", Identity: sa("job-controller"), New: runner(job.New)},
		{Name: "cronjob", Identity: sa("cronjob-controller"), New: runner(cronjob.New)},
		{Name: "ttl-after-finished", Identity: sa("ttl-after-finished-controller"), New: runner(ttlafterfinished.New)},
		{Name: "endpointslice", Identity: sa("endpointslice-controller"), New: runner(endpointslice.New)},
		{Name: "endpoints", Identity: sa("endpoint-controller"), New: runner(endpoints.New)},
		{Name: "clusterrole-aggregation", Identity: sa("clusterrole-aggregation-controller"), New: runner(clusterroleaggregation.New)},
		{Name: "disruption", Identity: sa("disruption-controller"), New: runner(disruption.New)},
		{Name: "resourcequota", Identity: sa("resourcequota-controller"), New: func(c controllers.Context) (manager.Runner, error) {
			return resourcequota.New(c, resourcequota.DefaultConfig())
		}},
		{Name: "csrsigning", Identity: sa("certificate-controller"), New: func(c controllers.Context) (manager.Runner, error) {
			return csrsigning.New(c, csrsigning.DefaultConfig(signer))
		}},
		// Upstream's CRD naming, establishing and finalizing controllers,
		// which it runs inside kube-apiserver.
		{Name: "crd", Identity: sa("crd-controller"), New: func(c controllers.Context) (manager.Runner, error) {
			return crd.New(c, c.Extensions, c.Dynamic)
		}},
		// Over-the-air rollouts of firmware.outpost.dev Releases; it
		// waits until the hub serves that API.
		{Name: "firmware-rollout", Identity: sa(firmwarerollout.Component), New: func(c controllers.Context) (manager.Runner, error) {
			return firmwarerollout.New(c, firmwarerollout.DefaultConfig())
		}},
		// The Releases' status: verified against the trusted keys, their
		// artifacts stored.
		{Name: "firmware-release", Identity: sa(firmwarerelease.Component), New: func(c controllers.Context) (manager.Runner, error) {
			return firmwarerelease.New(c, firmwarerelease.DefaultConfig(fw))
		}},
		{Name: "storage-version-migrator", Identity: sa("storage-version-migrator-controller"), New: runner(storageversionmigrator.New)},
		{Name: "scheduler", Identity: auth.SchedulerUser, OwnInformers: true, New: runner(scheduler.New)},
	}
	if hc.AllocateNodeCIDRs {
		ipam := hc.nodeIPAM()
		// Upstream's node IPAM runs as the node controller too.
		list = slices.Insert(list, 1, manager.Controller{Name: "nodeipam", Identity: sa("node-controller"), New: func(c controllers.Context) (manager.Runner, error) { return nodeipam.New(c, ipam) }})
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
