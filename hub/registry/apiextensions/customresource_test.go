package apiextensions_test

import (
	"context"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/metadata"
	"reflect"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/outpost-mesh/outpost/hub/registry/apiextensions"
	"github.com/outpost-mesh/outpost/hub/registry/typed/typedtest"
)

// servedWidgets serves widgetCRD's custom resources, its defaults
// applied as the CRD API applies them.
func servedWidgets(t *testing.T) *testServer {
	t.Helper()
	crd := widgetCRD()
	apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(crd)
	rs, err := apiextensions.CustomResources(crd, nil)
	if err != nil {
		t.Fatalf("CustomResources: %v", err)
	}
	return serve(t, rs...)
}

func widgetObject(name string, spec map[string]interface{}) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "example.outpost.dev/v1", "kind": "Widget",
		"metadata": map[string]interface{}{"name": name},
		"spec":     spec,
	}}
}

// TestCustomResourceSchema: objects are defaulted and pruned by the
// schema, refused with upstream's paths and messages where the schema or
// a CEL rule (a transition rule too) refuses them, and keep their status
// to the status subresource.
func TestCustomResourceSchema(t *testing.T) {
	s := servedWidgets(t)
	ctx := context.Background()
	widgets := s.dynamic.Resource(widgetsGVR).Namespace("default")

	in := widgetObject("w1", map[string]interface{}{"replicas": int64(3), "unknown": "x", "extra": map[string]interface{}{"anything": "kept"}})
	in.Object["status"] = map[string]interface{}{"phase": "Sneaky"}
	in.Object["toplevel"] = "pruned"
	w, err := widgets.Create(ctx, in, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	spec, _, _ := unstructured.NestedMap(w.Object, "spec")
	want := map[string]interface{}{"replicas": int64(3), "color": "blue", "extra": map[string]interface{}{"anything": "kept"}}
	if !reflect.DeepEqual(spec, want) || w.Object["status"] != nil || w.Object["toplevel"] != nil || w.GetGeneration() != 1 {
		t.Errorf("created %v, want spec %v without status or unknown fields, generation 1", w.Object, want)
	}

	for _, tt := range []struct {
		name string
		spec map[string]interface{}
		want string
	}{
		{"too many replicas", map[string]interface{}{"replicas": int64(200)},
			"spec.replicas: Invalid value: 200: spec.replicas in body should be less than or equal to 100"},
		{"wrong type", map[string]interface{}{"replicas": "three"},
			`spec.replicas: Invalid value: "string": spec.replicas in body must be of type integer: "string"`},
		{"CEL rule", map[string]interface{}{"replicas": int64(2), "minReplicas": int64(5)},
			"spec: Invalid value: replicas must be at least minReplicas"},
		{"list map duplicate", map[string]interface{}{"ports": []interface{}{map[string]interface{}{"name": "a"}, map[string]interface{}{"name": "a"}}},
			`spec.ports[1]: Duplicate value: {"name":"a"}`},
	} {
		_, err := widgets.Create(ctx, widgetObject("bad", tt.spec), metav1.CreateOptions{})
		typedtest.Causes(t, "create "+tt.name, err)
		if !strings.Contains(err.Error(), tt.want) {
			t.Errorf("create (%s) = %v, want %q", tt.name, err, tt.want)
		}
	}

	// A transition rule: color may not change.
	unstructured.SetNestedField(w.Object, "red", "spec", "color")
	_, err = widgets.Update(ctx, w, metav1.UpdateOptions{})
	if typedtest.Causes(t, "change the color", err); !strings.Contains(err.Error(), `spec.color: Invalid value: "red": color is immutable`) {
		t.Errorf("change the color = %v, want color is immutable", err)
	}

	// Status: an update keeps it; the status subresource changes only it
	// (not even labels, as upstream's status strategy of custom
	// resources), pruned and checked by the schema.
	w.SetLabels(map[string]string{"through": "status"})
	unstructured.SetNestedField(w.Object, "blue", "spec", "color")
	unstructured.SetNestedField(w.Object, int64(4), "spec", "replicas")
	unstructured.SetNestedField(w.Object, map[string]interface{}{"replicas": int64(4), "phase": "Running", "junk": "x", "selector": "app=w1"}, "status")
	st, err := widgets.UpdateStatus(ctx, w, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("update status: %v", err)
	}
	status, _, _ := unstructured.NestedMap(st.Object, "status")
	if r, _, _ := unstructured.NestedInt64(st.Object, "spec", "replicas"); r != 3 || !reflect.DeepEqual(status, map[string]interface{}{"replicas": int64(4), "phase": "Running", "selector": "app=w1"}) || len(st.GetLabels()) != 0 {
		t.Errorf("status update: spec.replicas %d status %v labels %v; want 3, the status without junk, no labels", r, status, st.GetLabels())
	}
	unstructured.SetNestedField(st.Object, "four", "status", "replicas")
	_, err = widgets.UpdateStatus(ctx, st, metav1.UpdateOptions{})
	if typedtest.Causes(t, "bad status", err); !strings.Contains(err.Error(), "status.replicas: Invalid value") {
		t.Errorf("bad status = %v, want status.replicas invalid", err)
	}

	// Scale reads the schema's paths.
	scale, err := widgets.Get(ctx, "w1", metav1.GetOptions{}, "scale")
	if err != nil {
		t.Fatalf("get scale: %v", err)
	}
	specReplicas, _, _ := unstructured.NestedInt64(scale.Object, "spec", "replicas")
	statusReplicas, _, _ := unstructured.NestedInt64(scale.Object, "status", "replicas")
	selector, _, _ := unstructured.NestedString(scale.Object, "status", "selector")
	if specReplicas != 3 || statusReplicas != 4 || selector != "app=w1" {
		t.Errorf("scale = %v, want spec 3, status 4, selector app=w1", scale.Object)
	}
}

// TestCustomResourceTableFieldsApply: printer columns (priority kept),
// selectable fields, and server-side apply merging a list map by its
// key.
func TestCustomResourceTableFieldsApply(t *testing.T) {
	s := servedWidgets(t)
	ctx := context.Background()
	widgets := s.dynamic.Resource(widgetsGVR).Namespace("default")
	for name, color := range map[string]string{"a": "red", "b": "green"} {
		if _, err := widgets.Create(ctx, widgetObject(name, map[string]interface{}{"color": color}), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	tbl := typedtest.Table(t, s.crds.ApiextensionsV1().RESTClient(), "/apis/example.outpost.dev/v1/namespaces/default/widgets")
	if names := typedtest.ColumnNames(tbl); !reflect.DeepEqual(names, []string{"Name", "Replicas", "Color", "Phase"}) || tbl.ColumnDefinitions[3].Priority != 1 {
		t.Errorf("table columns %q (%+v), want Name Replicas Color Phase, Phase of priority 1", names, tbl.ColumnDefinitions)
	}
	if len(tbl.Rows) != 2 || !reflect.DeepEqual(tbl.Rows[0].Cells, []interface{}{"a", float64(1), "red", nil}) {
		var cells [][]interface{}
		for _, r := range tbl.Rows {
			cells = append(cells, r.Cells)
		}
		t.Errorf("table rows %#v, want [a 1 red <nil>] first", cells)
	}

	list, err := widgets.List(ctx, metav1.ListOptions{FieldSelector: "spec.color=green"})
	if err != nil || len(list.Items) != 1 || list.Items[0].GetName() != "b" {
		t.Errorf("list spec.color=green = %v, %v; want b", list, err)
	}

	// Two managers apply an entry each of the ports list map: both stay.
	for _, p := range []struct {
		manager, port string
	}{{"one", "http"}, {"two", "https"}} {
		body := `{"apiVersion":"example.outpost.dev/v1","kind":"Widget","metadata":{"name":"a"},"spec":{"ports":[{"name":"` + p.port + `","port":1}]}}`
		if _, err := widgets.Patch(ctx, "a", types.ApplyPatchType, []byte(body), metav1.PatchOptions{FieldManager: p.manager}); err != nil {
			t.Fatalf("apply by %s: %v", p.manager, err)
		}
	}
	got, err := widgets.Get(ctx, "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ports, _, _ := unstructured.NestedSlice(got.Object, "spec", "ports")
	if len(ports) != 2 {
		t.Errorf("ports after two managers' applies = %v, want both entries", ports)
	}
}

// TestCustomResourcesVersions: one resource per served version, each but
// the storage version converted to it; names from status.acceptedNames
// once accepted; cluster scope; a non-structural schema refused.
func TestCustomResourcesVersions(t *testing.T) {
	crd := widgetCRD()
	crd.Spec.Scope = apiextensionsv1.ClusterScoped
	beta := crd.Spec.Versions[0]
	beta.Name, beta.Storage = "v1beta1", false
	off := beta
	off.Name, off.Served = "v1alpha1", false
	crd.Spec.Versions = append(crd.Spec.Versions, beta, off)
	crd.Status.AcceptedNames = apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList", ShortNames: []string{"w"}}
	rs, err := apiextensions.CustomResources(crd, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 {
		t.Fatalf("CustomResources = %d resources, want 2 (the served versions)", len(rs))
	}
	if rs[0].GroupVersion.Version != "v1" || rs[0].Conversion != nil || rs[1].GroupVersion.Version != "v1beta1" || rs[1].Conversion == nil || rs[1].Conversion.StorageVersion != "v1" {
		t.Errorf("versions %v/%v and %v/%v, want v1 stored and v1beta1 converted to v1", rs[0].GroupVersion, rs[0].Conversion, rs[1].GroupVersion, rs[1].Conversion)
	}
	for _, r := range rs {
		if r.Namespaced || !reflect.DeepEqual(r.ShortNames, []string{"w"}) || !r.Status || r.Scale == nil || r.TypeConverter == nil {
			t.Errorf("resource %v: namespaced %v shortNames %v status %v scale %v, want cluster-scoped, accepted short names, status and scale", r.GroupVersion, r.Namespaced, r.ShortNames, r.Status, r.Scale)
		}
	}

	bad := widgetCRD()
	bad.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = apiextensionsv1.JSONSchemaProps{Properties: map[string]apiextensionsv1.JSONSchemaProps{"a": {Type: "string"}}}
	if _, err := apiextensions.CustomResources(bad, nil); err == nil || !strings.Contains(err.Error(), "structural") {
		t.Errorf("CustomResources(non-structural) = %v, want a structural schema error", err)
	}
}

// TestCustomResourceDefaultsOnRead: a default added to the schema after
// an object was stored shows when the object is read, got or listed, as
// upstream defaults custom resources decoded from storage; the stored
// object changes only when it is next written.
func TestCustomResourceDefaultsOnRead(t *testing.T) {
	s := serve(t)
	ctx := context.Background()
	crd := widgetCRD()
	apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(crd)
	setSchema := func(crd *apiextensionsv1.CustomResourceDefinition) {
		t.Helper()
		rs, err := apiextensions.CustomResources(crd, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.srv.SetResources("crd", rs); err != nil {
			t.Fatal(err)
		}
	}
	setSchema(crd)
	widgets := s.dynamic.Resource(widgetsGVR).Namespace("default")
	if _, err := widgets.Create(ctx, widgetObject("w1", map[string]interface{}{"replicas": int64(2)}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	spec.Properties["size"] = apiextensionsv1.JSONSchemaProps{Type: "string", Default: &apiextensionsv1.JSON{Raw: []byte(`"large"`)}}
	crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = spec
	setSchema(crd)
	w, err := widgets.Get(ctx, "w1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, _, _ := unstructured.NestedString(w.Object, "spec", "size"); got != "large" {
		t.Errorf("get after the default was added: spec %v, want size large", w.Object["spec"])
	}
	l, err := widgets.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Items) != 1 {
		t.Fatalf("list = %d items, want 1", len(l.Items))
	}
	if got, _, _ := unstructured.NestedString(l.Items[0].Object, "spec", "size"); got != "large" {
		t.Errorf("list after the default was added: spec %v, want size large", l.Items[0].Object["spec"])
	}
}

// TestCustomResourceFieldValidation: fields the schema does not know are
// refused with fieldValidation=Strict, each named with its path, as
// upstream's strict decoding error; with Ignore they are pruned.
func TestCustomResourceFieldValidation(t *testing.T) {
	s := servedWidgets(t)
	ctx := context.Background()
	widgets := s.dynamic.Resource(widgetsGVR).Namespace("default")
	in := widgetObject("w1", map[string]interface{}{"replicas": int64(3), "unknown": "x"})
	in.Object["toplevel"] = "y"
	_, err := widgets.Create(ctx, in, metav1.CreateOptions{FieldValidation: "Strict"})
	if !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), `strict decoding error: unknown field "spec.unknown", unknown field "toplevel"`) {
		t.Fatalf("strict create with unknown fields = %v, want 400 naming spec.unknown and toplevel", err)
	}
	w, err := widgets.Create(ctx, in, metav1.CreateOptions{FieldValidation: "Ignore"})
	if err != nil {
		t.Fatal(err)
	}
	if _, has, _ := unstructured.NestedFieldNoCopy(w.Object, "spec", "unknown"); has || w.Object["toplevel"] != nil {
		t.Errorf("created with Ignore: %v, want the unknown fields pruned", w.Object)
	}
}

// TestCustomResourceMetadata: custom resources read as metadata only (as
// the garbage collector and namespace controller read them) carry their
// metadata: name, labels, resourceVersion, owners.
func TestCustomResourceMetadata(t *testing.T) {
	s := servedWidgets(t)
	ctx := context.Background()
	in := widgetObject("w1", map[string]interface{}{"replicas": int64(1)})
	in.SetLabels(map[string]string{"app": "x"})
	w, err := s.dynamic.Resource(widgetsGVR).Namespace("default").Create(ctx, in, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mc, err := metadata.NewForConfig(s.config)
	if err != nil {
		t.Fatal(err)
	}
	l, err := mc.Resource(widgetsGVR).Namespace("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Items) != 1 || l.Items[0].Name != "w1" || l.Items[0].ResourceVersion != w.GetResourceVersion() || l.Items[0].Labels["app"] != "x" || l.Items[0].UID != w.GetUID() {
		t.Fatalf("metadata list = %+v, want w1 at %s with its label and uid", l.Items, w.GetResourceVersion())
	}
	one, err := mc.Resource(widgetsGVR).Namespace("default").Get(ctx, "w1", metav1.GetOptions{})
	if err != nil || one.Name != "w1" || one.ResourceVersion != w.GetResourceVersion() {
		t.Fatalf("metadata get = %+v, %v", one, err)
	}
}
