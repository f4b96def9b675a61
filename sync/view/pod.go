package view

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"

	"github.com/outpost-mesh/outpost/internal/podrefs"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// podInfo is what the index needs of one version of a pod: the node it is
// bound to ("" for none), the configmaps, secrets and service accounts
// it references in its namespace, sorted by compareKeys and without
// duplicates, and the service account tokens it needs on its node (nil
// for none). It is immutable once built; the index, its history and its
// sessions share it.
type podInfo struct {
	node   string
	refs   []wire.Key
	tokens *podTokens
}

// podTokens is what a pod needs minted for its node: tokens of its
// service account for each of sources (see tokenSources).
type podTokens struct {
	uid            string
	serviceAccount string
	sources        []TokenSource
}

// unbound is the podInfo of a pod that does not decode: it belongs to no
// node and references nothing.
var unbound = &podInfo{}

// codec decodes stored pods and Nodes. Its scheme holds core/v1 only: the
// index decodes nothing else.
var codec = func() *protobuf.Serializer {
	s := runtime.NewScheme()
	utilruntime.Must(corev1.AddToScheme(s))
	return protobuf.NewSerializer(s, s)
}()

// decodePod returns the podInfo of a pod in namespace ns stored as raw
// (Kubernetes protobuf), and false with unbound if raw is not a Pod.
func decodePod(ns string, raw []byte) (*podInfo, bool) {
	obj, _, err := codec.Decode(raw, nil, &corev1.Pod{})
	if err != nil {
		return unbound, false
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return unbound, false
	}
	return &podInfo{node: pod.Spec.NodeName, refs: podRefs(ns, pod), tokens: tokenNeeds(pod)}, true
}

// podRefs returns the objects in namespace ns that pod needs on its node,
// those podrefs.Visit lists that a view holds: its secrets, config maps
// and service account. They are sorted by compareKeys, without duplicates.
func podRefs(ns string, pod *corev1.Pod) []wire.Key {
	var refs []wire.Key
	podrefs.Visit(pod, func(resource, name string) bool {
		// Both name resources as the API does.
		switch resource {
		case wire.ResourceSecrets, wire.ResourceConfigMaps, wire.ResourceServiceAccounts:
			refs = append(refs, wire.Key{Resource: resource, Namespace: ns, Name: name})
		}
		return true
	})
	slices.SortFunc(refs, compareKeys)
	return slices.Compact(refs)
}

// samePod reports whether a and b bind to the same node with the same
// references and token needs.
func samePod(a, b *podInfo) bool {
	return a == b || a.node == b.node && slices.Equal(a.refs, b.refs) && sameTokens(a.tokens, b.tokens)
}

func sameTokens(a, b *podTokens) bool {
	return a == b || a != nil && b != nil && a.uid == b.uid && a.serviceAccount == b.serviceAccount && slices.Equal(a.sources, b.sources)
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
