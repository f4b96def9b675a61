package apiserver

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/outpost-mesh/outpost/hub/store"
)

// wholeList builds the response to a list the way the server did before
// lists were streamed: every object decoded into the typed list, as a
// Table or metadata when asked, and encoded whole by the serializer. The
// streamed response must be the same bytes.
func wholeList(t *testing.T, rs *rawServer, prefix string, o listOptions, out output, include metav1.IncludeObjectPolicy) []byte {
	t.Helper()
	res := rs.srv.res().byGVR[corev1.SchemeGroupVersion.WithResource("configmaps")]
	ctx := context.Background()
	rev := int64(0)
	start := ""
	if o.cont != nil {
		rev, start = o.cont.RV, o.cont.Start
	}
	var items []runtime.Object
	var next string
	for done := false; !done; {
		page, err := rs.store.List(ctx, prefix, store.ListOptions{Revision: rev, Continue: start, Limit: 7})
		if err != nil {
			t.Fatal(err)
		}
		rev = page.Revision
		for _, kv := range page.KVs {
			if o.limit > 0 && int64(len(items)) == o.limit {
				next, done = kv.Key, true
				break
			}
			obj, err := res.decode(kv)
			if err != nil {
				t.Fatal(err)
			}
			if res.matches(obj, o) {
				items = append(items, obj)
			}
		}
		if !page.More {
			done = true
		}
		start = page.Continue
	}
	lm := metav1.ListMeta{ResourceVersion: strconv.FormatInt(rev, 10)}
	if next != "" {
		lm.Continue = encodeContinue(rev, next)
		if o.label.Empty() && o.field.Empty() {
			// remainingItemCount: the keys from next on, counted on a
			// whole list at the same revision.
			all, err := rs.store.List(ctx, prefix, store.ListOptions{Revision: rev})
			if err != nil {
				t.Fatal(err)
			}
			var n int64
			for _, kv := range all.KVs {
				if kv.Key >= next {
					n++
				}
			}
			lm.RemainingItemCount = &n
		}
	}
	var whole runtime.Object
	switch {
	case out.table:
		tbl := &metav1.Table{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "Table"}, ListMeta: lm, ColumnDefinitions: res.columns(), Rows: []metav1.TableRow{}}
		for _, obj := range items {
			row := metav1.TableRow{Cells: res.row(obj)}
			switch include {
			case metav1.IncludeMetadata:
				row.Object.Object = partialMetadata(obj)
			case metav1.IncludeObject:
				row.Object.Object = obj
			}
			tbl.Rows = append(tbl.Rows, row)
		}
		whole = tbl
	case out.partial:
		pl := &metav1.PartialObjectMetadataList{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadataList"}, ListMeta: lm, Items: []metav1.PartialObjectMetadata{}}
		for _, obj := range items {
			pl.Items = append(pl.Items, *partialMetadata(obj))
		}
		whole = pl
	default:
		list := &corev1.ConfigMapList{ListMeta: lm}
		if err := meta.SetList(list, items); err != nil {
			t.Fatal(err)
		}
		list.GetObjectKind().SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMapList"))
		whole = list
	}
	var buf bytes.Buffer
	gv := whole.GetObjectKind().GroupVersionKind().GroupVersion()
	if err := testCodecs.EncoderForVersion(out.info.Serializer, gv).Encode(whole, &buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// testConfigMaps creates n config maps in ns1 of assorted shapes: labels,
// annotations, owners, finalizers, multi-line and binary data, names that
// need escaping in JSON.
func testConfigMaps(t *testing.T, rs *rawServer, n int) {
	t.Helper()
	for i := range n {
		cm := &corev1.ConfigMap{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%03d", i), Labels: map[string]string{"i": strconv.Itoa(i % 3)}},
			Data:       map[string]string{"k": strings.Repeat("v", i*37), "multi": "line one\nline two\n\n  indented <&>\n"},
		}
		if i%2 == 0 {
			cm.Annotations = map[string]string{"note": `quote " backslash \ tab	`}
			cm.Finalizers = []string{"example.com/f"}
			cm.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "o", UID: types.UID("u" + strconv.Itoa(i))}}
			cm.BinaryData = map[string][]byte{"bin": {0, 1, 2, 255}}
		}
		if i%5 == 0 {
			cm.GenerateName = "gen-"
		}
		var body bytes.Buffer
		if err := testCodecs.LegacyCodec(corev1.SchemeGroupVersion).Encode(cm, &body); err != nil {
			t.Fatal(err)
		}
		if code, resp := rs.do(t, "POST", "/api/v1/namespaces/ns1/configmaps", "application/json", body.String()); code != 201 {
			t.Fatalf("create = %d %s", code, resp)
		}
	}
}

// TestStreamedListsAreWholeLists: every form of list response, streamed,
// is byte for byte what the serializer writes for the whole list: JSON,
// YAML and protobuf; objects, metadata and Tables; with limits, continue
// tokens and selectors.
func TestStreamedListsAreWholeLists(t *testing.T) {
	rs := startRaw(t, 0)
	testConfigMaps(t, rs, 40)
	res := rs.srv.res().byGVR[corev1.SchemeGroupVersion.WithResource("configmaps")]
	const prefix = "/registry/configmaps/"

	get := func(t *testing.T, path, accept string) (int, []byte, string) {
		req, _ := http.NewRequest("GET", rs.url+path, nil)
		req.Header.Set("Accept", accept)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b, resp.Header.Get("Content-Type")
	}
	forms := []struct {
		accept string
		out    output
	}{
		{"application/json", output{info: testMedia("application/json")}},
		{"application/yaml", output{info: testMedia("application/yaml")}},
		{"application/vnd.kubernetes.protobuf", output{info: testMedia("application/vnd.kubernetes.protobuf")}},
		{"application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1", output{info: testMedia("application/json"), partial: true}},
		{"application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1", output{info: testMedia("application/vnd.kubernetes.protobuf"), partial: true}},
		{"application/json;as=Table;g=meta.k8s.io;v=v1", output{info: testMedia("application/json"), table: true}},
		{"application/yaml;as=Table;g=meta.k8s.io;v=v1", output{info: testMedia("application/yaml"), table: true}},
	}
	queries := []string{"", "limit=7", "limit=40", "limit=1000", "labelSelector=i%3D1", "labelSelector=i%3D2&limit=4", "fieldSelector=metadata.name%3Dcm-004", "labelSelector=i%3Dnone"}
	for _, form := range forms {
		for _, query := range queries {
			includes := []string{""}
			if form.out.table {
				includes = []string{"", "includeObject=None", "includeObject=Object"}
			}
			for _, inc := range includes {
				q := strings.Trim(query+"&"+inc, "&")
				t.Run(form.accept+"?"+q, func(t *testing.T) {
					path := "/api/v1/namespaces/ns1/configmaps?" + q
					// Page through, comparing each page.
					for page := 0; ; page++ {
						code, got, ct := get(t, path, form.accept)
						if code != 200 {
							t.Fatalf("GET %s = %d %s", path, code, got)
						}
						if want := form.out.info.MediaType + form.out.asParam(); ct != want {
							t.Errorf("Content-Type = %q, want %q", ct, want)
						}
						vals, _ := url.ParseQuery(strings.SplitN(path, "?", 2)[1])
						r := httptest.NewRequest("GET", path, nil)
						rq := &request{s: rs.srv, r: r, res: res, verb: "list", ri: requestInfo{namespace: "ns1"}}
						o, err := rq.parseListOptions()
						if err != nil {
							t.Fatal(err)
						}
						include := metav1.IncludeObjectPolicy(vals.Get("includeObject"))
						if include == "" {
							include = metav1.IncludeMetadata
						}
						want := wholeList(t, rs, prefix+"ns1/", o, form.out, include)
						if !bytes.Equal(got, want) {
							t.Fatalf("page %d of GET %s (%s):\n got %d bytes %.400q\nwant %d bytes %.400q", page, path, form.accept, len(got), got, len(want), want)
						}
						cont := continueOf(t, got, form.out)
						if cont == "" {
							break
						}
						vals.Set("continue", cont)
						path = "/api/v1/namespaces/ns1/configmaps?" + vals.Encode()
					}
				})
			}
		}
	}
}

// continueOf returns the continue token of a list response.
func continueOf(t *testing.T, body []byte, out output) string {
	t.Helper()
	var into runtime.Object = &metav1.PartialObjectMetadataList{}
	switch {
	case out.table:
		into = &metav1.Table{}
	case !out.partial:
		into = &corev1.ConfigMapList{}
	}
	if _, _, err := testCodecs.UniversalDeserializer().Decode(body, nil, into); err != nil {
		if out.table { // no protobuf Table: JSON or YAML
			if _, _, err := testCodecs.UniversalDecoder().Decode(body, nil, into); err != nil {
				t.Fatalf("decode list: %v", err)
			}
		} else {
			t.Fatalf("decode list: %v", err)
		}
	}
	lm, err := meta.ListAccessor(into)
	if err != nil {
		t.Fatal(err)
	}
	return lm.GetContinue()
}

// TestProtoItem: the object's message made from its stored bytes is what
// the serializer writes for the decoded object with its resourceVersion,
// whatever its metadata holds.
func TestProtoItem(t *testing.T) {
	res := &resourceInfo{Resource: Resource{GroupVersion: corev1.SchemeGroupVersion, Kind: "Pod", New: func() runtime.Object { return &corev1.Pod{} }}, gvk: corev1.SchemeGroupVersion.WithKind("Pod"), codec: codec{media: testCodecs.SupportedMediaTypes(), storage: testStorage}}
	zero := int64(0)
	for i, m := range []metav1.ObjectMeta{
		{},
		{Name: "a"},
		{Name: "a", Namespace: "ns", UID: "u", Generation: 3, Labels: map[string]string{"x": "y"}},
		{Name: strings.Repeat("n", 300), Annotations: map[string]string{"big": strings.Repeat("a", 70_000)}},
		{Name: "b", GenerateName: "b-", SelfLink: "/x", DeletionGracePeriodSeconds: &zero, Finalizers: []string{"f"}, ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m"}}},
		{Name: "c", ResourceVersion: "99"}, // a stored resourceVersion is replaced
	} {
		pod := &corev1.Pod{ObjectMeta: m, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}}}
		pod.SetGroupVersionKind(res.gvk)
		var stored bytes.Buffer
		if err := testCodecs.EncoderForVersion(testStorage, corev1.SchemeGroupVersion).Encode(pod, &stored); err != nil {
			t.Fatal(err)
		}
		for _, rv := range []string{"1", "123456789012", strings.Repeat("9", 200)} {
			p, err := newProtoItem(stored.Bytes(), rv)
			if err != nil {
				t.Fatalf("object %d: newProtoItem = %v", i, err)
			}
			dec, err := res.decode(store.KeyValue{Value: stored.Bytes()})
			if err != nil {
				t.Fatal(err)
			}
			dec.(*corev1.Pod).ResourceVersion = rv
			want, err := dec.(*corev1.Pod).Marshal()
			if err != nil {
				t.Fatal(err)
			}
			if got := p.appendTo(nil); !bytes.Equal(got, want) || p.size() != len(want) {
				t.Errorf("object %d rv %.20s: protoItem = %d bytes (size %d), want %d bytes", i, rv, len(got), p.size(), len(want))
			}
			pm, _ := partialMetadata(dec).Marshal()
			if got := p.appendMeta(nil); !bytes.Equal(got, pm) || p.metaField() != len(pm) {
				t.Errorf("object %d rv %.20s: metadata = %d bytes, want %d", i, rv, len(got), len(pm))
			}
		}
	}
}

// FuzzProtoItem: any bytes are refused or made into an item of the size
// reported, never a panic.
func FuzzProtoItem(f *testing.F) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: map[string]string{"x": "y"}}}
	pod.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Pod"))
	var stored bytes.Buffer
	if err := testCodecs.EncoderForVersion(testStorage, corev1.SchemeGroupVersion).Encode(pod, &stored); err != nil {
		f.Fatal(err)
	}
	f.Add(stored.Bytes())
	f.Add([]byte("k8s\x00"))
	f.Add([]byte("k8s\x00\x12\x02\x0a\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := newProtoItem(b, "42")
		if err != nil {
			return
		}
		if got := p.appendTo(nil); len(got) != p.size() {
			t.Fatalf("item of %q = %d bytes, size %d", b, len(got), p.size())
		}
		if got := p.appendMeta(nil); len(got) != p.metaField() {
			t.Fatalf("metadata of %q = %d bytes, size %d", b, len(got), p.metaField())
		}
	})
}

// TestDeleteCollection: a delete of a collection removes what its
// selectors select and answers with the list of what it removed, in the
// form asked.
func TestDeleteCollection(t *testing.T) {
	rs := startRaw(t, 0)
	testConfigMaps(t, rs, 12)
	for _, tc := range []struct {
		accept, selector string
		left             int
	}{
		{"application/json", "i=0", 8},
		{"application/vnd.kubernetes.protobuf", "i=1", 4},
		{"application/json;as=Table;g=meta.k8s.io;v=v1", "i=2", 0},
	} {
		req, _ := http.NewRequest("DELETE", rs.url+"/api/v1/namespaces/ns1/configmaps?labelSelector="+url.QueryEscape(tc.selector), nil)
		req.Header.Set("Accept", tc.accept)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("DELETE %s (%s) = %d %s", tc.selector, tc.accept, resp.StatusCode, body)
		}
		var n int
		if strings.Contains(tc.accept, "Table") {
			var tbl metav1.Table
			if _, _, err := testCodecs.UniversalDecoder().Decode(body, nil, &tbl); err != nil {
				t.Fatal(err)
			}
			n = len(tbl.Rows)
		} else {
			var list corev1.ConfigMapList
			if _, _, err := testCodecs.UniversalDeserializer().Decode(body, nil, &list); err != nil {
				t.Fatalf("decode %.200q: %v", body, err)
			}
			for _, cm := range list.Items {
				if cm.Labels["i"] != strings.TrimPrefix(tc.selector, "i=") {
					t.Errorf("deleted %s with labels %v, selector %s", cm.Name, cm.Labels, tc.selector)
				}
			}
			n = len(list.Items)
		}
		if n != 4 {
			t.Errorf("DELETE %s answered %d objects, want 4", tc.selector, n)
		}
		page, err := rs.store.List(context.Background(), "/registry/configmaps/ns1/", store.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// Half of them hold a finalizer, and stay, marked for deletion.
		live := 0
		for _, kv := range page.KVs {
			obj, _ := rs.srv.res().byGVR[corev1.SchemeGroupVersion.WithResource("configmaps")].decode(kv)
			if om(obj).GetDeletionTimestamp() == nil {
				live++
			}
		}
		if live != tc.left {
			t.Errorf("after DELETE %s, %d config maps not being deleted, want %d", tc.selector, live, tc.left)
		}
	}
}
