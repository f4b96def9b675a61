package apiextensions_test

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/outpost-mesh/outpost/hub/registry/apiextensions"
	"github.com/outpost-mesh/outpost/hub/registry/typed/typedtest"
)

// TestCRDAPI: a CRD is created with upstream's defaults and a reset
// status, refused with upstream's causes where its spec is invalid or its
// schema not structural, keeps its status on updates, and prints as
// upstream prints CRDs.
func TestCRDAPI(t *testing.T) {
	s := serve(t, apiextensions.Resources()...)
	ctx := context.Background()
	crds := s.crds.ApiextensionsV1().CustomResourceDefinitions()

	in := widgetCRD()
	in.Status.AcceptedNames.Kind = "Sneaky"
	created, err := crds.Create(ctx, in, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create crd: %v", err)
	}
	if n := created.Spec.Names; n.Singular != "widget" || n.ListKind != "WidgetList" {
		t.Errorf("created names %+v, want singular widget and listKind WidgetList", n)
	}
	if c := created.Spec.Conversion; c == nil || c.Strategy != apiextensionsv1.NoneConverter {
		t.Errorf("created conversion %+v, want strategy None", c)
	}
	if created.Status.AcceptedNames.Kind != "" || !reflect.DeepEqual(created.Status.StoredVersions, []string{"v1"}) || created.Generation != 1 {
		t.Errorf("created status %+v generation %d, want no accepted names, storedVersions [v1], generation 1", created.Status, created.Generation)
	}

	// Status is the status subresource's: an update keeps it, and bumps
	// the generation only for a spec change.
	created.Status.AcceptedNames = created.Spec.Names
	created.Status.Conditions = []apiextensionsv1.CustomResourceDefinitionCondition{{
		Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionTrue, Reason: "InitialNamesAccepted", LastTransitionTime: metav1.Now(),
	}}
	st, err := crds.UpdateStatus(ctx, created, metav1.UpdateOptions{})
	if err != nil || st.Status.AcceptedNames.Plural != "widgets" {
		t.Fatalf("update status = %+v, %v", st.Status, err)
	}
	st.Spec.Versions[0].AdditionalPrinterColumns = nil
	st.Status.AcceptedNames = apiextensionsv1.CustomResourceDefinitionNames{}
	up, err := crds.Update(ctx, st, metav1.UpdateOptions{})
	if err != nil || up.Status.AcceptedNames.Plural != "widgets" || up.Generation != 2 {
		t.Fatalf("update = %+v generation %d, %v; want status kept, generation 2", up.Status.AcceptedNames, up.Generation, err)
	}
	up.Spec.Scope = apiextensionsv1.ClusterScoped
	_, err = crds.Update(ctx, up, metav1.UpdateOptions{})
	if got := typedtest.Causes(t, "change an established crd's scope", err); !slices.Contains(got, "spec.scope") {
		t.Errorf("change an established crd's scope: causes %v, want spec.scope", got)
	}

	for _, tt := range []struct {
		name   string
		change func(*apiextensionsv1.CustomResourceDefinition)
		field  string
		msg    string
	}{
		{"wrong name", func(c *apiextensionsv1.CustomResourceDefinition) { c.Name = "gadgets.example.outpost.dev" },
			"metadata.name", `must be spec.names.plural+"."+spec.group`},
		{"no storage version", func(c *apiextensionsv1.CustomResourceDefinition) { c.Spec.Versions[0].Storage = false },
			"spec.versions", "must have exactly one version marked as storage version"},
		// Upstream converts a v1 CRD whose versions share one schema to
		// the internal spec.validation, and its errors say so.
		{"not structural", func(c *apiextensionsv1.CustomResourceDefinition) {
			spec := c.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
			spec.Type = ""
			c.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = spec
		}, "spec.validation.openAPIV3Schema.properties[spec].type", "must not be empty for specified object fields"},
		{"bad CEL", func(c *apiextensionsv1.CustomResourceDefinition) {
			c.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].XValidations[0].Rule = "self.nope >"
		}, "spec.validation.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule", "compilation failed"},
	} {
		c := widgetCRD()
		c.Spec.Group = "other.outpost.dev"
		c.Name = "widgets.other.outpost.dev"
		tt.change(c)
		_, err := crds.Create(ctx, c, metav1.CreateOptions{})
		if got := typedtest.Causes(t, "create crd: "+tt.name, err); !slices.Contains(got, tt.field) || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("create crd (%s) = %v; causes %v, want %s with %q", tt.name, err, got, tt.field, tt.msg)
		}
	}

	tbl := typedtest.Table(t, s.crds.ApiextensionsV1().RESTClient(), "/apis/apiextensions.k8s.io/v1/customresourcedefinitions")
	if names := typedtest.ColumnNames(tbl); !reflect.DeepEqual(names, []string{"Name", "Created At"}) || len(tbl.Rows) != 1 || tbl.Rows[0].Cells[0] != "widgets.example.outpost.dev" {
		t.Errorf("crds as a Table: columns %q rows %v", names, tbl.Rows)
	}
	if _, err := crds.Get(ctx, "missing.example.outpost.dev", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("get a missing crd = %v, want NotFound", err)
	}
}

// TestCRDFinalizersOnDelete: a delete of a CRD adds the cleanup
// finalizer the CRD controller removes.
func TestCRDFinalizersOnDelete(t *testing.T) {
	rules, ok := apiextensions.Resources()[0].Rules.(interface {
		FinalizersOnDelete(obj runtime.Object) []string
	})
	if !ok {
		t.Fatalf("crd rules %T lack FinalizersOnDelete", apiextensions.Resources()[0].Rules)
	}
	if got := rules.FinalizersOnDelete(widgetCRD()); !reflect.DeepEqual(got, []string{"customresourcecleanup.apiextensions.k8s.io"}) {
		t.Errorf("FinalizersOnDelete = %q, want the cleanup finalizer", got)
	}
}
