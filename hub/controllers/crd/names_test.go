package crd

import (
	"reflect"
	"testing"

	apiextensionshelpers "k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func named(name, group, plural, kind string, short ...string) *apiextensionsv1.CustomResourceDefinition {
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: plural + "." + group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{Group: group, Names: apiextensionsv1.CustomResourceDefinitionNames{
			Plural: plural, Singular: name, Kind: kind, ListKind: kind + "List", ShortNames: short,
		}},
	}
}

// accepted returns c with its names accepted and established.
func accepted(c *apiextensionsv1.CustomResourceDefinition) *apiextensionsv1.CustomResourceDefinition {
	c.Status.AcceptedNames = c.Spec.Names
	apiextensionshelpers.SetCRDCondition(c, apiextensionsv1.CustomResourceDefinitionCondition{Type: apiextensionsv1.NamesAccepted, Status: apiextensionsv1.ConditionTrue, Reason: "NoConflicts"})
	apiextensionshelpers.SetCRDCondition(c, apiextensionsv1.CustomResourceDefinitionCondition{Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionTrue, Reason: "InitialNamesAccepted"})
	return c
}

func TestStatus(t *testing.T) {
	widgets := accepted(named("widget", "example.com", "widgets", "Widget", "wd"))
	tests := []struct {
		name         string
		crd          *apiextensionsv1.CustomResourceDefinition
		wantNames    apiextensionsv1.CustomResourceDefinitionNames
		accepted     apiextensionsv1.ConditionStatus
		reason       string
		message      string
		established  apiextensionsv1.ConditionStatus
		estReason    string
		wantUnchange bool
	}{
		{
			name: "fresh names", crd: named("gadget", "example.com", "gadgets", "Gadget", "gd"),
			wantNames: named("gadget", "example.com", "gadgets", "Gadget", "gd").Spec.Names,
			accepted:  apiextensionsv1.ConditionTrue, reason: "NoConflicts", message: "no conflicts found",
			established: apiextensionsv1.ConditionFalse, estReason: ReasonInstalling,
		},
		{
			name: "plural taken in the group", crd: named("other", "example.com", "widgets", "Other"),
			wantNames: apiextensionsv1.CustomResourceDefinitionNames{Singular: "other", Kind: "Other", ListKind: "OtherList"},
			accepted:  apiextensionsv1.ConditionFalse, reason: "PluralConflict", message: `"widgets" is already in use`,
			established: apiextensionsv1.ConditionFalse, estReason: "NotAccepted",
		},
		{
			name: "kind and short name taken", crd: named("thing", "example.com", "things", "Widget", "wd"),
			wantNames: apiextensionsv1.CustomResourceDefinitionNames{Plural: "things", Singular: "thing"},
			accepted:  apiextensionsv1.ConditionFalse, reason: "ListKindConflict", message: `"WidgetList" is already in use`,
			established: apiextensionsv1.ConditionFalse, estReason: "NotAccepted",
		},
		{
			name: "same names in another group", crd: named("widget", "other.com", "widgets", "Widget", "wd"),
			wantNames: named("widget", "other.com", "widgets", "Widget", "wd").Spec.Names,
			accepted:  apiextensionsv1.ConditionTrue, reason: "NoConflicts", message: "no conflicts found",
			established: apiextensionsv1.ConditionFalse, estReason: ReasonInstalling,
		},
		{
			name: "its own accepted names", crd: widgets, wantNames: widgets.Spec.Names,
			accepted: apiextensionsv1.ConditionTrue, reason: "NoConflicts", established: apiextensionsv1.ConditionTrue, estReason: "InitialNamesAccepted",
			wantUnchange: true,
		},
	}
	for _, tt := range tests {
		all := []*apiextensionsv1.CustomResourceDefinition{widgets, tt.crd}
		out, changed := Status(tt.crd, all)
		if changed == tt.wantUnchange {
			t.Errorf("%s: Status changed = %v, want %v", tt.name, changed, !tt.wantUnchange)
		}
		if !reflect.DeepEqual(out.Status.AcceptedNames, tt.wantNames) {
			t.Errorf("%s: accepted names %+v, want %+v", tt.name, out.Status.AcceptedNames, tt.wantNames)
		}
		na := apiextensionshelpers.FindCRDCondition(out, apiextensionsv1.NamesAccepted)
		if na == nil || na.Status != tt.accepted || na.Reason != tt.reason || (tt.message != "" && na.Message != tt.message) {
			t.Errorf("%s: NamesAccepted %+v, want %s %s %q", tt.name, na, tt.accepted, tt.reason, tt.message)
		}
		est := apiextensionshelpers.FindCRDCondition(out, apiextensionsv1.Established)
		if est == nil || est.Status != tt.established || est.Reason != tt.estReason {
			t.Errorf("%s: Established %+v, want %s %s", tt.name, est, tt.established, tt.estReason)
		}
	}
}
