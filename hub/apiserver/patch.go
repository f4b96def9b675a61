package apiserver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
)

func (q *request) patch() error {
	return q.patchAs(updateMain)
}

// patchAs applies the request's patch to the stored object and writes the
// result as an update of kind.
func (q *request) patchAs(kind updateKind) error {
	body, err := readBody(q.r)
	if err != nil {
		return err
	}
	pt, err := patchType(q.r.Header.Get("Content-Type"))
	if err != nil {
		return err
	}
	updated, _, err := q.s.updateObject(q.ctx(), q.res, q.ri.namespace, q.ri.name, q.r, func(old runtime.Object) (runtime.Object, error) {
		if old == nil {
			return nil, apierrors.NewNotFound(q.res.gr, q.ri.name)
		}
		patched, err := applyPatch(q.res, pt, old, body)
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

func patchType(ct string) (types.PatchType, error) {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return "", unsupportedMediaType(ct)
	}
	switch pt := types.PatchType(mt); pt {
	case types.JSONPatchType, types.MergePatchType, types.StrategicMergePatchType:
		return pt, nil
	}
	return "", unsupportedMediaType(ct)
}

// applyPatch returns the JSON of old with the patch applied.
func applyPatch(res *resourceInfo, pt types.PatchType, old runtime.Object, patch []byte) ([]byte, error) {
	var buf bytes.Buffer
	if err := codecs.EncoderForVersion(mediaInfo(runtime.ContentTypeJSON).Serializer, res.GroupVersion).Encode(old, &buf); err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	cur := buf.Bytes()
	var out []byte
	var err error
	if !json.Valid(patch) {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the patch is not valid JSON: %s", truncate(patch, 200)))
	}
	switch pt {
	case types.JSONPatchType:
		p, derr := jsonpatch.DecodePatch(patch)
		if derr != nil {
			return nil, apierrors.NewBadRequest(derr.Error())
		}
		out, err = p.Apply(cur)
	case types.MergePatchType:
		out, err = jsonpatch.MergePatch(cur, patch)
	case types.StrategicMergePatchType:
		out, err = strategicpatch.StrategicMergePatch(cur, patch, res.New())
	}
	if err != nil {
		// Upstream answers a patch that cannot be applied with 422.
		return nil, apierrors.NewGenericServerResponse(http.StatusUnprocessableEntity, "", schema.GroupResource{}, "", err.Error(), 0, false)
	}
	return out, nil
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}
