package apiserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// FuzzApply: decoding an apply's body, YAML or JSON, never panics and
// fails only with a 400 or 413; what it decodes is within a bounded
// multiple of maxAppliedBytes as JSON; and merging it into a stored
// ConfigMap with managers of its own never panics.
func FuzzApply(f *testing.F) {
	for _, seed := range []string{
		"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  k: v\n",
		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","labels":{"a":"b"}},"data":{"k":"w"},"binaryData":{"b":"AAEC"}}`,
		"a: &a [x, y]\nb: [*a, *a, *a]\n",
		"data: &d {k: v}\nmetadata: {name: c, annotations: *d}\n",
		"[1, 2]", "null", "", "---\n---\n", "{{{", "a: !!binary AAEC\n", "? [a]\n: b\n",
		strings.Repeat("[", 100) + strings.Repeat("]", 100),
	} {
		f.Add([]byte(seed))
	}
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		f.Fatal(err)
	}
	res := &resourceInfo{Resource: Resource{GroupVersion: corev1.SchemeGroupVersion, Kind: "ConfigMap", Namespaced: true,
		New: func() runtime.Object { return &corev1.ConfigMap{} }, Rules: testRules{}}, gvk: corev1.SchemeGroupVersion.WithKind("ConfigMap")}
	fm, err := newFieldTracker(res, scheme, builtinTypes(scheme)).manager("")
	if err != nil {
		f.Fatal(err)
	}
	empty := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", UID: "u"}}
	applied, err := decodeApply([]byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","labels":{"a":"b"}},"data":{"k":"v","l":"w"}}`))
	if err != nil {
		f.Fatal(err)
	}
	live, err := fm.Apply(empty, applied, "first", false)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		obj, err := decodeApply(body)
		if err != nil {
			var st apierrors.APIStatus
			if !errors.As(err, &st) || (st.Status().Code != http.StatusBadRequest && st.Status().Code != http.StatusRequestEntityTooLarge) {
				t.Fatalf("decodeApply(%q) = %v, want a 400 or 413", body, err)
			}
			return
		}
		b, err := json.Marshal(obj.Object)
		if err != nil {
			t.Fatalf("decodeApply(%q) = %v, which is not JSON: %v", body, obj.Object, err)
		}
		if len(b) > 4*maxAppliedBytes {
			t.Fatalf("decodeApply of %d bytes = %d bytes of JSON", len(body), len(b))
		}
		if obj.GetAPIVersion() == "" && obj.GetKind() == "" {
			obj.SetAPIVersion("v1")
			obj.SetKind("ConfigMap")
		}
		if merged, err := fm.Apply(live.DeepCopyObject(), obj, "second", false); err == nil {
			if _, err := json.Marshal(merged); err != nil {
				t.Fatalf("merge of %q is not JSON: %v", body, err)
			}
		} else if strings.Contains(err.Error(), "panic") {
			t.Fatal(fmt.Sprint(err))
		}
	})
}
