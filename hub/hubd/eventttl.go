package hubd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/store"
)

// eventPrefixes are where the store keeps events: core/v1 and
// events.k8s.io/v1 alike.
var eventPrefixes = []string{
	apiserver.KeyPrefix(schema.GroupResource{Resource: "events"}),
	apiserver.KeyPrefix(schema.GroupResource{Group: "events.k8s.io", Resource: "events"}),
}

// eventSweepEvery is how often expired events are looked for.
const eventSweepEvery = time.Minute

// eventExpiry deletes events a TTL after their last write, as
// kube-apiserver does (--event-ttl, 1h) by writing each event with an etcd
// lease. The store has no leases: the expiry samples the store's revision
// at every sweep, and an event last written at or before the revision it
// sampled a TTL ago has expired. The samples are kept in memory, so after
// the hub restarts nothing expires for one TTL. Edge nodes report events
// as kubelets do, and without expiry they would pile up in the store
// forever. Not safe for concurrent use.
type eventExpiry struct {
	st      store.Store
	ttl     time.Duration
	log     *slog.Logger
	samples []revisionAt // oldest first
}

// revisionAt is the store's revision at a time.
type revisionAt struct {
	rev int64
	at  time.Time
}

// expiredThrough returns the revision at or before which writes are older
// than ttl at now, by the samples (0: none known to be), and the samples
// still needed for later calls.
func expiredThrough(samples []revisionAt, now time.Time, ttl time.Duration) (int64, []revisionAt) {
	i := -1
	for j, s := range samples {
		if now.Sub(s.at) >= ttl {
			i = j
		}
	}
	if i < 0 {
		return 0, samples
	}
	return samples[i].rev, samples[i:]
}

// sweep samples the revision at now and deletes the expired events; it
// returns how many it deleted. An event written again meanwhile is left
// for a later sweep.
func (e *eventExpiry) sweep(ctx context.Context, now time.Time) (int, error) {
	rev, err := e.st.Revision(ctx)
	if err != nil {
		return 0, fmt.Errorf("store revision: %w", err)
	}
	e.samples = append(e.samples, revisionAt{rev, now})
	var cutoff int64
	cutoff, e.samples = expiredThrough(e.samples, now, e.ttl)
	if cutoff == 0 {
		return 0, nil
	}
	deleted := 0
	for _, prefix := range eventPrefixes {
		opts := store.ListOptions{Limit: 500}
		for {
			page, err := e.st.List(ctx, prefix, opts)
			if err != nil {
				return deleted, fmt.Errorf("list %s: %w", prefix, err)
			}
			for _, kv := range page.KVs {
				if kv.ModRevision > cutoff {
					continue
				}
				_, _, err := e.st.Delete(ctx, kv.Key, kv.ModRevision)
				switch {
				case err == nil:
					deleted++
				case errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrNotFound):
					// written again, or deleted, meanwhile
				default:
					return deleted, fmt.Errorf("delete %s: %w", kv.Key, err)
				}
			}
			if !page.More {
				break
			}
			opts.Revision, opts.Continue = page.Revision, page.Continue
		}
	}
	return deleted, nil
}

// run sweeps every interval until ctx ends.
func (e *eventExpiry) run(ctx context.Context, every time.Duration, now func() time.Time) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if n, err := e.sweep(ctx, now()); err != nil && ctx.Err() == nil {
			e.log.Warn("expire events", "err", err)
		} else if n > 0 {
			e.log.Debug("expired events", "deleted", n, "ttl", e.ttl)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
