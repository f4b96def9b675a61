package apiserver

import (
	"context"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Creator serves a create-only resource whose objects are never stored:
// a review, such as authorization.k8s.io's SubjectAccessReview or
// authentication.k8s.io's TokenReview, which a client creates to be
// answered. Its methods must be safe for concurrent use.
type Creator interface {
	// Create answers obj, the request's body decoded into the resource's
	// Go type (Resource.New) with its metadata's namespace set to the
	// request's: it returns the object to send back (201), usually obj
	// with its status filled in, or an error such as an
	// apierrors.StatusError (a 422 for a spec it refuses). ctx is the
	// request's, with whatever its caller put there (the user).
	Create(ctx context.Context, obj runtime.Object) (runtime.Object, error)
}

// createOnlyVerbs are the verbs discovery lists for a Creator's resource.
var createOnlyVerbs = metav1.Verbs{"create"}

// serveCreator serves a request for a resource with a Creator: a POST
// to its collection, nothing else.
func (q *request) serveCreator() {
	if q.verb != "create" || q.ri.subresource != "" || q.ri.name != "" {
		q.s.writeError(q.w, q.r, apierrors.NewMethodNotSupported(q.res.gr, q.verb))
		return
	}
	// Nothing created only is printed as a Table: upstream's resources
	// without a table convertor answer that Accept with 406.
	out, err := negotiate(q.r, q.res.codec, false)
	var obj runtime.Object
	if err == nil {
		obj, err = q.decodeBody()
	}
	if err == nil {
		obj, err = q.res.Creator.Create(q.ctx(), obj)
	}
	if err == nil && out.partial {
		obj, err = partialOf(obj)
	}
	if err != nil {
		q.s.writeError(q.w, q.r, err)
		return
	}
	q.s.writeObject(q.w, q.r, http.StatusCreated, obj, &out)
}
