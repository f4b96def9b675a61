package apps

import (
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/outpost-mesh/outpost/hub/registry/typed"
)

// controllerRevisionRules returns the rules of apps/v1
// controllerrevisions, immutable snapshots of a workload's template that
// the daemonset and statefulset controllers keep, with ages measured
// against now (nil is the wall clock). They have no defaults, nothing to
// prepare and no status to check.
func controllerRevisionRules(now func() time.Time) *typed.Rules[*appsv1.ControllerRevision] {
	return &typed.Rules[*appsv1.ControllerRevision]{
		Now:          now,
		Check:        validateControllerRevision,
		CheckUpdate:  validateControllerRevisionUpdate,
		TableColumns: controllerRevisionColumns(),
		TableRow:     controllerRevisionRow,
	}
}

func validateControllerRevision(cr *appsv1.ControllerRevision) field.ErrorList {
	errs := apivalidation.ValidateObjectMeta(&cr.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, metadataPath)
	return append(errs, validateRevisionData(cr)...)
}

func validateRevisionData(cr *appsv1.ControllerRevision) field.ErrorList {
	var errs field.ErrorList
	if cr.Data.Raw == nil && cr.Data.Object == nil {
		errs = append(errs, field.Required(field.NewPath("data"), "data is mandatory"))
	}
	return append(errs, apivalidation.ValidateNonnegativeField(cr.Revision, field.NewPath("revision"))...)
}

func validateControllerRevisionUpdate(cr, o *appsv1.ControllerRevision) field.ErrorList {
	errs := apivalidation.ValidateObjectMetaUpdate(&cr.ObjectMeta, &o.ObjectMeta, metadataPath)
	errs = append(errs, validateRevisionData(cr)...)
	return append(errs, apivalidation.ValidateImmutableField(cr.Data, o.Data, field.NewPath("data"))...)
}

func controllerRevisionColumns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{
		nameColumn,
		{Name: "Controller", Type: "string", Description: "Controller of the object"},
		{Name: "Revision", Type: "string", Description: appsv1.ControllerRevision{}.SwaggerDoc()["revision"]},
		ageColumn,
	}
}

func controllerRevisionRow(cr *appsv1.ControllerRevision, now time.Time) []interface{} {
	return []interface{}{cr.Name, controllerName(cr), cr.Revision, age(now, cr.CreationTimestamp)}
}

// controllerName is the CONTROLLER column: the controlling owner as
// kind.group/name ("statefulset.apps/web"), or "<none>".
func controllerName(obj metav1.Object) string {
	ref := metav1.GetControllerOfNoCopy(obj)
	if ref == nil {
		return "<none>"
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return ref.Name
	}
	gk := gv.WithKind(ref.Kind).GroupKind()
	if gk.Empty() {
		return ref.Name
	}
	return strings.ToLower(gk.String()) + "/" + ref.Name
}
