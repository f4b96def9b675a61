package apiserver

import (
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
)

// The steps of a resource's rules that are optional (see Rules): each
// does nothing, or the machinery's default, where the rules lack it.

func (r *resourceInfo) setDefaults(obj runtime.Object) {
	if d, ok := r.Rules.(Defaulter); ok {
		d.Default(obj)
	}
}

// unknownFields returns, as a strict decoder's errors, the fields of obj
// that the rules' schema does not know (see UnknownFieldsReporter).
func (r *resourceInfo) unknownFields(obj runtime.Object) []error {
	u, ok := r.Rules.(UnknownFieldsReporter)
	if !ok {
		return nil
	}
	paths := u.UnknownFields(obj)
	errs := make([]error, len(paths))
	for i, p := range paths {
		errs[i] = fmt.Errorf("unknown field %q", p)
	}
	return errs
}

func (r *resourceInfo) prepareForCreate(obj runtime.Object) {
	if p, ok := r.Rules.(CreatePreparer); ok {
		p.PrepareForCreate(obj)
	}
}

func (r *resourceInfo) prepareForUpdate(obj, old runtime.Object) {
	if p, ok := r.Rules.(UpdatePreparer); ok {
		p.PrepareForUpdate(obj, old)
	}
}

// subresource returns the one of Resource.Subresources named name, or nil.
func (r *resourceInfo) subresource(name string) *Subresource {
	if name == "" {
		return nil
	}
	for i := range r.Subresources {
		if r.Subresources[i].Name == name {
			return &r.Subresources[i]
		}
	}
	return nil
}

func (r *resourceInfo) allowCreateOnUpdate() bool {
	c, ok := r.Rules.(CreateOnUpdater)
	return ok && c.AllowCreateOnUpdate()
}

// fieldSet returns obj's field-selector values beyond the metadata ones,
// never nil: the caller adds those.
func (r *resourceInfo) fieldSet(obj runtime.Object) fields.Set {
	var set fields.Set
	if f, ok := r.Rules.(FieldSelector); ok {
		set = f.Fields(obj)
	}
	if set == nil {
		set = fields.Set{}
	}
	return set
}

// columns returns the resource's Table columns, a copy the caller owns.
func (r *resourceInfo) columns() []metav1.TableColumnDefinition {
	if p, ok := r.Rules.(Printer); ok {
		return p.Columns()
	}
	return slices.Clone(defaultColumns)
}

// row returns obj's cells for columns.
func (r *resourceInfo) row(obj runtime.Object) []interface{} {
	if p, ok := r.Rules.(Printer); ok {
		return p.Row(obj)
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return []interface{}{"", ""}
	}
	return []interface{}{m.GetName(), m.GetCreationTimestamp().UTC().Format(time.RFC3339)}
}

// defaultColumns are the columns of a resource without a Printer, as
// upstream's default table converter has them: the name and the creation
// time.
var defaultColumns = []metav1.TableColumnDefinition{
	{Name: "Name", Type: "string", Format: "name", Description: metav1.ObjectMeta{}.SwaggerDoc()["name"]},
	{Name: "Created At", Type: "date", Description: metav1.ObjectMeta{}.SwaggerDoc()["creationTimestamp"]},
}
