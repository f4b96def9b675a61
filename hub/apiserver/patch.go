package apiserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"slices"
	"strings"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"

	"github.com/outpost-mesh/outpost/hub/store"
)

func (q *request) patch() error {
	return q.patchAs(updateMain)
}

// patchAs applies the request's patch to the stored object and writes the
// result as an update of kind.
func (q *request) patchAs(kind updateKind) error {
	if isApply(q.r.Header.Get("Content-Type")) {
		return q.apply(kind)
	}
	body, err := readBody(q.r)
	if err != nil {
		return err
	}
	pt, err := patchType(q.r.Header.Get("Content-Type"), q.res.Encoding == EncodingProtobuf)
	if err != nil {
		return err
	}
	updated, _, err := q.updateObject(func(old runtime.Object) (runtime.Object, error) {
		if old == nil {
			return nil, apierrors.NewNotFound(q.res.gr, q.ri.name)
		}
		patched, err := q.s.applyPatch(q.res, pt, old, body)
		if err != nil {
			return nil, err
		}
		obj, err := q.decodeBytes(patched, runtime.ContentTypeJSON)
		if err != nil {
			return nil, err
		}
		m, _ := meta.Accessor(obj)
		if m.GetName() != q.ri.name {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", m.GetName(), q.ri.name))
		}
		// A resourceVersion in the patch is a precondition.
		if rv := m.GetResourceVersion(); rv != "" {
			if err := checkResourceVersion(rv); err != nil {
				return nil, err
			}
			om, _ := meta.Accessor(old)
			if rv != om.GetResourceVersion() {
				return nil, apierrors.NewConflict(q.res.gr, q.ri.name, fmt.Errorf("%s", optimisticLockMsg))
			}
		}
		return obj, nil
	}, "", kind)
	if err != nil {
		return err
	}
	return q.respond(http.StatusOK, updated)
}

// patchType returns the patch type of Content-Type ct, if accepted:
// strategic merge patches only with smp. Custom resources (EncodingJSON)
// have none, as upstream, since nothing declares how their lists merge.
func patchType(ct string, smp bool) (types.PatchType, error) {
	accepted := []types.PatchType{types.JSONPatchType, types.MergePatchType}
	if smp {
		accepted = append(accepted, types.StrategicMergePatchType)
	}
	if mt, _, err := mime.ParseMediaType(ct); err == nil && slices.Contains(accepted, types.PatchType(mt)) {
		return types.PatchType(mt), nil
	}
	names := make([]string, len(accepted))
	for i, pt := range accepted {
		names[i] = string(pt)
	}
	return "", &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusUnsupportedMediaType,
		Reason:  metav1.StatusReasonUnsupportedMediaType,
		Message: fmt.Sprintf("the body of the request was in an unknown format - accepted media types include: %s (got %q)", strings.Join(names, ", "), ct),
	}}
}

// Bounds on one patch beyond MaxBodyBytes on its body. Without them a
// 1 KB JSON patch of copies doubles the document with every operation,
// and a strategic merge patch of a long list runs for minutes.
const (
	// maxJSONPatchOps caps the operations of one JSON patch, as upstream.
	maxJSONPatchOps = 10_000
	// maxPatchCopyBytes caps what the copy operations of one JSON patch
	// may add to the document in all: no more than the largest object the
	// store keeps, as more could not be stored anyway (upstream's default
	// is its body limit, 3 MiB).
	maxPatchCopyBytes = store.MaxValueSize
	// maxPatchWork caps the estimated steps of applying one patch (see
	// jsonPatchWork and smpWork): some tens of milliseconds of CPU.
	maxPatchWork = 1 << 24
	// maxPatchGrowth is how much larger than the stored object a patched
	// one may be: what the body can add, and what copies can.
	maxPatchGrowth = MaxBodyBytes + maxPatchCopyBytes
)

// The JSON patch library takes its copy limit from a package variable,
// as kube-apiserver sets it at start.
func init() { jsonpatch.AccumulatedCopySizeLimit = maxPatchCopyBytes }

// jsonPatchOps are the operations of RFC 6902.
var jsonPatchOps = map[string]bool{"add": true, "remove": true, "replace": true, "move": true, "copy": true, "test": true}

// applyPatch returns the JSON of old with the patch applied. A patch that
// is not JSON, or not a patch, is a 400; one that cannot be applied to old
// a 422 saying why; one whose cost or result exceeds the bounds above a
// 413, before any of it is applied where that can be known in advance.
func (s *Server) applyPatch(res *resourceInfo, pt types.PatchType, old runtime.Object, patch []byte) ([]byte, error) {
	var buf bytes.Buffer
	if err := s.encoderFor(s.jsonSerializer(), res.GroupVersion).Encode(old, &buf); err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	cur := buf.Bytes()
	if !json.Valid(patch) {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the patch is not valid JSON: %s", truncate(patch, 200)))
	}
	var out []byte
	var err error
	switch pt {
	case types.JSONPatchType:
		out, err = applyJSONPatch(cur, patch)
	case types.MergePatchType:
		if out, err = jsonpatch.MergePatch(cur, patch); err != nil {
			err = unappliable("merge patch", err)
		}
	case types.StrategicMergePatchType:
		out, err = applyStrategicPatch(cur, patch, res.New())
	}
	if err != nil {
		return nil, err
	}
	if len(out) > len(cur)+maxPatchGrowth {
		return nil, apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("the patched object would be %d bytes, %d more than the object: at most %d more is allowed", len(out), len(out)-len(cur), maxPatchGrowth))
	}
	return out, nil
}

func applyJSONPatch(cur, patch []byte) ([]byte, error) {
	p, err := jsonpatch.DecodePatch(patch)
	if err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the JSON patch is not a list of operations: %v", err))
	}
	if len(p) > maxJSONPatchOps {
		return nil, apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("The allowed maximum operations in a JSON patch is %d, got %d", maxJSONPatchOps, len(p)))
	}
	for i, op := range p {
		if err := checkJSONPatchOp(op); err != nil {
			return nil, patchInvalid(fmt.Sprintf("the JSON patch's operation %d is invalid: %v", i, err))
		}
	}
	if w := jsonPatchWork(cur, patch, p); w > maxPatchWork {
		return nil, apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("the JSON patch would take too long to apply: its %d operations inserting into or removing from arrays copy them whole each time; send fewer operations, or replace the array in one", len(p)))
	}
	out, err := p.Apply(cur)
	if err != nil {
		var copyErr *jsonpatch.AccumulatedCopySizeError
		if errors.As(err, &copyErr) {
			return nil, apierrors.NewRequestEntityTooLargeError(err.Error())
		}
		return nil, unappliable("JSON patch", err)
	}
	return out, nil
}

// checkJSONPatchOp checks that op is an RFC 6902 operation with the
// members its kind needs.
func checkJSONPatchOp(op jsonpatch.Operation) error {
	kind := op.Kind()
	if op["op"] == nil {
		return errors.New(`it has no "op"`)
	}
	if !jsonPatchOps[kind] {
		return fmt.Errorf(`"op" is %s, not one of add, remove, replace, move, copy, test`, truncate(*op["op"], 50))
	}
	if _, err := op.Path(); err != nil {
		return fmt.Errorf(`a %s operation needs a "path" string`, kind)
	}
	switch kind {
	case "move", "copy":
		if _, err := op.From(); err != nil {
			return fmt.Errorf(`a %s operation needs a "from" string`, kind)
		}
	case "add", "replace", "test":
		if _, ok := op["value"]; !ok {
			return fmt.Errorf(`a %s operation needs a "value"`, kind)
		}
	}
	return nil
}

func applyStrategicPatch(cur, patch []byte, dataStruct runtime.Object) ([]byte, error) {
	var original, patchMap map[string]any
	if err := json.Unmarshal(cur, &original); err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	if err := json.Unmarshal(patch, &patchMap); err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the strategic merge patch is not a JSON object: %v", err))
	}
	if w := smpWork(original, patchMap, dataStruct, maxPatchWork); w > maxPatchWork {
		return nil, apierrors.NewRequestEntityTooLargeError("the strategic merge patch would take too long to apply: it merges long lists element by element; send fewer list elements, or use a JSON merge patch or an update, which replace lists whole")
	}
	merged, err := strategicpatch.StrategicMergeMapPatch(original, patchMap, dataStruct)
	if err != nil {
		return nil, unappliable("strategic merge patch", err)
	}
	out, err := json.Marshal(merged)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	return out, nil
}

// unappliable is the 422 of a patch of kind that does not apply to the
// object, saying why.
func unappliable(kind string, err error) error {
	return patchInvalid(fmt.Sprintf("the %s cannot be applied to the object: %v", kind, err))
}

// patchInvalid is upstream's 422 for a patch that cannot be applied, with
// the reason in the message, where kubectl shows it, as well as in a
// cause.
func patchInvalid(msg string) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusUnprocessableEntity,
		Reason:  metav1.StatusReasonInvalid,
		Message: msg,
		Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: metav1.CauseTypeFieldValueInvalid, Message: msg, Field: "patch"}}},
	}}
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}
