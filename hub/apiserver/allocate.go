package apiserver

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/outpost-mesh/outpost/hub/store"
)

// allocationKey is where a reservation of value for res lives in the
// store. Values are IPs and the like: valid in a key.
func (res *resourceInfo) allocationKey(value string) string {
	return "/registry/allocations/" + res.Plural + "/" + value
}

// assign reserves obj's unique values before obj is written. It returns a
// release func that undoes the reservations (for a failed create).
func (s *Server) assign(ctx context.Context, res *resourceInfo, obj runtime.Object, owner string) (release func(), err error) {
	al, ok := res.Rules.(Allocator)
	if !ok {
		return func() {}, nil
	}
	var taken []string
	release = func() {
		for _, v := range taken {
			s.store.Delete(context.WithoutCancel(ctx), res.allocationKey(v), 0)
		}
	}
	err = al.Assign(obj, func(v string) (bool, error) {
		_, err := s.store.Create(ctx, res.allocationKey(v), []byte(owner))
		var ce *store.ConflictError
		if errors.As(err, &ce) && ce.Exists {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		taken = append(taken, v)
		return true, nil
	})
	if err != nil {
		release()
		var st apierrors.APIStatus
		if errors.As(err, &st) {
			return nil, err // the rules' own answer, e.g. 422 for a taken IP
		}
		return nil, apierrors.NewInternalError(fmt.Errorf("allocate: %w", err))
	}
	return release, nil
}

// releaseHeld frees the unique values of a deleted object.
func (s *Server) releaseHeld(ctx context.Context, res *resourceInfo, obj runtime.Object) {
	al, ok := res.Rules.(Allocator)
	if !ok {
		return
	}
	for _, v := range al.Held(obj) {
		if _, _, err := s.store.Delete(context.WithoutCancel(ctx), res.allocationKey(v), 0); err != nil && !errors.Is(err, store.ErrNotFound) {
			s.log.Warn("release allocation", "resource", res.Plural, "value", v, "err", err)
		}
	}
}
