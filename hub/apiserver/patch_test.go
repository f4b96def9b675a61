package apiserver

import (
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
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
			// may add before they are stopped.
			if limit := allocSlack * (40*uint64(len(tc.patch)) + 16*maxPatchCopyBytes); alloc > limit {
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

// TestArrayElemBound: every '[' and ',' outside strings counts.
func TestArrayElemBound(t *testing.T) {
	for _, tc := range []struct {
		doc  string
		want int64
	}{
		{`{}`, 0},
		{`[]`, 1},
		{`[1,2,3]`, 3},
		{`{"a":[1,[2,3]],"b":"[,\",]"}`, 5},
	} {
		if got := arrayElemBound([]byte(tc.doc)); got != tc.want {
			t.Errorf("arrayElemBound(%s) = %d, want %d", tc.doc, got, tc.want)
		}
	}
}

// TestJSONPatchWork: the estimate counts the arrays' elements for every
// operation that shifts an array, and nothing for appends, map keys or
// reads.
func TestJSONPatchWork(t *testing.T) {
	doc := []byte(`{"a":[1,2,3,4,5,6,7],"m":{"k":"v"}}`)
	for _, tc := range []struct {
		patch  string
		shifts int64
	}{
		{`[{"op":"add","path":"/a/-","value":1}]`, 0},
		{`[{"op":"add","path":"/m/x","value":1}]`, 0},
		{`[{"op":"replace","path":"/a/0","value":1},{"op":"test","path":"/a/1","value":2}]`, 0},
		{`[{"op":"add","path":"/a/0","value":1}]`, 1},
		{`[{"op":"remove","path":"/a/3"},{"op":"move","from":"/a/1","path":"/m/y"}]`, 2},
		{`[{"op":"copy","from":"/m/k","path":"/a/2"}]`, 1},
	} {
		p, err := jsonpatch.DecodePatch([]byte(tc.patch))
		if err != nil {
			t.Fatal(err)
		}
		want := int64(len(p)) + tc.shifts*4*(arrayElemBound(doc)+arrayElemBound([]byte(tc.patch)))
		if got := jsonPatchWork(doc, []byte(tc.patch), p); got != want {
			t.Errorf("jsonPatchWork(%s) = %d, want %d", tc.patch, got, want)
		}
	}
}

// TestSMPWork: the estimate grows with the square of the lists merged by
// key, and only with the size of what is replaced or added whole.
func TestSMPWork(t *testing.T) {
	pod := func(env int) map[string]any {
		p := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}}
		for i := range env {
			p.Spec.Containers[0].Env = append(p.Spec.Containers[0].Env, corev1.EnvVar{Name: fmt.Sprint(i)})
		}
		b, _ := json.Marshal(p)
		var m map[string]any
		json.Unmarshal(b, &m)
		return m
	}
	patch := func(s string) map[string]any {
		var m map[string]any
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	const unbounded = 1 << 62
	small := smpWork(pod(10), patch(`{"spec":{"containers":[{"name":"c","env":[{"name":"x"}]}]}}`), &corev1.Pod{}, unbounded)
	big := smpWork(pod(1000), patch(`{"spec":{"containers":[{"name":"c","env":[{"name":"x"}]}]}}`), &corev1.Pod{}, unbounded)
	if small > 10_000 || big < 1000*1000 || big > maxPatchWork {
		t.Errorf("smpWork of one env var into 10 and 1000 = %d, %d; want under 10000, and between 1e6 and %d", small, big, maxPatchWork)
	}
	// A list the original lacks is taken whole; an atomic one (args) is
	// replaced whole.
	added := smpWork(pod(0), patch(`{"spec":{"volumes":[`+repeat(`{"name":"v"}`, 5000)+`]}}`), &corev1.Pod{}, unbounded)
	replaced := smpWork(pod(0), patch(`{"spec":{"containers":[{"name":"c","args":[`+repeat(`"a"`, 5000)+`]}]}}`), &corev1.Pod{}, unbounded)
	if added > 10_000 || replaced > 10_000 {
		t.Errorf("smpWork of 5000 new volumes, 5000 args = %d, %d; want each under 10000", added, replaced)
	}
	// Past its limit, the estimate says so.
	if got := smpWork(pod(3000), patch(`{"spec":{"containers":[{"name":"c","env":[{"name":"x"}]}]}}`), &corev1.Pod{}, 1000); got <= 1000 {
		t.Errorf("smpWork of one env var into 3000 with limit 1000 = %d, want over 1000", got)
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
