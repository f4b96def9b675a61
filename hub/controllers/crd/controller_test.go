package crd_test

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionshelpers "k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/controllers"
	"github.com/outpost-mesh/outpost/hub/controllers/crd"
	"github.com/outpost-mesh/outpost/hub/registry/apiextensions"
	"github.com/outpost-mesh/outpost/hub/registry/core"
	"github.com/outpost-mesh/outpost/hub/store/badgerstore"
	"github.com/outpost-mesh/outpost/internal/testlog"
	"github.com/outpost-mesh/outpost/internal/wait"
)

var widgetsGVR = schema.GroupVersionResource{Group: "example.outpost.dev", Version: "v1", Resource: "widgets"}

// widgetCRD is a namespaced CRD whose spec keeps any field; with
// finalized, it carries the cleanup finalizer already, as a delete adds it.
func widgetCRD(plural, kind string, finalized bool) *apiextensionsv1.CustomResourceDefinition {
	c := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: plural + ".example.outpost.dev"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "example.outpost.dev",
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: plural, Kind: kind},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec": {Type: "object", XPreserveUnknownFields: ptr.To(true)},
					},
				}},
			}},
		},
	}
	if finalized {
		c.Finalizers = []string{apiextensionsv1.CustomResourceCleanupFinalizer}
	}
	apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(c)
	return c
}

// clients of a test server.
type clients struct {
	kube    kubernetes.Interface
	crds    apiextensionsclient.Interface
	dynamic dynamic.Interface
	meta    metadata.Interface
}

// serve runs a server of namespaces, CRDs and rs until the test ends.
func serve(t *testing.T, rs ...apiserver.Resource) clients {
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
	resources = append(append(resources, apiextensions.Resources()...), rs...)
	srv, err := apiserver.New(apiserver.Config{Store: st, Resources: resources})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	t.Cleanup(srv.Shutdown)
	cfg := &rest.Config{Host: hs.URL, QPS: -1}
	var c clients
	if c.kube, err = kubernetes.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if c.crds, err = apiextensionsclient.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if c.dynamic, err = dynamic.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if c.meta, err = metadata.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	return c
}

// run runs the controller on c until the test ends.
func run(t *testing.T, c clients) {
	t.Helper()
	inf := informers.NewSharedInformerFactory(c.kube, 0)
	ctl, err := crd.New(controllers.Context{
		Client: c.kube, Metadata: c.meta, Informers: inf,
		Events: func(string) record.EventRecorder { return record.NewFakeRecorder(100) },
		Clock:  clock.RealClock{}, Logger: testlog.New(t, slog.LevelInfo),
	}, c.crds, c.dynamic)
	if err != nil {
		t.Fatal(err)
	}
	bg := wait.Start(t, 30*time.Second, "crd controller", ctl.Run)
	t.Cleanup(func() {
		if err := bg.Stop(); err != nil {
			t.Errorf("Run = %v", err)
		}
	})
}

// condition returns "Status/Reason" of the CRD's condition typ, or why not.
func condition(c clients, name string, typ apiextensionsv1.CustomResourceDefinitionConditionType) string {
	got, err := c.crds.ApiextensionsV1().CustomResourceDefinitions().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	cond := apiextensionshelpers.FindCRDCondition(got, typ)
	if cond == nil {
		return "none"
	}
	return string(cond.Status) + "/" + cond.Reason
}

// TestNamesAndFinalize: a CRD's names are accepted and it is
// established; a second CRD of the group asking for a taken kind is not;
// a deleted CRD's custom resources are deleted in every namespace, those
// held by finalizers waited for, and then the CRD goes.
func TestNamesAndFinalize(t *testing.T) {
	widgets := widgetCRD("widgets", "Widget", true)
	rs, err := apiextensions.CustomResources(widgets, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := serve(t, rs...)
	ctx := context.Background()
	// The namespaces come first: a watch from the resourceVersion of a
	// list of an empty store (0) means "from now" and could miss the
	// CRDs created while the controller's informer starts.
	for _, ns := range []string{"default", "ns2"} {
		if _, err := c.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	run(t, c)
	crds := c.crds.ApiextensionsV1().CustomResourceDefinitions()
	for _, in := range []*apiextensionsv1.CustomResourceDefinition{widgets, widgetCRD("gadgets", "Widget", false)} {
		if _, err := crds.Create(ctx, in, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for name, want := range map[string]string{"widgets.example.outpost.dev": "False/" + crd.ReasonInstalling, "gadgets.example.outpost.dev": "False/NotAccepted"} {
		wait.For(t, 10*time.Second, name+" named", func() (bool, string) {
			got := condition(c, name, apiextensionsv1.Established)
			return got == want, got
		})
	}
	// The server serving the widgets establishes them, as the hub does.
	est, err := crds.Get(ctx, "widgets.example.outpost.dev", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	apiextensionshelpers.SetCRDCondition(est, apiextensionsv1.CustomResourceDefinitionCondition{Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionTrue, Reason: "InitialNamesAccepted"})
	if _, err := crds.UpdateStatus(ctx, est, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "widgets established and kept so", func() (bool, string) {
		got := condition(c, "widgets.example.outpost.dev", apiextensionsv1.Established)
		return got == "True/InitialNamesAccepted", got
	})
	if got := condition(c, "gadgets.example.outpost.dev", apiextensionsv1.NamesAccepted); got != "False/ListKindConflict" {
		t.Errorf("gadgets NamesAccepted = %s, want False/ListKindConflict", got)
	}

	for _, w := range []struct {
		ns, name  string
		finalizer bool
	}{{"default", "a", false}, {"ns2", "b", false}, {"ns2", "held", true}} {
		obj := &unstructured.Unstructured{Object: map[string]interface{}{
			"apiVersion": "example.outpost.dev/v1", "kind": "Widget",
			"metadata": map[string]interface{}{"name": w.name},
			"spec":     map[string]interface{}{"size": int64(1)},
		}}
		if w.finalizer {
			obj.SetFinalizers([]string{"example.outpost.dev/hold"})
		}
		if _, err := c.dynamic.Resource(widgetsGVR).Namespace(w.ns).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	if err := crds.Delete(ctx, widgets.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "custom resources deleted but the held one", func() (bool, string) {
		list, err := c.dynamic.Resource(widgetsGVR).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		if len(list.Items) != 1 || list.Items[0].GetName() != "held" || list.Items[0].GetDeletionTimestamp() == nil {
			return false, "items remain"
		}
		return true, ""
	})
	if got := condition(c, widgets.Name, apiextensionsv1.Terminating); got != "True/InstanceDeletionInProgress" {
		t.Errorf("terminating crd with a held custom resource: Terminating %s, want True/InstanceDeletionInProgress", got)
	}

	patch := []byte(`{"metadata":{"finalizers":null}}`)
	if _, err := c.dynamic.Resource(widgetsGVR).Namespace("ns2").Patch(ctx, "held", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "crd gone", func() (bool, string) {
		_, err := crds.Get(ctx, widgets.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), condition(c, widgets.Name, apiextensionsv1.Terminating)
	})
}
