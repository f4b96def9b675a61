package apiextensions

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	structuralpruning "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apiextensions-apiserver/pkg/registry/customresource"
	"k8s.io/apiextensions-apiserver/pkg/registry/customresource/tableconvertor"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/webhookclient"
)

// CustomResources returns the resources that serve crd's custom
// resources: one per served version, each of *unstructured.Unstructured
// objects kept as JSON at the storage version (converted by the CRD's
// conversion webhook, reached through dial for a Service, or under
// strategy None by their apiVersion alone), with the
// version's schema (validation, CEL rules, defaults, pruning), status and
// scale subresources, printer columns and selectable fields. Names are
// crd's status.acceptedNames, or its spec.names while none are accepted.
// It fails on a CRD that validation would refuse: no storage version or a
// schema that is not structural.
func CustomResources(crd *apiextensionsv1.CustomResourceDefinition, dial webhookclient.DialService) ([]apiserver.Resource, error) {
	storage := storageVersion(crd)
	if storage == "" {
		return nil, fmt.Errorf("customresourcedefinition %s has no storage version", crd.Name)
	}
	names := acceptedNames(crd)
	tc, err := typeConverter(crd)
	if err != nil {
		return nil, fmt.Errorf("customresourcedefinition %s: %w", crd.Name, err)
	}
	var webhook *webhookConverter
	if c := crd.Spec.Conversion; c != nil && c.Strategy == apiextensionsv1.WebhookConverter {
		webhook = newWebhookConverter(crd, dial)
	}
	var out []apiserver.Resource
	for i := range crd.Spec.Versions {
		v := &crd.Spec.Versions[i]
		if !v.Served {
			continue
		}
		rules, err := newCRRules(crd, v)
		if err != nil {
			return nil, fmt.Errorf("customresourcedefinition %s version %s: %w", crd.Name, v.Name, err)
		}
		res := apiserver.Resource{
			GroupVersion:  schema.GroupVersion{Group: crd.Spec.Group, Version: v.Name},
			Kind:          names.Kind,
			Plural:        names.Plural,
			Singular:      names.Singular,
			ShortNames:    names.ShortNames,
			Categories:    names.Categories,
			Namespaced:    crd.Spec.Scope == apiextensionsv1.NamespaceScoped,
			New:           func() runtime.Object { return &unstructured.Unstructured{} },
			NewList:       func() runtime.Object { return &unstructured.UnstructuredList{} },
			Encoding:      apiserver.EncodingJSON,
			TypeConverter: tc,
			Status:        rules.status != nil,
			// A status write changes the status alone, as upstream's.
			StatusKeepsMetadata: true,
			Generation:          true,
			// A schema's new defaults and pruned fields show on objects
			// stored before, as upstream applies them on decode.
			DefaultOnRead: true,
			Scale:         scaleRules(rules.scale),
			Rules:         rules,
		}
		switch {
		case webhook != nil:
			// The storage version's resource too: objects stored at an
			// earlier storage version are converted as they are read.
			res.Conversion = webhook.conversion(res.GroupVersion, storage)
		case v.Name != storage:
			res.Conversion = &apiserver.Conversion{StorageVersion: storage}
		}
		out = append(out, res)
	}
	return out, nil
}

// storageVersion returns the name of crd's storage version, or "".
func storageVersion(crd *apiextensionsv1.CustomResourceDefinition) string {
	for _, v := range crd.Spec.Versions {
		if v.Storage {
			return v.Name
		}
	}
	return ""
}

// acceptedNames returns crd's accepted names, or its spec's names while
// it has none.
func acceptedNames(crd *apiextensionsv1.CustomResourceDefinition) apiextensionsv1.CustomResourceDefinitionNames {
	if crd.Status.AcceptedNames.Plural != "" {
		return crd.Status.AcceptedNames
	}
	n := crd.Spec.Names
	if n.Singular == "" {
		n.Singular = strings.ToLower(n.Kind)
	}
	if n.ListKind == "" {
		n.ListKind = n.Kind + "List"
	}
	return n
}

// crStrategy is what crRules use of upstream's custom resource strategy.
type crStrategy interface {
	PrepareForCreate(ctx context.Context, obj runtime.Object)
	PrepareForUpdate(ctx context.Context, obj, old runtime.Object)
	Validate(ctx context.Context, obj runtime.Object) field.ErrorList
	ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList
	GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error)
}

// crStatusStrategy is what crRules use of upstream's status strategy.
type crStatusStrategy interface {
	ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList
}

// crRules are the rules of one served version of a CRD's custom
// resources. They hold no state that changes, so one may serve
// concurrent requests.
type crRules struct {
	// structural is the version's structural schema with defaults
	// pruned, nil for a version without a schema.
	structural *structuralschema.Structural
	// preserveUnknown is spec.preserveUnknownFields: no pruning.
	preserveUnknown bool
	strategy        crStrategy
	statusStrategy  crStatusStrategy
	status          *apiextensions.CustomResourceSubresourceStatus
	scale           *apiextensions.CustomResourceSubresourceScale
	table           rest.TableConvertor
	columns         []metav1.TableColumnDefinition
}

var (
	_ apiserver.Rules                 = (*crRules)(nil)
	_ apiserver.Defaulter             = (*crRules)(nil)
	_ apiserver.UnknownFieldsReporter = (*crRules)(nil)
	_ apiserver.CreatePreparer        = (*crRules)(nil)
	_ apiserver.UpdatePreparer        = (*crRules)(nil)
	_ apiserver.StatusValidator       = (*crRules)(nil)
	_ apiserver.FieldSelector         = (*crRules)(nil)
	_ apiserver.Printer               = (*crRules)(nil)
)

// newCRRules builds the rules of version v of crd as upstream's
// customresource handler builds its strategies.
func newCRRules(crd *apiextensionsv1.CustomResourceDefinition, v *apiextensionsv1.CustomResourceDefinitionVersion) (*crRules, error) {
	r := &crRules{preserveUnknown: crd.Spec.PreserveUnknownFields}
	var props *apiextensions.JSONSchemaProps
	if v.Schema != nil {
		in := &apiextensions.CustomResourceValidation{}
		if err := apiextensionsv1.Convert_v1_CustomResourceValidation_To_apiextensions_CustomResourceValidation(v.Schema, in, nil); err != nil {
			return nil, fmt.Errorf("convert schema: %w", err)
		}
		props = in.OpenAPIV3Schema
		s, err := structuralschema.NewStructural(props)
		if err != nil && !r.preserveUnknown {
			return nil, fmt.Errorf("schema is not structural: %w", err)
		}
		if s != nil && !r.preserveUnknown {
			if errs := structuralschema.ValidateStructural(nil, s); len(errs) > 0 {
				return nil, fmt.Errorf("schema is not structural: %w", errs.ToAggregate())
			}
			s = s.DeepCopy()
			if err := structuraldefaulting.PruneDefaults(s); err != nil {
				return nil, fmt.Errorf("prune defaults: %w", err)
			}
		}
		r.structural = s
	}
	validator, _, err := apiservervalidation.NewSchemaValidator(props)
	if err != nil {
		return nil, fmt.Errorf("schema validator: %w", err)
	}
	var statusValidator apiservervalidation.SchemaValidator
	if sub := v.Subresources; sub != nil && sub.Status != nil {
		r.status = &apiextensions.CustomResourceSubresourceStatus{}
		if props != nil {
			if st, ok := props.Properties["status"]; ok {
				if statusValidator, _, err = apiservervalidation.NewSchemaValidator(&st); err != nil {
					return nil, fmt.Errorf("status schema validator: %w", err)
				}
			}
		}
	}
	if sub := v.Subresources; sub != nil && sub.Scale != nil {
		r.scale = &apiextensions.CustomResourceSubresourceScale{}
		if err := apiextensionsv1.Convert_v1_CustomResourceSubresourceScale_To_apiextensions_CustomResourceSubresourceScale(sub.Scale, r.scale, nil); err != nil {
			return nil, fmt.Errorf("convert scale subresource: %w", err)
		}
	}
	names := acceptedNames(crd)
	kind := schema.GroupVersionKind{Group: crd.Spec.Group, Version: v.Name, Kind: names.Kind}
	strategy := customresource.NewStrategy(nil, crd.Spec.Scope == apiextensionsv1.NamespaceScoped, kind,
		validator, statusValidator, r.structural, r.status, r.scale, v.SelectableFields)
	r.strategy = strategy
	r.statusStrategy = customresource.NewStatusStrategy(strategy)
	if err := r.setTable(v.AdditionalPrinterColumns); err != nil {
		return nil, err
	}
	return r, nil
}

// setTable builds the Table printer of columns, upstream's default Age
// column when there are none, as upstream serves custom resources.
func (r *crRules) setTable(columns []apiextensionsv1.CustomResourceColumnDefinition) error {
	if len(columns) == 0 {
		columns = []apiextensionsv1.CustomResourceColumnDefinition{{
			Name: "Age", Type: "date", JSONPath: ".metadata.creationTimestamp",
			Description: metav1.ObjectMeta{}.SwaggerDoc()["creationTimestamp"],
		}}
	}
	table, err := tableconvertor.New(columns)
	if err != nil {
		return fmt.Errorf("printer columns: %w", err)
	}
	empty, err := table.ConvertToTable(context.Background(), &unstructured.UnstructuredList{}, nil)
	if err != nil {
		return fmt.Errorf("printer columns: %w", err)
	}
	r.table, r.columns = table, empty.ColumnDefinitions
	return nil
}

// UnknownFields returns the paths of the fields of obj that Default
// would prune, as upstream's decoder reports them to fieldValidation.
func (r *crRules) UnknownFields(obj runtime.Object) []string {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok || r.structural == nil || r.preserveUnknown {
		return nil
	}
	return structuralpruning.PruneWithOptions(runtime.DeepCopyJSON(u.Object), r.structural, true,
		structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true})
}

// Default prunes the fields obj's schema does not know (unless the CRD
// preserves them) and applies the schema's defaults, as upstream does
// when it decodes a custom resource.
func (r *crRules) Default(obj runtime.Object) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok || r.structural == nil {
		return
	}
	if !r.preserveUnknown {
		structuralpruning.PruneWithOptions(u.Object, r.structural, true, structuralschema.UnknownFieldPathOptions{})
		structuraldefaulting.PruneNonNullableNullsWithoutDefaults(u.Object, r.structural)
	}
	structuraldefaulting.Default(u.Object, r.structural)
}

func (r *crRules) PrepareForCreate(obj runtime.Object) {
	if _, ok := obj.(*unstructured.Unstructured); ok {
		r.strategy.PrepareForCreate(context.Background(), obj)
	}
}

func (r *crRules) PrepareForUpdate(obj, old runtime.Object) {
	if both(obj, old) {
		r.strategy.PrepareForUpdate(context.Background(), obj, old)
	}
}

func (r *crRules) Validate(obj runtime.Object) field.ErrorList {
	return r.strategy.Validate(context.Background(), obj)
}

func (r *crRules) ValidateUpdate(obj, old runtime.Object) field.ErrorList {
	return r.strategy.ValidateUpdate(context.Background(), obj, old)
}

// ValidateStatusUpdate prunes and defaults obj, the stored object with
// the request's status, as upstream does when it decodes the request,
// and checks the status against the schema and its rules.
func (r *crRules) ValidateStatusUpdate(obj, old runtime.Object) field.ErrorList {
	r.Default(obj)
	return r.statusStrategy.ValidateUpdate(context.Background(), obj, old)
}

// Fields returns obj's selectable fields (with metadata.name and, for a
// namespaced resource, metadata.namespace), a field whose value is
// missing as "".
func (r *crRules) Fields(obj runtime.Object) fields.Set {
	_, set, err := r.strategy.GetAttrs(obj)
	if err != nil || set == nil {
		return fields.Set{}
	}
	return set
}

// Columns returns a copy of the printer columns; the caller owns it.
func (r *crRules) Columns() []metav1.TableColumnDefinition {
	return append([]metav1.TableColumnDefinition(nil), r.columns...)
}

// Row returns obj's cells for Columns; a column whose JSONPath finds
// nothing has a nil cell.
func (r *crRules) Row(obj runtime.Object) []interface{} {
	t, err := r.table.ConvertToTable(context.Background(), obj, nil)
	if err != nil || len(t.Rows) != 1 {
		return make([]interface{}, len(r.columns))
	}
	return t.Rows[0].Cells
}

// both reports whether obj and old are both unstructured.
func both(obj, old runtime.Object) bool {
	_, ok1 := obj.(*unstructured.Unstructured)
	_, ok2 := old.(*unstructured.Unstructured)
	return ok1 && ok2
}

// scaleRules reads and writes the replicas at scale's paths, or is nil
// for a version without a scale subresource.
func scaleRules(scale *apiextensions.CustomResourceSubresourceScale) *apiserver.ScaleRules {
	if scale == nil {
		return nil
	}
	specPath := splitPath(scale.SpecReplicasPath)
	statusPath := splitPath(scale.StatusReplicasPath)
	var selectorPath []string
	if scale.LabelSelectorPath != nil {
		selectorPath = splitPath(*scale.LabelSelectorPath)
	}
	return &apiserver.ScaleRules{
		Get: func(obj runtime.Object) (int32, int32, string) {
			u, ok := obj.(*unstructured.Unstructured)
			if !ok {
				return 0, 0, ""
			}
			spec, _, _ := unstructured.NestedInt64(u.Object, specPath...)
			status, _, _ := unstructured.NestedInt64(u.Object, statusPath...)
			var selector string
			if selectorPath != nil {
				selector, _, _ = unstructured.NestedString(u.Object, selectorPath...)
			}
			return int32(spec), int32(status), selector
		},
		Set: func(obj runtime.Object, replicas int32) {
			if u, ok := obj.(*unstructured.Unstructured); ok {
				// The paths are validated to hold no list, so setting
				// cannot meet a non-map on the way but a client's bad
				// value, which it then replaces.
				if err := unstructured.SetNestedField(u.Object, int64(replicas), specPath...); err != nil {
					setReplacing(u.Object, int64(replicas), specPath)
				}
			}
		},
	}
}

// setReplacing sets path in obj to value, replacing whatever non-map
// value lies on the way.
func setReplacing(obj map[string]interface{}, value interface{}, path []string) {
	m := obj
	for _, k := range path[:len(path)-1] {
		next, ok := m[k].(map[string]interface{})
		if !ok {
			next = map[string]interface{}{}
			m[k] = next
		}
		m = next
	}
	m[path[len(path)-1]] = value
}

// splitPath splits a scale path such as .spec.replicas into its fields.
func splitPath(p string) []string {
	return strings.Split(strings.TrimPrefix(p, "."), ".")
}
