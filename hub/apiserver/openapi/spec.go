package openapi

import (
	"bytes"
	"compress/gzip"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"sync"

	openapi_v2 "github.com/google/gnostic-models/openapiv2"
	openapi_v3 "github.com/google/gnostic-models/openapiv3"
	"google.golang.org/protobuf/proto"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Kind is one served kind as the OpenAPI documents describe it.
type Kind struct {
	GVK        schema.GroupVersionKind // e.g. {"", "v1", "Pod"}
	Plural     string                  // "pods"
	Namespaced bool
	Object     any // e.g. &corev1.Pod{}
	List       any // e.g. &corev1.PodList{}
	// Schema, for a kind without Go types (a custom resource), is its
	// OpenAPI v3 schema as JSON values (a CRD version's
	// openAPIV3Schema), described instead of Object and List, which are
	// then unset. Its metadata is described as ObjectMeta, as upstream
	// describes custom resources.
	Schema map[string]any
	// Subresources served under the item path. "status" and "scale" are
	// described (scale as autoscaling/v1 Scale); others, such as "log" or
	// "exec", are left out of the documents.
	Subresources []string
	// Verbs are the Kubernetes verbs served (get, list, watch, create,
	// update, patch, delete, deletecollection); nil means all of them.
	// Subresources get get, update and patch when the kind has them.
	Verbs []string
}

// scaleGVK is the kind of the scale subresource.
var scaleGVK = schema.GroupVersionKind{Group: "autoscaling", Version: "v1", Kind: "Scale"}

// Spec holds the rendered OpenAPI documents. It is immutable; its methods
// may be called concurrently.
type Spec struct {
	v2          *document
	v3Discovery *document
	v3          map[string]*document // by "api/v1" or "apis/apps/v1"
}

// document is one rendered OpenAPI document with its encodings. hash is
// the hex SHA-512 of the JSON form; it is the ETag and, for v3, the hash
// query parameter of the document's URL. The gnostic protobuf form is made
// on first use: converting goes through gnostic's YAML parser, which costs
// more than everything else in New together, and most clients never ask
// for it (kubectl reads v3 as JSON).
type document struct {
	json, jsonGzip []byte
	hash           string

	parse     func([]byte) (proto.Message, error) // nil: no protobuf form
	protoOnce sync.Once
	proto     []byte // set by protoOnce
	protoGzip []byte
	protoErr  error
}

// protobuf returns the gnostic protobuf form of d and its gzipped bytes.
// The caller must not modify them.
func (d *document) protobuf() (pb, gz []byte, err error) {
	d.protoOnce.Do(func() {
		if d.parse == nil {
			d.protoErr = errors.New("document has no protobuf form")
			return
		}
		msg, err := d.parse(d.json)
		if err != nil {
			d.protoErr = fmt.Errorf("parse as gnostic document: %w", err)
			return
		}
		pb, err := (proto.MarshalOptions{Deterministic: true}).Marshal(msg)
		if err != nil {
			d.protoErr = fmt.Errorf("encode protobuf: %w", err)
			return
		}
		if d.protoGzip, d.protoErr = compress(pb); d.protoErr == nil {
			d.proto = pb
		}
	})
	return d.proto, d.protoGzip, d.protoErr
}

// New builds the OpenAPI v2 document and the v3 documents, one per group
// version, for kinds. It fails when a kind is malformed or one of its Go
// types has no JSON schema. New starts nothing; the protobuf forms are
// made when first served.
func New(kinds []Kind) (*Spec, error) {
	if err := validate(kinds); err != nil {
		return nil, err
	}
	b := newBuilder()
	var meta [5]string
	for i, v := range []any{metav1.Status{}, metav1.DeleteOptions{}, metav1.WatchEvent{}, metav1.Patch{}, metav1.APIResourceList{}} {
		name, err := b.define(reflect.TypeOf(v))
		if err != nil {
			return nil, fmt.Errorf("define %T: %w", v, err)
		}
		meta[i] = name
	}
	if meta != [5]string{defStatus, defDeleteOptions, defWatchEvent, defPatch, defResourceList} {
		return nil, fmt.Errorf("unexpected metav1 definition names %v", meta)
	}
	addGVK(b.defs[defStatus], schema.GroupVersionKind{Version: "v1", Kind: "Status"})

	var scaleDef string
	byGV := make(map[schema.GroupVersion][]path)
	var gvs []schema.GroupVersion
	for i := range kinds {
		k := &kinds[i]
		objDef, listDef, err := b.defineKind(k)
		if err != nil {
			return nil, err
		}
		addGVK(b.defs[objDef], k.GVK)
		addGVK(b.defs[listDef], k.GVK.GroupVersion().WithKind(k.GVK.Kind+"List"))
		if slices.Contains(k.Subresources, "scale") && scaleDef == "" {
			if scaleDef, err = b.define(reflect.TypeFor[autoscalingv1.Scale]()); err != nil {
				return nil, fmt.Errorf("define scale: %w", err)
			}
			addGVK(b.defs[scaleDef], scaleGVK)
		}
		gv := k.GVK.GroupVersion()
		if _, ok := byGV[gv]; !ok {
			gvs = append(gvs, gv)
			byGV[gv] = []path{resourcesPath(gv)}
			addGVK(b.defs[defDeleteOptions], gv.WithKind("DeleteOptions"))
			addGVK(b.defs[defWatchEvent], gv.WithKind("WatchEvent"))
		}
		byGV[gv] = append(byGV[gv], kindPaths(k, objDef, listDef, scaleDef)...)
	}

	s := &Spec{v3: make(map[string]*document, len(gvs))}
	var all []path
	for _, gv := range gvs {
		all = append(all, byGV[gv]...)
	}
	var err error
	if s.v2, err = renderV2(all, b.defs); err != nil {
		return nil, fmt.Errorf("openapi v2: %w", err)
	}
	disc := v3Discovery{Paths: make(map[string]v3DiscoveryEntry, len(gvs))}
	for _, gv := range gvs {
		key := gvPrefix(gv)
		doc, err := renderV3(byGV[gv], b.defs)
		if err != nil {
			return nil, fmt.Errorf("openapi v3 %s: %w", key, err)
		}
		s.v3[key] = doc
		disc.Paths[key] = v3DiscoveryEntry{ServerRelativeURL: v3URL(key, doc.hash)}
	}
	if s.v3Discovery, err = newDocument(disc, nil); err != nil {
		return nil, fmt.Errorf("openapi v3 discovery: %w", err)
	}
	return s, nil
}

// v3Discovery is the document at /openapi/v3 that lists the group
// versions' documents, as client-go's openapi client reads it.
type v3Discovery struct {
	Paths map[string]v3DiscoveryEntry `json:"paths"`
}

type v3DiscoveryEntry struct {
	ServerRelativeURL string `json:"serverRelativeURL"`
}

// v3URL returns the URL of a v3 document, e.g. /openapi/v3/api/v1?hash=...
func v3URL(key, hash string) string {
	return "/openapi/v3/" + key + "?" + url.Values{"hash": {hash}}.Encode()
}

func validate(kinds []Kind) error {
	seenGVK := make(map[schema.GroupVersionKind]bool)
	seenPlural := make(map[schema.GroupVersionResource]bool)
	for _, k := range kinds {
		switch {
		case k.GVK.Version == "" || k.GVK.Kind == "":
			return fmt.Errorf("kind %q: group version kind needs a version and a kind", k.GVK)
		case k.Plural == "" || strings.ContainsAny(k.Plural, "/{}?# "):
			return fmt.Errorf("kind %s: bad plural %q", k.GVK, k.Plural)
		case k.Schema != nil && (k.Object != nil || k.List != nil):
			return fmt.Errorf("kind %s: both a schema and Go types", k.GVK)
		case k.Schema == nil && structType(k.Object) == nil:
			return fmt.Errorf("kind %s: object %T is not a named struct or a pointer to one", k.GVK, k.Object)
		case k.Schema == nil && structType(k.List) == nil:
			return fmt.Errorf("kind %s: list %T is not a named struct or a pointer to one", k.GVK, k.List)
		case seenGVK[k.GVK]:
			return fmt.Errorf("kind %s is listed twice", k.GVK)
		}
		gvr := k.GVK.GroupVersion().WithResource(k.Plural)
		if seenPlural[gvr] {
			return fmt.Errorf("kind %s: resource %s is listed twice", k.GVK, gvr)
		}
		seenGVK[k.GVK], seenPlural[gvr] = true, true
	}
	return nil
}

// structType returns the type of v, a named struct or a pointer to one,
// or nil.
func structType(v any) reflect.Type {
	t := reflect.TypeOf(v)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct || t.Name() == "" {
		return nil
	}
	return t
}

func addGVK(def *jsonSchema, gvk schema.GroupVersionKind) {
	list, _ := def.ext[extGVK].([]any)
	def.setExt(extGVK, append(list, gvkMap(gvk)))
	if def.v2 != nil {
		addGVK(def.v2, gvk)
	}
}

var (
	info     = map[string]any{"title": "Kubernetes", "version": "unversioned"}
	security = []any{map[string]any{"BearerToken": []string{}}}
	bearer   = map[string]any{"BearerToken": map[string]any{
		"type": "apiKey", "name": "authorization", "in": "header",
		"description": "Bearer token authentication, e.g. 'authorization: Bearer <token>'.",
	}}
)

func renderV2(paths []path, defs map[string]*jsonSchema) (*document, error) {
	ps := make(map[string]any, len(paths))
	for i := range paths {
		ps[paths[i].path] = paths[i].renderV2()
	}
	ds := make(map[string]any, len(defs))
	for name, d := range defs {
		ds[name] = d.render(false)
	}
	doc := map[string]any{
		"swagger":             "2.0",
		"info":                info,
		"paths":               ps,
		"definitions":         ds,
		"securityDefinitions": bearer,
		"security":            security,
	}
	return newDocument(doc, func(j []byte) (proto.Message, error) { return openapi_v2.ParseDocument(j) })
}

// renderV3 renders the v3 document of one group version: its paths and
// the definitions they reach.
func renderV3(paths []path, defs map[string]*jsonSchema) (*document, error) {
	ps := make(map[string]any, len(paths))
	reached := make(map[string]bool)
	var visit func(string)
	visit = func(name string) {
		if reached[name] {
			return
		}
		reached[name] = true
		defs[name].refs(visit)
	}
	for i := range paths {
		ps[paths[i].path] = paths[i].renderV3()
		paths[i].refs(visit)
	}
	schemas := make(map[string]any, len(reached))
	for name := range reached {
		schemas[name] = defs[name].render(true)
	}
	doc := map[string]any{
		"openapi":    "3.0.0",
		"info":       info,
		"paths":      ps,
		"components": map[string]any{"schemas": schemas, "securitySchemes": bearer},
		"security":   security,
	}
	return newDocument(doc, func(j []byte) (proto.Message, error) { return openapi_v3.ParseDocument(j) })
}

// newDocument encodes v as JSON and compresses it; parse, if not nil,
// turns the JSON into the gnostic protobuf form when it is first asked for.
func newDocument(v any, parse func([]byte) (proto.Message, error)) (*document, error) {
	j, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode json: %w", err)
	}
	sum := sha512.Sum512(j)
	d := &document{json: j, hash: hex.EncodeToString(sum[:]), parse: parse}
	if d.jsonGzip, err = compress(j); err != nil {
		return nil, err
	}
	return d, nil
}

func compress(b []byte) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	if err != nil {
		return nil, fmt.Errorf("gzip: %w", err)
	}
	_, err = zw.Write(b)
	if err = errors.Join(err, zw.Close()); err != nil {
		return nil, fmt.Errorf("gzip: %w", err)
	}
	return buf.Bytes(), nil
}
