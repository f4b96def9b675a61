// Package etcdstore implements the hub's store.Store on an etcd cluster, for
// hubs run as several replicas (HA). Revisions, compare-and-swap, paged
// lists, watches and compaction map onto etcd's own; nothing is kept locally.
package etcdstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/outpost-mesh/outpost/hub/store"
)

var _ store.Store = (*Store)(nil)

const (
	// revisionKey is read, count only, to learn the current revision: any
	// key will do, and a count of one key costs etcd next to nothing.
	revisionKey = "/"
	// compactProbeTimeout bounds asking etcd for its compacted revision to
	// fill a store.CompactedError; etcd answers within one watch sync
	// interval (100ms).
	compactProbeTimeout = 5 * time.Second
	// minMaxRequestBytes is the --max-request-bytes etcd needs for a write
	// of a store.MaxValueSize value with its key.
	minMaxRequestBytes = 2 << 20
)

// Store is a store.Store backed by etcd. All methods are safe for concurrent
// use.
type Store struct {
	cfg Config
	cli *clientv3.Client

	// closeCtx ends every watch when the store closes.
	closeCtx    context.Context
	closeCancel context.CancelFunc

	mu        sync.Mutex // orders wg.Add after a closed check against Close
	closed    atomic.Bool
	wg        sync.WaitGroup // the watch goroutines
	closeOnce sync.Once
	closeErr  error // set by the first Close

	// compacted is the highest compacted revision this store has seen;
	// another hub may have compacted further.
	compacted atomic.Int64
}

// New connects to the etcd cluster of cfg and checks that it answers within
// cfg.DialTimeout (and ctx). It starts no goroutine of its own; the etcd
// client keeps its connections until Close.
func New(ctx context.Context, cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("etcd store config: %w", err)
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   cfg.Endpoints,
		TLS:         cfg.TLS,
		DialTimeout: cfg.DialTimeout,
		Logger:      zapToSlog(cfg.Logger),
	})
	if err != nil {
		return nil, fmt.Errorf("etcd client for %v: %w", cfg.Endpoints, err)
	}
	s := &Store{cfg: cfg, cli: cli}
	s.closeCtx, s.closeCancel = context.WithCancel(context.Background())
	dctx := ctx
	if cfg.DialTimeout > 0 {
		var cancel context.CancelFunc
		dctx, cancel = context.WithTimeout(ctx, cfg.DialTimeout)
		defer cancel()
	}
	if _, err := s.Revision(dctx); err != nil {
		s.Close()
		return nil, fmt.Errorf("reach etcd at %v: %w", cfg.Endpoints, err)
	}
	return s, nil
}

// Close ends every watch, waits until their goroutines have exited and
// closes the etcd client. Calls in flight and later fail with
// store.ErrClosed. Close is safe to call more than once and concurrently;
// every call returns after the first has finished.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed.Store(true)
		s.mu.Unlock()
		s.closeCancel()
		s.wg.Wait()
		if err := s.cli.Close(); err != nil && !errors.Is(err, context.Canceled) {
			s.closeErr = fmt.Errorf("close etcd client: %w", err)
		}
	})
	return s.closeErr
}

// Get implements store.Reader.
func (s *Store) Get(ctx context.Context, key string, rev int64) (store.KeyValue, error) {
	if err := store.ValidateKey(key); err != nil {
		return store.KeyValue{}, err
	}
	if err := store.ValidateRevision(rev); err != nil {
		return store.KeyValue{}, err
	}
	if s.closed.Load() {
		return store.KeyValue{}, store.ErrClosed
	}
	var opts []clientv3.OpOption
	if rev > 0 {
		opts = append(opts, clientv3.WithRev(rev))
	}
	resp, err := s.cli.Get(ctx, key, opts...)
	if err != nil {
		return store.KeyValue{}, s.fail(ctx, "get", key, rev, err)
	}
	if len(resp.Kvs) == 0 {
		return store.KeyValue{}, fmt.Errorf("get %q: %w", key, store.ErrNotFound)
	}
	return toKV(resp.Kvs[0]), nil
}

// List implements store.Reader. A page reads [max(prefix, Continue),
// end of prefix) at one etcd revision, asking for one key more than Limit
// to learn whether more follow without a second read.
func (s *Store) List(ctx context.Context, prefix string, opts store.ListOptions) (store.ListResult, error) {
	if err := store.ValidateListOptions(prefix, opts); err != nil {
		return store.ListResult{}, err
	}
	if s.closed.Load() {
		return store.ListResult{}, store.ErrClosed
	}
	from := prefix
	if opts.Continue != "" {
		from = opts.Continue // validated to lie under prefix, so >= prefix
	}
	ops := []clientv3.OpOption{clientv3.WithRange(clientv3.GetPrefixRangeEnd(prefix))}
	if opts.Revision > 0 {
		ops = append(ops, clientv3.WithRev(opts.Revision))
	}
	if opts.Limit > 0 && opts.Limit < maxLimit {
		ops = append(ops, clientv3.WithLimit(opts.Limit+1))
	}
	resp, err := s.cli.Get(ctx, from, ops...)
	if err != nil {
		return store.ListResult{}, s.fail(ctx, "list", prefix, opts.Revision, err)
	}
	res := store.ListResult{Revision: resp.Header.Revision}
	if opts.Revision > 0 {
		// The header carries the current revision, not the one read at.
		res.Revision = opts.Revision
	}
	kvs := resp.Kvs
	if opts.Limit > 0 && int64(len(kvs)) > opts.Limit {
		res.More, res.Continue = true, string(kvs[opts.Limit].Key)
		kvs = kvs[:opts.Limit]
		// etcd counts the whole range, whatever the limit.
		res.Remaining = resp.Count - opts.Limit
	}
	res.KVs = make([]store.KeyValue, len(kvs))
	for i, kv := range kvs {
		res.KVs[i] = toKV(kv)
	}
	return res, nil
}

// maxLimit is the largest Limit for which Limit+1 is asked of etcd; larger
// ones are no limit at all.
const maxLimit = 1 << 62

// Revision implements store.Reader with a linearizable count-only read,
// whose response header carries the cluster's current revision.
func (s *Store) Revision(ctx context.Context) (int64, error) {
	if s.closed.Load() {
		return 0, store.ErrClosed
	}
	resp, err := s.cli.Get(ctx, revisionKey, clientv3.WithCountOnly())
	if err != nil {
		return 0, s.fail(ctx, "read revision", "", 0, err)
	}
	return resp.Header.Revision, nil
}

// Compact implements store.Compactor. It returns once etcd has removed the
// compacted versions from its backend, not only marked them.
func (s *Store) Compact(ctx context.Context, rev int64) error {
	if err := store.ValidateRevision(rev); err != nil {
		return err
	}
	if s.closed.Load() {
		return store.ErrClosed
	}
	if rev == 0 {
		return nil // etcd revisions start at 1: nothing is at or below 0
	}
	_, err := s.cli.Compact(ctx, rev, clientv3.WithCompactPhysical())
	switch {
	case err == nil:
		s.noteCompacted(rev)
		return nil
	case errors.Is(err, rpctypes.ErrCompacted):
		return nil // already compacted at or past rev
	}
	return s.fail(ctx, "compact", "", rev, err)
}

// fail translates an etcd error of op on key (or "") at rev into the
// store's errors.
func (s *Store) fail(ctx context.Context, op, key string, rev int64, err error) error {
	if key != "" {
		op = fmt.Sprintf("%s %q", op, key)
	}
	switch {
	case s.closed.Load():
		return fmt.Errorf("%s: %w", op, store.ErrClosed)
	case errors.Is(err, rpctypes.ErrFutureRev):
		return fmt.Errorf("%s: %w: %d", op, store.ErrFutureRevision, rev)
	case errors.Is(err, rpctypes.ErrCompacted):
		return s.compactedError(ctx, cmp.Or(key, revisionKey), rev)
	case errors.Is(err, rpctypes.ErrRequestTooLarge):
		return fmt.Errorf("%s: %w: etcd refused the request as too large; raise its --max-request-bytes to at least %d", op, store.ErrValueTooLarge, minMaxRequestBytes)
	}
	return fmt.Errorf("etcd %s: %w", op, err)
}

// compactedError returns the error for a read or watch at requested, which
// etcd reported compacted. etcd's error does not say up to where, so a
// watch at requested is asked: etcd answers it with its compacted revision.
func (s *Store) compactedError(ctx context.Context, key string, requested int64) *store.CompactedError {
	compacted := s.compacted.Load()
	if compacted <= requested {
		pctx, cancel := context.WithTimeout(ctx, compactProbeTimeout)
		for wr := range s.cli.Watch(pctx, key, clientv3.WithRev(max(requested, 1))) {
			if wr.CompactRevision != 0 {
				compacted = s.noteCompacted(wr.CompactRevision)
			}
			if wr.CompactRevision != 0 || wr.Canceled {
				break
			}
		}
		cancel()
	}
	if compacted <= requested {
		// All that is known: requested itself is gone.
		compacted = requested + 1
	}
	return &store.CompactedError{Requested: requested, Compacted: compacted}
}

// noteCompacted records that etcd has compacted up to rev and returns the
// highest compacted revision seen.
func (s *Store) noteCompacted(rev int64) int64 {
	for {
		cur := s.compacted.Load()
		if rev <= cur {
			return cur
		}
		if s.compacted.CompareAndSwap(cur, rev) {
			return rev
		}
	}
}

// toKV copies the fields the store exposes; the value's memory was decoded
// for this response alone, so the caller may own it.
func toKV(kv *mvccpb.KeyValue) store.KeyValue {
	return store.KeyValue{
		Key:            string(kv.Key),
		Value:          kv.Value,
		CreateRevision: kv.CreateRevision,
		ModRevision:    kv.ModRevision,
	}
}
