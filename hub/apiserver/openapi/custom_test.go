package openapi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
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
	// As upstream's v2: a nullable value untyped, an object keeping
	// unknown fields untyped and without properties; v3 keeps them.
	if note := at(v2, "definitions", def, "properties", "spec", "properties", "note"); at(note, "type") != nil {
		t.Errorf("v2 note = %v, want it untyped", note)
	}
	if status := at(v2, "definitions", def, "properties", "status"); at(status, "type") != nil || at(status, "x-kubernetes-preserve-unknown-fields") != true {
		t.Errorf("v2 status = %v, want it untyped, keeping unknown fields", status)
	}
	if at(schemas, def, "properties", "status", "type") != "object" {
		t.Errorf("v3 status = %v, want it an object", at(schemas, def, "properties", "status"))
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

// TestCustomResourceKeepingUnknownFieldsAtRoot: OpenAPI v2 describes a
// kind whose schema keeps unknown fields at its root as a bare object, as
// upstream does (kubectl's v2 validation would refuse every field not
// listed); v3 describes its schema.
func TestCustomResourceKeepingUnknownFieldsAtRoot(t *testing.T) {
	gvk := schema.GroupVersionKind{Group: "example.outpost.dev", Version: "v1", Kind: "Blob"}
	s, err := New([]Kind{{GVK: gvk, Plural: "blobs", Schema: map[string]any{
		"type": "object", "x-kubernetes-preserve-unknown-fields": true, "description": "Anything.",
		"properties": map[string]any{"spec": map[string]any{"type": "object"}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	const def = "dev.outpost.example.v1.Blob"
	v2 := fetchJSON(t, s.ServeV2, "/openapi/v2")
	got := at(v2, "definitions", def).(map[string]any)
	want := map[string]any{"type": "object", extGVK: []any{map[string]any{"group": "example.outpost.dev", "version": "v1", "kind": "Blob"}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("v2 %s = %v, want %v", def, got, want)
	}
	v3 := fetchJSON(t, s.ServeV3, "/openapi/v3/apis/example.outpost.dev/v1")
	if at(v3, "components", "schemas", def, "properties", "spec") == nil || at(v3, "components", "schemas", def, "description") != "Anything." {
		t.Errorf("v3 %s = %v, want its schema", def, at(v3, "components", "schemas", def))
	}
}
