package firmware

import (
	"net/http/httptest"
	"slices"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/registry/apiextensions"
	"github.com/outpost-mesh/outpost/hub/store/badgerstore"
)

// serveCRDs starts a real server of CustomResourceDefinitions and
// returns a client of them.
func serveCRDs(t *testing.T) apiextensionsclient.Interface {
	t.Helper()
	st, err := badgerstore.Open(badgerstore.DefaultConfig(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	srv, err := apiserver.New(apiserver.Config{Store: st, Resources: apiextensions.Resources()})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	t.Cleanup(srv.Shutdown)
	c, err := apiextensionsclient.NewForConfig(&rest.Config{Host: hs.URL, QPS: -1})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestInstall installs the definitions on an empty server, over an older
// definition and again unchanged.
func TestInstall(t *testing.T) {
	c := serveCRDs(t).ApiextensionsV1().CustomResourceDefinitions()
	// An older hub's rollouts definition, with a column since dropped and
	// a label another manager set.
	old := crdFor(t, "rollouts")
	old.Labels = map[string]string{"owner": "ops"}
	old.Spec.Versions[0].AdditionalPrinterColumns = append(old.Spec.Versions[0].AdditionalPrinterColumns,
		apiextensionsv1.CustomResourceColumnDefinition{Name: "Old", Type: "string", JSONPath: ".spec.release"})
	if _, err := c.Create(ctx(t), old, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := Install(ctx(t), c); err != nil {
		t.Fatal(err)
	}
	first := map[string]string{}
	for _, want := range CRDs() {
		got, err := c.Get(ctx(t), want.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !equality.Semantic.DeepEqual(got.Spec.Versions[0].AdditionalPrinterColumns, want.Spec.Versions[0].AdditionalPrinterColumns) ||
			!equality.Semantic.DeepEqual(got.Spec.Names, want.Spec.Names) || got.Spec.Scope != want.Spec.Scope {
			t.Errorf("%s not brought up to date: %+v", want.Name, got.Spec)
		}
		if !slices.ContainsFunc(got.ManagedFields, func(m metav1.ManagedFieldsEntry) bool { return m.Manager == FieldManager }) {
			t.Errorf("%s: no fields managed by %s", want.Name, FieldManager)
		}
		first[got.Name] = got.ResourceVersion
	}
	got, err := c.Get(ctx(t), old.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Labels["owner"] != "ops" {
		t.Errorf("labels %v: another manager's label was dropped", got.Labels)
	}
	if err := Install(ctx(t), c); err != nil {
		t.Fatal(err)
	}
	for name, rv := range first {
		got, err := c.Get(ctx(t), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.ResourceVersion != rv {
			t.Errorf("%s rewritten by an unchanged install: resourceVersion %s, was %s", name, got.ResourceVersion, rv)
		}
	}
}
