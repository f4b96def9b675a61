package openapi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// testKinds are the kinds the tests serve: two core kinds, one namespaced
// and one cluster-scoped, and a kind of a named group with subresources.
func testKinds() []Kind {
	return []Kind{
		{GVK: schema.GroupVersionKind{Version: "v1", Kind: "Pod"}, Plural: "pods", Namespaced: true,
			Object: &corev1.Pod{}, List: &corev1.PodList{}, Subresources: []string{"status", "log"}},
		{GVK: schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}, Plural: "namespaces",
			Object: &corev1.Namespace{}, List: &corev1.NamespaceList{}, Subresources: []string{"status"},
			Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
		{GVK: schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, Plural: "deployments", Namespaced: true,
			Object: &appsv1.Deployment{}, List: &appsv1.DeploymentList{}, Subresources: []string{"status", "scale"}},
	}
}

var (
	testSpecOnce sync.Once
	testSpecVal  *Spec
	testSpecErr  error
)

// testSpec builds the spec of testKinds once per test binary: the
// protobuf conversion is the slow part of New, more so under -race.
func testSpec(t *testing.T) *Spec {
	t.Helper()
	testSpecOnce.Do(func() { testSpecVal, testSpecErr = New(testKinds()) })
	if testSpecErr != nil {
		t.Fatalf("New(testKinds()) = %v", testSpecErr)
	}
	return testSpecVal
}

// fetchJSON serves one GET through h and decodes the JSON body.
func fetchJSON(t *testing.T, h http.HandlerFunc, target string) map[string]any {
	t.Helper()
	rec := httptest.NewRecorder()
	h(rec, httptest.NewRequest(http.MethodGet, target, nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET %s = %d %s", target, rec.Code, rec.Body)
	}
	var m map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil {
		t.Fatalf("GET %s: decode: %v", target, err)
	}
	return m
}

// at walks m along keys and returns what it finds there, or nil.
func at(m any, keys ...string) any {
	for _, k := range keys {
		mm, ok := m.(map[string]any)
		if !ok {
			return nil
		}
		m = mm[k]
	}
	return m
}

func str(m any, keys ...string) string {
	s, _ := at(m, keys...).(string)
	return s
}

func TestSchemaV2(t *testing.T) {
	doc := fetchJSON(t, testSpec(t).ServeV2, "/openapi/v2")
	defs := at(doc, "definitions")
	def := func(name string) any {
		t.Helper()
		d := at(defs, name)
		if d == nil {
			t.Fatalf("definition %s missing", name)
		}
		return d
	}

	pod := def("io.k8s.api.core.v1.Pod")
	if got := str(pod, "description"); !strings.HasPrefix(got, "Pod is a collection of containers") {
		t.Errorf("Pod description = %q", got)
	}
	if got := at(pod, extGVK); !reflect.DeepEqual(got, []any{map[string]any{"group": "", "version": "v1", "kind": "Pod"}}) {
		t.Errorf("Pod %s = %v", extGVK, got)
	}
	// apiVersion and kind come from the inlined TypeMeta, with its docs.
	if got := str(pod, "properties", "apiVersion", "description"); !strings.Contains(got, "APIVersion defines the versioned schema") {
		t.Errorf("Pod apiVersion description = %q", got)
	}
	if got := str(pod, "properties", "metadata", "$ref"); got != "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta" {
		t.Errorf("Pod metadata $ref = %q", got)
	}
	if got := at(def("io.k8s.api.core.v1.PodList"), extGVK); !reflect.DeepEqual(got, []any{map[string]any{"group": "", "version": "v1", "kind": "PodList"}}) {
		t.Errorf("PodList %s = %v", extGVK, got)
	}

	containers := at(def("io.k8s.api.core.v1.PodSpec"), "properties", "containers")
	for k, want := range map[string]string{
		"type":           "array",
		extPatchStrategy: "merge",
		extPatchMergeKey: "name",
	} {
		if got := str(containers, k); got != want {
			t.Errorf("PodSpec.containers %s = %q, want %q", k, got, want)
		}
	}
	if got := str(containers, "items", "$ref"); got != "#/definitions/io.k8s.api.core.v1.Container" {
		t.Errorf("PodSpec.containers items = %q", got)
	}
	if got := str(containers, "description"); !strings.Contains(got, "List of containers belonging to the pod") {
		t.Errorf("PodSpec.containers description = %q", got)
	}
	if req, _ := at(def("io.k8s.api.core.v1.PodSpec"), "required").([]any); !slices.Contains(req, any("containers")) {
		t.Errorf("PodSpec required = %v, want containers in it", req)
	}

	container := def("io.k8s.api.core.v1.Container")
	if got := str(container, "properties", "image", "description"); !strings.HasPrefix(got, "Container image name.") {
		t.Errorf("Container.image description = %q", got)
	}
	if got := str(container, "properties", "image", "type"); got != "string" {
		t.Errorf("Container.image type = %q", got)
	}
	if req, _ := at(container, "required").([]any); !reflect.DeepEqual(req, []any{"name"}) {
		t.Errorf("Container required = %v, want [name]", req)
	}
	if got := str(container, "properties", "ports", extPatchMergeKey); got != "containerPort" {
		t.Errorf("Container.ports merge key = %q", got)
	}
	if got := str(def("io.k8s.api.core.v1.ContainerPort"), "properties", "containerPort", "format"); got != "int32" {
		t.Errorf("ContainerPort.containerPort format = %q", got)
	}

	meta := def("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta")
	if got := str(meta, "properties", "creationTimestamp", "$ref"); got != "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.Time" {
		t.Errorf("ObjectMeta.creationTimestamp $ref = %q", got)
	}
	if got := str(meta, "properties", "labels", "additionalProperties", "type"); got != "string" {
		t.Errorf("ObjectMeta.labels = %v", at(meta, "properties", "labels"))
	}
	if got := str(meta, "properties", "uid", "type"); got != "string" {
		t.Errorf("ObjectMeta.uid (types.UID) type = %q", got)
	}
	timeDef := def("io.k8s.apimachinery.pkg.apis.meta.v1.Time")
	if str(timeDef, "type") != "string" || str(timeDef, "format") != "date-time" {
		t.Errorf("Time = %v, want a date-time string", timeDef)
	}
	if got := str(def("io.k8s.apimachinery.pkg.apis.meta.v1.ManagedFieldsEntry"), "properties", "fieldsV1", "$ref"); got != "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.FieldsV1" {
		t.Errorf("ManagedFieldsEntry.fieldsV1 = %q", got)
	}
	if got := str(def("io.k8s.apimachinery.pkg.apis.meta.v1.FieldsV1"), "type"); got != "object" {
		t.Errorf("FieldsV1 type = %q", got)
	}
	if got := str(def("io.k8s.apimachinery.pkg.runtime.RawExtension"), "type"); got != "object" {
		t.Errorf("RawExtension type = %q", got)
	}

	q := def("io.k8s.apimachinery.pkg.api.resource.Quantity")
	if at(q, extIntOrString) != true || str(q, "type") != "string" || str(q, "description") == "" {
		t.Errorf("Quantity = %v, want an int-or-string string with a description", q)
	}
	ios := def("io.k8s.apimachinery.pkg.util.intstr.IntOrString")
	if at(ios, extIntOrString) != true || str(ios, "format") != "int-or-string" {
		t.Errorf("IntOrString = %v", ios)
	}
	if got := str(def("io.k8s.api.core.v1.ResourceRequirements"), "properties", "limits", "additionalProperties", "$ref"); got != "#/definitions/io.k8s.apimachinery.pkg.api.resource.Quantity" {
		t.Errorf("ResourceRequirements.limits values = %q", got)
	}
	if got := str(def("io.k8s.api.core.v1.ConfigMapVolumeSource"), "properties", "defaultMode", "format"); got != "int32" {
		t.Errorf("ConfigMapVolumeSource.defaultMode format = %q", got)
	}
	if got := str(def("io.k8s.api.core.v1.PodSpec"), "properties", "activeDeadlineSeconds", "format"); got != "int64" {
		t.Errorf("PodSpec.activeDeadlineSeconds format = %q", got)
	}

	strategy := at(def("io.k8s.api.apps.v1.DeploymentSpec"), "properties", "strategy")
	if str(strategy, extPatchStrategy) != "retainKeys" || str(strategy, "$ref") != "#/definitions/io.k8s.api.apps.v1.DeploymentStrategy" {
		t.Errorf("DeploymentSpec.strategy = %v", strategy)
	}
	// Fields tagged json:"-" are left out.
	if p := at(def("io.k8s.apimachinery.pkg.apis.meta.v1.Status"), "properties"); at(p, "ListMeta") != nil || at(p, "metadata") == nil {
		t.Errorf("Status properties = %v", p)
	}
	for _, name := range []string{defDeleteOptions, defWatchEvent, "io.k8s.api.autoscaling.v1.Scale"} {
		if at(def(name), extGVK) == nil {
			t.Errorf("%s has no %s", name, extGVK)
		}
	}
}

func TestSchemaV3(t *testing.T) {
	s := testSpec(t)
	doc := fetchJSON(t, s.ServeV3, "/openapi/v3/api/v1")
	schemas := at(doc, "components", "schemas")
	containers := at(schemas, "io.k8s.api.core.v1.PodSpec", "properties", "containers")
	if got := str(containers, "items", "$ref"); got != "#/components/schemas/io.k8s.api.core.v1.Container" {
		t.Errorf("PodSpec.containers items = %q", got)
	}
	// A $ref with a description is wrapped in allOf in v3.
	meta := at(schemas, "io.k8s.api.core.v1.Pod", "properties", "metadata")
	if str(meta, "description") == "" || !reflect.DeepEqual(at(meta, "allOf"), []any{map[string]any{"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}}) {
		t.Errorf("Pod.metadata = %v", meta)
	}
	q := at(schemas, "io.k8s.apimachinery.pkg.api.resource.Quantity")
	if at(q, extIntOrString) != true || at(q, "type") != nil || len(at(q, "anyOf").([]any)) != 2 {
		t.Errorf("Quantity = %v", q)
	}
	// Each group version's document has only its own kinds.
	if at(schemas, "io.k8s.api.apps.v1.Deployment") != nil {
		t.Error("api/v1 document has apps/v1 Deployment")
	}
	apps := fetchJSON(t, s.ServeV3, "/openapi/v3/apis/apps/v1")
	if at(apps, "components", "schemas", "io.k8s.api.apps.v1.Deployment") == nil || at(apps, "components", "schemas", "io.k8s.api.autoscaling.v1.Scale") == nil {
		t.Error("apps/v1 document lacks Deployment or Scale")
	}
	if at(apps, "components", "schemas", "io.k8s.api.core.v1.Namespace") != nil {
		t.Error("apps/v1 document has core Namespace")
	}
}

func TestPaths(t *testing.T) {
	s := testSpec(t)
	for _, tc := range []struct {
		doc  map[string]any
		name string
	}{
		{fetchJSON(t, s.ServeV2, "/openapi/v2"), "v2"},
		{fetchJSON(t, s.ServeV3, "/openapi/v3/api/v1"), "v3"},
	} {
		paths := at(tc.doc, "paths")
		podGVK := map[string]any{"group": "", "version": "v1", "kind": "Pod"}
		for _, c := range []struct{ path, method, action, id string }{
			{"/api/v1/namespaces/{namespace}/pods", "get", "list", "listCoreV1NamespacedPod"},
			{"/api/v1/namespaces/{namespace}/pods", "post", "post", "createCoreV1NamespacedPod"},
			{"/api/v1/namespaces/{namespace}/pods", "delete", "deletecollection", "deleteCoreV1CollectionNamespacedPod"},
			{"/api/v1/namespaces/{namespace}/pods/{name}", "get", "get", "readCoreV1NamespacedPod"},
			{"/api/v1/namespaces/{namespace}/pods/{name}", "put", "put", "replaceCoreV1NamespacedPod"},
			{"/api/v1/namespaces/{namespace}/pods/{name}", "patch", "patch", "patchCoreV1NamespacedPod"},
			{"/api/v1/namespaces/{namespace}/pods/{name}", "delete", "delete", "deleteCoreV1NamespacedPod"},
			{"/api/v1/namespaces/{namespace}/pods/{name}/status", "patch", "patch", "patchCoreV1NamespacedPodStatus"},
			{"/api/v1/pods", "get", "list", "listCoreV1PodForAllNamespaces"},
			{"/api/v1/watch/namespaces/{namespace}/pods", "get", "watchlist", "watchCoreV1NamespacedPodList"},
			{"/api/v1/watch/namespaces/{namespace}/pods/{name}", "get", "watch", "watchCoreV1NamespacedPod"},
			{"/api/v1/watch/pods", "get", "watchlist", "watchCoreV1PodListForAllNamespaces"},
		} {
			op := at(paths, c.path, c.method)
			if op == nil {
				t.Errorf("%s: %s %s missing", tc.name, c.method, c.path)
				continue
			}
			if str(op, extAction) != c.action || str(op, "operationId") != c.id || !reflect.DeepEqual(at(op, extGVK), podGVK) {
				t.Errorf("%s: %s %s = action %q id %q gvk %v, want %q %q %v", tc.name, c.method, c.path,
					str(op, extAction), str(op, "operationId"), at(op, extGVK), c.action, c.id, podGVK)
			}
			var names []string
			params, _ := at(op, "parameters").([]any)
			for _, p := range params {
				names = append(names, str(p, "name"))
			}
			if wantFV := c.method == "post" || c.method == "put" || c.method == "patch"; wantFV != slices.Contains(names, "fieldValidation") {
				t.Errorf("%s: %s %s parameters %v: fieldValidation present = %v, want %v", tc.name, c.method, c.path, names, !wantFV, wantFV)
			}
			if c.action == "list" && !slices.Contains(names, "labelSelector") {
				t.Errorf("%s: %s %s parameters %v lack labelSelector", tc.name, c.method, c.path, names)
			}
		}
		// The "log" subresource is not described; deletecollection is
		// not among the namespace verbs.
		if at(paths, "/api/v1/namespaces/{namespace}/pods/{name}/log") != nil {
			t.Errorf("%s: pods/log is described", tc.name)
		}
		if at(paths, "/api/v1/namespaces", "delete") != nil || at(paths, "/api/v1/namespaces", "get") == nil {
			t.Errorf("%s: /api/v1/namespaces = %v", tc.name, at(paths, "/api/v1/namespaces"))
		}
	}
	v2 := fetchJSON(t, s.ServeV2, "/openapi/v2")
	scale := at(v2, "paths", "/apis/apps/v1/namespaces/{namespace}/deployments/{name}/scale", "put")
	if !reflect.DeepEqual(at(scale, extGVK), map[string]any{"group": "autoscaling", "version": "v1", "kind": "Scale"}) ||
		str(scale, "operationId") != "replaceAppsV1NamespacedDeploymentScale" {
		t.Errorf("deployments/scale put = %v", scale)
	}
}

func TestNewRejects(t *testing.T) {
	pod := testKinds()[0]
	for name, mutate := range map[string]func(k *Kind){
		"no kind":    func(k *Kind) { k.GVK.Kind = "" },
		"no plural":  func(k *Kind) { k.Plural = "" },
		"bad plural": func(k *Kind) { k.Plural = "pods/{x}" },
		"nil object": func(k *Kind) { k.Object = nil },
		"non-struct": func(k *Kind) { k.List = new(int) },
		"unnamed":    func(k *Kind) { k.Object = &struct{ C int }{} },
		"bad field":  func(k *Kind) { k.Object = &badKind{} },
	} {
		k := pod
		mutate(&k)
		if _, err := New([]Kind{k}); err == nil {
			t.Errorf("New(%s) = nil error", name)
		}
	}
	if _, err := New([]Kind{pod, pod}); err == nil {
		t.Error("New(pod, pod) = nil error")
	}
}

// badKind has a field with no JSON schema.
type badKind struct {
	C chan int `json:"c"`
}
