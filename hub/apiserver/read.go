package apiserver

import (
	"context"
	"fmt"
	"k8s.io/apimachinery/pkg/util/managedfields"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/outpost-mesh/outpost/hub/store"
)

// The hub's own readers of served objects of any kind (the params of
// admission policies) read them here, as the API would answer them,
// without a request: in the kind's version, converted from storage.

// readPage bounds the objects ListObjects reads from the store at once.
const readPage = 500

// resourceOfKind returns the stored resource serving gvk now.
func (s *Server) resourceOfKind(gvk schema.GroupVersionKind) (*resourceInfo, error) {
	for _, res := range s.res().byGVR {
		if res.gvk == gvk && res.Rules != nil {
			return res, nil
		}
	}
	return nil, fmt.Errorf("kind %s is not served", gvk)
}

// KindNamespaced reports whether objects of gvk are namespaced; an error
// means gvk is not served from the store.
func (s *Server) KindNamespaced(gvk schema.GroupVersionKind) (bool, error) {
	res, err := s.resourceOfKind(gvk)
	if err != nil {
		return false, err
	}
	return res.Namespaced, nil
}

// TypeConverter returns the schema objects of kind gvk merge by in
// server-side apply (a CRD version's for a custom resource, k8s.io/api's
// for a built-in type), for the hub's own mutations of them, such as
// MutatingAdmissionPolicies' apply configurations.
func (s *Server) TypeConverter(gvk schema.GroupVersionKind) (managedfields.TypeConverter, error) {
	res, err := s.resourceOfKind(gvk)
	if err != nil {
		return nil, err
	}
	return res.fields.typeConverter(), nil
}

// GetObject returns the object of kind gvk named name in namespace (""
// for a cluster-scoped kind), or a NotFound API error.
func (s *Server) GetObject(ctx context.Context, gvk schema.GroupVersionKind, namespace, name string) (runtime.Object, error) {
	res, err := s.resourceOfKind(gvk)
	if err != nil {
		return nil, err
	}
	kv, err := s.store.Get(ctx, res.key(namespace, name), 0)
	if err != nil {
		return nil, storeError(err, res.gr, name)
	}
	return res.decode(kv)
}

// ListObjects returns the objects of kind gvk in namespace ("" for all,
// or for a cluster-scoped kind) whose labels sel selects.
func (s *Server) ListObjects(ctx context.Context, gvk schema.GroupVersionKind, namespace string, sel labels.Selector) ([]runtime.Object, error) {
	res, err := s.resourceOfKind(gvk)
	if err != nil {
		return nil, err
	}
	var out []runtime.Object
	opts := store.ListOptions{Limit: readPage}
	for {
		page, err := s.store.List(ctx, res.listPrefix(namespace), opts)
		if err != nil {
			return nil, storeError(err, res.gr, "")
		}
		for _, kv := range page.KVs {
			obj, err := res.decode(kv)
			if err != nil {
				return nil, apierrors.NewInternalError(err)
			}
			if m, err := meta.Accessor(obj); err == nil && sel.Matches(labels.Set(m.GetLabels())) {
				out = append(out, obj)
			}
		}
		if !page.More {
			return out, nil
		}
		opts.Revision, opts.Continue = page.Revision, page.Continue
	}
}
