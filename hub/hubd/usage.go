package hubd

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/store"
	"github.com/outpost-mesh/outpost/hub/usage"
)

// storeLabels adapts the store to usage.Labels. It reads and decodes
// every node or pod of a namespace per request, which kubectl top makes
// rarely; an index would pay for itself only at a larger scale.
type storeLabels struct{ st store.Reader }

var _ usage.Labels = storeLabels{}

func (l storeLabels) NodeLabels(ctx context.Context) (map[string]map[string]string, error) {
	out := map[string]map[string]string{}
	err := l.each(ctx, nodesPrefix, func(kv store.KeyValue) error {
		n := &corev1.Node{}
		if err := apiserver.DecodeStored(kv.Value, n); err != nil {
			return err
		}
		out[n.Name] = n.Labels
		return nil
	})
	return out, err
}

func (l storeLabels) PodLabels(ctx context.Context, namespace string) (map[types.NamespacedName]map[string]string, error) {
	prefix := podsPrefix
	if namespace != "" {
		prefix += namespace + "/"
	}
	out := map[types.NamespacedName]map[string]string{}
	err := l.each(ctx, prefix, func(kv store.KeyValue) error {
		p, err := decodePod(kv)
		if err != nil {
			return err
		}
		out[types.NamespacedName{Namespace: p.Namespace, Name: p.Name}] = p.Labels
		return nil
	})
	return out, err
}

// each calls fn with every key-value under prefix, a page at a time.
func (l storeLabels) each(ctx context.Context, prefix string, fn func(store.KeyValue) error) error {
	opts := store.ListOptions{Limit: podsListPage}
	for {
		page, err := l.st.List(ctx, prefix, opts)
		if err != nil {
			return err
		}
		for _, kv := range page.KVs {
			if err := fn(kv); err != nil {
				return err
			}
		}
		if !page.More {
			return nil
		}
		opts.Revision, opts.Continue = page.Revision, page.Continue
	}
}
