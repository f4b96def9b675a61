// Package typed adapts the rules of one resource, written as functions of
// its own Go type, to the apiserver's Rules and the optional interfaces
// the machinery looks for: the one adapter every group of hub/registry
// uses. A nil function means the resource adds nothing at that step. An
// object of another type than the resource's is a programming error of
// the caller: it is left alone, and validation reports it as an internal
// error rather than panicking.
package typed

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/outpost-mesh/outpost/hub/apiserver"
)

// Rules are a resource's rules over its Go type T, e.g. *corev1.Pod.
// Check and CheckUpdate are required; the rest may be left nil.
type Rules[T runtime.Object] struct {
	// Now is the clock for the Age cells; nil is the wall clock.
	Now func() time.Time
	// Defaults applies upstream's defaults (apiserver.Defaulter).
	Defaults func(T)
	// PrepareCreate clears what a client may not set on create
	// (apiserver.CreatePreparer).
	PrepareCreate func(T)
	// PrepareUpdate restores what an update of the main resource may not
	// change (apiserver.UpdatePreparer).
	PrepareUpdate func(obj, old T)
	// Check validates a new object, CheckUpdate an update of the main
	// resource (apiserver.Rules).
	Check       func(T) field.ErrorList
	CheckUpdate func(obj, old T) field.ErrorList
	// PrepareStatus restores what a status update may not change in the
	// status or metadata (apiserver.StatusPreparer); nil changes nothing.
	PrepareStatus func(obj, old T)
	// CheckStatus validates a status update; nil accepts any status
	// (apiserver.StatusValidator).
	CheckStatus func(obj, old T) field.ErrorList
	// CreateOnUpdate lets a PUT of a missing object create it
	// (apiserver.CreateOnUpdater).
	CreateOnUpdate bool
	// FieldSet returns the field-selector values beyond metadata's
	// (apiserver.FieldSelector).
	FieldSet func(T) fields.Set
	// TableColumns and TableRow are the Table columns and an object's
	// cells, its Age measured against now (apiserver.Printer).
	TableColumns []metav1.TableColumnDefinition
	TableRow     func(obj T, now time.Time) []interface{}
}

var (
	_ apiserver.Rules           = (*Rules[runtime.Object])(nil)
	_ apiserver.Defaulter       = (*Rules[runtime.Object])(nil)
	_ apiserver.CreatePreparer  = (*Rules[runtime.Object])(nil)
	_ apiserver.UpdatePreparer  = (*Rules[runtime.Object])(nil)
	_ apiserver.StatusValidator = (*Rules[runtime.Object])(nil)
	_ apiserver.CreateOnUpdater = (*Rules[runtime.Object])(nil)
	_ apiserver.FieldSelector   = (*Rules[runtime.Object])(nil)
	_ apiserver.Printer         = (*Rules[runtime.Object])(nil)
)

func (r *Rules[T]) Default(obj runtime.Object) {
	if o, ok := obj.(T); ok && r.Defaults != nil {
		r.Defaults(o)
	}
}

func (r *Rules[T]) PrepareForCreate(obj runtime.Object) {
	if o, ok := obj.(T); ok && r.PrepareCreate != nil {
		r.PrepareCreate(o)
	}
}

func (r *Rules[T]) PrepareForUpdate(obj, old runtime.Object) {
	o, ok1 := obj.(T)
	p, ok2 := old.(T)
	if ok1 && ok2 && r.PrepareUpdate != nil {
		r.PrepareUpdate(o, p)
	}
}

func (r *Rules[T]) PrepareForStatusUpdate(obj, old runtime.Object) {
	o, ok1 := obj.(T)
	p, ok2 := old.(T)
	if ok1 && ok2 && r.PrepareStatus != nil {
		r.PrepareStatus(o, p)
	}
}

func (r *Rules[T]) Validate(obj runtime.Object) field.ErrorList {
	o, ok := obj.(T)
	if !ok {
		return WrongType[T](obj)
	}
	return r.Check(o)
}

func (r *Rules[T]) ValidateUpdate(obj, old runtime.Object) field.ErrorList {
	return r.pair(obj, old, r.CheckUpdate)
}

func (r *Rules[T]) ValidateStatusUpdate(obj, old runtime.Object) field.ErrorList {
	check := r.CheckStatus
	if check == nil {
		check = func(_, _ T) field.ErrorList { return nil }
	}
	return r.pair(obj, old, check)
}

func (r *Rules[T]) pair(obj, old runtime.Object, check func(obj, old T) field.ErrorList) field.ErrorList {
	o, ok := obj.(T)
	if !ok {
		return WrongType[T](obj)
	}
	p, ok := old.(T)
	if !ok {
		return WrongType[T](old)
	}
	return check(o, p)
}

func (r *Rules[T]) AllowCreateOnUpdate() bool { return r.CreateOnUpdate }

// Fields never returns nil, so that the machinery may add the metadata
// fields to the set it gets.
func (r *Rules[T]) Fields(obj runtime.Object) fields.Set {
	o, ok := obj.(T)
	if !ok || r.FieldSet == nil {
		return fields.Set{}
	}
	if s := r.FieldSet(o); s != nil {
		return s
	}
	return fields.Set{}
}

// Columns returns a copy of the column definitions; the caller owns it.
func (r *Rules[T]) Columns() []metav1.TableColumnDefinition {
	return append([]metav1.TableColumnDefinition(nil), r.TableColumns...)
}

func (r *Rules[T]) Row(obj runtime.Object) []interface{} {
	o, ok := obj.(T)
	if !ok || r.TableRow == nil {
		return make([]interface{}, len(r.TableColumns))
	}
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	return r.TableRow(o, now())
}

// WrongType is the internal error of rules for T given obj.
func WrongType[T runtime.Object](obj runtime.Object) field.ErrorList {
	var want T
	return field.ErrorList{field.InternalError(nil, fmt.Errorf("rules for %T given %T", want, obj))}
}

// All is the steps of a create, an update and a Table that Rules
// implements (all but ValidateStatusUpdate, which some rules lack), for
// tests that call them one by one.
type All interface {
	apiserver.Rules
	apiserver.Defaulter
	apiserver.CreatePreparer
	apiserver.UpdatePreparer
	apiserver.CreateOnUpdater
	apiserver.FieldSelector
	apiserver.Printer
}

var _ All = (*Rules[runtime.Object])(nil)
