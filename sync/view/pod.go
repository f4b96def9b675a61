package view

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"

	"github.com/outpost-mesh/outpost/sync/wire"
)

// podInfo is what the index needs of one version of a pod: the node it is
// bound to ("" for none) and the configmaps, secrets and service accounts
// it references in its namespace, sorted by compareKeys and without
// duplicates. It is immutable once built; the index, its history and its
// sessions share it.
type podInfo struct {
	node string
	refs []wire.Key
}

// unbound is the podInfo of a pod that does not decode: it belongs to no
// node and references nothing.
var unbound = &podInfo{}

// podCodec decodes stored pods. Its scheme holds core/v1 only: the index
// decodes nothing else.
var podCodec = func() *protobuf.Serializer {
	s := runtime.NewScheme()
	utilruntime.Must(corev1.AddToScheme(s))
	return protobuf.NewSerializer(s, s)
}()

// decodePod returns the podInfo of a pod in namespace ns stored as raw
// (Kubernetes protobuf), and false with unbound if raw is not a Pod.
func decodePod(ns string, raw []byte) (*podInfo, bool) {
	obj, _, err := podCodec.Decode(raw, nil, &corev1.Pod{})
	if err != nil {
		return unbound, false
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return unbound, false
	}
	return &podInfo{node: pod.Spec.NodeName, refs: podRefs(ns, &pod.Spec)}, true
}

// podRefs returns the objects in namespace ns that a pod with spec needs on
// its node: the configmaps and secrets of its volumes (projected ones
// included), environment and image pull secrets, and its service account
// ("default" when unset). They are sorted by compareKeys, without
// duplicates.
func podRefs(ns string, spec *corev1.PodSpec) []wire.Key {
	var refs []wire.Key
	add := func(resource, name string) {
		if name != "" {
			refs = append(refs, wire.Key{Resource: resource, Namespace: ns, Name: name})
		}
	}
	for i := range spec.Volumes {
		v := &spec.Volumes[i]
		if v.ConfigMap != nil {
			add(wire.ResourceConfigMaps, v.ConfigMap.Name)
		}
		if v.Secret != nil {
			add(wire.ResourceSecrets, v.Secret.SecretName)
		}
		if v.Projected != nil {
			for _, src := range v.Projected.Sources {
				if src.ConfigMap != nil {
					add(wire.ResourceConfigMaps, src.ConfigMap.Name)
				}
				if src.Secret != nil {
					add(wire.ResourceSecrets, src.Secret.Name)
				}
			}
		}
	}
	env := func(env []corev1.EnvVar, from []corev1.EnvFromSource) {
		for _, e := range env {
			if e.ValueFrom == nil {
				continue
			}
			if r := e.ValueFrom.ConfigMapKeyRef; r != nil {
				add(wire.ResourceConfigMaps, r.Name)
			}
			if r := e.ValueFrom.SecretKeyRef; r != nil {
				add(wire.ResourceSecrets, r.Name)
			}
		}
		for _, f := range from {
			if f.ConfigMapRef != nil {
				add(wire.ResourceConfigMaps, f.ConfigMapRef.Name)
			}
			if f.SecretRef != nil {
				add(wire.ResourceSecrets, f.SecretRef.Name)
			}
		}
	}
	for i := range spec.InitContainers {
		env(spec.InitContainers[i].Env, spec.InitContainers[i].EnvFrom)
	}
	for i := range spec.Containers {
		env(spec.Containers[i].Env, spec.Containers[i].EnvFrom)
	}
	for i := range spec.EphemeralContainers {
		env(spec.EphemeralContainers[i].Env, spec.EphemeralContainers[i].EnvFrom)
	}
	for _, s := range spec.ImagePullSecrets {
		add(wire.ResourceSecrets, s.Name)
	}
	sa := spec.ServiceAccountName
	if sa == "" {
		sa = spec.DeprecatedServiceAccount
	}
	if sa == "" {
		sa = "default"
	}
	add(wire.ResourceServiceAccounts, sa)
	slices.SortFunc(refs, compareKeys)
	return slices.Compact(refs)
}

// samePod reports whether a and b bind to the same node with the same
// references.
func samePod(a, b *podInfo) bool {
	return a == b || a.node == b.node && slices.Equal(a.refs, b.refs)
}

// compareKeys orders keys by resource, namespace and name.
func compareKeys(a, b wire.Key) int {
	if c := strings.Compare(a.Resource, b.Resource); c != 0 {
		return c
	}
	if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
		return c
	}
	return strings.Compare(a.Name, b.Name)
}
