package apiserver

import (
	"bytes"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
)

// testScheme knows the kinds of the tests' resources (core/v1) and the
// machinery's; testCodecs and testStorage encode and decode with it as a
// server serving them does.
var (
	testScheme = func() *runtime.Scheme {
		s, err := newScheme([]Resource{{AddToScheme: corev1.AddToScheme}})
		utilruntime.Must(err)
		return s
	}()
	testCodecs  = serializer.NewCodecFactory(testScheme)
	testStorage = protobuf.NewSerializer(testScheme, testScheme)
)

// testMedia returns testCodecs' serializer of mediaType.
func testMedia(mediaType string) runtime.SerializerInfo {
	info, _ := lookupMedia(testCodecs.SupportedMediaTypes(), mediaType)
	return info
}

// FuzzDecodeStored feeds DecodeStored and DecodeBody arbitrary bytes, as
// a damaged store or a client may: they return an error or an object,
// never panic.
func FuzzDecodeStored(f *testing.F) {
	var pod bytes.Buffer
	utilruntime.Must(testStorage.Encode(&corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, ObjectMeta: metav1.ObjectMeta{Name: "p"}}, &pod))
	f.Add(pod.Bytes())
	f.Add([]byte(`{"apiVersion":"example.outpost.dev/v1","kind":"Widget","metadata":{"name":"w"}}`))
	f.Add([]byte("apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n"))
	f.Add([]byte("k8s\x00\x0a"))
	f.Fuzz(func(t *testing.T, b []byte) {
		DecodeStored(b, &corev1.Pod{})
		DecodeStored(b, &unstructured.Unstructured{})
		for _, ct := range []string{"", "application/yaml", "application/vnd.kubernetes.protobuf"} {
			DecodeBody(ct, b, &corev1.Pod{})
		}
	})
}

// TestDecodeStored reads what a server stores back, for either encoding.
func TestDecodeStored(t *testing.T) {
	var b bytes.Buffer
	utilruntime.Must(testStorage.Encode(&corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: corev1.PodSpec{NodeName: "n1"}}, &b))
	var pod corev1.Pod
	if err := DecodeStored(b.Bytes(), &pod); err != nil || pod.Name != "p" || pod.Spec.NodeName != "n1" {
		t.Fatalf("DecodeStored(protobuf) = %v, %v", pod, err)
	}
	var u unstructured.Unstructured
	if err := DecodeStored([]byte(`{"apiVersion":"example.outpost.dev/v1","kind":"Widget","metadata":{"name":"w"}}`), &u); err != nil || u.GetName() != "w" {
		t.Fatalf("DecodeStored(JSON) = %v, %v", u.Object, err)
	}
	if err := DecodeStored([]byte("k8s\x00\xff"), &pod); err == nil {
		t.Fatal("DecodeStored(damaged protobuf) succeeded")
	}
	var node corev1.Node
	if err := DecodeBody("application/yaml", []byte("kind: Node\nmetadata:\n  name: n1\n"), &node); err != nil || node.Name != "n1" {
		t.Fatalf("DecodeBody(YAML) = %v, %v", node, err)
	}
	if err := DecodeBody("text/plain", []byte("x"), &node); err == nil {
		t.Fatal("DecodeBody(text/plain) succeeded")
	}
}
