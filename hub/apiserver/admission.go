package apiserver

import (
	"context"

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
func (s *Server) admit(ctx context.Context, res *resourceInfo, op Operation, subresource string, obj, old runtime.Object) error {
	if !res.admit {
		return nil
	}
	m := om(obj)
	return s.cfg.Admission.Admit(ctx, AdmissionAttributes{
		Operation:   op,
		Resource:    res.gr,
		Subresource: subresource,
		Namespace:   m.GetNamespace(),
		Name:        m.GetName(),
		Object:      obj,
		OldObject:   old,
	})
}
