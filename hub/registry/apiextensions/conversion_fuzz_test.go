package apiextensions

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// FuzzConversionAnswer: whatever a conversion webhook answers, reading
// it returns objects or an error, never a panic.
func FuzzConversionAnswer(f *testing.F) {
	f.Add([]byte(`{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","response":{"uid":"u","result":{"status":"Success"},"convertedObjects":[{"apiVersion":"g/v2","kind":"K","metadata":{"name":"a","labels":{"x":"y"}}}]}}`), "v1")
	f.Add([]byte(`{"response":{"result":{"status":"Failure","message":"no"}}}`), "v1beta1")
	f.Add([]byte(`{"response":{"result":{"status":"Success"},"convertedObjects":[{"metadata":{"labels":{"x":1}}}]}}`), "v1beta1")
	f.Fuzz(func(t *testing.T, answer []byte, version string) {
		objs, err := convertedObjects(answer, version, types.UID("u"))
		if err != nil {
			return
		}
		original := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "g/v1", "kind": "K", "metadata": map[string]any{"name": "a"}}}
		for _, o := range objs {
			out := &unstructured.Unstructured{}
			if out.UnmarshalJSON(o.Raw) != nil {
				continue
			}
			if sameObject(original, out) == nil {
				_ = restoreMeta(original, out)
			}
		}
	})
}
