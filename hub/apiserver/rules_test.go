package apiserver

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// validateOnly are rules with nothing but the required validation: no
// defaults, no preparation, no field selectors of their own, no printer.
type validateOnly struct{}

func (validateOnly) Validate(obj runtime.Object) field.ErrorList {
	if obj.(metav1.Object).GetName() == "" {
		return field.ErrorList{field.Required(field.NewPath("metadata", "name"), "name or generateName is required")}
	}
	return nil
}

func (validateOnly) ValidateUpdate(obj, old runtime.Object) field.ErrorList { return nil }

// TestValidationOnlyRules: a resource whose rules implement only Rules
// is served whole: create, update, no create on update, selectors on
// metadata only, and Tables with upstream's default columns, the name
// and the creation time.
func TestValidationOnlyRules(t *testing.T) {
	h := startTestServer(t, func(c *Config) {
		for i := range c.Resources {
			if c.Resources[i].Plural == "configmaps" {
				c.Resources[i].Rules = validateOnly{}
			}
		}
	})
	ctx := context.Background()
	cms := h.client.CoreV1().ConfigMaps("ns1")
	if _, err := h.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cm, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cms.Create(ctx, &corev1.ConfigMap{}, metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("create without a name = %v, want Invalid", err)
	}
	cm.Data["k"] = "w"
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update: %v", err)
	}
	if _, err := cms.Update(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "missing"}}, metav1.UpdateOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("PUT of a missing object = %v, want NotFound", err)
	}
	if l, err := cms.List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=a"}); err != nil || len(l.Items) != 1 {
		t.Errorf("list by metadata.name = %v, %v; want a", l, err)
	}
	if _, err := cms.List(ctx, metav1.ListOptions{FieldSelector: "data.k=w"}); !apierrors.IsBadRequest(err) {
		t.Errorf("list by a field the rules do not have = %v, want BadRequest", err)
	}

	for _, path := range []string{"/api/v1/namespaces/ns1/configmaps/a", "/api/v1/namespaces/ns1/configmaps"} {
		raw, err := h.client.CoreV1().RESTClient().Get().AbsPath(path).
			SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(ctx)
		if err != nil {
			t.Fatalf("GET %s as a Table: %v", path, err)
		}
		var tbl metav1.Table
		if err := json.Unmarshal(raw, &tbl); err != nil {
			t.Fatal(err)
		}
		if len(tbl.ColumnDefinitions) != 2 || tbl.ColumnDefinitions[0].Name != "Name" || tbl.ColumnDefinitions[1].Name != "Created At" ||
			tbl.ColumnDefinitions[1].Type != "date" {
			t.Errorf("%s: columns %+v, want Name and Created At", path, tbl.ColumnDefinitions)
		}
		if len(tbl.Rows) != 1 || len(tbl.Rows[0].Cells) != 2 || tbl.Rows[0].Cells[0] != "a" {
			t.Fatalf("%s: rows %+v, want one of a", path, tbl.Rows)
		}
		if at, err := time.Parse(time.RFC3339, tbl.Rows[0].Cells[1].(string)); err != nil || !at.Equal(cm.CreationTimestamp.Time) {
			t.Errorf("%s: Created At %v (%v), want %v", path, tbl.Rows[0].Cells[1], err, cm.CreationTimestamp)
		}
	}
}
