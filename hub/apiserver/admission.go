package apiserver

import (
	"context"
	"fmt"
	"reflect"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Operation is the kind of write Admission is asked about, named as
// upstream's admission names it.
type Operation string

const (
	// Create is a create, including that of a PUT on a missing object.
	Create Operation = "CREATE"
	// Update is any update: PUT, PATCH, and writes of the status, scale
	// and binding subresources.
	Update Operation = "UPDATE"
)

// AdmissionAttributes describe one write for Admission.
type AdmissionAttributes struct {
	Operation Operation
	// Resource is the resource written, such as {"", "nodes"}.
	Resource schema.GroupResource
	// Subresource is "status", "scale" or "binding" for a write of one,
	// "" for the resource itself.
	Subresource string
	// Namespace and Name are the object's ("" namespace for
	// cluster-scoped resources).
	Namespace, Name string
	// Object is what is about to be stored, in the resource's Go type:
	// defaulted and validated, with the system metadata the server sets,
	// and for an update prepared against OldObject (a subresource's
	// update is the stored object with only what that subresource may
	// change taken from the request).
	Object runtime.Object
	// OldObject is the stored object an update replaces; nil on create.
	OldObject runtime.Object
	// DryRun is set for a request with dryRun=All: nothing will be
	// written, and admission with side effects must not act.
	DryRun bool
}

// Admission is what the server asks before it writes an object, once the
// object is prepared and validated: the policy (governance) the hub layers
// over the machinery, which knows nothing of users. Its methods must be
// safe for concurrent use.
type Admission interface {
	// Handles reports whether Admit is to be asked about writes of
	// resource; the server asks once per resource, in New, so that
	// writes of the others cost nothing.
	Handles(resource schema.GroupResource) bool
	// Admit returns nil to let the write go ahead, or the error the
	// client gets instead, as is: an apierrors.StatusError such as a
	// Forbidden (any other error is answered 500). ctx is the request's,
	// with whatever its caller put there (the user). Admit must not
	// modify or keep the objects.
	Admit(ctx context.Context, a AdmissionAttributes) error
}

// admit asks the server's Admission about a write of res, when it handles
// res.
func (s *Server) admit(ctx context.Context, res *resourceInfo, op Operation, subresource string, obj, old runtime.Object, dry bool) error {
	if !res.admit {
		return nil
	}
	return s.cfg.Admission.Admit(ctx, attributes(res, op, subresource, obj, old, dry))
}

// attributes describes a write of res for admission.
func attributes(res *resourceInfo, op Operation, subresource string, obj, old runtime.Object, dry bool) AdmissionAttributes {
	m := om(obj)
	return AdmissionAttributes{
		Operation:   op,
		Resource:    res.gr,
		Subresource: subresource,
		Namespace:   m.GetNamespace(),
		Name:        m.GetName(),
		Object:      obj,
		OldObject:   old,
		DryRun:      dry,
	}
}

// MutatingAdmission is what the server asks, before it prepares and
// validates a write, to change the object: defaults that are policy
// rather than schema (a pod's priority from its class) and mutating
// webhooks, as upstream's mutating admission runs before the
// strategy's PrepareForCreate or PrepareForUpdate and validation. Its
// methods must be safe for concurrent use.
type MutatingAdmission interface {
	// Handles reports whether Mutate is to be asked about writes of
	// resource; asked once per resource, when it is added.
	Handles(resource schema.GroupResource) bool
	// Mutate may change a.Object in place or replace it with another
	// object of the same Go type; a.OldObject it must not modify. It
	// returns nil to let the write go on, or the error the client gets
	// instead (see Admission.Admit). On a create the object has been
	// defaulted but has no uid yet, and its name may still be to be
	// generated (upstream's webhooks see the same).
	Mutate(ctx context.Context, a *AdmissionAttributes) error
}

// mutate asks the server's MutatingAdmission about a write of res, when
// it handles res, and returns the object to write: obj, or the
// replacement Mutate made, defaulted again as upstream decodes a
// webhook's patched object with defaults.
func (s *Server) mutate(ctx context.Context, res *resourceInfo, op Operation, subresource string, obj, old runtime.Object, dry bool) (runtime.Object, error) {
	if !res.mutate {
		return obj, nil
	}
	a := attributes(res, op, subresource, obj, old, dry)
	if err := s.cfg.Mutation.Mutate(ctx, &a); err != nil {
		return nil, err
	}
	if a.Object == nil || reflect.TypeOf(a.Object) != reflect.TypeOf(obj) {
		return nil, apierrors.NewInternalError(fmt.Errorf("mutating admission returned a %T for a %T", a.Object, obj))
	}
	if a.Object != obj {
		a.Object.GetObjectKind().SetGroupVersionKind(res.gvk)
		if subresource == "" {
			res.setDefaults(a.Object)
		}
	}
	return a.Object, nil
}
