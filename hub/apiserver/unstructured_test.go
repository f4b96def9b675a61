package apiserver

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/outpost-mesh/outpost/hub/store/badgerstore"
)

// widgets are a resource without Go types, served as custom resources
// are: objects are *unstructured.Unstructured, kept in the store as JSON.
var widgetsGVR = schema.GroupVersionResource{Group: "example.outpost.dev", Version: "v1", Resource: "widgets"}

func widgetResource() Resource {
	return Resource{
		GroupVersion: widgetsGVR.GroupVersion(), Kind: "Widget", Plural: "widgets", Singular: "widget", Namespaced: true,
		New:      func() runtime.Object { return &unstructured.Unstructured{} },
		NewList:  func() runtime.Object { return &unstructured.UnstructuredList{} },
		Encoding: EncodingJSON, Status: true, Generation: true,
		Rules: testRules{},
	}
}

func widget(name string, size int64) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "example.outpost.dev/v1", "kind": "Widget",
		"metadata": map[string]interface{}{"name": name, "labels": map[string]interface{}{"size": "small"}},
		"spec":     map[string]interface{}{"size": size, "tags": []interface{}{"a", "b"}},
	}}
}

// TestUnstructuredResource serves a resource whose objects have no Go
// type through the generic machinery: create, get, list, watch, update,
// status, patch and Tables work as for typed ones; the store keeps JSON
// without resourceVersion; and what custom resources lack upstream
// (protobuf, strategic merge patch) is refused with upstream's codes.
func TestUnstructuredResource(t *testing.T) {
	h := startTestServer(t, func(c *Config) { c.Resources = append(c.Resources, widgetResource()) })
	ctx := context.Background()
	if _, err := h.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dc, err := dynamic.NewForConfig(&rest.Config{Host: h.url, QPS: -1})
	if err != nil {
		t.Fatal(err)
	}
	widgets := dc.Resource(widgetsGVR).Namespace("ns1")

	w, err := widgets.Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	created, err := widgets.Create(ctx, widget("w1", 3), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if created.GetUID() == "" || created.GetResourceVersion() == "" || created.GetGeneration() != 1 {
		t.Fatalf("created %v lacks system metadata", created.Object["metadata"])
	}
	kv, err := h.store.Get(ctx, KeyPrefix(widgetsGVR.GroupResource())+"ns1/w1", 0)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(kv.Value, []byte("{")) || bytes.Contains(kv.Value, []byte("resourceVersion")) {
		t.Fatalf("stored %s, want JSON without resourceVersion", kv.Value)
	}
	var stored unstructured.Unstructured
	if err := DecodeStored(kv.Value, &stored); err != nil || stored.GetName() != "w1" {
		t.Fatalf("DecodeStored = %v, %v", stored.Object, err)
	}

	got, err := widgets.Get(ctx, "w1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if size, _, _ := unstructured.NestedInt64(got.Object, "spec", "size"); size != 3 {
		t.Fatalf("get: spec.size = %d, want 3", size)
	}

	// A spec change bumps the generation; a status update changes only
	// the status, and an update keeps the stored status.
	unstructured.SetNestedField(got.Object, int64(4), "spec", "size")
	unstructured.SetNestedField(got.Object, "ignored", "status", "phase")
	updated, err := widgets.Update(ctx, got, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, has := updated.Object["status"]; has || updated.GetGeneration() != 2 {
		t.Fatalf("update: status %v, generation %d; want no status, generation 2", updated.Object["status"], updated.GetGeneration())
	}
	unstructured.SetNestedField(updated.Object, "Ready", "status", "phase")
	unstructured.SetNestedField(updated.Object, int64(99), "spec", "size")
	st, err := widgets.UpdateStatus(ctx, updated, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if phase, _, _ := unstructured.NestedString(st.Object, "status", "phase"); phase != "Ready" {
		t.Fatalf("status update: phase %q, want Ready", phase)
	}
	if size, _, _ := unstructured.NestedInt64(st.Object, "spec", "size"); size != 4 || st.GetGeneration() != 2 {
		t.Fatalf("status update: spec.size %d generation %d, want 4 and 2", size, st.GetGeneration())
	}

	patched, err := widgets.Patch(ctx, "w1", types.MergePatchType, []byte(`{"spec":{"size":5}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if size, _, _ := unstructured.NestedInt64(patched.Object, "spec", "size"); size != 5 {
		t.Fatalf("merge patch: spec.size %d, want 5", size)
	}
	if _, err := widgets.Patch(ctx, "w1", types.StrategicMergePatchType, []byte(`{"spec":{"size":6}}`), metav1.PatchOptions{}); !apierrors.IsUnsupportedMediaType(err) {
		t.Fatalf("strategic merge patch = %v, want 415", err)
	}

	if _, err := widgets.Create(ctx, widget("w2", 1), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	list, err := widgets.List(ctx, metav1.ListOptions{LabelSelector: "size=small", Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.GetContinue() == "" || list.Items[0].GetName() != "w1" {
		t.Fatalf("list page = %d items, continue %q", len(list.Items), list.GetContinue())
	}

	want := []watch.EventType{watch.Added, watch.Modified, watch.Modified, watch.Modified, watch.Added}
	deadline := time.After(10 * time.Second)
	for i, typ := range want {
		select {
		case ev := <-w.ResultChan():
			if ev.Type != typ {
				t.Fatalf("watch event %d = %s, want %s", i, ev.Type, typ)
			}
			if _, ok := ev.Object.(*unstructured.Unstructured); !ok {
				t.Fatalf("watch event %d holds %T", i, ev.Object)
			}
		case <-deadline:
			t.Fatalf("watch: %d of %d events seen", i, len(want))
		}
	}

	// Bodies: JSON and YAML, not protobuf, as upstream serves custom
	// resources; and Tables.
	base := h.url + "/apis/example.outpost.dev/v1/namespaces/ns1/widgets"
	for _, tc := range []struct {
		method, path, accept, contentType, body string
		code                                    int
		want                                    string
	}{
		{"GET", "/w1", "application/vnd.kubernetes.protobuf", "", "", http.StatusNotAcceptable, ""},
		{"GET", "/w1", "application/vnd.kubernetes.protobuf, application/json", "", "", http.StatusOK, `"kind":"Widget"`},
		{"GET", "/w1", "application/yaml", "", "", http.StatusOK, "kind: Widget"},
		{"GET", "", "application/json;as=Table;v=v1;g=meta.k8s.io", "", "", http.StatusOK, `"kind":"Table"`},
		{"POST", "", "", "application/vnd.kubernetes.protobuf", "k8s\x00", http.StatusUnsupportedMediaType, "application/json, application/yaml"},
		{"POST", "", "", "application/yaml", "apiVersion: example.outpost.dev/v1\nkind: Widget\nmetadata:\n  name: w3\n", http.StatusCreated, `"name":"w3"`},
	} {
		req, err := http.NewRequest(tc.method, base+tc.path, strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		if tc.accept != "" {
			req.Header.Set("Accept", tc.accept)
		}
		if tc.contentType != "" {
			req.Header.Set("Content-Type", tc.contentType)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.code || !strings.Contains(string(b), tc.want) {
			t.Errorf("%s %s (Accept %q, Content-Type %q) = %d %s, want %d with %q", tc.method, tc.path, tc.accept, tc.contentType, resp.StatusCode, b, tc.code, tc.want)
		}
	}

	if err := widgets.Delete(ctx, "w1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := widgets.Get(ctx, "w1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("get after delete = %v, want NotFound", err)
	}
}

// TestUnregisteredType: a resource of Go types its AddToScheme does not
// register is a mistake New reports, not a server that fails on the first
// write.
func TestUnregisteredType(t *testing.T) {
	r := testResources()
	r[1].AddToScheme = nil
	r[0].AddToScheme = func(s *runtime.Scheme) error {
		s.AddKnownTypes(corev1.SchemeGroupVersion, &corev1.Namespace{}, &corev1.NamespaceList{})
		return nil
	}
	r[2].AddToScheme = r[0].AddToScheme
	st, err := badgerstore.Open(badgerstore.DefaultConfig(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	_, err = New(Config{Store: st, Resources: r})
	if err == nil || !strings.Contains(err.Error(), "ConfigMap") {
		t.Fatalf("New with an unregistered ConfigMap = %v, want an error naming it", err)
	}
}
