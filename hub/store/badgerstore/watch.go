package badgerstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/outpost-mesh/outpost/hub/store"
	"github.com/outpost-mesh/outpost/hub/store/internal/fanout"
)

// eventRec is a published event with its revision.
type eventRec struct {
	rev  int64
	ev   store.Event
	prev *store.KeyValue
}

func (e eventRec) event() store.Event {
	ev := e.ev
	ev.PrevKV = e.prev
	return ev
}

func (e eventRec) size() int {
	n := 96 + 2*len(e.ev.KV.Key) + len(e.ev.KV.Value)
	if e.prev != nil {
		n += len(e.prev.Value)
	}
	return n
}

// watchHub holds the recent events and the live watchers. The committer
// publishes under mu, so a watcher registered under mu misses nothing.
type watchHub struct {
	maxEvents, maxBytes int
	limits              fanout.Limits

	mu       sync.Mutex
	ring     []eventRec // recent events, contiguous revisions, oldest first
	ringHead int        // index of the oldest event in ring
	ringLen  int
	ringSize int // bytes held by ring
	nextRev  int64
	watchers map[*watcher]struct{}
	closed   bool
}

type watcher struct {
	prefix string
	q      *fanout.Queue
	cancel context.CancelFunc
}

func (h *watchHub) init(cfg Config) {
	h.maxEvents, h.maxBytes, h.limits = cfg.HistoryEvents, cfg.HistoryBytes, cfg.Watch
	h.ring = make([]eventRec, max(cfg.HistoryEvents, 1))
	h.watchers = make(map[*watcher]struct{})
}

// start sets the revision the in-memory history begins after.
func (h *watchHub) start(rev int64) { h.nextRev = rev + 1 }

// oldestLocked returns the first revision held in memory.
func (h *watchHub) oldestLocked() int64 { return h.nextRev - int64(h.ringLen) }

// publish records a committed batch, makes rev the published revision and
// hands the events to the watchers whose prefix they match. It never blocks
// on a watcher.
func (h *watchHub) publish(events []eventRec, rev int64, published *atomic.Int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	published.Store(rev)
	for _, e := range events {
		h.appendLocked(e)
	}
	for w := range h.watchers {
		var matched []store.Event
		for _, e := range events {
			if strings.HasPrefix(e.ev.KV.Key, w.prefix) {
				matched = append(matched, e.event())
			}
		}
		if len(matched) > 0 && !w.q.Push(matched...) {
			delete(h.watchers, w) // overflowed: its Run delivers the error
		}
	}
}

func (h *watchHub) appendLocked(e eventRec) {
	if h.maxEvents == 0 || h.maxBytes == 0 {
		h.nextRev = e.rev + 1
		return
	}
	for h.ringLen > 0 && (h.ringLen == h.maxEvents || h.ringSize+e.size() > h.maxBytes) {
		h.ringSize -= h.ring[h.ringHead].size()
		h.ring[h.ringHead] = eventRec{}
		h.ringHead = (h.ringHead + 1) % len(h.ring)
		h.ringLen--
	}
	h.ring[(h.ringHead+h.ringLen)%len(h.ring)] = e
	h.ringLen++
	h.ringSize += e.size()
	h.nextRev = e.rev + 1
}

// registerFrom adds w if the events after rev are all in memory, queueing
// those that match. It reports false when older events must be read from
// disk first.
func (h *watchHub) registerFrom(w *watcher, rev int64) (bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false, store.ErrClosed
	}
	if rev+1 < h.oldestLocked() {
		return false, nil
	}
	var matched []store.Event
	for i := 0; i < h.ringLen; i++ {
		e := h.ring[(h.ringHead+i)%len(h.ring)]
		if e.rev > rev && strings.HasPrefix(e.ev.KV.Key, w.prefix) {
			matched = append(matched, e.event())
		}
	}
	if len(matched) > 0 && !w.q.Push(matched...) {
		return true, nil // too far behind already: Run delivers the error
	}
	h.watchers[w] = struct{}{}
	return true, nil
}

func (h *watchHub) remove(w *watcher) {
	h.mu.Lock()
	delete(h.watchers, w)
	h.mu.Unlock()
}

func (h *watchHub) closeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for w := range h.watchers {
		w.cancel()
		delete(h.watchers, w)
	}
}

// Watch implements store.Watcher. Events after rev that are still in memory
// are delivered from there; older ones are read from the on-disk log first.
func (s *Store) Watch(ctx context.Context, prefix string, rev int64) (<-chan store.WatchResponse, error) {
	if err := store.ValidatePrefix(prefix); err != nil {
		return nil, err
	}
	if rev != 0 {
		var err error
		if rev, err = s.readRev(rev); err != nil {
			return nil, err
		}
	} else if s.closed.Load() {
		return nil, store.ErrClosed
	} else {
		rev = s.rev.Load()
	}
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.closeCtx, cancel) // Close ends every watch
	w := &watcher{prefix: prefix, q: fanout.New(s.hub.limits), cancel: cancel}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer stop()
		defer cancel()
		defer s.hub.remove(w)
		s.runWatcher(ctx, w, rev)
	}()
	return w.q.Out(), nil
}

// runWatcher serves w from disk until its next revision is in memory, then
// registers it for live events and delivers until ctx ends.
func (s *Store) runWatcher(ctx context.Context, w *watcher, after int64) {
	for {
		ok, err := s.hub.registerFrom(w, after)
		if err != nil {
			w.q.Close()
			return
		}
		if ok {
			w.q.Run(ctx)
			return
		}
		evs, last, err := s.readLog(ctx, w.prefix, after, min(after+512, s.rev.Load()))
		if err == nil {
			err = s.afterRead(after) // the log may have been compacted under us
		}
		if err != nil {
			if ctx.Err() == nil {
				w.q.Send(ctx, store.WatchResponse{Err: err})
			}
			w.q.Close()
			return
		}
		if len(evs) > 0 && !w.q.Send(ctx, store.WatchResponse{Events: evs}) {
			w.q.Close()
			return
		}
		after = last
	}
}

// readLog returns the events under prefix with revisions in (after, upto],
// and the last revision it looked at. upto must be published.
func (s *Store) readLog(ctx context.Context, prefix string, after, upto int64) ([]store.Event, int64, error) {
	var evs []store.Event
	last := after
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefixLog}, PrefetchValues: false})
		defer it.Close()
		want := after + 1
		for it.Seek(logKey(want)); it.Valid() && want <= upto; it.Next() {
			if err := ctx.Err(); err != nil {
				return err
			}
			rev, err := parseLogKey(it.Item().Key())
			if err != nil {
				return err
			}
			if rev != want {
				// A gap: revisions are dense, so it was compacted away.
				return &store.CompactedError{Requested: after, Compacted: s.compactRev.Load()}
			}
			want++
			last = rev
			var op byte
			var key string
			if err := it.Item().Value(func(v []byte) error {
				op, key, err = decodeLogEntry(v)
				return err
			}); err != nil {
				return fmt.Errorf("log at %d: %w", rev, err)
			}
			if !strings.HasPrefix(key, prefix) {
				continue
			}
			ev, err := eventAt(txn, op, key, rev)
			if err != nil {
				return fmt.Errorf("event at %d: %w", rev, err)
			}
			evs = append(evs, ev)
		}
		return nil
	})
	return evs, last, err
}

// eventAt rebuilds the event revision rev wrote to key.
func eventAt(txn *badger.Txn, op byte, key string, rev int64) (store.Event, error) {
	var prev *store.KeyValue
	if p, err := getAt(txn, key, rev-1); err == nil {
		prev = &p
	} else if !errors.Is(err, store.ErrNotFound) {
		return store.Event{}, err
	}
	if op == opDelete {
		if prev == nil {
			return store.Event{}, fmt.Errorf("%w: delete of %q at %d has no previous version", store.ErrCorrupt, key, rev)
		}
		return store.Event{Type: store.EventDelete, KV: store.KeyValue{Key: key, CreateRevision: prev.CreateRevision, ModRevision: rev}, PrevKV: prev}, nil
	}
	item, err := txn.Get(versionKey(key, rev))
	if err != nil {
		return store.Event{}, fmt.Errorf("read %q at %d: %w", key, rev, err)
	}
	kv, err := itemKV(item, key)
	if err != nil {
		return store.Event{}, err
	}
	return store.Event{Type: store.EventPut, KV: kv, PrevKV: prev}, nil
}
