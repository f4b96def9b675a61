package apiserver

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"strconv"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/outpost-mesh/outpost/hub/store"
)

func typesUID(s string) types.UID { return types.UID(s) }

// key returns the store key of an object.
func (res *resourceInfo) key(namespace, name string) string {
	if res.Namespaced {
		return res.prefix + namespace + "/" + name
	}
	return res.prefix + name
}

// listPrefix returns the store prefix of a list in namespace ("" for all).
func (res *resourceInfo) listPrefix(namespace string) string {
	if res.Namespaced && namespace != "" {
		return res.prefix + namespace + "/"
	}
	return res.prefix
}

// encode returns the stored form of obj, in the resource's Encoding and
// storage version, without resourceVersion (the store's revision is the
// resourceVersion).
func (res *resourceInfo) encode(obj runtime.Object) ([]byte, error) {
	gvkTo := res.gvk
	if c := res.Conversion; c != nil {
		stored, err := res.toStorage(obj)
		if err != nil {
			return nil, err
		}
		obj, gvkTo = stored, res.storageGVK()
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, err
	}
	rv := m.GetResourceVersion()
	m.SetResourceVersion("")
	defer m.SetResourceVersion(rv)
	kind := obj.GetObjectKind()
	gvk := kind.GroupVersionKind()
	kind.SetGroupVersionKind(gvkTo)
	defer kind.SetGroupVersionKind(gvk)
	var buf bytes.Buffer
	if err := res.codec.storage.Encode(obj, &buf); err != nil {
		return nil, fmt.Errorf("encode %s: %w", res.gvk.Kind, err)
	}
	return buf.Bytes(), nil
}

// decode returns the object stored in kv, in the resource's version, with
// its resourceVersion.
func (res *resourceInfo) decode(kv store.KeyValue) (runtime.Object, error) {
	obj, gvk := res.New(), res.gvk
	if c := res.Conversion; c != nil && c.NewStorage != nil {
		obj, gvk = c.NewStorage(), res.storageGVK()
	}
	if _, _, err := res.codec.storage.Decode(kv.Value, &gvk, obj); err != nil {
		return nil, fmt.Errorf("decode %s: %w", kv.Key, err)
	}
	if c := res.Conversion; c != nil && c.FromStorage != nil {
		// An unstructured object says the version it was stored at,
		// which may be an earlier storage version; a Go type's is gvk.
		if u, ok := obj.(*unstructured.Unstructured); !ok || u.GetAPIVersion() == "" {
			obj.GetObjectKind().SetGroupVersionKind(gvk)
		}
		conv, err := c.FromStorage(obj)
		if err != nil {
			return nil, fmt.Errorf("convert %s from %s: %w", kv.Key, gvk.GroupVersion(), err)
		}
		obj = conv
	}
	obj.GetObjectKind().SetGroupVersionKind(res.gvk)
	if res.DefaultOnRead {
		res.setDefaults(obj)
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, err
	}
	m.SetResourceVersion(strconv.FormatInt(kv.ModRevision, 10))
	return obj, nil
}

// encodeError is the client's error for a failed encode: a conversion's
// own API error as it is (an autoscaling/v1 annotation that does not
// parse is the client's 400), anything else 500.
func encodeError(err error) error {
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		return err
	}
	return apierrors.NewInternalError(err)
}

// asStored returns obj as a client reads it back once written: for
// a resource with a Conversion, obj converted to the storage version and
// back, as upstream answers a write with the object it stored (an
// autoscaling/v1 create shows the defaults v2 gave it); obj itself for
// the others, or if data does not decode (then obj is what was written).
// data is what was stored, at revision rev.
func (res *resourceInfo) asStored(obj runtime.Object, data []byte, rev int64) runtime.Object {
	if res.Conversion == nil {
		return obj
	}
	back, err := res.decode(store.KeyValue{Value: data, ModRevision: rev})
	if err != nil {
		return obj
	}
	return back
}

// storageGVK is the kind objects of a resource with a Conversion are
// stored as.
func (res *resourceInfo) storageGVK() schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: res.gvk.Group, Version: res.Conversion.StorageVersion, Kind: res.gvk.Kind}
}

// toStorage returns obj converted to the storage version, leaving obj as
// it is; for conversion None, a shallow copy with the stored apiVersion.
func (res *resourceInfo) toStorage(obj runtime.Object) (runtime.Object, error) {
	c := res.Conversion
	if c.ToStorage == nil {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return nil, fmt.Errorf("convert %s: a %T without conversion functions", res.gvk.Kind, obj)
		}
		return &unstructured.Unstructured{Object: maps.Clone(u.Object)}, nil
	}
	obj.GetObjectKind().SetGroupVersionKind(res.gvk)
	stored, err := c.ToStorage(obj)
	if err != nil {
		return nil, fmt.Errorf("convert %s to %s: %w", res.gvk.Kind, c.StorageVersion, err)
	}
	return stored, nil
}

// checkConversion checks a resource's Conversion: a storage version
// other than its own, and conversion functions for Go types that the
// scheme knows.
func (s *Server) checkConversion(ri *resourceInfo, c *Conversion) error {
	typed := ri.Encoding != EncodingJSON
	switch {
	case c.StorageVersion == "" || c.StorageVersion == ri.GroupVersion.Version && (typed || c.ToStorage == nil):
		// (An EncodingJSON resource stored at its own version may still
		// convert the objects stored at an earlier one.)
		return fmt.Errorf("apiserver: resource %s: conversion to storage version %q", ri.gvr, c.StorageVersion)
	case (c.ToStorage == nil) != (c.FromStorage == nil):
		return fmt.Errorf("apiserver: resource %s: a conversion needs both ToStorage and FromStorage, or neither", ri.gvr)
	case typed && (c.ToStorage == nil || c.NewStorage == nil):
		return fmt.Errorf("apiserver: resource %s: a conversion of Go types needs NewStorage, ToStorage and FromStorage", ri.gvr)
	case typed && !s.knows(c.NewStorage()):
		return fmt.Errorf("apiserver: resource %s: storage type %T is not registered", ri.gvr, c.NewStorage())
	}
	return nil
}

// An object is either a pointer to a Go struct with TypeMeta,
// ObjectMeta and usually Spec and Status fields, or an
// *unstructured.Unstructured whose content has the same parts as keys
// (custom resources). The functions below see both the same way.

// structField returns the addressable struct field name of obj (a pointer to a
// struct), or an invalid Value.
func structField(obj runtime.Object, name string) reflect.Value {
	v := reflect.ValueOf(obj)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return reflect.Value{}
	}
	return v.Elem().FieldByName(name)
}

// copyStatus sets obj's status to old's.
func copyStatus(obj, old runtime.Object) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		if o, ok := old.(*unstructured.Unstructured); ok {
			if st, has := o.Object["status"]; has {
				u.Object["status"] = runtime.DeepCopyJSONValue(st)
			} else {
				delete(u.Object, "status")
			}
		}
		return
	}
	dst, src := structField(obj, "Status"), structField(old, "Status")
	if dst.IsValid() && src.IsValid() && dst.CanSet() {
		dst.Set(src)
	}
}

// specChanged reports whether an update changes anything but metadata and
// status: what bumps metadata.generation.
func specChanged(obj, old runtime.Object) bool {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		o, ok := old.(*unstructured.Unstructured)
		if !ok {
			return true
		}
		rest := func(m map[string]interface{}) map[string]interface{} {
			r := make(map[string]interface{}, len(m))
			for k, v := range m {
				switch k {
				case "apiVersion", "kind", "metadata", "status":
					continue
				}
				r[k] = v
			}
			return r
		}
		return !equality.Semantic.DeepEqual(rest(u.Object), rest(o.Object))
	}
	a, b := reflect.ValueOf(obj).Elem(), reflect.ValueOf(old).Elem()
	for i := 0; i < a.NumField(); i++ {
		switch a.Type().Field(i).Name {
		case "TypeMeta", "ObjectMeta", "Status":
			continue
		}
		if !reflect.DeepEqual(a.Field(i).Interface(), b.Field(i).Interface()) {
			return true
		}
	}
	return false
}

// replaceObject sets *dst to *src, two objects of the same Go type.
func replaceObject(dst, src runtime.Object) {
	if u, ok := dst.(*unstructured.Unstructured); ok {
		u.Object = src.(*unstructured.Unstructured).Object
		return
	}
	reflect.ValueOf(dst).Elem().Set(reflect.ValueOf(src).Elem())
}

// randomSuffix returns n characters for generateName, from the alphabet
// upstream uses (no vowels, no confusable digits).
func randomSuffix(n int) string {
	const alphabet = "bcdfghjklmnpqrstvwxz2456789"
	b := make([]byte, n)
	rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}

// newUID returns a random RFC 4122 version 4 UUID.
func newUID() types.UID {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return types.UID(fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:]))
}

// partialMetadata returns the PartialObjectMetadata of obj for Tables.
func partialMetadata(obj runtime.Object) *metav1.PartialObjectMetadata {
	pm := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadata"}}
	switch o := obj.(type) {
	case metav1.ObjectMetaAccessor:
		if om, ok := o.GetObjectMeta().(*metav1.ObjectMeta); ok {
			pm.ObjectMeta = *om
		}
	case *unstructured.Unstructured:
		// A custom resource: its metadata as ObjectMeta. What the
		// machinery stored decodes; anything else leaves it empty.
		if m, ok := o.Object["metadata"].(map[string]any); ok {
			_ = runtime.DefaultUnstructuredConverter.FromUnstructured(m, &pm.ObjectMeta)
		}
	}
	return pm
}

// partialOf returns the metadata-only form of an object or list.
func partialOf(obj runtime.Object) (runtime.Object, error) {
	if !meta.IsListType(obj) {
		return partialMetadata(obj), nil
	}
	items, err := meta.ExtractList(obj)
	if err != nil {
		return nil, err
	}
	lm, _ := meta.ListAccessor(obj)
	list := &metav1.PartialObjectMetadataList{
		TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadataList"},
		ListMeta: metav1.ListMeta{ResourceVersion: lm.GetResourceVersion(), Continue: lm.GetContinue(), RemainingItemCount: lm.GetRemainingItemCount()},
		Items:    make([]metav1.PartialObjectMetadata, 0, len(items)),
	}
	for _, item := range items {
		list.Items = append(list.Items, *partialMetadata(item))
	}
	return list, nil
}
