package metrics

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/outpost-mesh/outpost/hub/store"
)

// InstrumentStore returns s with its calls measured:
// outpost_store_request_duration_seconds and outpost_store_request_errors_total
// per operation, and outpost_store_watchers for the watches open through it.
// Closing the returned store closes s and ends the watches opened through
// it.
func (m *Metrics) InstrumentStore(s store.Store) store.Store {
	return &instrumentedStore{Store: s, m: m, open: map[*countedWatch]struct{}{}}
}

var _ store.Store = (*instrumentedStore)(nil)

type instrumentedStore struct {
	store.Store // the measured store
	m           *Metrics

	mu       sync.Mutex
	open     map[*countedWatch]struct{} // watches counted in the gauge
	isClosed bool
}

// observe records a call of op that started at start and returned err.
func (s *instrumentedStore) observe(op string, start time.Time, err error) {
	s.m.storeDurations.WithLabelValues(op).Observe(time.Since(start).Seconds())
	if err != nil && !expected(err) {
		s.m.storeErrors.WithLabelValues(op).Inc()
	}
}

// expected reports whether err is an answer of a healthy store to the
// request it was given, which the API turns into 404, 409 or 410, or the
// caller giving up; such errors are not counted as store errors.
func expected(err error) bool {
	return errors.Is(err, store.ErrNotFound) ||
		errors.Is(err, store.ErrKeyExists) ||
		errors.Is(err, store.ErrConflict) ||
		errors.Is(err, store.ErrCompacted) ||
		errors.Is(err, context.Canceled)
}

func (s *instrumentedStore) Get(ctx context.Context, key string, rev int64) (store.KeyValue, error) {
	start := time.Now()
	kv, err := s.Store.Get(ctx, key, rev)
	s.observe(opGet, start, err)
	return kv, err
}

func (s *instrumentedStore) List(ctx context.Context, prefix string, opts store.ListOptions) (store.ListResult, error) {
	start := time.Now()
	res, err := s.Store.List(ctx, prefix, opts)
	s.observe(opList, start, err)
	return res, err
}

func (s *instrumentedStore) Revision(ctx context.Context) (int64, error) {
	start := time.Now()
	rev, err := s.Store.Revision(ctx)
	s.observe(opRevision, start, err)
	return rev, err
}

func (s *instrumentedStore) Create(ctx context.Context, key string, value []byte) (store.KeyValue, error) {
	start := time.Now()
	kv, err := s.Store.Create(ctx, key, value)
	s.observe(opCreate, start, err)
	return kv, err
}

func (s *instrumentedStore) Update(ctx context.Context, key string, value []byte, modRev int64) (store.KeyValue, error) {
	start := time.Now()
	kv, err := s.Store.Update(ctx, key, value, modRev)
	s.observe(opUpdate, start, err)
	return kv, err
}

func (s *instrumentedStore) Delete(ctx context.Context, key string, modRev int64) (store.KeyValue, int64, error) {
	start := time.Now()
	prev, rev, err := s.Store.Delete(ctx, key, modRev)
	s.observe(opDelete, start, err)
	return prev, rev, err
}

func (s *instrumentedStore) Compact(ctx context.Context, rev int64) error {
	start := time.Now()
	err := s.Store.Compact(ctx, rev)
	s.observe(opCompact, start, err)
	return err
}

// Watch counts the watch in outpost_store_watchers until ctx ends or the
// store is closed, whichever is first. It hands out the wrapped store's own
// channel: a forwarding goroutine would cost every event of every watch a
// channel hop and two context switches. The API server cancels the context
// of a watch as soon as its channel ends, so the gauge follows the open
// watches.
func (s *instrumentedStore) Watch(ctx context.Context, prefix string, rev int64) (<-chan store.WatchResponse, error) {
	src, err := s.Store.Watch(ctx, prefix, rev)
	if err != nil {
		return nil, err
	}
	w := &countedWatch{}
	s.mu.Lock()
	if s.isClosed {
		s.mu.Unlock()
		return src, nil // the wrapped store ends it
	}
	s.open[w] = struct{}{}
	s.m.storeWatchers.Inc()
	// AfterFunc runs its function in a goroutine of its own, which waits
	// for mu if ctx has already ended.
	w.stop = context.AfterFunc(ctx, func() { s.uncount(w) })
	s.mu.Unlock()
	return src, nil
}

// countedWatch is a watch counted in the gauge.
type countedWatch struct{ stop func() bool }

// uncount lowers the gauge for w unless that was done already.
func (s *instrumentedStore) uncount(w *countedWatch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.open[w]; ok {
		delete(s.open, w)
		s.m.storeWatchers.Dec()
	}
}

// Close ends the watches opened through s and closes the wrapped store. It
// may be called more than once; each call closes the wrapped store again,
// as its Close allows.
func (s *instrumentedStore) Close() error {
	s.mu.Lock()
	s.isClosed = true
	for w := range s.open {
		delete(s.open, w)
		s.m.storeWatchers.Dec()
		w.stop()
	}
	s.mu.Unlock()
	return s.Store.Close()
}
