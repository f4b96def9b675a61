package apps

import (
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/outpost-mesh/outpost/hub/apiserver"
)

// controllerRevisionRules are the rules of apps/v1 controllerrevisions:
// immutable snapshots of a workload's template that the daemonset and
// statefulset controllers keep.
type controllerRevisionRules struct {
	now func() time.Time
}

var _ apiserver.Rules = controllerRevisionRules{}

func (controllerRevisionRules) Default(runtime.Object)               {}
func (controllerRevisionRules) PrepareForCreate(runtime.Object)      {}
func (controllerRevisionRules) PrepareForUpdate(_, _ runtime.Object) {}

func (controllerRevisionRules) Validate(obj runtime.Object) field.ErrorList {
	cr := obj.(*appsv1.ControllerRevision)
	errs := apivalidation.ValidateObjectMeta(&cr.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, metadataPath)
	return append(errs, validateControllerRevision(cr)...)
}

func validateControllerRevision(cr *appsv1.ControllerRevision) field.ErrorList {
	var errs field.ErrorList
	if cr.Data.Raw == nil && cr.Data.Object == nil {
		errs = append(errs, field.Required(field.NewPath("data"), "data is mandatory"))
	}
	return append(errs, apivalidation.ValidateNonnegativeField(cr.Revision, field.NewPath("revision"))...)
}

func (controllerRevisionRules) ValidateUpdate(obj, old runtime.Object) field.ErrorList {
	cr, o := obj.(*appsv1.ControllerRevision), old.(*appsv1.ControllerRevision)
	errs := apivalidation.ValidateObjectMetaUpdate(&cr.ObjectMeta, &o.ObjectMeta, metadataPath)
	errs = append(errs, validateControllerRevision(cr)...)
	return append(errs, apivalidation.ValidateImmutableField(cr.Data, o.Data, field.NewPath("data"))...)
}

func (controllerRevisionRules) AllowCreateOnUpdate() bool { return false }

func (controllerRevisionRules) Fields(runtime.Object) fields.Set { return fields.Set{} }

func (controllerRevisionRules) Columns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{
		nameColumn,
		{Name: "Controller", Type: "string", Description: "Controller of the object"},
		{Name: "Revision", Type: "string", Description: appsv1.ControllerRevision{}.SwaggerDoc()["revision"]},
		ageColumn,
	}
}

func (r controllerRevisionRules) Row(obj runtime.Object) []interface{} {
	cr := obj.(*appsv1.ControllerRevision)
	return []interface{}{cr.Name, controllerName(cr), cr.Revision, age(r.now, cr.CreationTimestamp)}
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
