// Package checkpointtest gives tests a real checkpoint, in memory, whose
// view they set from Kubernetes objects as the hub would send them.
package checkpointtest

import (
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/outpost-mesh/outpost/edge/checkpoint"
	"github.com/outpost-mesh/outpost/edge/objects"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// View is a checkpoint in memory, closed when the test ends.
type View struct {
	*checkpoint.Store

	mu  sync.Mutex
	rev int64 // the last revision given
}

// New returns an empty View.
func New(t testing.TB) *View {
	t.Helper()
	s, err := checkpoint.Open("", checkpoint.MemoryConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close checkpoint: %v", err)
		}
	})
	return &View{Store: s}
}

// Set replaces the whole view with objs, each keyed by its resource,
// namespace and name and at a revision of its own, newer than any given
// before: an object set again counts as changed.
func (v *View) Set(t testing.TB, objs ...runtime.Object) {
	t.Helper()
	v.mu.Lock()
	defer v.mu.Unlock()
	list := make([]checkpoint.Object, 0, len(objs))
	for _, o := range objs {
		res := Resource(t, o)
		m, err := meta.Accessor(o)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := objects.Encode(o)
		if err != nil {
			t.Fatal(err)
		}
		v.rev++
		list = append(list, checkpoint.Object{
			Key:      wire.Key{Resource: res, Namespace: m.GetNamespace(), Name: m.GetName()},
			Revision: v.rev,
			Raw:      raw,
		})
	}
	if err := v.ReplaceAll(list, v.rev); err != nil {
		t.Fatal(err)
	}
}

// Resource returns the view's resource that holds objects of o's type.
func Resource(t testing.TB, o runtime.Object) string {
	t.Helper()
	switch o.(type) {
	case *corev1.Service:
		return wire.ResourceServices
	case *discoveryv1.EndpointSlice:
		return wire.ResourceEndpointSlices
	case *corev1.Pod:
		return wire.ResourcePods
	case *corev1.Node:
		return wire.ResourceNodes
	case *corev1.ConfigMap:
		return wire.ResourceConfigMaps
	case *corev1.Secret:
		return wire.ResourceSecrets
	}
	t.Fatalf("checkpointtest: no view resource holds a %T", o)
	return ""
}
