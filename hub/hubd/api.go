package hubd

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"

	admissionpolicy "github.com/outpost-mesh/outpost/hub/admission/policy"
	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/auth/review"
	"github.com/outpost-mesh/outpost/hub/registry/admissionregistration"
	"github.com/outpost-mesh/outpost/hub/registry/apiextensions"
	"github.com/outpost-mesh/outpost/hub/registry/apiregistration"
	"github.com/outpost-mesh/outpost/hub/registry/apps"
	"github.com/outpost-mesh/outpost/hub/registry/autoscaling"
	"github.com/outpost-mesh/outpost/hub/registry/batch"
	"github.com/outpost-mesh/outpost/hub/registry/certificates"
	"github.com/outpost-mesh/outpost/hub/registry/coordination"
	"github.com/outpost-mesh/outpost/hub/registry/core"
	"github.com/outpost-mesh/outpost/hub/registry/discovery"
	"github.com/outpost-mesh/outpost/hub/registry/events"
	"github.com/outpost-mesh/outpost/hub/registry/flowcontrol"
	"github.com/outpost-mesh/outpost/hub/registry/networking"
	"github.com/outpost-mesh/outpost/hub/registry/node"
	"github.com/outpost-mesh/outpost/hub/registry/policy"
	"github.com/outpost-mesh/outpost/hub/registry/rbac"
	"github.com/outpost-mesh/outpost/hub/registry/scheduling"
	"github.com/outpost-mesh/outpost/hub/registry/storage"
	"github.com/outpost-mesh/outpost/hub/registry/storagemigration"
	"github.com/outpost-mesh/outpost/hub/store"
	"github.com/outpost-mesh/outpost/hub/usage"
)

// defaultNamespaces exist from the first start, as on any cluster.
var defaultNamespaces = []string{"default", "kube-system", "kube-public", "kube-node-lease"}

// resources returns every resource the hub serves: with nodeUsage, the
// metrics.k8s.io resources too, served from it with the labels of st.
func resources(svc core.ServiceConfig, st store.Reader, nodeUsage *usage.Store) []apiserver.Resource {
	var rs []apiserver.Resource
	for _, group := range [][]apiserver.Resource{
		core.Resources(core.WithServices(svc)), apps.Resources(), batch.Resources(),
		coordination.Resources(), discovery.Resources(), events.Resources(),
		policy.Resources(), rbac.Resources(),
		networking.Resources(), scheduling.Resources(), node.Resources(),
		storage.Resources(), flowcontrol.Resources(), storagemigration.Resources(),
		autoscaling.Resources(), certificates.Resources(), apiextensions.Resources(),
		admissionregistration.Resources(admissionregistration.WithPolicyCheck(admissionpolicy.CheckPolicy)),
		apiregistration.Resources(),
	} {
		rs = append(rs, group...)
	}
	if nodeUsage != nil {
		rs = append(rs, usage.Resources(nodeUsage, storeLabels{st})...)
	}
	return rs
}

// newAPI builds the Kubernetes API server and its OpenAPI documents over
// st, with the admission chains and the review resources of hooks (with
// hooks nil, NodeRestriction alone and no reviews); pods serves the pods'
// streaming subresources, and nodeUsage, if not nil, metrics.k8s.io.
func newAPI(st store.Store, svc core.ServiceConfig, tokens apiserver.TokenIssuer, pods apiserver.PodStreams, nodeUsage *usage.Store, hooks *policyHooks, log *slog.Logger) (*apiserver.Server, *openapiDocs, error) {
	mutating, validating := hooks.chains()
	rs := resources(svc, st, nodeUsage)
	if hooks != nil {
		rs = append(rs, review.Resources(hooks.reviews, hooks.reviews, hooks.reviews.tokens)...)
	}
	cfg := apiserver.Config{Store: st, Resources: rs, Logger: log, Admission: validating, Tokens: tokens, PodStreams: pods}
	if len(mutating) > 0 {
		cfg.Mutation = mutating
	}
	api, err := apiserver.New(cfg)
	if err != nil {
		return nil, nil, err
	}
	spec, err := newOpenAPIDocs(api.OpenAPIKinds())
	if err != nil {
		return nil, nil, fmt.Errorf("build openapi: %w", err)
	}
	return api, spec, nil
}

// ensureNamespaces creates the default namespaces that are missing.
func ensureNamespaces(ctx context.Context, api *apiserver.Server) error {
	var objs []runtime.Object
	for _, ns := range defaultNamespaces {
		objs = append(objs, &corev1.Namespace{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
			ObjectMeta: metav1.ObjectMeta{Name: ns},
		})
	}
	return api.Ensure(ctx, objs...)
}

// ensureSystemPriorityClasses creates the system priority classes that
// are missing, as upstream's apiserver does at start: charts and
// manifests for cluster add-ons name them in their pods.
func ensureSystemPriorityClasses(ctx context.Context, api *apiserver.Server) error {
	var objs []runtime.Object
	for _, pc := range scheduling.SystemPriorityClasses() {
		objs = append(objs, pc)
	}
	return api.Ensure(ctx, objs...)
}

// ensureFlowControlDefaults creates upstream's mandatory and suggested
// flow schemas and priority levels that are missing, as upstream's
// apiserver does at start; an existing one is left as it is. The hub
// serves them but enforces no priority and fairness.
func ensureFlowControlDefaults(ctx context.Context, api *apiserver.Server) error {
	return api.Ensure(ctx, flowcontrol.BootstrapObjects()...)
}

// ensureKubernetesService creates the `kubernetes` service in default
// that points in-cluster clients at the API, as every cluster has, with the
// first cluster IP, kip.
func ensureKubernetesService(ctx context.Context, api *apiserver.Server, kip netip.Addr, apiPort int32) error {
	ip := kip.String()
	return api.Ensure(ctx, &corev1.Service{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: "kubernetes", Namespace: "default",
			Labels: map[string]string{"component": "apiserver", "provider": "kubernetes"}},
		Spec: corev1.ServiceSpec{
			ClusterIP: ip, ClusterIPs: []string{ip},
			Ports: []corev1.ServicePort{{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(apiPort)}},
		},
	})
}

// DNSService names the cluster DNS Service, in kube-system: its cluster
// IP is what pods' resolv.conf names, and every node routes it to the DNS
// server the node runs itself, so names resolve while the hub is away.
// It has no selector, so no endpoints: the nodes are its servers.
const DNSService = "kube-dns"

// ensureDNSService creates kube-system's kube-dns Service with cluster IP
// ip (see core.ServiceConfig.DNSIP), ports 53 over UDP and TCP, as
// upstream clusters name it. An existing one is left as it is.
func ensureDNSService(ctx context.Context, api *apiserver.Server, ip netip.Addr) error {
	s := ip.String()
	return api.Ensure(ctx, &corev1.Service{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: DNSService, Namespace: "kube-system",
			Labels: map[string]string{"k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS", "kubernetes.io/cluster-service": "true"}},
		Spec: corev1.ServiceSpec{
			ClusterIP: s, ClusterIPs: []string{s},
			Ports: []corev1.ServicePort{
				{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(53)},
				{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(53)},
			},
		},
	})
}

// compactInterval is how often the hub drops old store history, as
// kube-apiserver does every five minutes: each round compacts to the
// revision current at the previous round, so clients always have at least
// one interval to resume a watch.
const compactInterval = 5 * time.Minute

// compactLoop compacts st until ctx ends.
func compactLoop(ctx context.Context, st store.Store, every time.Duration, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	var prev int64
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cur, err := st.Revision(ctx)
		if err != nil {
			continue
		}
		if prev > 0 {
			if err := st.Compact(ctx, prev); err != nil && ctx.Err() == nil {
				log.Warn("store compaction failed", "revision", prev, "err", err)
			} else {
				log.Debug("store compacted", "revision", prev)
			}
		}
		prev = cur
	}
}
