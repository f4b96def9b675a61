package networking

import (
	"slices"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/outpost-mesh/outpost/hub/registry/typed"
)

// maxControllerLength is the longest spec.controller upstream accepts.
const maxControllerLength = 250

// ingressClassRules are the rules of ingressclasses, with ages measured
// against now (nil is the wall clock). An ingressclass is cluster-scoped,
// has no status and no field selectors beyond metadata's, and a PUT does
// not create one. Which class is the default (its annotation) is for
// upstream's admission, which the hub does not run: an ingress without a
// class keeps none.
func ingressClassRules(now func() time.Time) *typed.Rules[*networkingv1.IngressClass] {
	return &typed.Rules[*networkingv1.IngressClass]{
		Now:          now,
		Defaults:     defaultIngressClass,
		Check:        validateIngressClass,
		CheckUpdate:  validateIngressClassUpdate,
		TableColumns: ingressClassColumns(),
		TableRow:     ingressClassRow,
	}
}

// defaultIngressClass gives parameters without a scope the Cluster scope,
// as upstream does.
func defaultIngressClass(ic *networkingv1.IngressClass) {
	if p := ic.Spec.Parameters; p != nil && p.Scope == nil {
		p.Scope = new(networkingv1.IngressClassParametersReferenceScopeCluster)
	}
}

func validateIngressClass(ic *networkingv1.IngressClass) field.ErrorList {
	errs := apivalidation.ValidateObjectMeta(&ic.ObjectMeta, false, apivalidation.NameIsDNSSubdomain, metadataPath)
	return append(errs, validateIngressClassSpec(&ic.Spec, specPath)...)
}

// validateIngressClassUpdate checks an update of ingressclass old to ic:
// the controller that implements a class may not change.
func validateIngressClassUpdate(ic, old *networkingv1.IngressClass) field.ErrorList {
	errs := apivalidation.ValidateObjectMetaUpdate(&ic.ObjectMeta, &old.ObjectMeta, metadataPath)
	errs = append(errs, apivalidation.ValidateImmutableField(ic.Spec.Controller, old.Spec.Controller, specPath.Child("controller"))...)
	return append(errs, validateIngressClassSpec(&ic.Spec, specPath)...)
}

func validateIngressClassSpec(s *networkingv1.IngressClassSpec, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	cp := fld.Child("controller")
	switch {
	case s.Controller == "":
		errs = append(errs, field.Required(cp, ""))
	case len(s.Controller) > maxControllerLength:
		errs = append(errs, field.TooLong(cp, "", maxControllerLength))
		fallthrough
	default:
		errs = append(errs, validation.IsDomainPrefixedPath(cp, s.Controller)...)
	}
	if s.Parameters != nil {
		errs = append(errs, validateParameters(s.Parameters, fld.Child("parameters"))...)
	}
	return errs
}

var parameterScopes = []string{networkingv1.IngressClassParametersReferenceScopeCluster, networkingv1.IngressClassParametersReferenceScopeNamespace}

// validateParameters checks the reference to a class's parameters: the
// object, and its namespace exactly when the scope is Namespace.
func validateParameters(p *networkingv1.IngressClassParametersReference, fld *field.Path) field.ErrorList {
	errs := validateObjectReference(p.APIGroup, p.Kind, p.Name, fld)
	sp, np := fld.Child("scope"), fld.Child("namespace")
	switch {
	case p.Scope == nil:
		errs = append(errs, field.Required(sp, ""))
	case !slices.Contains(parameterScopes, *p.Scope):
		errs = append(errs, field.NotSupported(sp, *p.Scope, parameterScopes))
	case *p.Scope == networkingv1.IngressClassParametersReferenceScopeNamespace:
		if p.Namespace == nil {
			errs = append(errs, field.Required(np, "`parameters.scope` is set to 'Namespace'"))
			break
		}
		for _, msg := range apivalidation.ValidateNamespaceName(*p.Namespace, false) {
			errs = append(errs, field.Invalid(np, *p.Namespace, msg))
		}
	case p.Namespace != nil:
		errs = append(errs, field.Forbidden(np, "`parameters.scope` is set to 'Cluster'"))
	}
	return errs
}

func ingressClassColumns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{
		typed.NameColumn,
		{Name: "Controller", Type: "string", Description: "Controller that is responsible for handling this class"},
		{Name: "Parameters", Type: "string", Description: "A reference to a resource with additional parameters"},
		typed.AgeColumn,
	}
}

// ingressClassRow is ic's cells for ingressClassColumns: its name marked
// "(default)" when annotated the default class, as upstream (1.35 on)
// prints it, and its parameters as Kind.group/name.
func ingressClassRow(ic *networkingv1.IngressClass, now time.Time) []interface{} {
	name := ic.Name
	if ic.Annotations[networkingv1.AnnotationIsDefaultIngressClass] == "true" {
		name += " (default)"
	}
	params := "<none>"
	if p := ic.Spec.Parameters; p != nil {
		params = p.Kind
		if p.APIGroup != nil {
			params += "." + *p.APIGroup
		}
		params += "/" + p.Name
	}
	return []interface{}{name, ic.Spec.Controller, params, typed.Age(now, ic.CreationTimestamp)}
}
