package openapi

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Extension keys of the Kubernetes OpenAPI dialect.
const (
	extGVK           = "x-kubernetes-group-version-kind"
	extAction        = "x-kubernetes-action"
	extPatchStrategy = "x-kubernetes-patch-strategy"
	extPatchMergeKey = "x-kubernetes-patch-merge-key"
	extIntOrString   = "x-kubernetes-int-or-string"
)

// jsonSchema is one JSON schema in a form shared by both OpenAPI versions; it
// is rendered to v2 or v3 JSON by render. A schema with ref set refers to
// a definition by name and carries at most a description and extensions.
type jsonSchema struct {
	ref         string
	typ         string
	format      string
	description string
	items       *jsonSchema
	properties  map[string]*jsonSchema
	additional  *jsonSchema
	required    []string
	// v3AnyOf, when set, replaces typ and format in OpenAPI v3 by an anyOf
	// of these types (int-or-string values); v2 has no anyOf and keeps typ.
	v3AnyOf []string
	ext     map[string]any
	// raw, when set, is a schema given as JSON values (part of a custom
	// resource's), rendered as it is in v3 and through v2Schema in v2.
	raw map[string]any
	// v2, when set, is rendered in OpenAPI v2 instead of s.
	v2 *jsonSchema
}

func (s *jsonSchema) setExt(k string, v any) {
	if s.ext == nil {
		s.ext = make(map[string]any)
	}
	s.ext[k] = v
}

// special describes a type that is not serialized as its Go structure says
// (custom JSON marshaling) and gets a named definition of a given shape.
type special struct {
	typ, format string
	v3AnyOf     []string
	intOrString bool
	description string // used when the type has no SwaggerDoc
}

// specials are the apimachinery types with their own JSON form, following
// the OpenAPI conventions of upstream Kubernetes.
var specials = map[reflect.Type]special{
	reflect.TypeFor[metav1.Time](): {typ: "string", format: "date-time",
		description: "Time is a timestamp in RFC 3339 form with second precision, e.g. \"2024-05-01T12:00:00Z\"."},
	reflect.TypeFor[metav1.MicroTime](): {typ: "string", format: "date-time",
		description: "MicroTime is a timestamp in RFC 3339 form with microsecond precision, e.g. \"2024-05-01T12:00:00.000001Z\"."},
	reflect.TypeFor[metav1.Duration](): {typ: "string",
		description: "Duration is a length of time written as a Go duration string, e.g. \"30s\" or \"1h15m\"."},
	reflect.TypeFor[resource.Quantity](): {typ: "string", v3AnyOf: []string{"integer", "string"}, intOrString: true,
		description: "Quantity is a fixed-point number, written as a string with an optional suffix: binary SI (Ki, Mi, Gi, Ti, Pi, Ei), decimal SI (m, k, M, G, T, P, E) or a decimal exponent (e.g. 1e3). Examples: \"500m\", \"128Mi\", \"2\"."},
	reflect.TypeFor[intstr.IntOrString](): {typ: "string", format: "int-or-string", v3AnyOf: []string{"integer", "string"}, intOrString: true,
		description: "IntOrString holds either an integer or a string, such as a port number or a port name."},
	reflect.TypeFor[runtime.RawExtension](): {typ: "object",
		description: "RawExtension is an embedded object in its serialized form, with its own apiVersion and kind."},
	reflect.TypeFor[metav1.FieldsV1](): {typ: "object",
		description: "FieldsV1 is the set of fields a manager owns, in the JSON trie format of server-side apply."},
}

var (
	typeTime        = reflect.TypeFor[time.Time]()
	typeSwaggerDoc  = reflect.TypeFor[interface{ SwaggerDoc() map[string]string }]()
	typeModelNamer  = reflect.TypeFor[interface{ OpenAPIModelName() string }]()
	typeSchemaTyper = reflect.TypeFor[interface {
		OpenAPISchemaType() []string
		OpenAPISchemaFormat() string
	}]()
)

// builder turns Go types into named definitions. It is used by New only.
//
// Reflection sees json tags, patchStrategy/patchMergeKey tags and the
// SwaggerDoc texts, not the comment markers upstream's generator reads.
// So, unlike upstream's documents, these have no enum values (+enum), no
// x-kubernetes-list-type/list-map-keys/map-type (+listType, +listMapKey,
// +mapType), no defaults (+default), no value validations (minimum,
// pattern, ...), and required fields are approximated (see isRequired).
// A named type with its own JSON form is described correctly only if it is
// in specials or has kube-openapi's OpenAPISchemaType method; otherwise
// its Go structure is described.
type builder struct {
	defs  map[string]*jsonSchema  // definition name -> schema
	names map[reflect.Type]string // types already named
	types map[string]reflect.Type // name -> type, to catch collisions
}

func newBuilder() *builder {
	return &builder{
		defs:  make(map[string]*jsonSchema),
		names: make(map[reflect.Type]string),
		types: make(map[string]reflect.Type),
	}
}

// modelName returns upstream's definition name for a named type: the one
// its OpenAPIModelName method reports if it has one, otherwise the Go
// package path with the domain reversed, e.g. k8s.io/api/core/v1.Pod ->
// io.k8s.api.core.v1.Pod.
func modelName(t reflect.Type) string {
	if reflect.PointerTo(t).Implements(typeModelNamer) {
		return reflect.New(t).Interface().(interface{ OpenAPIModelName() string }).OpenAPIModelName()
	}
	parts := strings.Split(t.PkgPath(), "/")
	if labels := strings.Split(parts[0], "."); len(labels) > 1 {
		for i, j := 0, len(labels)-1; i < j; i, j = i+1, j-1 {
			labels[i], labels[j] = labels[j], labels[i]
		}
		parts[0] = strings.Join(labels, ".")
	}
	return strings.Join(append(parts, t.Name()), ".")
}

// swaggerDoc returns the field documentation of t's SwaggerDoc method (the
// "" key documents the type itself), or nil.
func swaggerDoc(t reflect.Type) map[string]string {
	if !reflect.PointerTo(t).Implements(typeSwaggerDoc) {
		return nil
	}
	return reflect.New(t).Interface().(interface{ SwaggerDoc() map[string]string }).SwaggerDoc()
}

// define makes sure t (a named struct or special type) has a definition
// and returns its name.
func (b *builder) define(t reflect.Type) (string, error) {
	if name, ok := b.names[t]; ok {
		return name, nil
	}
	name := modelName(t)
	if other, ok := b.types[name]; ok && other != t {
		return "", fmt.Errorf("definition name %s is used by both %v and %v", name, other, t)
	}
	b.names[t] = name
	b.types[name] = t
	def := &jsonSchema{}
	b.defs[name] = def // before the fields, so recursive types end here
	doc := swaggerDoc(t)
	def.description = doc[""]

	if sp, ok := specials[t]; ok {
		def.typ, def.format, def.v3AnyOf = sp.typ, sp.format, sp.v3AnyOf
		if sp.intOrString {
			def.setExt(extIntOrString, true)
		}
		if def.description == "" {
			def.description = sp.description
		}
		return name, nil
	}
	if t.Implements(typeSchemaTyper) || reflect.PointerTo(t).Implements(typeSchemaTyper) {
		// Other types with their own JSON form declare it the way
		// kube-openapi's generator expects.
		st := reflect.New(t).Interface().(interface {
			OpenAPISchemaType() []string
			OpenAPISchemaFormat() string
		})
		if types := st.OpenAPISchemaType(); len(types) == 1 {
			def.typ, def.format = types[0], st.OpenAPISchemaFormat()
			return name, nil
		}
	}
	def.typ = "object"
	if err := b.addFields(def, t, doc); err != nil {
		return "", fmt.Errorf("%v: %w", t, err)
	}
	sort.Strings(def.required)
	return name, nil
}

// addFields adds the JSON fields of struct t to obj, flattening embedded
// structs without a JSON name the way encoding/json does.
func (b *builder) addFields(obj *jsonSchema, t reflect.Type, doc map[string]string) error {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if _, isSpecial := specials[ft]; ft.Kind() == reflect.Struct && !isSpecial {
				if err := b.addFields(obj, ft, swaggerDoc(ft)); err != nil {
					return err
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if _, dup := obj.properties[name]; dup {
			continue // the shallower field wins, as in encoding/json
		}
		prop, err := b.schemaFor(f.Type)
		if err != nil {
			return fmt.Errorf("field %s: %w", f.Name, err)
		}
		prop.description = doc[name]
		if v := f.Tag.Get("patchStrategy"); v != "" {
			prop.setExt(extPatchStrategy, v)
		}
		if v := f.Tag.Get("patchMergeKey"); v != "" {
			prop.setExt(extPatchMergeKey, v)
		}
		if obj.properties == nil {
			obj.properties = make(map[string]*jsonSchema)
		}
		obj.properties[name] = prop
		if isRequired(f.Type, opts) {
			obj.required = append(obj.required, name)
		}
	}
	return nil
}

// isRequired approximates upstream's required fields, which come from
// +required/+optional comment markers that reflection cannot see: a field
// is required when it is always serialized (no omitempty or omitzero) and
// is neither a pointer nor a struct nor an interface.
func isRequired(t reflect.Type, opts string) bool {
	for o := range strings.SplitSeq(opts, ",") {
		if o == "omitempty" || o == "omitzero" {
			return false
		}
	}
	switch t.Kind() {
	case reflect.Pointer, reflect.Struct, reflect.Interface:
		return false
	}
	return true
}

// schemaFor returns a new schema for a value of type t: a reference for
// named structs and special types, an inline schema for everything else.
// The caller owns the result and may set its description and extensions.
func (b *builder) schemaFor(t reflect.Type) (*jsonSchema, error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == typeTime {
		return &jsonSchema{typ: "string", format: "date-time"}, nil
	}
	if _, ok := specials[t]; ok || (t.Kind() == reflect.Struct && t.Name() != "") {
		name, err := b.define(t)
		if err != nil {
			return nil, err
		}
		return &jsonSchema{ref: name}, nil
	}
	if t.Name() != "" && (t.Implements(typeSchemaTyper) || reflect.PointerTo(t).Implements(typeSchemaTyper)) {
		name, err := b.define(t)
		if err != nil {
			return nil, err
		}
		return &jsonSchema{ref: name}, nil
	}
	switch t.Kind() {
	case reflect.Struct: // anonymous struct type
		s := &jsonSchema{typ: "object"}
		if err := b.addFields(s, t, nil); err != nil {
			return nil, err
		}
		sort.Strings(s.required)
		return s, nil
	case reflect.Slice, reflect.Array:
		if t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8 {
			return &jsonSchema{typ: "string", format: "byte"}, nil // base64
		}
		items, err := b.schemaFor(t.Elem())
		if err != nil {
			return nil, err
		}
		return &jsonSchema{typ: "array", items: items}, nil
	case reflect.Map:
		v, err := b.schemaFor(t.Elem())
		if err != nil {
			return nil, err
		}
		return &jsonSchema{typ: "object", additional: v}, nil
	case reflect.String:
		return &jsonSchema{typ: "string"}, nil
	case reflect.Bool:
		return &jsonSchema{typ: "boolean"}, nil
	case reflect.Int8, reflect.Uint8:
		return &jsonSchema{typ: "integer", format: "byte"}, nil
	case reflect.Int, reflect.Int16, reflect.Int32, reflect.Uint, reflect.Uint16:
		return &jsonSchema{typ: "integer", format: "int32"}, nil
	case reflect.Int64, reflect.Uint32, reflect.Uint64:
		return &jsonSchema{typ: "integer", format: "int64"}, nil
	case reflect.Float32:
		return &jsonSchema{typ: "number", format: "float"}, nil
	case reflect.Float64:
		return &jsonSchema{typ: "number", format: "double"}, nil
	case reflect.Interface:
		return &jsonSchema{}, nil // any JSON value
	}
	return nil, fmt.Errorf("type %v (%v) has no JSON schema", t, t.Kind())
}

// render returns the JSON form of s for OpenAPI v3 or v2.
func (s *jsonSchema) render(v3 bool) map[string]any {
	if !v3 && s.v2 != nil {
		return s.v2.render(false)
	}
	if s.raw != nil {
		if v3 {
			return s.raw
		}
		return v2Schema(s.raw).(map[string]any)
	}
	m := make(map[string]any, 4)
	if s.description != "" {
		m["description"] = s.description
	}
	for k, v := range s.ext {
		m[k] = v
	}
	if s.ref != "" {
		if !v3 {
			m["$ref"] = "#/definitions/" + s.ref
			return m
		}
		ref := map[string]any{"$ref": "#/components/schemas/" + s.ref}
		if len(m) == 0 {
			return ref
		}
		// A v3 $ref takes no siblings; wrap it as upstream does.
		m["allOf"] = []any{ref}
		return m
	}
	if v3 && len(s.v3AnyOf) > 0 {
		anyOf := make([]any, len(s.v3AnyOf))
		for i, t := range s.v3AnyOf {
			anyOf[i] = map[string]any{"type": t}
		}
		m["anyOf"] = anyOf
	} else {
		if s.typ != "" {
			m["type"] = s.typ
		}
		if s.format != "" {
			m["format"] = s.format
		}
	}
	if s.items != nil {
		m["items"] = s.items.render(v3)
	}
	if len(s.properties) > 0 {
		props := make(map[string]any, len(s.properties))
		for k, p := range s.properties {
			props[k] = p.render(v3)
		}
		m["properties"] = props
	}
	if s.additional != nil {
		m["additionalProperties"] = s.additional.render(v3)
	}
	if len(s.required) > 0 {
		m["required"] = s.required
	}
	return m
}

// refs calls fn with the name of every definition s refers to directly.
func (s *jsonSchema) refs(fn func(string)) {
	if s.ref != "" {
		fn(s.ref)
	}
	if s.items != nil {
		s.items.refs(fn)
	}
	if s.additional != nil {
		s.additional.refs(fn)
	}
	for _, p := range s.properties {
		p.refs(fn)
	}
}

// v2Schema returns v, part of a custom resource's schema as JSON values,
// as upstream publishes it in OpenAPI v2 (ToStructuralOpenAPIV2), so that
// kubectl's v2 reader neither chokes on it nor refuses what the server
// accepts: without what v2 lacks (nullable, allOf, anyOf, oneOf, not); a
// nullable value untyped and without items or properties; a value that
// keeps unknown fields without items or properties, and untyped if an
// object; an array left without items untyped; nullable properties not
// required. v is left as it is.
func v2Schema(v any) any {
	m, ok := v.(map[string]any)
	if !ok {
		return v
	}
	out := make(map[string]any, len(m))
	for k, e := range m {
		switch k {
		case "nullable", "allOf", "anyOf", "oneOf", "not":
		case "properties":
			props, _ := e.(map[string]any)
			conv := make(map[string]any, len(props))
			for name, p := range props {
				conv[name] = v2Schema(p)
			}
			out[k] = conv
		case "items", "additionalProperties":
			out[k] = v2Schema(e)
		default:
			out[k] = e
		}
	}
	nullable, _ := m["nullable"].(bool)
	preserve, _ := m["x-kubernetes-preserve-unknown-fields"].(bool)
	if nullable {
		delete(out, "type")
		delete(out, "items")
		delete(out, "properties")
	}
	if preserve {
		delete(out, "items")
		delete(out, "properties")
	}
	if _, has := out["items"]; !has && out["type"] == "array" {
		delete(out, "type")
	}
	if preserve && out["type"] == "object" {
		delete(out, "type")
	}
	if ap, _ := m["additionalProperties"].(map[string]any); ap["nullable"] == true {
		delete(out, "required")
	} else if req, ok := out["required"].([]any); ok {
		out["required"] = v2Required(req, m)
	}
	return out
}

// v2Required returns req, the required properties of schema, without the
// nullable ones, which OpenAPI v2 cannot say may be null.
func v2Required(req []any, schema map[string]any) []any {
	props, _ := schema["properties"].(map[string]any)
	kept := make([]any, 0, len(req))
	for _, r := range req {
		name, _ := r.(string)
		if p, _ := props[name].(map[string]any); p["nullable"] != true {
			kept = append(kept, r)
		}
	}
	return kept
}

// v2Kind returns how OpenAPI v2 describes obj, the root of a custom
// resource's definition made from schema, where that differs from v3: as
// a bare object when the schema keeps unknown fields at its root (as
// upstream does, since kubectl's v2 validation would refuse every field
// not listed), or with nullable properties not required; nil otherwise.
func v2Kind(schema map[string]any, obj *jsonSchema) *jsonSchema {
	if preserve, _ := schema["x-kubernetes-preserve-unknown-fields"].(bool); preserve {
		return &jsonSchema{typ: "object"}
	}
	req := make([]any, len(obj.required))
	for i, r := range obj.required {
		req[i] = r
	}
	if kept := v2Required(req, schema); len(kept) != len(req) {
		v2 := *obj
		v2.ext = maps.Clone(obj.ext)
		v2.required = nil
		for _, r := range kept {
			v2.required = append(v2.required, r.(string))
		}
		return &v2
	}
	return nil
}

// defineKind defines k's object and list and returns their names: from
// their Go types, or for a kind with a Schema, from it, named as
// upstream names custom resources' definitions (the group reversed, the
// version and the kind, e.g. dev.outpost.example.v1.Gadget).
func (b *builder) defineKind(k *Kind) (objDef, listDef string, err error) {
	if k.Schema == nil {
		if objDef, err = b.define(structType(k.Object)); err != nil {
			return "", "", fmt.Errorf("kind %s: %w", k.GVK, err)
		}
		if listDef, err = b.define(structType(k.List)); err != nil {
			return "", "", fmt.Errorf("kind %s list: %w", k.GVK, err)
		}
		return objDef, listDef, nil
	}
	objectMeta, err := b.define(reflect.TypeFor[metav1.ObjectMeta]())
	if err != nil {
		return "", "", err
	}
	listMeta, err := b.define(reflect.TypeFor[metav1.ListMeta]())
	if err != nil {
		return "", "", err
	}
	group := strings.Split(k.GVK.Group, ".")
	slices.Reverse(group)
	objDef = strings.Join(append(group, k.GVK.Version, k.GVK.Kind), ".")
	listDef = objDef + "List"
	if _, dup := b.defs[objDef]; dup {
		return "", "", fmt.Errorf("kind %s: definition %s is defined twice", k.GVK, objDef)
	}
	str := func(desc string) *jsonSchema { return &jsonSchema{typ: "string", description: desc} }
	obj := &jsonSchema{typ: "object", properties: map[string]*jsonSchema{}}
	if d, ok := k.Schema["description"].(string); ok {
		obj.description = d
	}
	props, _ := k.Schema["properties"].(map[string]any)
	for name, p := range props {
		if m, ok := p.(map[string]any); ok {
			obj.properties[name] = &jsonSchema{raw: m}
		}
	}
	for key, v := range k.Schema {
		if strings.HasPrefix(key, "x-kubernetes-") {
			obj.setExt(key, v)
		}
	}
	if req, ok := k.Schema["required"].([]any); ok {
		for _, r := range req {
			if s, ok := r.(string); ok {
				obj.required = append(obj.required, s)
			}
		}
	}
	obj.v2 = v2Kind(k.Schema, obj)
	obj.properties["apiVersion"] = str("APIVersion defines the versioned schema of this representation of an object.")
	obj.properties["kind"] = str("Kind is a string value representing the REST resource this object represents.")
	obj.properties["metadata"] = &jsonSchema{ref: objectMeta, description: "Standard object's metadata."}
	b.defs[objDef] = obj
	b.defs[listDef] = &jsonSchema{typ: "object", required: []string{"items"}, properties: map[string]*jsonSchema{
		"apiVersion": str("APIVersion defines the versioned schema of this representation of an object."),
		"kind":       str("Kind is a string value representing the REST resource this object represents."),
		"items":      {typ: "array", items: &jsonSchema{ref: objDef}, description: "List of " + k.Plural + "."},
		"metadata":   {ref: listMeta, description: "Standard list metadata."},
	}}
	return objDef, listDef, nil
}
