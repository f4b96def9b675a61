package rbac

import (
	"slices"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/hub/auth"
)

// The bootstrap policy is upstream's (plugin/pkg/auth/authorizer/rbac/
// bootstrappolicy, Kubernetes 1.37 with its default feature gates) for the
// roles the hub has a use for. Left out, and why:
//   - roles of components the hub does not run or serve: system:heapster,
//     system:kube-aggregator, system:kube-dns, system:node-bootstrapper
//     (nodes join with the hub's own bootstrap tokens), system:node-problem-
//     detector, system:persistent-volume-provisioner, system:volume-scheduler,
//     system:kubelet-api-admin, the certificates.k8s.io approver and
//     signer roles of signers the hub does not run (it signs for
//     kube-apiserver-client only), system:cluster-trust-bundle-discovery
//     (beta, off);
//   - controller roles of controllers the hub does not run (attachdetach,
//     expand, ephemeral-volume, persistent-volume-binder, pv/pvc-
//     protection, horizontal-pod-autoscaler, route, service,
//     service-cidrs, ttl, resource-claim and the other DRA ones,
//     validatingadmissionpolicy-status, storage-version-garbage-
//     collector, legacy-service-account-token-cleaner, selinux-
//     warning). Upstream
//     has no role for the serviceaccount-token controller: it runs with the
//     controller manager's own credentials, and so does the hub's;
//   - rules for resource.k8s.io (dynamic resource allocation) in
//     system:node and system:kube-scheduler: the hub serves no such API;
//   - the namespaced roles of namespace_policy.go but
//     extension-apiserver-authentication-reader (kube-system's leader
//     locking, the bootstrap-signer and token-cleaner ones): the hub's
//     controllers take their one Lease as the controller manager, and it
//     runs no bootstrap signer.

// Well-known names of the bootstrap policy.
const (
	// BootstrapLabel and BootstrapLabelValue mark every bootstrap object.
	BootstrapLabel      = "kubernetes.io/bootstrapping"
	BootstrapLabelValue = "rbac-defaults"
	// AggregateToAdmin, AggregateToEdit and AggregateToView label a
	// ClusterRole ("true") whose rules admin, edit or view aggregate.
	AggregateToAdmin = "rbac.authorization.k8s.io/aggregate-to-admin"
	AggregateToEdit  = "rbac.authorization.k8s.io/aggregate-to-edit"
	AggregateToView  = "rbac.authorization.k8s.io/aggregate-to-view"
	// ControllerRolePrefix begins the name of each controller's
	// ClusterRole, bound to service account kube-system/<rest of name>.
	ControllerRolePrefix = "system:controller:"
	// OutpostControllerRolePrefix begins the name of the ClusterRole of
	// what one of the hub's controllers does beyond its upstream role,
	// bound to the same service account.
	OutpostControllerRolePrefix = "system:outpost:controller:"
	// KubeProxyUser is who system:node-proxier is bound to.
	KubeProxyUser = "system:kube-proxy"
	// MonitoringGroup is who system:monitoring is bound to.
	MonitoringGroup = "system:monitoring"
)

var (
	readVerbs      = []string{"get", "list", "watch"}
	writeVerbs     = []string{"create", "update", "patch", "delete", "deletecollection"}
	readWriteVerbs = []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}
)

const (
	legacyGroup         = ""
	appsGroup           = "apps"
	authenticationGroup = "authentication.k8s.io"
	authorizationGroup  = "authorization.k8s.io"
	autoscalingGroup    = "autoscaling"
	batchGroup          = "batch"
	certificatesGroup   = "certificates.k8s.io"
	apiextensionsGroup  = "apiextensions.k8s.io"
	firmwareGroup       = "firmware.outpost.dev"
	coordinationGroup   = "coordination.k8s.io"
	discoveryGroup      = "discovery.k8s.io"
	eventsGroup         = "events.k8s.io"
	extensionsGroup     = "extensions"
	networkingGroup     = "networking.k8s.io"
	nodeGroup           = "node.k8s.io"
	policyGroup         = "policy"
	rbacGroup           = rbacv1.GroupName
	storageGroup        = "storage.k8s.io"
	// storageMigrationGroup is upstream's storageVersionMigrationGroup.
	storageMigrationGroup = "storagemigration.k8s.io"
)

// rule builds a PolicyRule. Its lists are sorted, as upstream's builder
// sorts them, so that the objects match upstream's byte for byte.
type rule rbacv1.PolicyRule

func verbs(v ...string) rule { return rule{Verbs: v} }

func (r rule) groups(g ...string) rule    { r.APIGroups = g; return r }
func (r rule) resources(s ...string) rule { r.Resources = s; return r }
func (r rule) names(n ...string) rule     { r.ResourceNames = n; return r }
func (r rule) urls(u ...string) rule      { r.NonResourceURLs = u; return r }

func (r rule) done() rbacv1.PolicyRule {
	return rbacv1.PolicyRule{
		Verbs:           sorted(r.Verbs),
		APIGroups:       sorted(r.APIGroups),
		Resources:       sorted(r.Resources),
		ResourceNames:   sorted(r.ResourceNames),
		NonResourceURLs: sorted(r.NonResourceURLs),
	}
}

func sorted(s []string) []string {
	if s == nil {
		return nil
	}
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

func rules(rs ...rule) []rbacv1.PolicyRule {
	out := make([]rbacv1.PolicyRule, len(rs))
	for i, r := range rs {
		out[i] = r.done()
	}
	return out
}

// eventsRule lets a component record events through either API.
func eventsRule() rule {
	return verbs("create", "update", "patch").groups(legacyGroup, eventsGroup).resources("events")
}

func clusterRole(name string, labels map[string]string, rs ...rule) rbacv1.ClusterRole {
	return rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Rules: rules(rs...)}
}

func aggregatingRole(name string, labels map[string]string, selectLabel string) rbacv1.ClusterRole {
	return rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		AggregationRule: &rbacv1.AggregationRule{ClusterRoleSelectors: []metav1.LabelSelector{
			{MatchLabels: map[string]string{selectLabel: "true"}},
		}},
	}
}

// ClusterRoles returns the bootstrap ClusterRoles, controller roles
// included, each labeled kubernetes.io/bootstrapping=rbac-defaults and
// annotated for autoupdate. admin, edit and view have aggregationRules
// and no rules of their own: see Aggregate. The caller owns the result.
func ClusterRoles() []rbacv1.ClusterRole {
	roles := []rbacv1.ClusterRole{
		// A "root" role which can do absolutely anything.
		clusterRole("cluster-admin", nil,
			verbs("*").groups("*").resources("*"),
			verbs("*").urls("*"),
		),
		// Just enough to tell whether the server is ready and to
		// discover API versions.
		clusterRole("system:discovery", nil,
			verbs("get").urls("/livez", "/readyz", "/healthz", "/version", "/version/",
				"/openapi", "/openapi/*", "/api", "/api/*", "/apis", "/apis/*"),
		),
		// Read access to the monitoring endpoints; the health checks
		// under * may tell more about the cluster.
		clusterRole("system:monitoring", nil,
			verbs("get").urls("/metrics", "/metrics/slis", "/livez", "/readyz", "/healthz",
				"/livez/*", "/readyz/*", "/healthz/*"),
		),
		// What a "normal" user needs to learn about themselves.
		clusterRole("system:basic-user", nil,
			verbs("create").groups(authorizationGroup).resources("selfsubjectaccessreviews", "selfsubjectrulesreviews"),
			verbs("create").groups(authenticationGroup).resources("selfsubjectreviews"),
		),
		// Cluster information that is not sensitive.
		clusterRole("system:public-info-viewer", nil,
			verbs("get").urls("/livez", "/readyz", "/healthz", "/version", "/version/"),
		),
		// A namespace's admin: edit plus granting permissions to others.
		aggregatingRole("admin", nil, AggregateToAdmin),
		// A namespace's editor: all user-level actions, but not the
		// privileged status subresources, quota or limits.
		aggregatingRole("edit", map[string]string{AggregateToAdmin: "true"}, AggregateToEdit),
		// A namespace's viewer: reads of what does not escalate
		// (no secrets).
		aggregatingRole("view", map[string]string{AggregateToEdit: "true"}, AggregateToView),
		clusterRole("system:aggregate-to-admin", map[string]string{AggregateToAdmin: "true"},
			verbs("create").groups(authorizationGroup).resources("localsubjectaccessreviews"),
			verbs(readWriteVerbs...).groups(rbacGroup).resources("roles", "rolebindings"),
		),
		clusterRole("system:aggregate-to-edit", map[string]string{AggregateToEdit: "true"},
			// Reads of what may escalate.
			verbs(readVerbs...).groups(legacyGroup).resources("pods/attach", "pods/proxy", "pods/exec", "pods/portforward", "secrets", "services/proxy"),
			verbs("impersonate").groups(legacyGroup).resources("serviceaccounts"),
			verbs(writeVerbs...).groups(legacyGroup).resources("pods", "pods/attach", "pods/proxy", "pods/exec", "pods/portforward"),
			verbs("create").groups(legacyGroup).resources("pods/eviction"),
			verbs(writeVerbs...).groups(legacyGroup).resources("replicationcontrollers", "replicationcontrollers/scale", "serviceaccounts",
				"services", "services/proxy", "persistentvolumeclaims", "configmaps", "secrets", "events"),
			verbs("create").groups(legacyGroup).resources("serviceaccounts/token"),
			verbs(writeVerbs...).groups(appsGroup).resources("statefulsets", "statefulsets/scale", "daemonsets",
				"deployments", "deployments/scale", "deployments/rollback", "replicasets", "replicasets/scale"),
			verbs(writeVerbs...).groups(autoscalingGroup).resources("horizontalpodautoscalers"),
			verbs(writeVerbs...).groups(batchGroup).resources("jobs", "cronjobs"),
			verbs(writeVerbs...).groups(extensionsGroup).resources("daemonsets", "deployments", "deployments/scale",
				"deployments/rollback", "ingresses", "replicasets", "replicasets/scale", "replicationcontrollers/scale", "networkpolicies"),
			verbs(writeVerbs...).groups(policyGroup).resources("poddisruptionbudgets"),
			verbs(writeVerbs...).groups(networkingGroup).resources("networkpolicies", "ingresses"),
			verbs(readWriteVerbs...).groups(coordinationGroup).resources("leases"),
		),
		clusterRole("system:aggregate-to-view", map[string]string{AggregateToView: "true"},
			verbs(readVerbs...).groups(legacyGroup).resources("pods", "replicationcontrollers", "replicationcontrollers/scale", "serviceaccounts",
				"services", "services/status", "endpoints", "persistentvolumeclaims", "persistentvolumeclaims/status", "configmaps"),
			verbs(readVerbs...).groups(legacyGroup).resources("limitranges", "resourcequotas", "bindings", "events",
				"pods/status", "resourcequotas/status", "namespaces/status", "replicationcontrollers/status", "pods/log"),
			// Reading namespaces in a namespace reads that one: a sign of
			// which namespaces one has access to.
			verbs(readVerbs...).groups(legacyGroup).resources("namespaces"),
			verbs(readVerbs...).groups(discoveryGroup).resources("endpointslices"),
			verbs(readVerbs...).groups(appsGroup).resources("controllerrevisions",
				"statefulsets", "statefulsets/status", "statefulsets/scale",
				"daemonsets", "daemonsets/status",
				"deployments", "deployments/status", "deployments/scale",
				"replicasets", "replicasets/status", "replicasets/scale"),
			verbs(readVerbs...).groups(autoscalingGroup).resources("horizontalpodautoscalers", "horizontalpodautoscalers/status"),
			verbs(readVerbs...).groups(batchGroup).resources("jobs", "cronjobs", "cronjobs/status", "jobs/status"),
			verbs(readVerbs...).groups(extensionsGroup).resources("daemonsets", "daemonsets/status", "deployments", "deployments/scale", "deployments/status",
				"ingresses", "ingresses/status", "replicasets", "replicasets/scale", "replicasets/status", "replicationcontrollers/scale", "networkpolicies"),
			verbs(readVerbs...).groups(policyGroup).resources("poddisruptionbudgets", "poddisruptionbudgets/status"),
			verbs(readVerbs...).groups(networkingGroup).resources("networkpolicies", "ingresses", "ingresses/status"),
		),
		// What a kubelet needs. Upstream keeps it though the Node
		// authorizer decides for nodes; so does the hub (hub/auth).
		clusterRole("system:node", nil, nodeRules()...),
		// Delegated authentication and authorization.
		clusterRole("system:auth-delegator", nil,
			verbs("create").groups(authenticationGroup).resources("tokenreviews"),
			verbs("create").groups(authorizationGroup).resources("subjectaccessreviews"),
		),
		// Bootstrapping the controller manager: its shared informers and
		// the identities of the other controllers.
		clusterRole("system:kube-controller-manager", nil,
			eventsRule(),
			verbs("create").groups(coordinationGroup).resources("leases"),
			verbs("get", "update").groups(coordinationGroup).resources("leases").names("kube-controller-manager"),
			verbs("create").groups(legacyGroup).resources("secrets", "serviceaccounts"),
			verbs("delete").groups(legacyGroup).resources("secrets"),
			verbs("get").groups(legacyGroup).resources("namespaces", "secrets", "serviceaccounts", "configmaps"),
			verbs("update").groups(legacyGroup).resources("secrets", "serviceaccounts"),
			verbs("create").groups(authenticationGroup).resources("tokenreviews"),
			verbs("create").groups(authorizationGroup).resources("subjectaccessreviews"),
			verbs("list", "watch").groups("*").resources("*"),
			verbs("create").groups(legacyGroup).resources("serviceaccounts/token"),
		),
		// Who may approve requests for client certificates of the API.
		clusterRole("system:certificates.k8s.io:kube-apiserver-client-approver", nil,
			verbs("approve").groups(certificatesGroup).resources("signers").names("kubernetes.io/kube-apiserver-client"),
		),
		// The service account issuer's discovery documents; trailing
		// slashes for clients generated from older OpenAPI documents.
		clusterRole("system:service-account-issuer-discovery", nil,
			verbs("get").urls("/.well-known/openid-configuration", "/.well-known/openid-configuration/",
				"/openid/v1/jwks", "/openid/v1/jwks/"),
		),
		// kube-proxy.
		clusterRole("system:node-proxier", nil,
			verbs("list", "watch").groups(legacyGroup).resources("services", "endpoints"),
			verbs("get", "list", "watch").groups(legacyGroup).resources("nodes"),
			eventsRule(),
			verbs("list", "watch").groups(networkingGroup).resources("servicecidrs"),
			verbs("list", "watch").groups(discoveryGroup).resources("endpointslices"),
		),
		clusterRole("system:kube-scheduler", nil,
			eventsRule(),
			// Leader election.
			verbs("create").groups(coordinationGroup).resources("leases"),
			verbs("get", "update", "list", "watch").groups(coordinationGroup).resources("leases").names("kube-scheduler"),
			verbs(readWriteVerbs...).groups(coordinationGroup).resources("leasecandidates"),
			verbs(readVerbs...).groups(legacyGroup).resources("nodes"),
			verbs("get", "list", "watch", "delete").groups(legacyGroup).resources("pods"),
			verbs("create").groups(legacyGroup).resources("pods/binding", "bindings"),
			verbs("patch", "update").groups(legacyGroup).resources("pods/status"),
			// What selects pods.
			verbs(readVerbs...).groups(legacyGroup).resources("services", "replicationcontrollers"),
			verbs(readVerbs...).groups(appsGroup, extensionsGroup).resources("replicasets"),
			verbs(readVerbs...).groups(appsGroup).resources("statefulsets"),
			// What pods use or what applies to them.
			verbs(readVerbs...).groups(policyGroup).resources("poddisruptionbudgets"),
			verbs(readVerbs...).groups(legacyGroup).resources("persistentvolumeclaims", "persistentvolumes"),
			verbs("create").groups(authenticationGroup).resources("tokenreviews"),
			verbs("create").groups(authorizationGroup).resources("subjectaccessreviews"),
			verbs(readVerbs...).groups(storageGroup).resources("csinodes"),
			verbs("get", "list", "watch").groups(storageGroup).resources("volumeattachments"),
			verbs(readVerbs...).groups(legacyGroup).resources("namespaces"),
			verbs(readVerbs...).groups(storageGroup).resources("csidrivers"),
			verbs(readVerbs...).groups(storageGroup).resources("csistoragecapacities"),
		),
	}
	roles = append(roles, controllerRoles()...)
	roles = append(roles, outpostControllerRoles()...)
	for i := range roles {
		addBootstrapMetadata(&roles[i].ObjectMeta)
	}
	return roles
}

// nodeRules are system:node's.
func nodeRules() []rule {
	return []rule{
		verbs("create").groups(authenticationGroup).resources("tokenreviews"),
		verbs("create").groups(authorizationGroup).resources("subjectaccessreviews", "localsubjectaccessreviews"),
		verbs(readVerbs...).groups(legacyGroup).resources("services"),
		verbs("create", "get", "list", "watch").groups(legacyGroup).resources("nodes"),
		verbs("update", "patch").groups(legacyGroup).resources("nodes/status"),
		verbs("update", "patch").groups(legacyGroup).resources("nodes"),
		verbs("create", "update", "patch").groups(legacyGroup).resources("events"),
		verbs(readVerbs...).groups(legacyGroup).resources("pods"),
		verbs("create", "delete").groups(legacyGroup).resources("pods"),
		verbs("update", "patch").groups(legacyGroup).resources("pods/status"),
		verbs("create").groups(legacyGroup).resources("pods/eviction"),
		verbs("get", "list", "watch").groups(legacyGroup).resources("secrets", "configmaps"),
		verbs("get").groups(legacyGroup).resources("persistentvolumeclaims", "persistentvolumes"),
		verbs("get").groups(legacyGroup).resources("endpoints"),
		verbs("create", "get", "list", "watch").groups(certificatesGroup).resources("certificatesigningrequests"),
		verbs("get", "create", "update", "patch", "delete").groups(coordinationGroup).resources("leases"),
		verbs("get").groups(storageGroup).resources("volumeattachments"),
		verbs("create").groups(legacyGroup).resources("serviceaccounts/token"),
		verbs("get", "update", "patch").groups(legacyGroup).resources("persistentvolumeclaims/status"),
		verbs("get", "watch", "list").groups(storageGroup).resources("csidrivers"),
		verbs("get", "create", "update", "patch", "delete").groups(storageGroup).resources("csinodes"),
		verbs("get", "list", "watch").groups(nodeGroup).resources("runtimeclasses"),
	}
}

// controllerRoles are the roles of the controllers the hub runs, named
// and with the rules upstream gives them.
func controllerRoles() []rbacv1.ClusterRole {
	c := func(name string, rs ...rule) rbacv1.ClusterRole {
		return clusterRole(ControllerRolePrefix+name, nil, rs...)
	}
	return []rbacv1.ClusterRole{
		c("certificate-controller",
			verbs("get", "list", "watch", "delete").groups(certificatesGroup).resources("certificatesigningrequests"),
			verbs("update").groups(certificatesGroup).resources("certificatesigningrequests/status", "certificatesigningrequests/approval"),
			verbs("approve").groups(certificatesGroup).resources("signers").names("kubernetes.io/kube-apiserver-client-kubelet"),
			verbs("sign").groups(certificatesGroup).resources("signers").names("kubernetes.io/legacy-unknown",
				"kubernetes.io/kube-apiserver-client", "kubernetes.io/kube-apiserver-client-kubelet", "kubernetes.io/kubelet-serving"),
			verbs("create").groups(authorizationGroup).resources("subjectaccessreviews"),
			eventsRule(),
		),
		c("clusterrole-aggregation-controller",
			// Full powers on clusterroles, to change them in any way.
			verbs("escalate", "get", "list", "watch", "update", "patch").groups(rbacGroup).resources("clusterroles"),
		),
		c("cronjob-controller",
			verbs("get", "list", "watch", "update").groups(batchGroup).resources("cronjobs"),
			verbs("get", "list", "watch", "create", "update", "delete", "patch").groups(batchGroup).resources("jobs"),
			verbs("update").groups(batchGroup).resources("cronjobs/status"),
			verbs("update").groups(batchGroup).resources("cronjobs/finalizers"),
			verbs("list", "watch", "delete").groups(legacyGroup).resources("pods"),
			eventsRule(),
		),
		c("daemon-set-controller",
			verbs("get", "list", "watch").groups(extensionsGroup, appsGroup).resources("daemonsets"),
			verbs("update").groups(extensionsGroup, appsGroup).resources("daemonsets/status"),
			verbs("update").groups(extensionsGroup, appsGroup).resources("daemonsets/finalizers"),
			verbs("list", "watch").groups(legacyGroup).resources("nodes"),
			verbs("list", "watch", "create", "delete", "patch").groups(legacyGroup).resources("pods"),
			verbs("create").groups(legacyGroup).resources("pods/binding"),
			verbs("get", "list", "watch", "create", "delete", "update", "patch").groups(appsGroup).resources("controllerrevisions"),
			eventsRule(),
		),
		c("deployment-controller",
			verbs("get", "list", "watch", "update").groups(extensionsGroup, appsGroup).resources("deployments"),
			verbs("update").groups(extensionsGroup, appsGroup).resources("deployments/status"),
			verbs("update").groups(extensionsGroup, appsGroup).resources("deployments/finalizers"),
			verbs("get", "list", "watch", "create", "update", "patch", "delete").groups(appsGroup, extensionsGroup).resources("replicasets"),
			verbs("get", "list", "watch", "update").groups(legacyGroup).resources("pods"),
			eventsRule(),
		),
		c("disruption-controller",
			verbs("get", "list", "watch").groups(extensionsGroup, appsGroup).resources("deployments"),
			verbs("get", "list", "watch").groups(appsGroup, extensionsGroup).resources("replicasets"),
			verbs("get", "list", "watch").groups(legacyGroup).resources("replicationcontrollers"),
			verbs("get", "list", "watch").groups(policyGroup).resources("poddisruptionbudgets"),
			verbs("get", "list", "watch").groups(appsGroup).resources("statefulsets"),
			verbs("update").groups(policyGroup).resources("poddisruptionbudgets/status"),
			verbs("patch", "update").groups(legacyGroup).resources("pods/status"),
			verbs("get").groups("*").resources("*/scale"),
			eventsRule(),
		),
		c("endpoint-controller",
			verbs("get", "list", "watch").groups(legacyGroup).resources("services", "pods"),
			verbs("get", "list", "watch", "create", "update", "delete").groups(legacyGroup).resources("endpoints"),
			verbs("create").groups(legacyGroup).resources("endpoints/restricted"),
			eventsRule(),
		),
		c("endpointslice-controller",
			verbs("get", "list", "watch").groups(legacyGroup).resources("services", "pods", "nodes"),
			// Owning a slice with blockOwnerDeletion sets the service's
			// finalizers.
			verbs("update").groups(legacyGroup).resources("services/finalizers"),
			verbs("get", "list", "watch", "create", "update", "delete").groups(discoveryGroup).resources("endpointslices"),
			eventsRule(),
		),
		c("generic-garbage-collector",
			// List, watch, get and update anything.
			verbs("get", "list", "watch", "patch", "update", "delete").groups("*").resources("*"),
			eventsRule(),
		),
		c("job-controller",
			verbs("get", "list", "watch", "update", "patch").groups(batchGroup).resources("jobs"),
			verbs("update").groups(batchGroup).resources("jobs/status"),
			verbs("update").groups(batchGroup).resources("jobs/finalizers"),
			verbs("list", "watch", "create", "delete", "patch").groups(legacyGroup).resources("pods"),
			eventsRule(),
		),
		c("namespace-controller",
			verbs("get", "list", "watch", "delete").groups(legacyGroup).resources("namespaces"),
			verbs("update").groups(legacyGroup).resources("namespaces/finalize", "namespaces/status"),
			verbs("get", "list", "watch", "delete", "deletecollection").groups("*").resources("*"),
		),
		// Node lifecycle; upstream's node IPAM controller runs under this
		// identity too.
		c("node-controller",
			verbs("get", "list", "watch", "update", "delete", "patch").groups(legacyGroup).resources("nodes"),
			verbs("patch", "update").groups(legacyGroup).resources("nodes/status"),
			verbs("patch", "update").groups(legacyGroup).resources("pods/status"),
			verbs("list", "watch", "get", "delete").groups(legacyGroup).resources("pods"),
			verbs("get", "list", "watch").groups(coordinationGroup).resources("leases"),
			eventsRule(),
		),
		c("pod-garbage-collector",
			verbs("list", "watch", "delete").groups(legacyGroup).resources("pods"),
			verbs("get", "list", "watch").groups(legacyGroup).resources("nodes"),
			verbs("patch").groups(legacyGroup).resources("pods/status"),
		),
		c("replicaset-controller",
			verbs("get", "list", "watch", "update").groups(appsGroup, extensionsGroup).resources("replicasets"),
			verbs("update").groups(appsGroup, extensionsGroup).resources("replicasets/status"),
			verbs("update").groups(appsGroup, extensionsGroup).resources("replicasets/finalizers"),
			verbs("list", "watch", "patch", "create", "delete").groups(legacyGroup).resources("pods"),
			eventsRule(),
		),
		c("resourcequota-controller",
			// It counts quota on anything, so it views everything.
			verbs("list", "watch").groups("*").resources("*"),
			verbs("update").groups(legacyGroup).resources("resourcequotas/status"),
			eventsRule(),
		),
		c("replication-controller",
			verbs("get", "list", "watch", "update").groups(legacyGroup).resources("replicationcontrollers"),
			verbs("update").groups(legacyGroup).resources("replicationcontrollers/status"),
			verbs("update").groups(legacyGroup).resources("replicationcontrollers/finalizers"),
			verbs("list", "watch", "patch", "create", "delete").groups(legacyGroup).resources("pods"),
			eventsRule(),
		),
		c("root-ca-cert-publisher",
			verbs("create", "update").groups(legacyGroup).resources("configmaps"),
			eventsRule(),
		),
		c("service-account-controller",
			verbs("create").groups(legacyGroup).resources("serviceaccounts"),
			eventsRule(),
		),
		c("statefulset-controller",
			verbs("list", "watch").groups(legacyGroup).resources("pods"),
			verbs("get", "list", "watch").groups(appsGroup).resources("statefulsets"),
			verbs("update").groups(appsGroup).resources("statefulsets/status"),
			verbs("update").groups(appsGroup).resources("statefulsets/finalizers"),
			verbs("get", "create", "delete", "update", "patch").groups(legacyGroup).resources("pods"),
			verbs("get", "create", "delete", "update", "patch", "list", "watch").groups(appsGroup).resources("controllerrevisions"),
			verbs("get", "create", "list", "watch").groups(legacyGroup).resources("persistentvolumeclaims"),
			verbs("update", "delete").groups(legacyGroup).resources("persistentvolumeclaims"),
			verbs("update").groups(legacyGroup).resources("pods/finalizers"),
			eventsRule(),
		),
		c("storage-version-migrator-controller",
			verbs("list", "patch").groups("*").resources("*"),
			verbs("get").groups(apiextensionsGroup).resources("customresourcedefinitions"),
			verbs("patch").groups(apiextensionsGroup).resources("customresourcedefinitions/status"),
			verbs("update").groups(storageMigrationGroup).resources("storageversionmigrations/status"),
		),
		c("ttl-after-finished-controller",
			verbs("get", "list", "watch", "delete").groups(batchGroup).resources("jobs"),
			eventsRule(),
		),
	}
}

// outpostControllerRoles are what the hub's controllers do beyond their
// upstream roles, each bound to the controller's service account like
// those: the hub's serviceaccount controller also publishes
// kube-root-ca.crt (upstream's root-ca-cert-publisher) from informers of
// its own, filtered by name; its deployment controller patches
// a Deployment's revision annotation; and the
// CustomResourceDefinition controller, which upstream runs inside
// kube-apiserver, names and establishes definitions and deletes the
// objects of those deleted; the firmware rollout controller offers
// releases to Nodes and writes its Rollouts' status; the firmware release
// controller writes whether Releases verify against the trusted keys.
func outpostControllerRoles() []rbacv1.ClusterRole {
	c := func(name string, rs ...rule) rbacv1.ClusterRole {
		return clusterRole(OutpostControllerRolePrefix+name, nil, rs...)
	}
	return []rbacv1.ClusterRole{
		c("service-account-controller",
			verbs("list", "watch").groups(legacyGroup).resources("serviceaccounts"),
			verbs("get", "list", "watch", "create", "update").groups(legacyGroup).resources("configmaps"),
		),
		c("deployment-controller",
			verbs("patch").groups(appsGroup).resources("deployments"),
		),
		c("firmware-rollout-controller",
			verbs("get", "list", "watch", "patch").groups(firmwareGroup).resources("rollouts"),
			verbs("update").groups(firmwareGroup).resources("rollouts/status"),
			verbs("get", "list", "watch").groups(firmwareGroup).resources("releases"),
			verbs("get", "list", "watch", "patch").groups(legacyGroup).resources("nodes"),
			eventsRule(),
		),
		c("firmware-release-controller",
			verbs("get", "list", "watch").groups(firmwareGroup).resources("releases"),
			verbs("update").groups(firmwareGroup).resources("releases/status"),
			verbs("get", "list", "watch").groups(legacyGroup).resources("configmaps"),
		),
		c("crd-controller",
			verbs("get", "list", "watch", "update").groups(apiextensionsGroup).resources("customresourcedefinitions"),
			verbs("update").groups(apiextensionsGroup).resources("customresourcedefinitions/status"),
			verbs("get", "list", "watch", "delete", "deletecollection").groups("*").resources("*"),
			eventsRule(),
		),
	}
}

// ClusterRoleBindings returns the bootstrap ClusterRoleBindings, each
// labeled and annotated as ClusterRoles. system:node is bound to no one,
// as upstream keeps it since nodes have the Node authorizer. The caller
// owns the result.
func ClusterRoleBindings() []rbacv1.ClusterRoleBinding {
	bindings := []rbacv1.ClusterRoleBinding{
		binding("cluster-admin", groups(auth.MastersGroup)),
		binding("system:monitoring", groups(MonitoringGroup)),
		binding("system:discovery", groups(auth.AuthenticatedGroup)),
		binding("system:basic-user", groups(auth.AuthenticatedGroup)),
		binding("system:public-info-viewer", groups(auth.AuthenticatedGroup, auth.UnauthenticatedGroup)),
		binding("system:node-proxier", users(KubeProxyUser)),
		binding("system:kube-controller-manager", users(auth.ControllerManagerUser)),
		binding("system:kube-scheduler", users(auth.SchedulerUser)),
		binding("system:node", nil),
		// Every workload may read the issuer's discovery documents; the
		// issuer is in its own token anyway.
		binding("system:service-account-issuer-discovery", groups(auth.ServiceAccountsGroup)),
	}
	for _, r := range controllerRoles() {
		sa := r.Name[len(ControllerRolePrefix):]
		bindings = append(bindings, binding(r.Name, []rbacv1.Subject{
			{Kind: rbacv1.ServiceAccountKind, Namespace: "kube-system", Name: sa},
		}))
	}
	for _, r := range outpostControllerRoles() {
		sa := r.Name[len(OutpostControllerRolePrefix):]
		bindings = append(bindings, binding(r.Name, []rbacv1.Subject{
			{Kind: rbacv1.ServiceAccountKind, Namespace: "kube-system", Name: sa},
		}))
	}
	for i := range bindings {
		addBootstrapMetadata(&bindings[i].ObjectMeta)
	}
	return bindings
}

func binding(role string, subjects []rbacv1.Subject) rbacv1.ClusterRoleBinding {
	return rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   subjects,
	}
}

func groups(names ...string) []rbacv1.Subject {
	out := make([]rbacv1.Subject, len(names))
	for i, n := range names {
		out[i] = rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: n}
	}
	return out
}

func users(names ...string) []rbacv1.Subject {
	out := make([]rbacv1.Subject, len(names))
	for i, n := range names {
		out[i] = rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: n}
	}
	return out
}

func addBootstrapMetadata(m *metav1.ObjectMeta) {
	if m.Labels == nil {
		m.Labels = map[string]string{}
	}
	m.Labels[BootstrapLabel] = BootstrapLabelValue
	if m.Annotations == nil {
		m.Annotations = map[string]string{}
	}
	m.Annotations[rbacv1.AutoUpdateAnnotationKey] = "true"
}

// AuthenticationReaderRole is the kube-system Role that lets extension
// API servers read the ConfigMap in which the hub publishes whom to
// trust (extension-apiserver-authentication).
const AuthenticationReaderRole = "extension-apiserver-authentication-reader"

// Roles returns the bootstrap Roles, upstream's namespace_policy.go ones
// the hub has a use for, labeled and annotated as ClusterRoles. The
// caller owns the result.
func Roles() []rbacv1.Role {
	roles := []rbacv1.Role{{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: AuthenticationReaderRole},
		Rules: rules(verbs("get", "list", "watch").groups("").resources("configmaps").
			names("extension-apiserver-authentication")),
	}}
	for i := range roles {
		addBootstrapMetadata(&roles[i].ObjectMeta)
	}
	return roles
}

// RoleBindings returns the bootstrap RoleBindings of Roles, as upstream's:
// the controller manager and scheduler read the authentication ConfigMap.
// The caller owns the result.
func RoleBindings() []rbacv1.RoleBinding {
	bindings := []rbacv1.RoleBinding{{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "system::" + AuthenticationReaderRole},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: AuthenticationReaderRole},
		Subjects:   users(auth.ControllerManagerUser, auth.SchedulerUser),
	}}
	for i := range bindings {
		addBootstrapMetadata(&bindings[i].ObjectMeta)
	}
	return bindings
}
