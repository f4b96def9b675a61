package apiserver

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
)

// Reader serves a read-only resource whose objects are not in the store,
// such as metrics.k8s.io's, which nodes report: only get and list, with
// label selectors, as metrics-server serves them. Objects it returns are
// the resource's Go types (Resource.New and NewList) with their metadata
// and TypeMeta set; the machinery does not change them. Its methods must
// be safe for concurrent use.
type Reader interface {
	// Get returns the object namespace/name ("" namespace for a
	// cluster-scoped resource), or an error for which apierrors.IsNotFound
	// holds.
	Get(ctx context.Context, namespace, name string) (runtime.Object, error)
	// List returns the list of the objects of namespace ("" for all) whose
	// labels match sel.
	List(ctx context.Context, namespace string, sel labels.Selector) (runtime.Object, error)
}

// readOnlyVerbs are the verbs discovery lists for a Reader's resource.
var readOnlyVerbs = metav1.Verbs{"get", "list"}

// serveReader serves a request for a resource with a Reader.
func (q *request) serveReader() {
	var obj runtime.Object
	var err error
	switch {
	case q.ri.subresource != "":
		err = apierrors.NewNotFound(q.res.gr, q.ri.name+"/"+q.ri.subresource)
	case q.verb == "get":
		obj, err = q.res.Reader.Get(q.r.Context(), q.ri.namespace, q.ri.name)
	case q.verb == "list":
		var sel labels.Selector
		if sel, err = labels.Parse(q.r.URL.Query().Get("labelSelector")); err != nil {
			err = apierrors.NewBadRequest(fmt.Sprintf("labelSelector: %v", err))
			break
		}
		// Field selectors (metrics-server takes metadata.name) are not
		// worth their code yet: refuse one rather than answer wrongly.
		if fs, perr := fields.ParseSelector(q.r.URL.Query().Get("fieldSelector")); perr != nil || !fs.Empty() {
			err = apierrors.NewBadRequest(fmt.Sprintf("fieldSelector %q is not supported for %s", q.r.URL.Query().Get("fieldSelector"), q.res.gr))
			break
		}
		obj, err = q.res.Reader.List(q.r.Context(), q.ri.namespace, sel)
	default:
		err = apierrors.NewMethodNotSupported(q.res.gr, q.verb)
	}
	if err != nil {
		q.s.writeError(q.w, q.r, err)
		return
	}
	q.s.writeObject(q.w, q.r, 200, obj, nil)
}
