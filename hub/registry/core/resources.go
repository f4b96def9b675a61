// Package core holds the rules of the core/v1 resources the hub serves
// (pods, services, namespaces, nodes, ...): their defaults, validation,
// field selectors and printer columns, as upstream Kubernetes defines them.
// The hub's composition root registers its Resources with hub/apiserver;
// the workload registries use its pod template rules. It does no I/O and
// keeps no state.
package core

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/registry/typed"
)

// Resources returns the core/v1 resources with their rules, in the order
// `kubectl api-resources` lists them. Ages in table rows are computed with
// the wall clock. The caller owns the returned slice.
func Resources(opts ...Option) []apiserver.Resource {
	o := options{services: DefaultServiceConfig()}
	for _, opt := range opts {
		opt(&o)
	}
	return resources(time.Now, o)
}

// Option adjusts the rules Resources returns.
type Option func(*options)

type options struct {
	services ServiceConfig
}

// WithServices sets the ranges services' cluster IPs and node ports are
// allocated from (default DefaultServiceConfig()); cfg must be valid
// (ServiceConfig.Validate).
func WithServices(cfg ServiceConfig) Option {
	return func(o *options) { o.services = cfg }
}

// resources is Resources with the clock that table rows use for ages.
func resources(now func() time.Time, o options) []apiserver.Resource {
	return []apiserver.Resource{
		configMapResource(now),
		endpointsResource(now),
		eventResource(now),
		limitRangeResource(now),
		namespaceResource(now),
		nodeResource(now),
		persistentVolumeClaimResource(now),
		persistentVolumeResource(now),
		podResource(now),
		podTemplateResource(now),
		replicationControllerResource(now),
		resourceQuotaResource(now),
		secretResource(now),
		serviceAccountResource(now),
		serviceResource(now, o.services),
	}
}

// The columns most resources share, as typed words them.
var (
	objectMetaDoc = metav1.ObjectMeta{}.SwaggerDoc()
	nameColumn    = typed.NameColumn
	ageColumn     = typed.AgeColumn
)

// age is the Age cell: how long before now t was, as kubectl shows it.
func age(t metav1.Time, now time.Time) string { return typed.Age(now, t) }

// microAge is age for a MicroTime.
func microAge(t metav1.MicroTime, now time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(t.Time))
}

func ptrTo[T any](v T) *T { return &v }
