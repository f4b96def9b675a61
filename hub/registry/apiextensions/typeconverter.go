package apiextensions

import (
	"fmt"
	"strings"
	"sync"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/controller/openapi/builder"
	generatedopenapi "k8s.io/apiextensions-apiserver/pkg/generated/openapi"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/kube-openapi/pkg/util"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// typeConverter returns the schema server-side apply merges crd's custom
// resources by: its versions' schemas (list-map keys, atomic fields) with
// the metadata types they refer to, as upstream builds it.
func typeConverter(crd *apiextensionsv1.CustomResourceDefinition) (managedfields.TypeConverter, error) {
	specs := []*spec3.OpenAPI{{
		Version:    "3.0.0",
		Info:       &spec.Info{InfoProps: spec.InfoProps{Title: "Kubernetes CRD Swagger", Version: "v0.1.0"}},
		Components: &spec3.Components{Schemas: staticModels()},
	}}
	for _, v := range crd.Spec.Versions {
		s, err := builder.BuildOpenAPIV3(crd, v.Name, builder.Options{})
		if err != nil {
			return nil, fmt.Errorf("openapi of version %s: %w", v.Name, err)
		}
		specs = append(specs, s)
	}
	merged, err := builder.MergeSpecsV3(specs...)
	if err != nil {
		return nil, fmt.Errorf("merge openapi: %w", err)
	}
	tc, err := managedfields.NewTypeConverter(merged.Components.Schemas, crd.Spec.PreserveUnknownFields)
	if err != nil {
		return nil, fmt.Errorf("type converter: %w", err)
	}
	return tc, nil
}

// staticModels returns the OpenAPI v3 schemas of the Go types a custom
// resource's schema refers to (ObjectMeta, ListMeta and theirs), by
// their REST-friendly names, a new map each call whose schemas the
// caller must not change: upstream's server-wide static spec, of which
// custom resources use only these.
func staticModels() map[string]*spec.Schema {
	defs := staticDefinitions()
	out := make(map[string]*spec.Schema, len(defs))
	for name, def := range defs {
		s := def.Schema
		out[modelName(name)] = &s
	}
	return out
}

// modelName returns the REST-friendly name of a generated definition:
// the name itself where the type declares its model name
// (io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta), else its Go path
// reversed as upstream's namer does.
func modelName(name string) string {
	if !strings.Contains(name, "/") {
		return name
	}
	return util.ToRESTFriendlyName(name)
}

// staticDefinitions are the generated OpenAPI definitions of the Go types
// apiextensions-apiserver knows, with v3 references, computed once.
var staticDefinitions = sync.OnceValue(func() map[string]common.OpenAPIDefinition {
	return generatedopenapi.GetOpenAPIDefinitions(func(name string) spec.Ref {
		return spec.MustCreateRef("#/components/schemas/" + common.EscapeJsonPointer(modelName(name)))
	})
})
