package apiserver

import (
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// allocated returns the bytes the process allocated while f ran.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// copyAmplifier is the JSON patch of the report: n copies of /data into
// itself, each doubling the document.
func copyAmplifier(n int) string {
	var ops []map[string]string
	for i := range n {
		ops = append(ops, map[string]string{"op": "copy", "from": "/data", "path": fmt.Sprintf("/data/c%d", i)})
	}
	b, _ := json.Marshal(ops)
	return string(b)
}

// repeat returns n copies of item joined by commas.
func repeat(item string, n int) string {
	return strings.TrimSuffix(strings.Repeat(item+",", n), ",")
}

// TestPatchBounds: patches whose cost is out of proportion with their size
// are refused at once with 413, before they are applied, and the server
// allocates a bounded multiple of what it was sent; patches that do not
// apply say why; patches of the same kinds within the bounds still work.
func TestPatchBounds(t *testing.T) {
	rs := startRaw(t, 0)
	const path = "/api/v1/namespaces/ns1/configmaps/"
	create := func(name, meta string, data string) {
		t.Helper()
		body := fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":%q%s},"data":%s}`, name, meta, data)
		if code, resp := rs.do(t, "POST", "/api/v1/namespaces/ns1/configmaps", "application/json", body); code != 201 {
			t.Fatalf("create %s = %d %s", name, code, resp)
		}
	}
	create("amp", "", `{"k":"`+strings.Repeat("x", 1000)+`"}`)
	create("owned", `,"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"o","uid":"u0"}],"finalizers":["example.com/f0"]`, `{}`)

	var refs []string
	for i := range 3000 {
		refs = append(refs, fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","name":"o","uid":"u%d"}`, i+1))
	}
	var finalizers []string
	for i := range 3000 {
		finalizers = append(finalizers, fmt.Sprintf(`"example.com/f%d"`, i+1))
	}
	const (
		jp  = "application/json-patch+json"
		smp = "application/strategic-merge-patch+json"
		mp  = "application/merge-patch+json"
	)
	for _, tc := range []struct {
		name, object, ct, patch string
		code                    int
		reason                  metav1.StatusReason
		msg                     string // in the Status message
	}{
		{"copies doubling the document", "amp", jp, copyAmplifier(23), 413, metav1.StatusReasonRequestEntityTooLarge, "accumulated size increase of copy"},
		{"too many operations", "amp", jp, "[" + repeat(`{"op":"test","path":"/data/k","value":"x"}`, 10_001) + "]", 413, metav1.StatusReasonRequestEntityTooLarge, "maximum operations in a JSON patch is 10000, got 10001"},
		{"inserts into a long array", "amp", jp, `[{"op":"add","path":"/metadata/finalizers","value":[` + repeat(`"a"`, 200_000) + `]},` + repeat(`{"op":"add","path":"/metadata/finalizers/0","value":"b"}`, 5000) + "]", 413, metav1.StatusReasonRequestEntityTooLarge, "copy them whole"},
		{"merge of a long keyed list", "owned", smp, `{"metadata":{"ownerReferences":[` + strings.Join(refs, ",") + `]}}`, 413, metav1.StatusReasonRequestEntityTooLarge, "merges long lists"},
		{"merge of a long scalar list", "owned", smp, `{"metadata":{"finalizers":[` + strings.Join(finalizers, ",") + `]}}`, 413, metav1.StatusReasonRequestEntityTooLarge, "merges long lists"},
		{"long element order", "owned", smp, `{"metadata":{"$setElementOrder/ownerReferences":[` + repeat(`{"uid":"u0"}`, 5000) + `]}}`, 413, metav1.StatusReasonRequestEntityTooLarge, "merges long lists"},
		{"unknown operation", "amp", jp, `[{"op":"explode","path":"/data"}]`, 422, metav1.StatusReasonInvalid, `"op" is "explode", not one of add, remove, replace, move, copy, test`},
		{"operation without op", "amp", jp, `[{"path":"/data"}]`, 422, metav1.StatusReasonInvalid, `operation 0 is invalid: it has no "op"`},
		{"add without value", "amp", jp, `[{"op":"test","path":"/data","value":{}},{"op":"add","path":"/data/x"}]`, 422, metav1.StatusReasonInvalid, `operation 1 is invalid: a add operation needs a "value"`},
		{"copy without from", "amp", jp, `[{"op":"copy","path":"/data/x"}]`, 422, metav1.StatusReasonInvalid, `needs a "from" string`},
		{"missing path", "amp", jp, `[{"op":"remove","path":"/data/nope"}]`, 422, metav1.StatusReasonInvalid, "the JSON patch cannot be applied to the object: "},
		{"not a list of operations", "amp", jp, `{"op":"add"}`, 400, metav1.StatusReasonBadRequest, "not a list of operations"},
		{"strategic patch not an object", "amp", smp, `[1]`, 400, metav1.StatusReasonBadRequest, "not a JSON object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var code int
			var body string
			alloc := allocated(func() { code, body = rs.do(t, "PATCH", path+tc.object, tc.ct, tc.patch) })
			var st metav1.Status
			if err := json.Unmarshal([]byte(body), &st); err != nil || st.Kind != "Status" {
				t.Fatalf("PATCH = %d with body %.300q, want a Status", code, body)
			}
			if code != tc.code || st.Reason != tc.reason || !strings.Contains(st.Message, tc.msg) {
				t.Fatalf("PATCH = %d %s %q, want %d %s with %q", code, st.Reason, st.Message, tc.code, tc.reason, tc.msg)
			}
			// The request, its decoding and the server's JSON of the
			// object, a small multiple of what was sent, and what copies
			// may add before they are stopped (1.5 MiB).
			if limit := allocSlack * (40*uint64(len(tc.patch)) + 24<<20); alloc > limit {
				t.Errorf("PATCH of %d bytes allocated %d MB, want under %d MB", len(tc.patch), alloc>>20, limit>>20)
			}
		})
	}

	// The same kinds of patch within the bounds apply.
	for _, tc := range []struct{ name, object, ct, patch, want string }{
		{"a few copies", "amp", jp, `[{"op":"copy","from":"/data/k","path":"/data/c0"},{"op":"copy","from":"/data/c0","path":"/data/c1"}]`, `"c1":"xxx`},
		{"appends to an array", "amp", jp, `[{"op":"add","path":"/metadata/finalizers","value":[]},` + repeat(`{"op":"add","path":"/metadata/finalizers/-","value":"example.com/b"}`, 5000) + "]", `"example.com/b"`},
		{"keyed list merge", "owned", smp, `{"metadata":{"ownerReferences":[` + strings.Join(refs[:200], ",") + `]}}`, `"uid":"u200"`},
		{"merge patch of many keys", "amp", mp, `{"data":{` + manyKeys(1000) + `}}`, `"k999":"v"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if code, body := rs.do(t, "PATCH", path+tc.object, tc.ct, tc.patch); code != 200 || !strings.Contains(body, tc.want) {
				t.Fatalf("PATCH = %d %.300s, want 200 with %s", code, body, tc.want)
			}
		})
	}
}

// manyKeys returns n JSON object members "kI":"v".
func manyKeys(n int) string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf(`"k%d":"v"`, i)
	}
	return strings.Join(keys, ",")
}
