package firmware

import (
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	structuralpruning "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	firmwarev1 "github.com/outpost-mesh/outpost/firmware/apis/v1"
)

// crdFor returns the CRD of plural from CRDs.
func crdFor(t *testing.T, plural string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	for _, c := range CRDs() {
		if c.Spec.Names.Plural == plural {
			return c
		}
	}
	t.Fatalf("no CRD of %s", plural)
	return nil
}

// TestCRDsValid checks the definitions' names and shape and that
// upstream's CRD validation (structural schema, CEL compilation and cost)
// accepts them.
func TestCRDsValid(t *testing.T) {
	crds := CRDs()
	if len(crds) != 2 {
		t.Fatalf("CRDs() = %d definitions, want 2", len(crds))
	}
	tests := []struct {
		plural, kind, short string
	}{
		{"releases", "Release", "rel"},
		{"rollouts", "Rollout", "ro"},
	}
	for _, tt := range tests {
		t.Run(tt.plural, func(t *testing.T) {
			crd := crdFor(t, tt.plural)
			if got, want := crd.Name, tt.plural+"."+firmwarev1.GroupName; got != want {
				t.Errorf("name %q, want %q", got, want)
			}
			if crd.Spec.Group != firmwarev1.GroupName || crd.Spec.Scope != apiextensionsv1.ClusterScoped {
				t.Errorf("group %q scope %q, want %q Cluster", crd.Spec.Group, crd.Spec.Scope, firmwarev1.GroupName)
			}
			n := crd.Spec.Names
			if n.Kind != tt.kind || !slices.Equal(n.ShortNames, []string{tt.short}) || !slices.Equal(n.Categories, []string{"firmware"}) {
				t.Errorf("names %+v", n)
			}
			if crd.APIVersion != "apiextensions.k8s.io/v1" || crd.Kind != "CustomResourceDefinition" {
				t.Errorf("type meta %q %q", crd.APIVersion, crd.Kind)
			}
			if len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Name != firmwarev1.SchemeGroupVersion.Version ||
				crd.Spec.Versions[0].Subresources == nil || crd.Spec.Versions[0].Subresources.Status == nil {
				t.Fatalf("versions %+v, want v1 with a status subresource", crd.Spec.Versions)
			}
			internal := &apiextensions.CustomResourceDefinition{}
			if err := apiextensionsv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(crd, internal, nil); err != nil {
				t.Fatal(err)
			}
			// The hub's CRD registry records the storage version on create.
			internal.Status.StoredVersions = []string{"v1"}
			if errs := validation.ValidateCustomResourceDefinition(context.Background(), internal); len(errs) > 0 {
				t.Fatalf("upstream validation: %v", errs.ToAggregate())
			}
		})
	}
}

// TestCRDsAreCopies checks that a caller changing what CRDs returned
// changes nothing for the next caller.
func TestCRDsAreCopies(t *testing.T) {
	a := CRDs()
	a[0].Spec.Names.Plural = "changed"
	if b := CRDs(); b[0].Spec.Names.Plural == "changed" {
		t.Fatal("CRDs shares memory between calls")
	}
}

// fullRelease returns a Release with every field set.
func fullRelease() *firmwarev1.Release {
	now := metav1.NewTime(time.Date(2026, 12, 7, 18, 0, 0, 0, time.UTC))
	return &firmwarev1.Release{
		TypeMeta:   metav1.TypeMeta{APIVersion: firmwarev1.SchemeGroupVersion.String(), Kind: "Release"},
		ObjectMeta: metav1.ObjectMeta{Name: "agent-1-4-0", Labels: map[string]string{"a": "b"}},
		Spec: firmwarev1.ReleaseSpec{
			Version:  "1.4.0",
			Envelope: []byte(`{"payloadType":"x"}`),
			Components: []firmwarev1.ReleaseComponent{{
				Name: "agent", Kind: "agent", OS: "linux", Arch: "arm", Variant: "7", Size: 1234,
				SHA256: strings.Repeat("ab", 32),
			}},
		},
		Status: firmwarev1.ReleaseStatus{
			ObservedGeneration: 1,
			Conditions: []metav1.Condition{{Type: firmwarev1.ReleaseVerified, Status: metav1.ConditionTrue, ObservedGeneration: 1,
				LastTransitionTime: now, Reason: "Verified", Message: "2 of 2 signatures"}},
			KeyIDs: []string{"0123456789abcdef"},
		},
	}
}

// fullRollout returns a Rollout with every field set.
func fullRollout() *firmwarev1.Rollout {
	now := metav1.NewTime(time.Date(2026, 12, 7, 18, 0, 0, 0, time.UTC))
	return &firmwarev1.Rollout{
		TypeMeta:   metav1.TypeMeta{APIVersion: firmwarev1.SchemeGroupVersion.String(), Kind: "Rollout"},
		ObjectMeta: metav1.ObjectMeta{Name: "agent-1-4-0"},
		Spec: firmwarev1.RolloutSpec{
			Release: "agent-1-4-0",
			NodeSelector: &metav1.LabelSelector{
				MatchLabels:      map[string]string{"tier": "edge"},
				MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "zone", Operator: metav1.LabelSelectorOpIn, Values: []string{"a", "b"}}},
			},
			Sites:              []string{"berlin", "lyon"},
			Waves:              []string{"1", "5%", "100%"},
			HealthWindow:       &metav1.Duration{Duration: 10 * time.Minute},
			FailureBudget:      firmwarev1.FailureBudget{Count: 1, Percent: 10, MinSample: 5},
			OnFailure:          firmwarev1.FailureRevert,
			MaintenanceWindows: []firmwarev1.MaintenanceWindow{{Days: []string{"Sat", "Sun"}, Start: "22:00", End: "04:00"}},
			Paused:             true,
		},
		Status: firmwarev1.RolloutStatus{
			ObservedGeneration: 2,
			Wave:               1,
			Waves:              []firmwarev1.WaveStatus{{Target: 1, Nodes: 1, Updated: 1, Healthy: 1, Failed: 1, InProgress: 1, Pending: 1, Offline: 1, Started: &now}},
			Updated:            1, Failed: 1, Pending: 1,
			Nodes: []firmwarev1.NodeStatus{{Name: "n1", State: "Updated", Version: "1.4.0", Reason: "Committed", Message: "healthy", Since: now}},
			Planner: &firmwarev1.PlannerState{Wave: 0, WaveStarted: []metav1.Time{now}, Assigned: map[string]int32{"n1": 0},
				Tripped: true, Complete: true, Paused: true, Failed: []string{"n2"}, Excused: []string{"n3"}},
			Conditions: []metav1.Condition{{Type: "Progressing", Status: metav1.ConditionFalse, ObservedGeneration: 2,
				LastTransitionTime: now, Reason: "Paused", Message: "spec.paused is set"}},
		},
	}
}

// TestSchemaKeepsEveryField round-trips fully populated objects through
// JSON and the CRD's structural pruning: nothing may be pruned, and the
// object decodes back equal.
func TestSchemaKeepsEveryField(t *testing.T) {
	tests := []struct {
		plural string
		obj    runtime.Object
		into   func() runtime.Object
	}{
		{"releases", fullRelease(), func() runtime.Object { return &firmwarev1.Release{} }},
		{"rollouts", fullRollout(), func() runtime.Object { return &firmwarev1.Rollout{} }},
	}
	for _, tt := range tests {
		t.Run(tt.plural, func(t *testing.T) {
			s := structural(t, crdFor(t, tt.plural))
			data, err := json.Marshal(tt.obj)
			if err != nil {
				t.Fatal(err)
			}
			var u map[string]any
			if err := json.Unmarshal(data, &u); err != nil {
				t.Fatal(err)
			}
			pruned := structuralpruning.PruneWithOptions(u, s, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true})
			if len(pruned) > 0 {
				t.Fatalf("schema prunes %v", pruned)
			}
			back, err := json.Marshal(u)
			if err != nil {
				t.Fatal(err)
			}
			got := tt.into()
			if err := json.Unmarshal(back, got); err != nil {
				t.Fatal(err)
			}
			if !equality.Semantic.DeepEqual(got, tt.obj) {
				t.Fatalf("after pruning\n got %+v\nwant %+v", got, tt.obj)
			}
		})
	}
}

// structural returns crd's v1 structural schema.
func structural(t *testing.T, crd *apiextensionsv1.CustomResourceDefinition) *structuralschema.Structural {
	t.Helper()
	in := &apiextensions.CustomResourceValidation{}
	if err := apiextensionsv1.Convert_v1_CustomResourceValidation_To_apiextensions_CustomResourceValidation(crd.Spec.Versions[0].Schema, in, nil); err != nil {
		t.Fatal(err)
	}
	s, err := structuralschema.NewStructural(in.OpenAPIV3Schema)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestSchemaMatchesTypes walks the Go types and the schemas together:
// every JSON field of a Go struct is a property of the schema with the
// matching type and format, and every property is a Go field.
func TestSchemaMatchesTypes(t *testing.T) {
	tests := []struct {
		plural string
		typ    reflect.Type
	}{
		{"releases", reflect.TypeFor[firmwarev1.Release]()},
		{"rollouts", reflect.TypeFor[firmwarev1.Rollout]()},
	}
	for _, tt := range tests {
		t.Run(tt.plural, func(t *testing.T) {
			schema := crdFor(t, tt.plural).Spec.Versions[0].Schema.OpenAPIV3Schema
			matchType(t, tt.plural, tt.typ, schema)
		})
	}
}

// Types with a JSON form of their own.
var (
	timeType       = reflect.TypeFor[metav1.Time]()
	durationType   = reflect.TypeFor[metav1.Duration]()
	objectMetaType = reflect.TypeFor[metav1.ObjectMeta]()
)

// reporter is the part of *testing.T that matchType uses, so that a test
// of the walk can record what it reports.
type reporter interface {
	Helper()
	Errorf(format string, args ...any)
}

// recorder is a reporter that counts errors.
type recorder struct{ errors int }

func (*recorder) Helper()                 {}
func (r *recorder) Errorf(string, ...any) { r.errors++ }

// matchType checks that schema s describes Go type typ at path.
func matchType(t reporter, path string, typ reflect.Type, s *apiextensionsv1.JSONSchemaProps) {
	t.Helper()
	for typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	want := func(typ, format string) {
		if s.Type != typ || s.Format != format {
			t.Errorf("%s: schema %s/%s, want %s/%s", path, s.Type, s.Format, typ, format)
		}
	}
	switch {
	case typ == timeType:
		want("string", "date-time")
	case typ == durationType:
		want("string", "")
	case typ == objectMetaType:
		want("object", "")
	case typ.Kind() == reflect.Slice && typ.Elem().Kind() == reflect.Uint8:
		want("string", "byte")
	case typ.Kind() == reflect.String:
		want("string", "")
	case typ.Kind() == reflect.Bool:
		want("boolean", "")
	case typ.Kind() == reflect.Int32:
		want("integer", "int32")
	case typ.Kind() == reflect.Int64:
		want("integer", "int64")
	case typ.Kind() == reflect.Slice:
		want("array", "")
		if s.Items == nil || s.Items.Schema == nil {
			t.Errorf("%s: array without items", path)
			return
		}
		matchType(t, path+"[]", typ.Elem(), s.Items.Schema)
	case typ.Kind() == reflect.Map:
		want("object", "")
		if s.AdditionalProperties == nil || s.AdditionalProperties.Schema == nil {
			t.Errorf("%s: map without additionalProperties", path)
			return
		}
		matchType(t, path+"{}", typ.Elem(), s.AdditionalProperties.Schema)
	case typ.Kind() == reflect.Struct:
		want("object", "")
		matchStruct(t, path, typ, s)
	default:
		t.Errorf("%s: Go type %v has no schema rule in this test", path, typ)
	}
}

// matchStruct checks that s's properties are exactly typ's JSON fields,
// inlined structs included, each described as matchType says.
func matchStruct(t reporter, path string, typ reflect.Type, s *apiextensionsv1.JSONSchemaProps) {
	t.Helper()
	seen := map[string]bool{}
	var walk func(reflect.Type)
	walk = func(typ reflect.Type) {
		for f := range typ.Fields() {
			name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" || !f.IsExported() {
				continue
			}
			if name == "" && strings.Contains(opts, "inline") {
				walk(f.Type)
				continue
			}
			seen[name] = true
			prop, ok := s.Properties[name]
			if !ok {
				t.Errorf("%s.%s: Go field %s is not in the schema", path, name, f.Name)
				continue
			}
			matchType(t, path+"."+name, f.Type, &prop)
		}
	}
	walk(typ)
	for name := range s.Properties {
		if !seen[name] {
			t.Errorf("%s.%s: schema property has no Go field", path, name)
		}
	}
}

// TestMatchTypeCatchesDrift checks the walk itself: a schema missing a
// field, with an extra one or of the wrong format is reported.
func TestMatchTypeCatchesDrift(t *testing.T) {
	type small struct {
		A int32  `json:"a"`
		B string `json:"b,omitempty"`
	}
	good := &apiextensionsv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
		"a": {Type: "integer", Format: "int32"}, "b": {Type: "string"},
	}}
	tests := []struct {
		name   string
		change func(*apiextensionsv1.JSONSchemaProps)
		fails  bool
	}{
		{"same", func(*apiextensionsv1.JSONSchemaProps) {}, false},
		{"missing", func(s *apiextensionsv1.JSONSchemaProps) { delete(s.Properties, "b") }, true},
		{"extra", func(s *apiextensionsv1.JSONSchemaProps) {
			s.Properties["c"] = apiextensionsv1.JSONSchemaProps{Type: "string"}
		}, true},
		{"format", func(s *apiextensionsv1.JSONSchemaProps) {
			s.Properties["a"] = apiextensionsv1.JSONSchemaProps{Type: "integer", Format: "int64"}
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := good.DeepCopy()
			tt.change(s)
			var r recorder
			matchType(&r, "x", reflect.TypeFor[small](), s)
			if (r.errors > 0) != tt.fails {
				t.Fatalf("%d errors, want failure %v", r.errors, tt.fails)
			}
		})
	}
}

// TestDefaultsAndPrinterColumns checks the defaults and columns the
// issue asks for.
func TestDefaultsAndPrinterColumns(t *testing.T) {
	spec := crdFor(t, "rollouts").Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	defaults := map[string]string{"waves": `["100%"]`, "healthWindow": `"5m"`, "onFailure": `"Pause"`}
	for name, want := range defaults {
		d := spec.Properties[name].Default
		if d == nil || string(d.Raw) != want {
			t.Errorf("spec.%s default %v, want %s", name, d, want)
		}
	}
	columns := map[string][]string{
		"releases": {"Version", "Verified", "Age"},
		"rollouts": {"Release", "Wave", "Updated", "Failed", "Pending", "Paused", "Age"},
	}
	for plural, want := range columns {
		var got []string
		for _, c := range crdFor(t, plural).Spec.Versions[0].AdditionalPrinterColumns {
			got = append(got, c.Name)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s columns %v, want %v", plural, got, want)
		}
	}
}
