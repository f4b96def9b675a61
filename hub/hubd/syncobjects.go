package hubd

import (
	"context"
	"errors"
	"fmt"

	"github.com/outpost-mesh/outpost/hub/store"
	"github.com/outpost-mesh/outpost/sync/server"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// storeKey maps an object key of the sync protocol to its store key, the
// inverse of wireKey; ok is false for keys of other resources.
func storeKey(k wire.Key) (string, bool) {
	for _, r := range syncResources {
		if r.resource != k.Resource {
			continue
		}
		if r.namespaced {
			return r.prefix + k.Namespace + "/" + k.Name, k.Namespace != ""
		}
		return r.prefix + k.Name, k.Namespace == ""
	}
	return "", false
}

// syncObjects reads for the sync server the objects whose bytes the views
// do not hold.
type syncObjects struct{ st store.Reader }

var _ server.Objects = syncObjects{}

// Object reads the latest version of key: a read at rev itself would fail
// once rev is compacted, although the store keeps an object's latest
// version through compactions. If that version is not rev's, the object
// changed or went since, and the views are bound to hear of it.
func (o syncObjects) Object(ctx context.Context, key wire.Key, rev int64) ([]byte, error) {
	sk, ok := storeKey(key)
	if !ok {
		return nil, fmt.Errorf("read %s: not a resource of the views", key)
	}
	kv, err := o.st.Get(ctx, sk, 0)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, fmt.Errorf("read %s at revision %d: deleted since: %w", key, rev, server.ErrObjectGone)
	case err != nil:
		return nil, fmt.Errorf("read %s: %w", key, err)
	case kv.ModRevision != rev:
		return nil, fmt.Errorf("read %s at revision %d: at %d now: %w", key, rev, kv.ModRevision, server.ErrObjectGone)
	}
	return kv.Value, nil
}
