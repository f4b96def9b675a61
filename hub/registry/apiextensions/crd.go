// Package apiextensions holds the hub's rules for apiextensions.k8s.io/v1
// CustomResourceDefinitions and builds, from a CRD, the resources that
// serve its custom resources (schema validation, CEL rules, defaults,
// pruning, subresources, printer columns, selectable fields) and their
// OpenAPI descriptions. It reuses upstream's apiextensions-apiserver
// libraries for everything a CRD's schema decides, so that errors carry
// upstream's field paths and messages.
package apiextensions

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/install"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/registry/typed"
)

// CleanupFinalizer is the finalizer a delete of a CRD adds, which the CRD
// controller removes once the CRD's custom resources are gone.
const CleanupFinalizer = apiextensionsv1.CustomResourceCleanupFinalizer

// internalScheme converts CRDs between v1 and the internal types that
// upstream's validation takes.
var internalScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	install.Install(s)
	return s
}()

// Resources returns the apiextensions.k8s.io/v1 resources, with ages in
// printed tables measured against the wall clock.
func Resources() []apiserver.Resource { return ResourcesWithClock(nil) }

// ResourcesWithClock is Resources with ages measured against now, or the
// wall clock if now is nil.
func ResourcesWithClock(now func() time.Time) []apiserver.Resource {
	return []apiserver.Resource{{
		GroupVersion: apiextensionsv1.SchemeGroupVersion,
		Kind:         "CustomResourceDefinition",
		Plural:       "customresourcedefinitions",
		Singular:     "customresourcedefinition",
		ShortNames:   []string{"crd", "crds"},
		Categories:   []string{"api-extensions"},
		New:          func() runtime.Object { return &apiextensionsv1.CustomResourceDefinition{} },
		NewList:      func() runtime.Object { return &apiextensionsv1.CustomResourceDefinitionList{} },
		AddToScheme:  apiextensionsv1.AddToScheme,
		Status:       true,
		Generation:   true,
		Rules:        crdRules{crdTypedRules(now)},
		// The machinery's default is k8s.io/api's, which lacks
		// apiextensions' types.
		TypeConverter: crdTypeConverter(),
	}}
}

// crdTypeConverter returns the schema server-side apply merges CRDs by,
// built from apiextensions' generated OpenAPI definitions. It panics if
// they do not make one, which the package's tests rule out.
func crdTypeConverter() managedfields.TypeConverter {
	models := staticModels()
	for kind, name := range map[string]string{
		"CustomResourceDefinition":     "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinition",
		"CustomResourceDefinitionList": "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinitionList",
	} {
		s := *models[name]
		s.Extensions = spec.Extensions{"x-kubernetes-group-version-kind": []interface{}{map[string]interface{}{
			"group": apiextensionsv1.GroupName, "version": "v1", "kind": kind,
		}}}
		for k, v := range models[name].Extensions {
			s.Extensions[k] = v
		}
		models[name] = &s
	}
	tc, err := managedfields.NewTypeConverter(models, false)
	if err != nil {
		panic(fmt.Sprintf("apiextensions: type converter of customresourcedefinitions: %v", err))
	}
	return tc
}

// crdRules are the rules of CRDs: the typed ones, plus the cleanup
// finalizer a delete adds, as upstream's CRD REST Delete does.
type crdRules struct {
	*typed.Rules[*apiextensionsv1.CustomResourceDefinition]
}

// FinalizersOnDelete returns the finalizers a delete of a CRD adds: the
// cleanup finalizer, so that the CRD stays until its objects are gone.
func (crdRules) FinalizersOnDelete(runtime.Object) []string {
	return []string{CleanupFinalizer}
}

func crdTypedRules(now func() time.Time) *typed.Rules[*apiextensionsv1.CustomResourceDefinition] {
	return &typed.Rules[*apiextensionsv1.CustomResourceDefinition]{
		Now:           now,
		Defaults:      apiextensionsv1.SetObjectDefaults_CustomResourceDefinition,
		PrepareCreate: prepareCRDCreate,
		PrepareUpdate: prepareCRDUpdate,
		Check:         validateCRD,
		CheckUpdate:   validateCRDUpdate,
		CheckStatus:   validateCRDStatus,
		TableColumns:  crdColumns(),
		TableRow:      crdRow,
	}
}

// prepareCRDCreate clears the status a client sent and records the
// storage version as stored, as upstream's strategy does.
func prepareCRDCreate(crd *apiextensionsv1.CustomResourceDefinition) {
	crd.Status = apiextensionsv1.CustomResourceDefinitionStatus{}
	addStoredVersion(crd)
}

// prepareCRDUpdate adds the storage version to the stored versions (the
// machinery keeps the rest of the stored status).
func prepareCRDUpdate(crd, _ *apiextensionsv1.CustomResourceDefinition) {
	addStoredVersion(crd)
}

// addStoredVersion appends crd's storage version to status.storedVersions
// unless it is there.
func addStoredVersion(crd *apiextensionsv1.CustomResourceDefinition) {
	for _, v := range crd.Spec.Versions {
		if !v.Storage {
			continue
		}
		for _, s := range crd.Status.StoredVersions {
			if s == v.Name {
				return
			}
		}
		crd.Status.StoredVersions = append(crd.Status.StoredVersions, v.Name)
		return
	}
}

// toInternal converts crd to upstream's internal type for its validation.
func toInternal(crd *apiextensionsv1.CustomResourceDefinition) (*apiextensions.CustomResourceDefinition, error) {
	out := &apiextensions.CustomResourceDefinition{}
	if err := internalScheme.Convert(crd, out, nil); err != nil {
		return nil, fmt.Errorf("convert customresourcedefinition to internal: %w", err)
	}
	return out, nil
}

func validateCRD(crd *apiextensionsv1.CustomResourceDefinition) field.ErrorList {
	in, err := toInternal(crd)
	if err != nil {
		return field.ErrorList{field.InternalError(nil, err)}
	}
	return validation.ValidateCustomResourceDefinition(context.Background(), in)
}

func validateCRDUpdate(crd, old *apiextensionsv1.CustomResourceDefinition) field.ErrorList {
	return validatePair(crd, old, validation.ValidateCustomResourceDefinitionUpdate)
}

func validateCRDStatus(crd, old *apiextensionsv1.CustomResourceDefinition) field.ErrorList {
	return validatePair(crd, old, validation.ValidateUpdateCustomResourceDefinitionStatus)
}

// validatePair converts crd and old to internal and validates them with
// check.
func validatePair(crd, old *apiextensionsv1.CustomResourceDefinition, check func(context.Context, *apiextensions.CustomResourceDefinition, *apiextensions.CustomResourceDefinition) field.ErrorList) field.ErrorList {
	in, err := toInternal(crd)
	if err != nil {
		return field.ErrorList{field.InternalError(nil, err)}
	}
	inOld, err := toInternal(old)
	if err != nil {
		return field.ErrorList{field.InternalError(nil, err)}
	}
	return check(context.Background(), in, inOld)
}

// crdColumns are upstream's CRD columns: NAME and CREATED AT.
func crdColumns() []metav1.TableColumnDefinition {
	doc := metav1.ObjectMeta{}.SwaggerDoc()
	return []metav1.TableColumnDefinition{
		{Name: "Name", Type: "string", Format: "name", Description: doc["name"]},
		{Name: "Created At", Type: "date", Description: doc["creationTimestamp"]},
	}
}

func crdRow(crd *apiextensionsv1.CustomResourceDefinition, _ time.Time) []interface{} {
	return []interface{}{crd.Name, crd.CreationTimestamp.UTC().Format(time.RFC3339)}
}
