package hubd

import (
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/outpost-mesh/outpost/hub/apiserver/openapi"
)

// openapiDocs serves the OpenAPI documents of what the hub serves now:
// the built-in kinds, and the custom resources' kinds as their
// definitions come and go. A change builds new documents and swaps them
// in whole, so a request sees one version of them. Safe for concurrent
// use.
type openapiDocs struct {
	spec atomic.Pointer[openapi.Spec]
	// mu makes rebuilds run one at a time, so the last stored is the
	// last asked for.
	mu sync.Mutex
}

// newOpenAPIDocs builds the documents of kinds.
func newOpenAPIDocs(kinds []openapi.Kind) (*openapiDocs, error) {
	d := &openapiDocs{}
	return d, d.rebuild(kinds)
}

// rebuild replaces the documents with those of kinds; on error the old
// ones stay.
func (d *openapiDocs) rebuild(kinds []openapi.Kind) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	spec, err := openapi.New(kinds)
	if err != nil {
		return err
	}
	d.spec.Store(spec)
	return nil
}

func (d *openapiDocs) ServeV2(w http.ResponseWriter, r *http.Request) { d.spec.Load().ServeV2(w, r) }
func (d *openapiDocs) ServeV3(w http.ResponseWriter, r *http.Request) { d.spec.Load().ServeV3(w, r) }
