package apiserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/outpost-mesh/outpost/hub/store"
)

// storeError translates a store error into the API error a client expects.
// This is the only place store errors become HTTP.
func storeError(err error, gr schema.GroupResource, name string) error {
	var ce *store.ConflictError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ce) && ce.Exists:
		return apierrors.NewAlreadyExists(gr, name)
	case errors.As(err, &ce):
		return apierrors.NewConflict(gr, name, errors.New(optimisticLockMsg))
	case errors.Is(err, store.ErrNotFound):
		return apierrors.NewNotFound(gr, name)
	case errors.Is(err, store.ErrCompacted):
		return apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %v", err))
	case errors.Is(err, store.ErrFutureRevision):
		return apierrors.NewTimeoutError("Too large resource version", 1)
	case errors.Is(err, store.ErrValueTooLarge):
		return apierrors.NewRequestEntityTooLargeError(err.Error())
	case errors.Is(err, store.ErrInvalidKey), errors.Is(err, store.ErrInvalidArgument):
		return apierrors.NewBadRequest(err.Error())
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return apierrors.NewTimeoutError("request did not complete in time", 0)
	}
	return apierrors.NewInternalError(err)
}

const optimisticLockMsg = "the object has been modified; please apply your changes to the latest version and try again"

// toStatus returns the Status body for err.
func toStatus(err error) *metav1.Status {
	var s apierrors.APIStatus
	if errors.As(err, &s) {
		st := s.Status()
		st.Kind, st.APIVersion = "Status", "v1"
		if st.Status == "" {
			st.Status = metav1.StatusFailure
		}
		return &st
	}
	st := apierrors.NewInternalError(err).Status()
	st.Kind, st.APIVersion = "Status", "v1"
	return &st
}

// writeError answers with err as a metav1.Status in the negotiated
// encoding (JSON when none could be negotiated).
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	st := toStatus(err)
	code := int(st.Code)
	if code == 0 {
		code = http.StatusInternalServerError
	}
	if code >= 500 {
		s.log.Warn("api request failed", "method", r.Method, "path", r.URL.Path, "code", code, "err", err)
	}
	s.writeObject(w, r, code, st, nil)
}
