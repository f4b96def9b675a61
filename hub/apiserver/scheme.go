package apiserver

import (
	"bytes"
	"fmt"
	"io"
	"mime"

	authenticationv1 "k8s.io/api/authentication/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
)

// Encoding is how a resource's objects are written, in the store and in
// request and response bodies.
type Encoding int

const (
	// EncodingProtobuf is for Go types with a Kubernetes protobuf form,
	// those of k8s.io/api: the store keeps protobuf, as kube-apiserver
	// keeps them in etcd, and clients may use JSON, YAML or protobuf.
	EncodingProtobuf Encoding = iota
	// EncodingJSON is for objects without one, such as custom resources
	// served as *unstructured.Unstructured: the store keeps JSON, and
	// clients may use JSON or YAML, as upstream serves custom resources.
	EncodingJSON
)

// machineryKinds are the kinds the machinery itself reads and writes
// besides the resources': meta.k8s.io's (Status, Table, WatchEvent,
// DeleteOptions, ...) and the bodies of the subresources it serves.
var machineryKinds = []struct {
	gv    schema.GroupVersion
	kinds []runtime.Object
}{
	{autoscalingv1.SchemeGroupVersion, []runtime.Object{&autoscalingv1.Scale{}}},
	{authenticationv1.SchemeGroupVersion, []runtime.Object{&authenticationv1.TokenRequest{}}},
	{policyv1.SchemeGroupVersion, []runtime.Object{&policyv1.Eviction{}}},
	{corev1.SchemeGroupVersion, []runtime.Object{&corev1.Binding{}}},
}

// newScheme returns the scheme of a server serving rs: the kinds of the
// machinery and those each resource registers (Resource.AddToScheme). The
// hub keeps and serves objects in one version of each group, so the scheme
// holds no conversions.
func newScheme(rs []Resource) (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := metav1.AddMetaToScheme(s); err != nil {
		return nil, err
	}
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	for _, m := range machineryKinds {
		s.AddKnownTypes(m.gv, m.kinds...)
		metav1.AddToGroupVersion(s, m.gv)
	}
	for _, r := range rs {
		if r.AddToScheme == nil {
			continue
		}
		if err := r.AddToScheme(s); err != nil {
			return nil, fmt.Errorf("register %s %s: %w", r.GroupVersion, r.Kind, err)
		}
	}
	if err := s.SetVersionPriority(corev1.SchemeGroupVersion); err != nil {
		return nil, err
	}
	return s, nil
}

// codec is how the machinery writes and reads one resource's objects.
type codec struct {
	// media are the serializers clients may use for bodies, JSON first.
	media []runtime.SerializerInfo
	// storage is the serializer of the stored form.
	storage runtime.Serializer
}

// newCodecs returns the codec of each Encoding over the server's scheme
// and codecs, whose media types come JSON first.
func newCodecs(scheme *runtime.Scheme, codecs serializer.CodecFactory) map[Encoding]codec {
	all := codecs.SupportedMediaTypes()
	var text []runtime.SerializerInfo
	for _, info := range all {
		if info.MediaType == runtime.ContentTypeJSON || info.MediaType == runtime.ContentTypeYAML {
			text = append(text, info)
		}
	}
	return map[Encoding]codec{
		EncodingProtobuf: {media: all, storage: protobuf.NewSerializer(scheme, scheme)},
		EncodingJSON:     {media: text, storage: json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme, scheme, json.SerializerOptions{})},
	}
}

// lookup returns the serializer of mediaType, if clients may use it.
func (c codec) lookup(mediaType string) (runtime.SerializerInfo, bool) {
	for _, info := range c.media {
		if info.MediaType == mediaType {
			return info, true
		}
	}
	return runtime.SerializerInfo{}, false
}

// json returns the JSON serializer, which every codec has.
func (c codec) json() runtime.SerializerInfo { return c.media[0] }

// bare decodes into Go types it does not know, which is all of them: its
// serializers then unmarshal straight into the object they are given.
var bare = serializer.NewCodecFactory(runtime.NewScheme())

// DecodeStored decodes value, an object as the API server keeps it in the
// store, into into, an object of the resource's Go type: a type of
// k8s.io/api for a resource encoded as protobuf, or an
// *unstructured.Unstructured for one encoded as JSON. It is the one way
// for other parts of the hub to read stored objects; resourceVersion is
// not in value (it is the key's revision).
func DecodeStored(value []byte, into runtime.Object) error {
	var info runtime.SerializerInfo
	if bytes.HasPrefix(value, protoMagic) {
		info, _ = lookupMedia(bare.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	} else {
		info, _ = lookupMedia(bare.SupportedMediaTypes(), runtime.ContentTypeJSON)
	}
	if _, _, err := info.Serializer.Decode(value, nil, into); err != nil {
		return fmt.Errorf("decode stored %T: %w", into, err)
	}
	return nil
}

// DecodeBody decodes body, a request body of contentType (JSON when
// empty), into into as the API server will decode it, leniently: for a
// caller that must look into a request before the API server serves it.
func DecodeBody(contentType string, body []byte, into runtime.Object) error {
	mt := runtime.ContentTypeJSON
	if contentType != "" {
		var err error
		if mt, _, err = mime.ParseMediaType(contentType); err != nil {
			return fmt.Errorf("content type %q: %w", contentType, err)
		}
	}
	info, ok := lookupMedia(bare.SupportedMediaTypes(), mt)
	if !ok {
		return fmt.Errorf("content type %q is not served", mt)
	}
	_, _, err := info.Serializer.Decode(body, nil, into)
	return err
}

func lookupMedia(media []runtime.SerializerInfo, mediaType string) (runtime.SerializerInfo, bool) {
	return codec{media: media}.lookup(mediaType)
}

// machineryCodec is the codec of the bodies of the machinery's own kinds
// (Scale, TokenRequest): every media type of the server's codecs.
func (s *Server) machineryCodec() codec { return codec{media: s.codecs.SupportedMediaTypes()} }

// jsonSerializer returns the server's JSON serializer.
func (s *Server) jsonSerializer() runtime.Serializer { return s.machineryCodec().json().Serializer }

// knows reports whether the server's scheme has obj's Go type.
func (s *Server) knows(obj runtime.Object) bool {
	_, _, err := s.scheme.ObjectKinds(obj)
	return err == nil
}

// encoderFor returns the encoder that writes objects with ser in version
// gv. Objects without Go types (runtime.Unstructured: custom resources
// and their lists) carry their kind themselves and are served in the one
// version they are kept in, so they are written as they are: the scheme
// has no conversion for them.
func (s *Server) encoderFor(ser runtime.Encoder, gv runtime.GroupVersioner) runtime.Encoder {
	return versionedEncoder{versioned: s.codecs.EncoderForVersion(ser, gv), plain: ser}
}

type versionedEncoder struct{ versioned, plain runtime.Encoder }

func (e versionedEncoder) Encode(obj runtime.Object, w io.Writer) error {
	if _, ok := obj.(runtime.Unstructured); ok {
		return e.plain.Encode(obj, w)
	}
	return e.versioned.Encode(obj, w)
}

func (e versionedEncoder) Identifier() runtime.Identifier { return e.versioned.Identifier() }
