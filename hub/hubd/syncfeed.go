package hubd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/store"
	"github.com/outpost-mesh/outpost/sync/view"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// syncResources are the stored resources nodes' views are made of, by
// store prefix.
var syncResources = []struct {
	prefix     string
	resource   string
	namespaced bool
}{
	{apiserver.KeyPrefix(schema.GroupResource{Resource: "nodes"}), wire.ResourceNodes, false},
	{apiserver.KeyPrefix(schema.GroupResource{Resource: "pods"}), wire.ResourcePods, true},
	{apiserver.KeyPrefix(schema.GroupResource{Resource: "configmaps"}), wire.ResourceConfigMaps, true},
	{apiserver.KeyPrefix(schema.GroupResource{Resource: "secrets"}), wire.ResourceSecrets, true},
	{apiserver.KeyPrefix(schema.GroupResource{Resource: "serviceaccounts"}), wire.ResourceServiceAccounts, true},
	{apiserver.KeyPrefix(schema.GroupResource{Resource: "services"}), wire.ResourceServices, true},
	{apiserver.KeyPrefix(schema.GroupResource{Group: "discovery.k8s.io", Resource: "endpointslices"}), wire.ResourceEndpointSlices, true},
}

// syncWatchPrefix covers every prefix above in one watch, so that their
// events come in one revision order.
const syncWatchPrefix = apiserver.KeyRoot

// wireKey maps a store key to the object key of the sync protocol; ok is
// false for keys of other resources.
func wireKey(key string) (wire.Key, bool) {
	for _, r := range syncResources {
		rest, found := strings.CutPrefix(key, r.prefix)
		if !found {
			continue
		}
		k := wire.Key{Resource: r.resource, Name: rest}
		if r.namespaced {
			ns, name, ok := strings.Cut(rest, "/")
			if !ok {
				return wire.Key{}, false
			}
			k.Namespace, k.Name = ns, name
		}
		return k, k.Validate() == nil
	}
	return wire.Key{}, false
}

// feedViews keeps idx equal to the store: a snapshot of every sync
// resource at one revision, then the changes after it from one watch. When
// the watch ends (compaction, too slow) it takes a new snapshot. It returns
// when ctx ends.
func feedViews(ctx context.Context, st store.Store, idx *view.Index, ready chan<- struct{}, log *slog.Logger) {
	for ctx.Err() == nil {
		err := feedOnce(ctx, st, idx, ready)
		ready = nil // closed by the first round
		if ctx.Err() != nil {
			return
		}
		log.Warn("sync view feed restarts", "err", err)
		t := time.NewTimer(time.Second)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

func feedOnce(ctx context.Context, st store.Store, idx *view.Index, ready chan<- struct{}) error {
	rev, err := st.Revision(ctx)
	if err != nil {
		return fmt.Errorf("store revision: %w", err)
	}
	// Of the objects the views hold only while nodes need them, the feed
	// keeps the keys, revisions and sizes: the values of a page are
	// dropped with it.
	var objs []view.Object
	for _, r := range syncResources {
		onDemand := view.OnDemand(r.resource)
		opts := store.ListOptions{Revision: rev, Limit: store.DefaultPageSizer.Next(0, 0)}
		seen, seenBytes := 0, 0
		for {
			page, err := st.List(ctx, r.prefix, opts)
			if err != nil {
				return fmt.Errorf("list %s: %w", r.prefix, err)
			}
			for _, kv := range page.KVs {
				seen, seenBytes = seen+1, seenBytes+len(kv.Value)
				k, ok := wireKey(kv.Key)
				if !ok {
					continue
				}
				o := view.Object{Key: k, Revision: kv.ModRevision, Raw: kv.Value}
				if onDemand && !view.Shared(k) {
					o.Raw, o.Size = nil, len(kv.Value)
				}
				objs = append(objs, o)
			}
			if !page.More {
				break
			}
			opts.Continue, opts.Limit = page.Continue, store.DefaultPageSizer.Next(seen, seenBytes)
		}
	}
	if err := idx.Reset(rev, objs); err != nil {
		return fmt.Errorf("reset views: %w", err)
	}
	if ready != nil {
		close(ready)
	}
	watchCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	events, err := st.Watch(watchCtx, syncWatchPrefix, rev)
	if err != nil {
		return fmt.Errorf("watch %s: %w", syncWatchPrefix, err)
	}
	for resp := range events {
		if resp.Err != nil {
			return fmt.Errorf("watch %s: %w", syncWatchPrefix, resp.Err)
		}
		batch := make([]view.Event, 0, len(resp.Events))
		for _, ev := range resp.Events {
			k, ok := wireKey(ev.KV.Key)
			if !ok {
				continue
			}
			e := view.Event{Revision: ev.Revision(), Key: k}
			if ev.Type == store.EventDelete {
				e.Deleted = true
			} else {
				// The views keep it only if a node needs it.
				e.Raw, e.Size = ev.KV.Value, len(ev.KV.Value)
			}
			batch = append(batch, e)
		}
		if len(batch) == 0 {
			continue
		}
		if err := idx.Apply(batch); err != nil {
			return fmt.Errorf("apply to views: %w", err)
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return errors.New("watch channel closed")
}
