// Package coordination holds the hub's rules for the coordination.k8s.io/v1
// resource leases: their validation and printer columns, as upstream
// Kubernetes defines them. Nodes' heartbeats and the hub's leader election
// are leases.
package coordination

import (
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/validate/content"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/registry/typed"
)

// Resources returns the coordination.k8s.io/v1 resources, with ages in
// printed tables measured against the wall clock.
func Resources() []apiserver.Resource { return ResourcesWithClock(nil) }

// ResourcesWithClock is Resources with ages measured against now, or the
// wall clock if now is nil.
func ResourcesWithClock(now func() time.Time) []apiserver.Resource {
	return []apiserver.Resource{{
		GroupVersion: coordinationv1.SchemeGroupVersion,
		Kind:         "Lease",
		Plural:       "leases",
		Singular:     "lease",
		Namespaced:   true,
		New:          func() runtime.Object { return &coordinationv1.Lease{} },
		NewList:      func() runtime.Object { return &coordinationv1.LeaseList{} },
		AddToScheme:  coordinationv1.AddToScheme,
		Rules:        leaseRules(now),
	}}
}

// leaseRules are the rules of leases, with ages measured against now (nil
// is the wall clock). A lease has no defaults, nothing to clear and no
// field selectors beyond metadata's. It may be created with a PUT, as
// upstream allows and leader election clients rely on.
func leaseRules(now func() time.Time) *typed.Rules[*coordinationv1.Lease] {
	return &typed.Rules[*coordinationv1.Lease]{
		Now:            now,
		Check:          validateLease,
		CheckUpdate:    validateLeaseUpdate,
		CreateOnUpdate: true,
		TableColumns:   leaseColumns(),
		TableRow:       leaseRow,
	}
}

var (
	metadataPath = field.NewPath("metadata")
	specPath     = field.NewPath("spec")
)

func validateLease(l *coordinationv1.Lease) field.ErrorList {
	errs := apivalidation.ValidateObjectMeta(&l.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, metadataPath)
	return append(errs, validateLeaseSpec(&l.Spec, specPath)...)
}

func validateLeaseUpdate(l, old *coordinationv1.Lease) field.ErrorList {
	errs := apivalidation.ValidateObjectMetaUpdate(&l.ObjectMeta, &old.ObjectMeta, metadataPath)
	return append(errs, validateLeaseSpec(&l.Spec, specPath)...)
}

func validateLeaseSpec(s *coordinationv1.LeaseSpec, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	if d := s.LeaseDurationSeconds; d != nil && *d <= 0 {
		errs = append(errs, field.Invalid(fld.Child("leaseDurationSeconds"), *d, "must be greater than 0"))
	}
	if n := s.LeaseTransitions; n != nil && *n < 0 {
		errs = append(errs, field.Invalid(fld.Child("leaseTransitions"), *n, "must be greater than or equal to 0"))
	}
	if s.Strategy != nil {
		errs = append(errs, validateStrategy(*s.Strategy, fld.Child("strategy"))...)
	}
	if h := s.PreferredHolder; h != nil && *h != "" && (s.Strategy == nil || *s.Strategy == "") {
		errs = append(errs, field.Forbidden(fld.Child("preferredHolder"), "may only be specified if `strategy` is defined"))
	}
	return errs
}

// validateStrategy checks a coordinated leader election strategy: one
// Kubernetes defines, or a custom one prefixed by its owner's domain.
func validateStrategy(s coordinationv1.CoordinatedLeaseStrategy, fld *field.Path) field.ErrorList {
	if !strings.Contains(string(s), "/") {
		if s != coordinationv1.OldestEmulationVersion {
			return field.ErrorList{field.NotSupported(fld, s, []coordinationv1.CoordinatedLeaseStrategy{coordinationv1.OldestEmulationVersion})}
		}
		return nil
	}
	var errs field.ErrorList
	for _, msg := range content.IsLabelKey(string(s)) {
		errs = append(errs, field.Invalid(fld, s, msg))
	}
	return errs
}

func leaseColumns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{
		{Name: "Name", Type: "string", Format: "name", Description: metav1.ObjectMeta{}.SwaggerDoc()["name"]},
		{Name: "Holder", Type: "string", Description: coordinationv1.LeaseSpec{}.SwaggerDoc()["holderIdentity"]},
		{Name: "Age", Type: "string", Description: metav1.ObjectMeta{}.SwaggerDoc()["creationTimestamp"]},
	}
}

func leaseRow(l *coordinationv1.Lease, now time.Time) []interface{} {
	var holder string
	if l.Spec.HolderIdentity != nil {
		holder = *l.Spec.HolderIdentity
	}
	age := "<unknown>"
	if !l.CreationTimestamp.IsZero() {
		age = duration.HumanDuration(now.Sub(l.CreationTimestamp.Time))
	}
	return []interface{}{l.Name, holder, age}
}
