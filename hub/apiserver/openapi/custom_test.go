package openapi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	openapi_v2 "github.com/google/gnostic-models/openapiv2"
	openapi_v3 "github.com/google/gnostic-models/openapiv3"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// gadgetSchema is a custom resource's openAPIV3Schema, as JSON values.
func gadgetSchema(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(`{"type":"object","description":"A gadget.","properties":{
		"spec":{"type":"object","required":["size"],"properties":{"size":{"type":"integer","maximum":100},"note":{"type":"string","nullable":true}},
			"x-kubernetes-validations":[{"rule":"self.size > 0"}]},
		"status":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}}`), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestCustomResourceKinds: a kind described by a schema (a custom
// resource) gets definitions named as upstream names them, its schema as
// given (in v2 without what v2 lacks), ObjectMeta as its metadata, a list
// of it, and paths; the documents parse as clients parse them.
func TestCustomResourceKinds(t *testing.T) {
	gvk := schema.GroupVersionKind{Group: "example.outpost.dev", Version: "v1", Kind: "Gadget"}
	kinds := []Kind{
		{GVK: corev1.SchemeGroupVersion.WithKind("Namespace"), Plural: "namespaces", Object: &corev1.Namespace{}, List: &corev1.NamespaceList{}},
		{GVK: gvk, Plural: "gadgets", Namespaced: true, Schema: gadgetSchema(t), Subresources: []string{"status"}},
	}
	s, err := New(kinds)
	if err != nil {
		t.Fatal(err)
	}
	const def = "dev.outpost.example.v1.Gadget"
	v3 := fetchJSON(t, s.ServeV3, "/openapi/v3/apis/example.outpost.dev/v1")
	schemas := at(v3, "components", "schemas")
	if at(schemas, def, "properties", "spec", "properties", "size", "maximum") != float64(100) || at(schemas, def, "properties", "spec", "properties", "note", "nullable") != true {
		t.Errorf("v3 %s spec = %v", def, at(schemas, def, "properties", "spec"))
	}
	if at(schemas, def, "properties", "metadata", "allOf") == nil || at(schemas, "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta") == nil {
		t.Errorf("v3 %s metadata = %v, want ObjectMeta", def, at(schemas, def, "properties", "metadata"))
	}
	if str(schemas, def+"List", "properties", "items", "items", "$ref") != "#/components/schemas/"+def {
		t.Errorf("v3 list = %v", at(schemas, def+"List"))
	}
	if at(v3, "paths", "/apis/example.outpost.dev/v1/namespaces/{namespace}/gadgets/{name}/status") == nil {
		t.Error("v3: no status path")
	}
	v2 := fetchJSON(t, s.ServeV2, "/openapi/v2")
	if note := at(v2, "definitions", def, "properties", "spec", "properties", "note"); note == nil || at(note, "nullable") != nil {
		t.Errorf("v2 note = %v, want it without nullable", note)
	}
	if gvks, _ := at(v2, "definitions", def, extGVK).([]any); len(gvks) != 1 {
		t.Errorf("v2 %s gvk = %v", def, at(v2, "definitions", def, extGVK))
	}

	// The protobuf forms parse.
	m := http.NewServeMux()
	m.HandleFunc("/openapi/v2", s.ServeV2)
	m.HandleFunc("/openapi/v3/", s.ServeV3)
	srv := httptest.NewServer(m)
	defer srv.Close()
	var d3 openapi_v3.Document
	if err := proto.Unmarshal(get(t, srv.URL+"/openapi/v3/apis/example.outpost.dev/v1", mediaV3ProtoAt), &d3); err != nil {
		t.Errorf("v3 protobuf: %v", err)
	}
	var d2 openapi_v2.Document
	if err := proto.Unmarshal(get(t, srv.URL+"/openapi/v2", mediaV2Proto), &d2); err != nil {
		t.Errorf("v2 protobuf: %v", err)
	}

	if _, err := New([]Kind{{GVK: gvk, Plural: "gadgets", Schema: gadgetSchema(t), Object: &corev1.Namespace{}}}); err == nil {
		t.Error("New accepted a kind with both a schema and Go types")
	}
}
