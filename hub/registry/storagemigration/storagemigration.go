// Package storagemigration holds the hub's rules for the
// storagemigration.k8s.io/v1 resource storageversionmigrations: their
// validation, status subresource and printer columns, as upstream
// Kubernetes defines them. A migration asks that every object of a
// resource be rewritten in the storage version the hub now writes, which
// matters for custom resources, whose CustomResourceDefinition may switch
// its storage version; the hub's migrator is the controller in
// hub/controllers/storageversionmigrator.
package storagemigration

import (
	"strings"
	"time"

	svmv1 "k8s.io/api/storagemigration/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/registry/typed"
)

// Resources returns the storagemigration.k8s.io/v1 resources, with ages
// in printed tables measured against the wall clock.
func Resources() []apiserver.Resource { return ResourcesWithClock(nil) }

// ResourcesWithClock is Resources with ages measured against now, or the
// wall clock if now is nil.
func ResourcesWithClock(now func() time.Time) []apiserver.Resource {
	return []apiserver.Resource{{
		GroupVersion: svmv1.SchemeGroupVersion,
		Kind:         "StorageVersionMigration",
		Plural:       "storageversionmigrations",
		Singular:     "storageversionmigration",
		New:          func() runtime.Object { return &svmv1.StorageVersionMigration{} },
		NewList:      func() runtime.Object { return &svmv1.StorageVersionMigrationList{} },
		AddToScheme:  svmv1.AddToScheme,
		Status:       true,
		// Upstream's status strategy resets the metadata.
		StatusKeepsMetadata: true,
		Rules: &typed.Rules[*svmv1.StorageVersionMigration]{
			Now:           now,
			PrepareCreate: func(m *svmv1.StorageVersionMigration) { m.Status = svmv1.StorageVersionMigrationStatus{} },
			PrepareUpdate: func(m, old *svmv1.StorageVersionMigration) { m.Status = old.Status },
			Check:         validateMigration,
			CheckUpdate:   validateMigrationUpdate,
			CheckStatus:   validateMigrationStatus,
			TableColumns: []metav1.TableColumnDefinition{
				typed.NameColumn,
				{Name: "Resource", Type: "string", Description: "Fully qualified resource to migrate"},
			},
			TableRow: func(m *svmv1.StorageVersionMigration, _ time.Time) []interface{} {
				gr := schema.GroupResource{Group: m.Spec.Resource.Group, Resource: m.Spec.Resource.Resource}
				return []interface{}{m.Name, gr.String()}
			},
		},
	}}
}

var (
	metadataPath = field.NewPath("metadata")
	specPath     = field.NewPath("spec")
	statusPath   = field.NewPath("status")
)

// validateMigration checks a migration: a resource named as an
// APIService names one, a DNS-1035 label in a DNS subdomain group.
func validateMigration(m *svmv1.StorageVersionMigration) field.ErrorList {
	errs := apivalidation.ValidateObjectMeta(&m.ObjectMeta, false, apivalidation.NameIsDNSSubdomain, metadataPath)
	p := specPath.Child("resource")
	if r := m.Spec.Resource.Resource; r == "" {
		errs = append(errs, field.Required(p.Child("resource"), "resource is required to be set"))
	} else if msgs := validation.IsDNS1035Label(r); len(msgs) > 0 {
		errs = append(errs, field.Invalid(p.Child("resource"), r, strings.Join(msgs, ",")))
	}
	if g := m.Spec.Resource.Group; g != "" {
		if msgs := validation.IsDNS1123Subdomain(g); len(msgs) > 0 {
			errs = append(errs, field.Invalid(p.Child("group"), g, strings.Join(msgs, ",")))
		}
	}
	return errs
}

// validateMigrationUpdate checks an update: the spec is immutable.
func validateMigrationUpdate(m, old *svmv1.StorageVersionMigration) field.ErrorList {
	errs := validateMigration(m)
	errs = append(errs, apivalidation.ValidateObjectMetaUpdate(&m.ObjectMeta, &old.ObjectMeta, metadataPath)...)
	return append(errs, apivalidation.ValidateImmutableField(m.Spec, old.Spec, specPath)...)
}

// validateMigrationStatus checks a status update as upstream: a
// resourceVersion that is well formed when set (a status without one, such
// as a first condition, is fine) and, once set, stays; valid conditions;
// Succeeded and Failed exclusive, and neither taken back once true.
// Running may stay true beside either, as upstream's migrator leaves it.
func validateMigrationStatus(m, old *svmv1.StorageVersionMigration) field.ErrorList {
	errs := apivalidation.ValidateObjectMetaUpdate(&m.ObjectMeta, &old.ObjectMeta, metadataPath)
	s := &m.Status
	rvPath := statusPath.Child("resourceVersion")
	if s.ResourceVersion != "" {
		if _, err := resourceversion.CompareResourceVersion(s.ResourceVersion, s.ResourceVersion); err != nil {
			errs = append(errs, field.Invalid(rvPath, s.ResourceVersion, err.Error()))
		}
	}
	if old.Status.ResourceVersion != "" && old.Status.ResourceVersion != s.ResourceVersion {
		errs = append(errs, field.Invalid(rvPath, s.ResourceVersion, "field is immutable"))
	}
	condPath := statusPath.Child("conditions")
	errs = append(errs, metav1validation.ValidateConditions(s.Conditions, condPath)...)
	succeeded, failed := isTrue(m, svmv1.MigrationSucceeded), isTrue(m, svmv1.MigrationFailed)
	invalid := func(msg string) { errs = append(errs, field.Invalid(condPath, s.Conditions, msg)) }
	if succeeded && failed {
		invalid("Both success and failed conditions cannot be true at the same time")
	}
	if isTrue(old, svmv1.MigrationSucceeded) && !succeeded {
		invalid("Success condition cannot be set to false once it is true")
	}
	if isTrue(old, svmv1.MigrationFailed) && !failed {
		invalid("Failed condition cannot be set to false once it is true")
	}
	return errs
}

// isTrue reports whether m has condition t with status True.
func isTrue(m *svmv1.StorageVersionMigration, t svmv1.MigrationConditionType) bool {
	return meta.IsStatusConditionTrue(m.Status.Conditions, string(t))
}
