package hubd

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/outpost-mesh/outpost/hub/store"
	"github.com/outpost-mesh/outpost/internal/testlog"
	"github.com/outpost-mesh/outpost/sync/view"
)

// pageCounter is a store whose lists are counted: the values of each page.
type pageCounter struct {
	store.Store
	mu    sync.Mutex
	pages map[string][]int // by prefix, the bytes of each page
}

func (p *pageCounter) List(ctx context.Context, prefix string, opts store.ListOptions) (store.ListResult, error) {
	res, err := p.Store.List(ctx, prefix, opts)
	n := 0
	for _, kv := range res.KVs {
		n += len(kv.Value)
	}
	p.mu.Lock()
	p.pages[prefix] = append(p.pages[prefix], n)
	p.mu.Unlock()
	return res, err
}

// TestFeedHoldsWhatNodesNeed: the feed lists the store in pages of a few
// MB, however large the objects, and seeds the views without the bytes of
// the configmaps, secrets and service accounts; the pods and the rest are
// held.
func TestFeedHoldsWhatNodesNeed(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := &pageCounter{Store: openTestStore(t), pages: map[string][]int{}}
	big := bytes.Repeat([]byte("x"), 256<<10)
	const configMaps = 60 // 15 MB
	for i := range configMaps {
		if _, err := st.Create(ctx, fmt.Sprintf("/registry/configmaps/default/cm-%02d", i), big); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.Create(ctx, "/registry/services/default/api", []byte("k8s\x00service")); err != nil {
		t.Fatal(err)
	}
	idx := view.NewIndex(view.DefaultConfig())
	ready := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		feedViews(ctx, st, idx, ready, testlog.New(t, slog.LevelInfo))
	}()
	defer func() { cancel(); <-done }()
	select {
	case <-ready:
	case <-time.After(time.Minute):
		t.Fatal("views not seeded in a minute")
	}

	s := idx.Stats()
	if s.Objects != configMaps+1 || s.Unheld != configMaps || s.ObjectBytes != int64(len("k8s\x00service")) {
		t.Errorf("views: %d objects, %d bytes held, %d without theirs; want %d, the service's %d, %d",
			s.Objects, s.ObjectBytes, s.Unheld, configMaps+1, len("k8s\x00service"), configMaps)
	}
	st.mu.Lock()
	pages := st.pages["/registry/configmaps/"]
	st.mu.Unlock()
	if len(pages) < 3 {
		t.Errorf("configmaps listed in %d pages %v, want several", len(pages), pages)
	}
	for i, n := range pages {
		if n > store.DefaultPageSizer.Bytes+len(big) {
			t.Errorf("page %d of the configmaps holds %d bytes, want at most about %d", i, n, store.DefaultPageSizer.Bytes)
		}
	}
}
