package hubd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/auth"
	"github.com/outpost-mesh/outpost/hub/store"
)

// podsPrefix is where the API server keeps pods: podsPrefix<ns>/<name>.
var podsPrefix = apiserver.KeyPrefix(schema.GroupResource{Resource: "pods"})

// podsListPage bounds each page of storePods.OnNode's list.
const podsListPage = 500

// storePods adapts the store to the authorizer's pod lookups. OnNode reads
// and decodes every pod: the hub has no index of pods by node for the API
// yet, and nodes rarely ask the API for what only it answers (their view
// comes over sync).
type storePods struct{ st store.Reader }

var _ auth.Pods = storePods{}

func (p storePods) Get(ctx context.Context, ns, name string) (*corev1.Pod, error) {
	kv, err := p.st.Get(ctx, podsPrefix+ns+"/"+name, 0)
	if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrInvalidKey) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return decodePod(kv)
}

func (p storePods) OnNode(ctx context.Context, node string) ([]*corev1.Pod, error) {
	var pods []*corev1.Pod
	opts := store.ListOptions{Limit: podsListPage}
	for {
		page, err := p.st.List(ctx, podsPrefix, opts)
		if err != nil {
			return nil, err
		}
		for _, kv := range page.KVs {
			pod, err := decodePod(kv)
			if err != nil {
				return nil, err
			}
			if pod.Spec.NodeName == node {
				pods = append(pods, pod)
			}
		}
		if !page.More {
			return pods, nil
		}
		opts.Revision, opts.Continue = page.Revision, page.Continue
	}
}

func decodePod(kv store.KeyValue) (*corev1.Pod, error) {
	pod := &corev1.Pod{}
	if err := apiserver.DecodeStored(kv.Value, pod); err != nil {
		return nil, fmt.Errorf("decode %s: %w", kv.Key, err)
	}
	return pod, nil
}

// createName returns the name of the object a create request's body
// holds, decoded as the API server will decode it (by Content-Type, JSON
// when none), and puts the body back for it to read. It returns "" when
// the body does not decode, is too large, or gives no name (generateName):
// the API server would refuse such a body, or pick a name the authorizer
// cannot foresee. Only nodes' creates of Nodes and Leases come here.
func createName(r *http.Request, a auth.Attributes) (string, error) {
	var into runtime.Object
	switch a.Resource {
	case "nodes":
		into = &corev1.Node{}
	case "leases":
		into = &coordinationv1.Lease{}
	default:
		return "", nil
	}
	obj, err := peekBody(r, into)
	if obj == nil || err != nil {
		return "", err
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return "", nil
	}
	return m.GetName(), nil
}

// readCloser reads from one place and closes another.
type readCloser struct {
	io.Reader
	io.Closer
}
