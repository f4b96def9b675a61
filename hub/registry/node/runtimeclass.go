// Package node holds the hub's rules for the node.k8s.io/v1 resource
// runtimeclasses: their validation and printer columns, as upstream
// Kubernetes defines them. A RuntimeClass names the container runtime
// handler a node runs a pod with, and the overhead and scheduling
// constraints that come with it.
package node

import (
	"time"

	nodev1 "k8s.io/api/node/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/registry/core"
	"github.com/outpost-mesh/outpost/hub/registry/typed"
)

// Resources returns the node.k8s.io/v1 resources, with ages in printed
// tables measured against the wall clock.
func Resources() []apiserver.Resource { return ResourcesWithClock(nil) }

// ResourcesWithClock is Resources with ages measured against now, or the
// wall clock if now is nil.
func ResourcesWithClock(now func() time.Time) []apiserver.Resource {
	return []apiserver.Resource{{
		GroupVersion: nodev1.SchemeGroupVersion,
		Kind:         "RuntimeClass",
		Plural:       "runtimeclasses",
		Singular:     "runtimeclass",
		New:          func() runtime.Object { return &nodev1.RuntimeClass{} },
		NewList:      func() runtime.Object { return &nodev1.RuntimeClassList{} },
		AddToScheme:  nodev1.AddToScheme,
		Rules:        runtimeClassRules(now),
	}}
}

// runtimeClassRules are the rules of runtimeclasses, with ages measured
// against now (nil is the wall clock). A runtimeclass is cluster-scoped,
// has no defaults, status or field selectors beyond metadata's, and may
// be created with a PUT, as upstream allows.
func runtimeClassRules(now func() time.Time) *typed.Rules[*nodev1.RuntimeClass] {
	return &typed.Rules[*nodev1.RuntimeClass]{
		Now:            now,
		Check:          validateRuntimeClass,
		CheckUpdate:    validateRuntimeClassUpdate,
		CreateOnUpdate: true,
		TableColumns:   runtimeClassColumns(),
		TableRow:       runtimeClassRow,
	}
}

var (
	metadataPath = field.NewPath("metadata")
	handlerPath  = field.NewPath("handler")
)

// validateRuntimeClass checks a runtimeclass: its handler, which names a
// runtime configuration on the nodes, is a DNS label; its overhead is
// checked as a container's limits are, and its scheduling as a pod's
// node selector and tolerations.
func validateRuntimeClass(rc *nodev1.RuntimeClass) field.ErrorList {
	errs := apivalidation.ValidateObjectMeta(&rc.ObjectMeta, false, apivalidation.NameIsDNSSubdomain, metadataPath)
	return append(errs, validateRuntimeClassFields(rc)...)
}

// validateRuntimeClassFields checks what a runtimeclass holds beyond its
// metadata.
func validateRuntimeClassFields(rc *nodev1.RuntimeClass) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range apivalidation.NameIsDNSLabel(rc.Handler, false) {
		errs = append(errs, field.Invalid(handlerPath, rc.Handler, msg))
	}
	if rc.Overhead != nil {
		errs = append(errs, core.ValidateOverhead(rc.Overhead.PodFixed, field.NewPath("overhead"))...)
	}
	if s := rc.Scheduling; s != nil {
		sp := field.NewPath("scheduling")
		errs = append(errs, metav1validation.ValidateLabels(s.NodeSelector, sp.Child("nodeSelector"))...)
		errs = append(errs, core.ValidateTolerations(s.Tolerations, sp.Child("tolerations"))...)
	}
	return errs
}

// validateRuntimeClassUpdate checks an update of runtimeclass old to rc:
// everything a create checks, and that the handler stays, since pods
// running with the class were started with it.
func validateRuntimeClassUpdate(rc, old *nodev1.RuntimeClass) field.ErrorList {
	errs := apivalidation.ValidateObjectMetaUpdate(&rc.ObjectMeta, &old.ObjectMeta, metadataPath)
	errs = append(errs, validateRuntimeClassFields(rc)...)
	return append(errs, apivalidation.ValidateImmutableField(rc.Handler, old.Handler, handlerPath)...)
}

func runtimeClassColumns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{
		typed.NameColumn,
		{Name: "Handler", Type: "string", Description: nodev1.RuntimeClass{}.SwaggerDoc()["handler"]},
		typed.AgeColumn,
	}
}

func runtimeClassRow(rc *nodev1.RuntimeClass, now time.Time) []interface{} {
	return []interface{}{rc.Name, rc.Handler, typed.Age(now, rc.CreationTimestamp)}
}
