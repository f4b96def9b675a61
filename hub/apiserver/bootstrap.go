package apiserver

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/outpost-mesh/outpost/hub/apiserver/openapi"
	"github.com/outpost-mesh/outpost/hub/store"
)

// Ensure creates each object that does not exist yet, through the same
// create path as the API (defaults, validation), e.g. the default
// namespaces at start. Objects must carry their apiVersion and kind.
func (s *Server) Ensure(ctx context.Context, objs ...runtime.Object) error {
	for _, obj := range objs {
		gvk := obj.GetObjectKind().GroupVersionKind()
		var res *resourceInfo
		for _, r := range s.res().byGVR {
			if r.gvk == gvk {
				res = r
			}
		}
		if res == nil {
			return fmt.Errorf("ensure %s: not a served kind", gvk)
		}
		m, err := meta.Accessor(obj)
		if err != nil {
			return fmt.Errorf("ensure %s: %w", gvk.Kind, err)
		}
		if _, err := s.store.Get(ctx, res.key(m.GetNamespace(), m.GetName()), 0); err == nil {
			continue // exists: leave it as it is
		} else if !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("ensure %s %s: %w", gvk.Kind, m.GetName(), err)
		}
		if _, err := s.createObject(ctx, res, obj.DeepCopyObject(), false); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("ensure %s: %w", gvk.Kind, err)
		}
	}
	return nil
}

// OpenAPIKinds describes the served resources for the OpenAPI documents.
func (s *Server) OpenAPIKinds() []openapi.Kind {
	var kinds []openapi.Kind
	for _, res := range s.cfg.Resources {
		k := openapi.Kind{GVK: res.GroupVersion.WithKind(res.Kind), Plural: res.Plural, Namespaced: res.Namespaced, Object: res.New(), List: res.NewList()}
		if res.Status {
			k.Subresources = append(k.Subresources, "status")
		}
		if res.Scale != nil {
			k.Subresources = append(k.Subresources, "scale")
		}
		kinds = append(kinds, k)
	}
	return kinds
}
