package openapi

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	openapi_v2 "github.com/google/gnostic-models/openapiv2"
	openapi_v3 "github.com/google/gnostic-models/openapiv3"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/openapi"
	"k8s.io/client-go/openapi3"
	"k8s.io/client-go/rest"
	"k8s.io/kube-openapi/pkg/spec3"
	kproto "k8s.io/kube-openapi/pkg/util/proto"
)

// TestV2Protobuf fetches /openapi/v2 the way kubectl does (client-go's
// discovery client, gnostic protobuf) and reads it with kube-openapi's
// util/proto, which kubectl builds its v2 models with.
func TestV2Protobuf(t *testing.T) {
	srv := newTestServer(t)
	dc, err := discovery.NewDiscoveryClientForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	doc, err := dc.OpenAPISchema()
	if err != nil {
		t.Fatalf("OpenAPISchema() = %v", err)
	}
	if doc.GetSwagger() != "2.0" {
		t.Errorf("swagger = %q", doc.GetSwagger())
	}
	models, err := kproto.NewOpenAPIData(doc)
	if err != nil {
		t.Fatalf("proto.NewOpenAPIData: %v", err)
	}
	pod, ok := models.LookupModel("io.k8s.api.core.v1.Pod").(*kproto.Kind)
	if !ok {
		t.Fatalf("Pod model = %T, want *proto.Kind", models.LookupModel("io.k8s.api.core.v1.Pod"))
	}
	if _, ok := pod.Fields["spec"]; !ok {
		t.Errorf("Pod model fields = %v, want spec", pod.FieldOrder)
	}
	spec := models.LookupModel("io.k8s.api.core.v1.PodSpec").(*kproto.Kind)
	containers := spec.Fields["containers"].(*kproto.Array)
	if containers.GetExtensions()[extPatchMergeKey] != "name" {
		t.Errorf("containers extensions = %v", containers.GetExtensions())
	}
	if ref, ok := containers.SubType.(kproto.Reference); !ok || ref.Reference() != "io.k8s.api.core.v1.Container" {
		t.Errorf("containers items = %v", containers.SubType)
	}
	var patchHasFV bool
	for _, p := range doc.GetPaths().GetPath() {
		if p.GetName() != "/api/v1/namespaces/{namespace}/pods/{name}" {
			continue
		}
		for _, param := range p.GetValue().GetPatch().GetParameters() {
			if param.GetParameter().GetNonBodyParameter().GetQueryParameterSubSchema().GetName() == "fieldValidation" {
				patchHasFV = true
			}
		}
	}
	if !patchHasFV {
		t.Error("v2 pod patch has no fieldValidation query parameter")
	}
}

// TestV3ClientGo reads the v3 documents through client-go's openapi3
// root, as kubectl's field validation check and explain do, and uses
// their patch metadata for a strategic merge patch.
func TestV3ClientGo(t *testing.T) {
	srv := newTestServer(t)
	dc, err := discovery.NewDiscoveryClientForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	root := openapi3.NewRoot(dc.OpenAPIV3())
	gvs, err := root.GroupVersions()
	if err != nil {
		t.Fatalf("GroupVersions() = %v", err)
	}
	slices.SortFunc(gvs, func(a, b schema.GroupVersion) int { return strings.Compare(a.String(), b.String()) })
	if want := []schema.GroupVersion{{Group: "apps", Version: "v1"}, {Version: "v1"}}; !slices.Equal(gvs, want) {
		t.Errorf("GroupVersions() = %v, want %v", gvs, want)
	}
	core, err := root.GVSpec(schema.GroupVersion{Version: "v1"})
	if err != nil {
		t.Fatalf("GVSpec(v1) = %v", err)
	}
	pod := core.Components.Schemas["io.k8s.api.core.v1.Pod"]
	if pod == nil || pod.Extensions[extGVK] == nil {
		t.Fatalf("v1 Pod schema = %v", pod)
	}
	patch := core.Paths.Paths["/api/v1/namespaces/{namespace}/pods/{name}"].Patch
	if patch == nil || !slices.ContainsFunc(patch.Parameters, func(p *spec3.Parameter) bool { return p.Name == "fieldValidation" }) {
		t.Errorf("v3 pod patch = %v, want a fieldValidation parameter", patch)
	}
	if _, err := root.GVSpec(schema.GroupVersion{Group: "apps", Version: "v1"}); err != nil {
		t.Errorf("GVSpec(apps/v1) = %v", err)
	}

	// Patch metadata as kubectl apply reads it from v3.
	lookup := strategicpatch.PatchMetaFromOpenAPIV3{SchemaList: core.Components.Schemas, Schema: pod}
	before := `{"spec":{"containers":[{"name":"a","image":"a:1"},{"name":"b","image":"b:1"}]}}`
	after := `{"spec":{"containers":[{"name":"a","image":"a:1"},{"name":"b","image":"b:2"}]}}`
	p, err := strategicpatch.CreateTwoWayMergePatchUsingLookupPatchMeta([]byte(before), []byte(after), lookup)
	if err != nil {
		t.Fatalf("strategic merge patch: %v", err)
	}
	if want := `{"spec":{"$setElementOrder/containers":[{"name":"a"},{"name":"b"}],"containers":[{"image":"b:2","name":"b"}]}}`; string(p) != want {
		t.Errorf("patch = %s, want %s", p, want)
	}

	// Structured-merge-diff types, as client-go's apply extraction uses.
	tc, err := openapi.NewTypeConverter(dc.OpenAPIV3(), false)
	if err != nil {
		t.Fatalf("NewTypeConverter: %v", err)
	}
	obj := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Image: "a:1"}}}}
	obj.APIVersion, obj.Kind = "v1", "Pod"
	if _, err := tc.ObjectToTyped(obj); err != nil {
		t.Errorf("ObjectToTyped(pod) = %v", err)
	}
}

// TestV3Protobuf checks the v3 protobuf form parses with gnostic.
func TestV3Protobuf(t *testing.T) {
	srv := newTestServer(t)
	for _, accept := range []string{mediaV3ProtoAt, mediaV3Proto} {
		b := get(t, srv.URL+"/openapi/v3/apis/apps/v1", accept)
		var doc openapi_v3.Document
		if err := proto.Unmarshal(b, &doc); err != nil {
			t.Fatalf("unmarshal v3 protobuf: %v", err)
		}
		var found bool
		for _, s := range doc.GetComponents().GetSchemas().GetAdditionalProperties() {
			found = found || s.GetName() == "io.k8s.api.apps.v1.Deployment"
		}
		if doc.GetOpenapi() != "3.0.0" || !found {
			t.Errorf("v3 protobuf: openapi %q, Deployment found %v", doc.GetOpenapi(), found)
		}
	}
	var v2 openapi_v2.Document
	if err := proto.Unmarshal(get(t, srv.URL+"/openapi/v2", mediaV2Proto), &v2); err != nil || len(v2.GetDefinitions().GetAdditionalProperties()) == 0 {
		t.Errorf("v2 protobuf (current media type): %v, %d definitions", err, len(v2.GetDefinitions().GetAdditionalProperties()))
	}
}

func get(t *testing.T, url, accept string) []byte {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", accept)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s (%s) = %d %v %s", url, accept, resp.StatusCode, err, b)
	}
	if ct := resp.Header.Get("Content-Type"); accept != mediaJSON && !strings.Contains(ct, "protobuf") {
		t.Errorf("GET %s (%s): Content-Type %q", url, accept, ct)
	}
	return b
}

// The v3 discovery document is plain JSON in client-go's shape.
func TestV3Discovery(t *testing.T) {
	srv := newTestServer(t)
	var d struct {
		Paths map[string]struct {
			ServerRelativeURL string `json:"serverRelativeURL"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(get(t, srv.URL+"/openapi/v3", mediaJSON), &d); err != nil {
		t.Fatal(err)
	}
	u := d.Paths["apis/apps/v1"].ServerRelativeURL
	if !strings.HasPrefix(u, "/openapi/v3/apis/apps/v1?hash=") {
		t.Errorf("apps/v1 serverRelativeURL = %q", u)
	}
}
