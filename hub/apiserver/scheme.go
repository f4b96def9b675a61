package apiserver

import (
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	networkingv1 "k8s.io/api/networking/v1"
	nodev1 "k8s.io/api/node/v1"
	policyv1 "k8s.io/api/policy/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	metricsv1beta1 "k8s.io/metrics/pkg/apis/metrics/v1beta1"
)

// Scheme knows every Go type the hub serves, in its versioned (external)
// form: the hub keeps and serves objects in the one version of each group,
// so no conversion is ever needed.
var Scheme = runtime.NewScheme()

var (
	// codecs negotiates JSON, YAML and protobuf; lenient decoding.
	codecs = serializer.NewCodecFactory(Scheme)
	// strictCodecs decodes as fieldValidation=Strict asks: unknown and
	// duplicate fields are errors.
	strictCodecs = serializer.NewCodecFactory(Scheme, serializer.EnableStrict)
	// storageCodec is the encoding of objects in the store: Kubernetes
	// protobuf, as kube-apiserver keeps them in etcd.
	storageSerializer = protobuf.NewSerializer(Scheme, Scheme)
)

func init() {
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme, appsv1.AddToScheme, batchv1.AddToScheme,
		coordinationv1.AddToScheme, discoveryv1.AddToScheme, eventsv1.AddToScheme,
		autoscalingv1.AddToScheme, policyv1.AddToScheme, authenticationv1.AddToScheme,
		networkingv1.AddToScheme, schedulingv1.AddToScheme, nodev1.AddToScheme,
		metricsv1beta1.AddToScheme, metav1.AddMetaToScheme,
	} {
		utilruntime.Must(add(Scheme))
	}
	metav1.AddToGroupVersion(Scheme, schema.GroupVersion{Version: "v1"})
	utilruntime.Must(Scheme.SetVersionPriority(corev1.SchemeGroupVersion))
}
