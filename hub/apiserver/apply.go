package apiserver

import (
	"fmt"
	"mime"
	"net/http"

	yamlv2 "go.yaml.in/yaml/v2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"
)

// isApply reports whether contentType is that of a server-side apply.
func isApply(contentType string) bool {
	mt, _, _ := mime.ParseMediaType(contentType)
	return mt == string(types.ApplyYAMLPatchType)
}

// maxAppliedBytes bounds the JSON form of an apply's body. A YAML body
// can be far larger as JSON than as YAML by repeating aliases of a long
// value; go-yaml bounds how many aliases it expands, not how large what
// they stand for is. An object this large could not be stored anyway.
const maxAppliedBytes = 2 * MaxBodyBytes

// apply serves a server-side apply (PATCH with Content-Type
// application/apply-patch+yaml) of the main resource or, with kind
// updateStatus, of its status: the body, a partial object in YAML or
// JSON, is merged into the stored object by the field manager, which
// refuses to change fields another manager owns unless force=true, and
// creates the object when it is missing, as upstream.
func (q *request) apply(kind updateKind) error {
	body, err := readBody(q.r)
	if err != nil {
		return err
	}
	q.fields.apply = true
	o, err := q.fieldOptions()
	if err != nil {
		return err
	}
	validation := q.r.URL.Query().Get("fieldValidation")
	switch validation {
	case "", "Ignore", "Warn", "Strict":
	default:
		return apierrors.NewBadRequest(fmt.Sprintf("fieldValidation %q is not one of Ignore, Warn, Strict", validation))
	}
	applied, err := decodeApply(body)
	if err != nil {
		return err
	}
	if validation == "Strict" || validation == "Warn" {
		if err := yaml.UnmarshalStrict(body, &map[string]any{}); err != nil {
			if validation == "Strict" {
				return apierrors.NewBadRequest(fmt.Sprintf("error strict decoding patch: %v", err))
			}
			q.warnings = append(q.warnings, err.Error())
		}
	}
	sub := ""
	if kind == updateStatus || kind == updateSubresource {
		sub = q.ri.subresource
	}
	fm, err := q.res.fields.manager(sub)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	if err := q.checkApplied(applied); err != nil {
		return err
	}
	updated, code, err := q.updateObject(func(old runtime.Object) (runtime.Object, error) {
		live := old
		if live == nil {
			if live, err = (oneVersion{res: q.res}).New(q.res.gvk); err != nil {
				return nil, apierrors.NewInternalError(err)
			}
		}
		obj, err := fm.Apply(live, applied.DeepCopy(), o.manager, o.force)
		if err != nil {
			if _, ok := err.(apierrors.APIStatus); ok {
				return nil, err // a conflict, or a bad configuration
			}
			return nil, apierrors.NewInternalError(err)
		}
		obj.GetObjectKind().SetGroupVersionKind(q.res.gvk)
		m := om(obj)
		if m.GetName() != q.ri.name {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", m.GetName(), q.ri.name))
		}
		switch ns := m.GetNamespace(); {
		case !q.res.Namespaced:
			m.SetNamespace("")
		case ns != "" && ns != q.ri.namespace:
			return nil, apierrors.NewBadRequest(fmt.Sprintf("the namespace of the object (%s) does not match the namespace on the request (%s)", ns, q.ri.namespace))
		default:
			m.SetNamespace(q.ri.namespace)
		}
		// A resourceVersion in the configuration is a precondition.
		if rv := applied.GetResourceVersion(); rv != "" && old != nil {
			if err := checkResourceVersion(rv); err != nil {
				return nil, err
			}
			if rv != om(old).GetResourceVersion() {
				return nil, apierrors.NewConflict(q.res.gr, q.ri.name, fmt.Errorf("%s", optimisticLockMsg))
			}
		}
		return obj, nil
	}, "", kind)
	if err != nil {
		return err
	}
	if code != http.StatusCreated {
		code = http.StatusOK
	}
	return q.respond(code, updated)
}

// checkApplied checks that applied is a configuration of the resource
// that fits its schema, with upstream's 400 for another kind or version
// and for managedFields, and a 400 naming the fields the schema lacks
// (upstream answers those with a 500).
func (q *request) checkApplied(applied *unstructured.Unstructured) error {
	if gvk := applied.GroupVersionKind(); gvk != q.res.gvk {
		if gvk.GroupKind() == q.res.gvk.GroupKind() {
			return apierrors.NewBadRequest(fmt.Sprintf("Incorrect version specified in apply patch. Specified patch version: %s, expected: %s", gvk.GroupVersion(), q.res.GroupVersion))
		}
		return apierrors.NewBadRequest(fmt.Sprintf("invalid object type: %v", gvk))
	}
	if applied.GetManagedFields() != nil {
		return apierrors.NewBadRequest("metadata.managedFields must be nil")
	}
	if _, err := q.res.fields.typeConverter().ObjectToTyped(applied); err != nil {
		return apierrors.NewBadRequest(fmt.Sprintf("the apply configuration does not fit the schema of %s: %v", q.res.gvk.Kind, err))
	}
	return nil
}

// decodeApply decodes the body of an apply, YAML or JSON, into the
// object it configures, with upstream's 400 for one that is not an
// object, and a 413 for one that would be over maxAppliedBytes as JSON.
// The caller owns the result.
func decodeApply(body []byte) (*unstructured.Unstructured, error) {
	// Read the YAML once to measure it: the tree shares the strings
	// aliases repeat, and go-yaml bounds how many nodes aliases add.
	var tree any
	if err := yamlv2.Unmarshal(body, &tree); err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("error decoding patch: %v", err))
	}
	if n := jsonSize(tree, maxAppliedBytes); n > maxAppliedBytes {
		return nil, apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("the apply configuration is over %d bytes as JSON: its YAML aliases repeat too much", maxAppliedBytes))
	}
	obj := map[string]any{}
	if err := yaml.Unmarshal(body, &obj); err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("error decoding patch: %v", err))
	}
	if obj == nil {
		obj = map[string]any{}
	}
	return &unstructured.Unstructured{Object: obj}, nil
}

// jsonSize returns about how many bytes v, a value decoded by go-yaml,
// takes as JSON; it stops counting once over limit.
func jsonSize(v any, limit int) int {
	n := 0
	var walk func(v any)
	walk = func(v any) {
		if n > limit {
			return
		}
		switch v := v.(type) {
		case string:
			n += len(v) + 2
		case map[any]any:
			n += 2
			for k, e := range v {
				walk(k)
				walk(e)
				n += 2
			}
		case []any:
			n += 2
			for _, e := range v {
				walk(e)
				n++
			}
		default: // numbers, booleans, null
			n += 8
		}
	}
	walk(v)
	return n
}
