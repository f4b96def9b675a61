package webhook

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/uuid"
	kjson "sigs.k8s.io/json"
)

// call sends h the AdmissionReview of r and acts on its answer: a
// mutating webhook's patch replaces r.obj, and call reports whether that
// changed it. A failure to call h or to make sense of its answer is a
// *callError, for h's failurePolicy to decide; a refusal, a dry run h
// cannot take part in, or a patch that does not apply is the client's
// answer whatever the policy, as upstream's.
func (d *Dispatcher) call(ctx context.Context, r *request, h *hook) (bool, error) {
	if r.dryRun {
		if h.sideEffects == nil {
			return false, &callError{h.name, errors.New("Webhook SideEffects is nil")}
		}
		if !sideEffectsAllowDryRun(*h.sideEffects) {
			return false, dryRunUnsupported(h.name)
		}
	}
	version, err := reviewVersion(h.versions)
	if err != nil {
		return false, &callError{h.name, fmt.Errorf("could not create admission objects: %w", err)}
	}
	uid := uuid.NewUUID()
	body, err := encodeReview(version, uid, r)
	if err != nil {
		return false, &callError{h.name, fmt.Errorf("could not create admission objects: %w", err)}
	}
	if h.clientErr != nil {
		return false, &callError{h.name, fmt.Errorf("could not get REST client: %w", h.clientErr)}
	}
	answer, err := d.post(ctx, h, body)
	if err != nil {
		return false, &callError{h.name, fmt.Errorf("failed to call webhook: %w", err)}
	}
	res, err := decodeResponse(answer, version, uid, h.mutating)
	var de decodeError
	var up unsupportedPatch
	switch {
	case errors.As(err, &de):
		return false, &callError{h.name, fmt.Errorf("failed to call webhook: %w", de.err)}
	case errors.As(err, &up):
		return false, &callError{h.name, up}
	case err != nil:
		return false, &callError{h.name, fmt.Errorf("received invalid webhook response: %w", err)}
	case !res.allowed:
		return false, denied(h.name, res.result)
	case len(res.patch) == 0:
		return false, nil
	}
	return d.applyPatch(r, h, res.patch)
}

// post posts body to h within h's timeout and returns the answer of a
// 2xx status, at most MaxResponseBytes of it.
func (d *Dispatcher) post(ctx context.Context, h *hook, body []byte) ([]byte, error) {
	return h.client.Post(ctx, h.timeout, body, d.cfg.MaxResponseBytes)
}

// denied is upstream's refusal of a webhook that did not allow the
// request, with the status it answered: code at least 400 (403 when it
// gave none, as its ToStatusErr leaves a Forbidden's), and its message
// after the webhook's name.
func denied(name string, result *metav1.Status) error {
	st := metav1.Status{Status: metav1.StatusFailure}
	if result != nil {
		st = *result.DeepCopy()
	}
	if st.Code < http.StatusBadRequest {
		st.Code = http.StatusBadRequest
	}
	if st.Status == "" || st.Status == metav1.StatusSuccess {
		st.Status = metav1.StatusFailure
	}
	by := fmt.Sprintf("admission webhook %q denied the request", name)
	switch {
	case st.Message != "":
		st.Message = by + ": " + st.Message
	case st.Reason != "":
		st.Message = by + ": " + string(st.Reason)
	default:
		st.Message = by + " without explanation"
	}
	return &apierrors.StatusError{ErrStatus: st}
}

// applyPatch applies a mutating webhook's JSONPatch to r.obj, decoding
// the result into a new object of the same Go type, and reports whether
// that changed the object.
func (d *Dispatcher) applyPatch(r *request, h *hook, patch []byte) (bool, error) {
	p, err := jsonpatch.DecodePatch(patch)
	if err != nil {
		return false, &callError{h.name, fmt.Errorf("received undecodable patch in webhook response: %w", err)}
	}
	if len(p) == 0 {
		return false, nil
	}
	doc, err := encodeObject(r.obj, r.gvk)
	if err != nil {
		return false, apierrors.NewInternalError(err)
	}
	patched, err := p.Apply(doc)
	if err != nil {
		return false, apierrors.NewInternalError(err)
	}
	obj, err := decodeLike(r.obj, patched)
	if err != nil {
		return false, apierrors.NewInternalError(err)
	}
	obj.GetObjectKind().SetGroupVersionKind(r.obj.GetObjectKind().GroupVersionKind())
	changed := !apiequality.Semantic.DeepEqual(r.obj, obj)
	r.obj = obj
	return changed, nil
}

// decodeLike decodes data into a new object of like's Go type, with
// JSON's case-sensitive field names as the API's decoders use.
func decodeLike(like runtime.Object, data []byte) (runtime.Object, error) {
	if _, ok := like.(*unstructured.Unstructured); ok {
		u := &unstructured.Unstructured{}
		return u, u.UnmarshalJSON(data)
	}
	t := reflect.TypeOf(like)
	if t.Kind() != reflect.Pointer {
		return nil, fmt.Errorf("cannot decode a patched %T", like)
	}
	obj, ok := reflect.New(t.Elem()).Interface().(runtime.Object)
	if !ok {
		return nil, fmt.Errorf("cannot decode a patched %T", like)
	}
	if err := kjson.UnmarshalCaseSensitivePreserveInts(data, obj); err != nil {
		return nil, err
	}
	return obj, nil
}
