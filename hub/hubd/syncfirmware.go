package hubd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime/schema"

	fwv1 "github.com/outpost-mesh/outpost/firmware/apis/v1"
	"github.com/outpost-mesh/outpost/firmware/artifacts"
	"github.com/outpost-mesh/outpost/firmware/transfer"
	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/store"
)

// releasesPrefix is the store prefix of the Release objects.
var releasesPrefix = apiserver.KeyPrefix(schema.GroupResource{Group: fwv1.GroupName, Resource: "releases"})

// storeReleases gives the artifact streams the manifest envelopes of the
// Releases, read from the store: the hub hands them out as they are, and
// nodes verify them.
type storeReleases struct{ st store.Reader }

var _ transfer.Releases = storeReleases{}

func (r storeReleases) Envelope(ctx context.Context, name string) ([]byte, error) {
	kv, err := r.st.Get(ctx, releasesPrefix+name, 0)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("release %s: %w", name, transfer.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	var rel struct {
		Spec struct {
			Envelope []byte `json:"envelope"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(kv.Value, &rel); err != nil {
		return nil, fmt.Errorf("release %s: stored form: %w", name, err)
	}
	return rel.Spec.Envelope, nil
}

// storeBlobs opens the artifacts of the hub's content-addressed store.
type storeBlobs struct{ s *artifacts.Store }

var _ transfer.Blobs = storeBlobs{}

func (b storeBlobs) OpenBlob(_ context.Context, sha256 string) (transfer.Blob, error) {
	blob, err := b.s.Open(sha256)
	if errors.Is(err, artifacts.ErrNotFound) {
		return nil, fmt.Errorf("artifact %s: %w", sha256, transfer.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	return blob, nil
}
