// Package core holds the rules of the core/v1 resources the hub serves
// (pods, services, namespaces, nodes, ...): their defaults, validation,
// field selectors and printer columns, as upstream Kubernetes defines them.
// The hub's composition root registers its Resources with hub/apiserver;
// the workload registries use its pod template rules. It does no I/O and
// keeps no state.
package core

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/outpost-mesh/outpost/hub/apiserver"
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
		podResource(now),
		resourceQuotaResource(now),
		secretResource(now),
		serviceAccountResource(now),
		serviceResource(now, o.services),
	}
}

// rules adapts the functions one resource defines against its Go type T
// to apiserver.Rules. A nil function means the resource adds nothing at
// that step. An object of another type than T is a programming error of
// the caller: it is left alone, and Validate reports it as an internal
// error rather than panicking.
type rules[T runtime.Object] struct {
	now            func() time.Time // clock for the Age cells
	defaults       func(T)
	prepareCreate  func(T)
	prepareUpdate  func(obj, old T)
	validate       func(T) field.ErrorList
	validateUpdate func(obj, old T) field.ErrorList
	createOnUpdate bool
	fields         func(T) fields.Set
	columns        []metav1.TableColumnDefinition
	row            func(obj T, now time.Time) []interface{}
}

var _ apiserver.Rules = (*rules[*corev1.Pod])(nil)

func (r *rules[T]) Default(obj runtime.Object) {
	if o, ok := obj.(T); ok && r.defaults != nil {
		r.defaults(o)
	}
}

func (r *rules[T]) PrepareForCreate(obj runtime.Object) {
	if o, ok := obj.(T); ok && r.prepareCreate != nil {
		r.prepareCreate(o)
	}
}

func (r *rules[T]) PrepareForUpdate(obj, old runtime.Object) {
	o, ok1 := obj.(T)
	p, ok2 := old.(T)
	if ok1 && ok2 && r.prepareUpdate != nil {
		r.prepareUpdate(o, p)
	}
}

func (r *rules[T]) Validate(obj runtime.Object) field.ErrorList {
	o, ok := obj.(T)
	if !ok {
		return wrongType[T](obj)
	}
	return r.validate(o)
}

func (r *rules[T]) ValidateUpdate(obj, old runtime.Object) field.ErrorList {
	o, ok := obj.(T)
	if !ok {
		return wrongType[T](obj)
	}
	p, ok := old.(T)
	if !ok {
		return wrongType[T](old)
	}
	return r.validateUpdate(o, p)
}

func (r *rules[T]) AllowCreateOnUpdate() bool { return r.createOnUpdate }

// Fields never returns nil, so that the machinery may add the metadata
// fields to the set it gets.
func (r *rules[T]) Fields(obj runtime.Object) fields.Set {
	o, ok := obj.(T)
	if !ok || r.fields == nil {
		return fields.Set{}
	}
	return r.fields(o)
}

// Columns returns a copy of the column definitions; the caller owns it.
func (r *rules[T]) Columns() []metav1.TableColumnDefinition {
	return append([]metav1.TableColumnDefinition(nil), r.columns...)
}

func (r *rules[T]) Row(obj runtime.Object) []interface{} {
	o, ok := obj.(T)
	if !ok {
		return make([]interface{}, len(r.columns))
	}
	return r.row(o, r.now())
}

// statusRules are rules of a resource whose status subresource validates
// what it is given.
type statusRules[T runtime.Object] struct {
	*rules[T]
	validateStatus func(obj, old T) field.ErrorList
}

var _ apiserver.StatusValidator = statusRules[*corev1.Pod]{}

func (r statusRules[T]) ValidateStatusUpdate(obj, old runtime.Object) field.ErrorList {
	o, ok := obj.(T)
	if !ok {
		return wrongType[T](obj)
	}
	p, ok := old.(T)
	if !ok {
		return wrongType[T](old)
	}
	return r.validateStatus(o, p)
}

func wrongType[T runtime.Object](obj runtime.Object) field.ErrorList {
	var want T
	return field.ErrorList{field.InternalError(nil, fmt.Errorf("rules for %T given %T", want, obj))}
}

// Column descriptions shared by most resources, as upstream's printers
// take them from the API documentation.
var (
	objectMetaDoc = metav1.ObjectMeta{}.SwaggerDoc()
	nameColumn    = metav1.TableColumnDefinition{Name: "Name", Type: "string", Format: "name", Description: objectMetaDoc["name"]}
	ageColumn     = metav1.TableColumnDefinition{Name: "Age", Type: "string", Description: objectMetaDoc["creationTimestamp"]}
)

// age is the Age cell: how long before now t was, as kubectl shows it.
func age(t metav1.Time, now time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(t.Time))
}

// microAge is age for a MicroTime.
func microAge(t metav1.MicroTime, now time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(t.Time))
}

func ptrTo[T any](v T) *T { return &v }
