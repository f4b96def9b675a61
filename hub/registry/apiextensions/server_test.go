package apiextensions_test

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/registry/core"
	"github.com/outpost-mesh/outpost/hub/store/badgerstore"
)

// testServer is a real apiserver.Server over a real store, serving the
// namespaces resource and the given ones, until its test ends.
type testServer struct {
	srv     *apiserver.Server
	config  *rest.Config
	dynamic dynamic.Interface
	crds    apiextensionsclient.Interface
}

// serve starts a server of namespaces (with namespace "default") and rs.
func serve(t *testing.T, rs ...apiserver.Resource) *testServer {
	t.Helper()
	st, err := badgerstore.Open(badgerstore.DefaultConfig(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	var resources []apiserver.Resource
	for _, r := range core.Resources() {
		if r.Plural == "namespaces" {
			resources = append(resources, r)
		}
	}
	srv, err := apiserver.New(apiserver.Config{Store: st, Resources: append(resources, rs...)})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	t.Cleanup(srv.Shutdown)
	ns := &corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}, ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := srv.Ensure(ctx, []runtime.Object{ns}...); err != nil {
		t.Fatal(err)
	}
	cfg := &rest.Config{Host: hs.URL, QPS: -1}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &testServer{srv: srv, config: cfg, dynamic: dc, crds: cc}
}

// widgetsGVR is the resource of widgetCRD's custom resources.
var widgetsGVR = schema.GroupVersionResource{Group: "example.outpost.dev", Version: "v1", Resource: "widgets"}

// widgetCRD returns a namespaced CRD with a schema holding defaults, a
// list map, preserved unknown fields, CEL rules (one a transition rule),
// status and scale subresources, printer columns and a selectable field.
func widgetCRD() *apiextensionsv1.CustomResourceDefinition {
	str := apiextensionsv1.JSONSchemaProps{Type: "string"}
	integer := apiextensionsv1.JSONSchemaProps{Type: "integer"}
	replicas := apiextensionsv1.JSONSchemaProps{Type: "integer", Minimum: ptr.To(0.0), Maximum: ptr.To(100.0), Default: &apiextensionsv1.JSON{Raw: []byte(`1`)}}
	color := apiextensionsv1.JSONSchemaProps{Type: "string", Default: &apiextensionsv1.JSON{Raw: []byte(`"blue"`)},
		XValidations: apiextensionsv1.ValidationRules{{Rule: "self == oldSelf", Message: "color is immutable"}}}
	ports := apiextensionsv1.JSONSchemaProps{
		Type: "array", XListType: ptr.To("map"), XListMapKeys: []string{"name"},
		Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &apiextensionsv1.JSONSchemaProps{
			Type: "object", Required: []string{"name"},
			Properties: map[string]apiextensionsv1.JSONSchemaProps{"name": str, "port": integer},
		}},
	}
	spec := apiextensionsv1.JSONSchemaProps{
		Type: "object",
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"replicas": replicas, "minReplicas": integer, "color": color, "ports": ports,
			"extra": {Type: "object", XPreserveUnknownFields: ptr.To(true)},
		},
		XValidations: apiextensionsv1.ValidationRules{{Rule: "!has(self.minReplicas) || self.replicas >= self.minReplicas", Message: "replicas must be at least minReplicas"}},
	}
	status := apiextensionsv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
		"replicas": integer, "selector": str, "phase": str,
	}}
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.example.outpost.dev"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "example.outpost.dev",
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Kind: "Widget", ShortNames: []string{"wd"}, Categories: []string{"all"}},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type:       "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{"spec": spec, "status": status},
				}},
				Subresources: &apiextensionsv1.CustomResourceSubresources{
					Status: &apiextensionsv1.CustomResourceSubresourceStatus{},
					Scale: &apiextensionsv1.CustomResourceSubresourceScale{
						SpecReplicasPath: ".spec.replicas", StatusReplicasPath: ".status.replicas", LabelSelectorPath: ptr.To(".status.selector"),
					},
				},
				AdditionalPrinterColumns: []apiextensionsv1.CustomResourceColumnDefinition{
					{Name: "Replicas", Type: "integer", JSONPath: ".spec.replicas"},
					{Name: "Color", Type: "string", JSONPath: ".spec.color"},
					{Name: "Phase", Type: "string", JSONPath: ".status.phase", Priority: 1},
				},
				SelectableFields: []apiextensionsv1.SelectableField{{JSONPath: ".spec.color"}},
			}},
		},
	}
}
