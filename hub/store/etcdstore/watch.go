package etcdstore

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/outpost-mesh/outpost/hub/store"
	"github.com/outpost-mesh/outpost/hub/store/internal/fanout"
)

// errWatchClosed ends a watch whose etcd channel closed without saying why.
var errWatchClosed = errors.New("etcd closed the watch")

// Watch implements store.Watcher on an etcd watch with previous values.
// The etcd client buffers without bound, so one goroutine moves its
// responses into a bounded fanout.Queue and another delivers them; a
// consumer that falls behind cfg.Watch gets store.ErrWatcherTooSlow and the
// etcd watch is cancelled. Both goroutines exit when ctx ends or the store
// closes. When the store closes the channel is closed without an error.
func (s *Store) Watch(ctx context.Context, prefix string, rev int64) (<-chan store.WatchResponse, error) {
	if err := store.ValidatePrefix(prefix); err != nil {
		return nil, err
	}
	if err := store.ValidateRevision(rev); err != nil {
		return nil, err
	}
	if s.closed.Load() {
		return nil, store.ErrClosed
	}
	// start is the etcd revision the watch reads from; events at or before
	// after are dropped.
	var after, start int64
	if rev == 0 {
		cur, err := s.Revision(ctx)
		if err != nil {
			return nil, fmt.Errorf("watch %q: %w", prefix, err)
		}
		// From the next revision: etcd then streams new events at once
		// rather than first catching up from its backend.
		after, start = cur, cur+1
	} else {
		// A read at rev fails exactly when rev is beyond the current
		// revision or older than the compacted one, as Watch must; the
		// watch itself would wait for a future revision silently.
		if _, err := s.cli.Get(ctx, prefix, clientv3.WithRev(rev), clientv3.WithCountOnly()); err != nil {
			return nil, s.fail(ctx, "watch", prefix, rev, err)
		}
		// From rev itself, not rev+1: etcd then reports a compaction that
		// overtakes this call the same way, with rev < compacted revision.
		after, start = rev, rev
	}

	wctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.closeCtx, cancel)
	q := fanout.New(s.cfg.Watch)
	s.mu.Lock()
	if s.closed.Load() {
		s.mu.Unlock()
		stop()
		cancel()
		return nil, store.ErrClosed
	}
	s.wg.Add(2)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		s.pump(wctx, q, prefix, after, start)
	}()
	go func() {
		defer s.wg.Done()
		defer stop()
		defer cancel()
		q.Run(wctx)
	}()
	return q.Out(), nil
}

// pump moves the events of an etcd watch from start into q until ctx ends,
// the watch fails or q overflows; then it cancels the etcd watch.
func (s *Store) pump(ctx context.Context, q *fanout.Queue, prefix string, after, start int64) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wch := s.cli.Watch(clientv3.WithRequireLeader(ctx), prefix,
		clientv3.WithPrefix(), clientv3.WithPrevKV(), clientv3.WithRev(start))
	for {
		var (
			wr clientv3.WatchResponse
			ok bool
		)
		select {
		case <-ctx.Done():
			return
		case wr, ok = <-wch:
		}
		switch {
		case ctx.Err() != nil:
			return // the consumer left or the store closed: no error owed
		case !ok:
			q.Fail(fmt.Errorf("watch %q: %w", prefix, errWatchClosed))
			return
		case wr.CompactRevision != 0:
			q.Fail(&store.CompactedError{Requested: after, Compacted: s.noteCompacted(wr.CompactRevision)})
			return
		case wr.Err() != nil:
			q.Fail(s.fail(ctx, "watch", prefix, after, wr.Err()))
			return
		}
		events := make([]store.Event, 0, len(wr.Events))
		for _, ev := range wr.Events {
			if ev.Kv.ModRevision > after {
				events = append(events, toEvent(ev))
			}
		}
		if len(events) > 0 && !q.Push(events...) {
			return // overflowed: q delivers store.ErrWatcherTooSlow
		}
	}
}

// toEvent translates an etcd event. etcd's delete event carries only the
// key and the delete's revision; the deleted incarnation's create revision
// comes from the previous version. PrevKV is missing if etcd had compacted
// it away before the event was sent.
func toEvent(ev *clientv3.Event) store.Event {
	kv := toKV(ev.Kv)
	var prev *store.KeyValue
	if ev.PrevKv != nil && !ev.IsCreate() {
		p := toKV(ev.PrevKv)
		prev = &p
	}
	if ev.Type == clientv3.EventTypeDelete {
		kv.Value = nil
		if prev != nil {
			kv.CreateRevision = prev.CreateRevision
		}
		return store.Event{Type: store.EventDelete, KV: kv, PrevKV: prev}
	}
	return store.Event{Type: store.EventPut, KV: kv, PrevKV: prev}
}
