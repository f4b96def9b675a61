package crd

import (
	"fmt"
	"reflect"

	apiextensionshelpers "k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/sets"
)

// ReasonInstalling is the reason of a CRD's Established condition while
// its names are accepted and its resources not served yet.
const ReasonInstalling = "Installing"

// Status returns the status crd should have given all the CRDs there are
// (crd may be among them): its accepted names and its NamesAccepted and
// Established conditions, as upstream's naming and establishing
// controllers set them. A requested name is accepted unless another CRD
// of the same group has accepted it already; a name the CRD has accepted
// stays accepted. Once all names are accepted, Established is False with
// reason Installing, as upstream's naming controller leaves it: the server
// that serves the CRD's resources sets it True once it serves them (as
// upstream's establishing controller does), so that a client waiting for
// Established finds them in discovery. The conditions' times are those of
// SetCRDCondition.
// It returns a copy of crd; changed reports whether its status differs.
func Status(crd *apiextensionsv1.CustomResourceDefinition, all []*apiextensionsv1.CustomResourceDefinition) (out *apiextensionsv1.CustomResourceDefinition, changed bool) {
	out = crd.DeepCopy()
	if !reflect.DeepEqual(crd.Spec.Names, crd.Status.AcceptedNames) {
		names, accepted := acceptNames(crd, all)
		out.Status.AcceptedNames = names
		if old := apiextensionshelpers.FindCRDCondition(crd, apiextensionsv1.NamesAccepted); !apiextensionshelpers.IsCRDConditionEquivalent(&accepted, old) {
			apiextensionshelpers.SetCRDCondition(out, accepted)
		}
		if accepted.Status != apiextensionsv1.ConditionTrue && apiextensionshelpers.FindCRDCondition(out, apiextensionsv1.Established) == nil {
			apiextensionshelpers.SetCRDCondition(out, apiextensionsv1.CustomResourceDefinitionCondition{
				Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionFalse,
				Reason: "NotAccepted", Message: "not all names are accepted",
			})
		}
	}
	if apiextensionshelpers.IsCRDConditionTrue(out, apiextensionsv1.NamesAccepted) && !apiextensionshelpers.IsCRDConditionTrue(out, apiextensionsv1.Established) {
		if est := apiextensionshelpers.FindCRDCondition(out, apiextensionsv1.Established); est == nil || est.Reason != ReasonInstalling {
			apiextensionshelpers.SetCRDCondition(out, apiextensionsv1.CustomResourceDefinitionCondition{
				Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionFalse,
				Reason: ReasonInstalling, Message: "the initial names have been accepted",
			})
		}
	}
	return out, !reflect.DeepEqual(crd.Status, out.Status)
}

// acceptNames returns the names of crd that all lets it have and the
// NamesAccepted condition that says so, as upstream's naming controller
// computes them: each name that conflicts keeps the accepted one, and the
// condition names the last conflict.
func acceptNames(crd *apiextensionsv1.CustomResourceDefinition, all []*apiextensionsv1.CustomResourceDefinition) (apiextensionsv1.CustomResourceDefinitionNames, apiextensionsv1.CustomResourceDefinitionCondition) {
	resources, kinds := usedNames(crd.Spec.Group, all)
	requested, accepted := crd.Spec.Names, crd.Status.AcceptedNames
	names := accepted
	cond := apiextensionsv1.CustomResourceDefinitionCondition{Type: apiextensionsv1.NamesAccepted, Status: apiextensionsv1.ConditionUnknown}
	conflict := func(reason string, err error) {
		cond.Status, cond.Reason, cond.Message = apiextensionsv1.ConditionFalse, reason, err.Error()
	}

	if err := acceptedOrFresh(requested.Plural, accepted.Plural, resources); err != nil {
		conflict("PluralConflict", err)
	} else {
		names.Plural = requested.Plural
	}
	if err := acceptedOrFresh(requested.Singular, accepted.Singular, resources); err != nil {
		conflict("SingularConflict", err)
	} else {
		names.Singular = requested.Singular
	}
	if !reflect.DeepEqual(requested.ShortNames, accepted.ShortNames) {
		have := sets.New(accepted.ShortNames...)
		var errs []error
		for _, s := range requested.ShortNames {
			if have.Has(s) {
				continue
			}
			if err := acceptedOrFresh(s, "", resources); err != nil {
				errs = append(errs, err)
			}
		}
		if err := utilerrors.NewAggregate(errs); err != nil {
			conflict("ShortNamesConflict", err)
		} else {
			names.ShortNames = requested.ShortNames
		}
	}
	if err := acceptedOrFresh(requested.Kind, accepted.Kind, kinds); err != nil {
		conflict("KindConflict", err)
	} else {
		names.Kind = requested.Kind
	}
	if err := acceptedOrFresh(requested.ListKind, accepted.ListKind, kinds); err != nil {
		conflict("ListKindConflict", err)
	} else {
		names.ListKind = requested.ListKind
	}
	names.Categories = requested.Categories

	if cond.Status == apiextensionsv1.ConditionUnknown {
		cond.Status, cond.Reason, cond.Message = apiextensionsv1.ConditionTrue, "NoConflicts", "no conflicts found"
	}
	return names, cond
}

// usedNames returns the resource names (plural, singular, short) and the
// kinds (kind, list kind) that the CRDs of group in all have accepted.
func usedNames(group string, all []*apiextensionsv1.CustomResourceDefinition) (resources, kinds sets.Set[string]) {
	resources, kinds = sets.New[string](), sets.New[string]()
	for _, c := range all {
		if c.Spec.Group != group {
			continue
		}
		n := c.Status.AcceptedNames
		resources.Insert(n.Plural, n.Singular)
		resources.Insert(n.ShortNames...)
		kinds.Insert(n.Kind, n.ListKind)
	}
	return resources, kinds
}

// acceptedOrFresh fails when requested is a name other than accepted
// that used holds.
func acceptedOrFresh(requested, accepted string, used sets.Set[string]) error {
	if requested == accepted || !used.Has(requested) {
		return nil
	}
	return fmt.Errorf("%q is already in use", requested)
}
