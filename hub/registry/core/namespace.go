package core

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/registry/typed"
)

func namespaceResource(now func() time.Time) apiserver.Resource {
	return apiserver.Resource{
		GroupVersion: corev1.SchemeGroupVersion,
		Kind:         "Namespace",
		Plural:       "namespaces",
		Singular:     "namespace",
		ShortNames:   []string{"ns"},
		New:          func() runtime.Object { return &corev1.Namespace{} },
		NewList:      func() runtime.Object { return &corev1.NamespaceList{} },
		AddToScheme:  corev1.AddToScheme,
		Status:       true,
		Rules: namespaceRules{&typed.Rules[*corev1.Namespace]{
			Now:           now,
			Defaults:      defaultNamespace,
			PrepareCreate: prepareNamespaceForCreate,
			PrepareUpdate: prepareNamespaceForUpdate,
			Check:         validateNamespace,
			CheckUpdate:   validateNamespaceUpdate,
			FieldSet:      namespaceFields,
			TableColumns: []metav1.TableColumnDefinition{
				nameColumn,
				{Name: "Status", Type: "string", Description: "The status of the namespace"},
				ageColumn,
			},
			TableRow: func(ns *corev1.Namespace, now time.Time) []interface{} {
				return []interface{}{ns.Name, string(ns.Status.Phase), age(ns.CreationTimestamp, now)}
			},
			CheckStatus: validateNamespaceStatusUpdate,
		}},
	}
}

// namespaceRules are the namespace rules plus the spec's finalizers, which
// keep a deleted namespace Terminating until the namespace controller has
// removed its content and then its "kubernetes" finalizer through the
// finalize subresource.
type namespaceRules struct {
	*typed.Rules[*corev1.Namespace]
}

var _ apiserver.Finalizable = namespaceRules{}

func (namespaceRules) SpecFinalizers(obj runtime.Object) []string {
	ns, ok := obj.(*corev1.Namespace)
	if !ok {
		return nil
	}
	out := make([]string, len(ns.Spec.Finalizers))
	for i, f := range ns.Spec.Finalizers {
		out[i] = string(f)
	}
	return out
}

// PrepareForFinalize keeps the stored status: the finalize subresource
// changes metadata and spec.finalizers, as upstream's finalize strategy.
func (namespaceRules) PrepareForFinalize(obj, old runtime.Object) {
	ns, ok := obj.(*corev1.Namespace)
	prev, ok2 := old.(*corev1.Namespace)
	if ok && ok2 {
		ns.Status = prev.Status
	}
}

// MarkDeleting moves a namespace being deleted to phase Terminating.
func (namespaceRules) MarkDeleting(obj runtime.Object) {
	if ns, ok := obj.(*corev1.Namespace); ok {
		ns.Status.Phase = corev1.NamespaceTerminating
	}
}

// defaultNamespace labels the namespace with its name, so that selectors
// can pick namespaces by name, and makes an unset phase Active.
//
// A namespace created with generateName gets its name after Default, so
// it gets no label on create; the contract has no hook after name
// generation (upstream sets the label again in Canonicalize).
func defaultNamespace(ns *corev1.Namespace) {
	if ns.Name != "" {
		if ns.Labels == nil {
			ns.Labels = map[string]string{}
		}
		ns.Labels[corev1.LabelMetadataName] = ns.Name
	}
	if ns.Status.Phase == "" {
		ns.Status.Phase = corev1.NamespaceActive
	}
}

// prepareNamespaceForCreate makes a new namespace Active and gives it the
// kubernetes finalizer, which the namespace controller removes once it
// has deleted the namespace's content.
func prepareNamespaceForCreate(ns *corev1.Namespace) {
	ns.Status = corev1.NamespaceStatus{Phase: corev1.NamespaceActive}
	for _, f := range ns.Spec.Finalizers {
		if f == corev1.FinalizerKubernetes {
			return
		}
	}
	ns.Spec.Finalizers = append(ns.Spec.Finalizers, corev1.FinalizerKubernetes)
}

// prepareNamespaceForUpdate keeps finalizers (changed only through the
// finalize subresource) and status.
func prepareNamespaceForUpdate(ns, old *corev1.Namespace) {
	ns.Spec.Finalizers = old.Spec.Finalizers
	ns.Status = old.Status
}

func validateNamespace(ns *corev1.Namespace) field.ErrorList {
	errs := validateObjectMeta(&ns.ObjectMeta, false, apimachineryvalidation.ValidateNamespaceName)
	for i, f := range ns.Spec.Finalizers {
		errs = append(errs, validateFinalizerName(string(f), specPath.Child("finalizers").Index(i))...)
	}
	return errs
}

func validateNamespaceUpdate(ns, old *corev1.Namespace) field.ErrorList {
	errs := validateObjectMetaUpdate(&ns.ObjectMeta, &old.ObjectMeta)
	for i, f := range ns.Spec.Finalizers {
		errs = append(errs, validateFinalizerName(string(f), specPath.Child("finalizers").Index(i))...)
	}
	return errs
}

// validateNamespaceStatusUpdate requires the phase to match whether the
// namespace is being deleted.
func validateNamespaceStatusUpdate(ns, old *corev1.Namespace) field.ErrorList {
	errs := validateObjectMetaUpdate(&ns.ObjectMeta, &old.ObjectMeta)
	phasePath := field.NewPath("status", "Phase")
	if ns.DeletionTimestamp.IsZero() {
		if ns.Status.Phase != corev1.NamespaceActive {
			errs = append(errs, field.Invalid(phasePath, ns.Status.Phase, "may only be 'Active' if `deletionTimestamp` is empty"))
		}
	} else if ns.Status.Phase != corev1.NamespaceTerminating {
		errs = append(errs, field.Invalid(phasePath, ns.Status.Phase, "may only be 'Terminating' if `deletionTimestamp` is not empty"))
	}
	return errs
}

// namespaceFields includes the legacy "name", which upstream keeps for
// compatibility.
func namespaceFields(ns *corev1.Namespace) fields.Set {
	return fields.Set{
		"status.phase": string(ns.Status.Phase),
		"name":         ns.Name,
	}
}
