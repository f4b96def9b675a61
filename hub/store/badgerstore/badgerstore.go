// Package badgerstore is the hub's embedded default store: etcd's MVCC
// semantics (store.Store) on a local badger database, with durable group
// commit, revision-ordered watches served from memory or the on-disk log, and
// compaction. Only the hub's composition root, benchmarks and tests import it.
package badgerstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"

	"github.com/outpost-mesh/outpost/hub/store"
)

var _ store.Store = (*Store)(nil)

// Store is a store.Store on badger. Its methods are safe for concurrent use.
//
// Writes go through one committer goroutine that takes every write waiting at
// that moment (up to Config.MaxBatchOps), checks their preconditions in order,
// gives each the next revision, and commits them in one synced badger
// transaction: concurrent writers share one fsync, and a write returns only
// once it is on disk. Reads see only revisions that have been published,
// which happens after the sync and before the writers are answered.
type Store struct {
	cfg Config
	db  *badger.DB
	log *slog.Logger

	writes  chan *writeReq
	closing chan struct{}
	// releaseKick asks releaseLoop to page out sealed value logs; the
	// committer sends when it has written a quarter of a value-log file
	// since the last time (unwritten counts the bytes, committer-owned).
	releaseKick chan struct{}
	unwritten   int64
	// committerDone is closed when the committer has exited.
	committerDone chan struct{}
	// closeCtx ends when Close starts; every watch derives from it.
	closeCtx    context.Context
	closeCancel context.CancelFunc
	closed      atomic.Bool
	once        sync.Once
	wg          sync.WaitGroup // committer and watchers

	// rev is the latest published revision; compactRev the compacted one.
	rev        atomic.Int64
	compactRev atomic.Int64

	// index maps each live key to its revisions; owned by the committer
	// (read and written only on its goroutine, or before it starts).
	index map[string]indexEntry

	// fatal is set when a commit fails: the store then refuses writes, as
	// the on-disk state is no longer known to match memory.
	fatal atomic.Pointer[error]

	hub watchHub

	compactMu sync.Mutex // serializes Compact
}

type indexEntry struct {
	createRev, modRev int64
}

// Open opens (or creates) the store in cfg.Dir, recovering the revision,
// compaction point and key index from disk. It starts the committer
// goroutine; Close stops it.
func Open(cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("create store dir: %w", err)
	}
	// Absolute, so the value-log files can be found in /proc/self/maps.
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("store dir: %w", err)
	}
	cfg.Dir = dir
	opts := badger.DefaultOptions(cfg.Dir).
		WithSyncWrites(true).
		WithDetectConflicts(false).
		WithNumVersionsToKeep(1).
		WithMemTableSize(cfg.MemTableSize).
		WithBaseTableSize(cfg.BaseTableSize).
		WithNumMemtables(cfg.NumMemtables).
		WithNumLevelZeroTables(cfg.NumMemtables).
		WithNumLevelZeroTablesStall(cfg.NumMemtables * 4).
		WithBlockCacheSize(cfg.BlockCacheSize).
		WithIndexCacheSize(cfg.IndexCacheSize).
		WithValueLogFileSize(cfg.ValueLogFileSize).
		WithValueThreshold(cfg.ValueThreshold).
		WithCompression(options.None).
		WithNumCompactors(2).
		WithLogger(badgerLogger{logger})
	db, err := badger.Open(opts)
	if err != nil {
		return nil, fmt.Errorf("open badger at %s: %w", cfg.Dir, err)
	}
	s := &Store{
		cfg:     cfg,
		db:      db,
		log:     logger,
		writes:  make(chan *writeReq, cfg.MaxBatchOps),
		closing: make(chan struct{}),

		committerDone: make(chan struct{}),
		releaseKick:   make(chan struct{}, 1),
		index:         make(map[string]indexEntry),
	}
	s.closeCtx, s.closeCancel = context.WithCancel(context.Background())
	s.hub.init(cfg)
	if err := s.recover(); err != nil {
		s.closeCancel()
		db.Close()
		return nil, err
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(s.committerDone)
		s.commitLoop()
	}()
	if cfg.ReleaseValueLogPages {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.releaseLoop()
		}()
	}
	return s, nil
}

// recover loads the revision, the compaction point and the key index, and
// finishes a physical compaction a crash interrupted.
func (s *Store) recover() error {
	var rev, compact, compacted int64
	err := s.db.View(func(txn *badger.Txn) error {
		if v, err := getValue(txn, metaFormat); err == nil {
			if len(v) != 1 || v[0] != formatVersion {
				return fmt.Errorf("%w: layout version %v, this build reads %d", store.ErrCorrupt, v, formatVersion)
			}
		} else if !errors.Is(err, badger.ErrKeyNotFound) {
			return err
		}
		var err error
		if rev, err = getRev(txn, metaRev); err != nil {
			return err
		}
		if compact, err = getRev(txn, metaCompact); err != nil {
			return err
		}
		if compacted, err = getRev(txn, metaCompacted); err != nil {
			return err
		}
		// The index: the newest version of every key, unless it is a tombstone.
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefixVersion}})
		defer it.Close()
		last := ""
		for it.Rewind(); it.Valid(); it.Next() {
			key, mod, err := parseVersionKey(it.Item().Key())
			if err != nil {
				return err
			}
			if key == last {
				continue
			}
			last = key
			var rec record
			if err := it.Item().Value(func(v []byte) error {
				rec, err = decodeRecord(v)
				return err
			}); err != nil {
				return fmt.Errorf("key %q at %d: %w", key, mod, err)
			}
			if mod > rev {
				return fmt.Errorf("%w: key %q has revision %d beyond the store's %d", store.ErrCorrupt, key, mod, rev)
			}
			if rec.op == opPut {
				s.index[key] = indexEntry{createRev: rec.createRev, modRev: mod}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("recover store: %w", err)
	}
	if err := s.db.Update(func(txn *badger.Txn) error {
		return txn.Set(metaFormat, []byte{formatVersion})
	}); err != nil {
		return fmt.Errorf("write layout version: %w", err)
	}
	s.rev.Store(rev)
	s.compactRev.Store(compact)
	s.hub.start(rev)
	if compacted < compact {
		if err := s.physicalCompact(context.Background(), compact); err != nil {
			return fmt.Errorf("finish compaction to %d: %w", compact, err)
		}
	}
	s.log.Debug("store opened", "dir", s.cfg.Dir, "revision", rev, "compacted", compact, "keys", len(s.index))
	return nil
}

// releaseLoop pages out sealed value logs when the committer asks, until
// Close. It stops for good if the kernel lacks MADV_PAGEOUT.
func (s *Store) releaseLoop() {
	for {
		select {
		case <-s.closing:
			return
		case <-s.releaseKick:
		}
		n, err := releaseSealedValueLogs(s.cfg.Dir)
		if err != nil {
			s.log.Warn("cannot page out sealed value logs; RSS will include every value written", "err", err)
			return
		}
		s.log.Debug("paged out sealed value logs", "bytes", n)
	}
}

// ReleaseMemory asks the store to page out the value logs it has mapped
// (see Config.ReleaseValueLogPages), after reads brought them into the
// process's RSS; it does not wait for it. The hub calls it when idle.
func (s *Store) ReleaseMemory() {
	if !s.cfg.ReleaseValueLogPages {
		return
	}
	select {
	case s.releaseKick <- struct{}{}:
	default: // one is pending
	}
}

// Close stops the committer and every watch and closes the database. Writes
// in flight fail with store.ErrClosed. Close is safe to call more than once.
func (s *Store) Close() error {
	var err error
	s.once.Do(func() {
		s.closed.Store(true)
		close(s.closing)
		s.closeCancel()
		s.hub.closeAll()
		s.wg.Wait()
		err = s.db.Close()
	})
	return err
}

// Revision returns the latest published revision.
func (s *Store) Revision(ctx context.Context) (int64, error) {
	if s.closed.Load() {
		return 0, store.ErrClosed
	}
	return s.rev.Load(), ctx.Err()
}

// readRev resolves the revision a read is served at.
func (s *Store) readRev(rev int64) (int64, error) {
	if s.closed.Load() {
		return 0, store.ErrClosed
	}
	if err := store.ValidateRevision(rev); err != nil {
		return 0, err
	}
	cur := s.rev.Load()
	if rev == 0 {
		rev = cur
	}
	if rev > cur {
		return 0, fmt.Errorf("%w: %d > current %d", store.ErrFutureRevision, rev, cur)
	}
	if c := s.compactRev.Load(); rev < c {
		return 0, &store.CompactedError{Requested: rev, Compacted: c}
	}
	return rev, nil
}

// afterRead reports a compaction that overtook a read while it ran: the
// versions it needed may have been dropped under it.
func (s *Store) afterRead(rev int64) error {
	if c := s.compactRev.Load(); rev < c {
		return &store.CompactedError{Requested: rev, Compacted: c}
	}
	return nil
}

// Get returns key as of rev.
func (s *Store) Get(ctx context.Context, key string, rev int64) (store.KeyValue, error) {
	if err := store.ValidateKey(key); err != nil {
		return store.KeyValue{}, err
	}
	rev, err := s.readRev(rev)
	if err != nil {
		return store.KeyValue{}, err
	}
	if err := ctx.Err(); err != nil {
		return store.KeyValue{}, err
	}
	var kv store.KeyValue
	err = s.db.View(func(txn *badger.Txn) error {
		var err error
		kv, err = getAt(txn, key, rev)
		return err
	})
	if errors.Is(err, store.ErrNotFound) {
		return store.KeyValue{}, fmt.Errorf("%w: %q at revision %d", store.ErrNotFound, key, rev)
	}
	if err != nil {
		return store.KeyValue{}, fmt.Errorf("get %q: %w", key, err)
	}
	return kv, s.afterRead(rev)
}

// getAt reads the version of key visible at rev, or store.ErrNotFound.
func getAt(txn *badger.Txn, key string, rev int64) (store.KeyValue, error) {
	it := txn.NewIterator(badger.IteratorOptions{Prefix: versionPrefix(key)})
	defer it.Close()
	it.Seek(versionKey(key, rev))
	if !it.Valid() {
		return store.KeyValue{}, store.ErrNotFound
	}
	return itemKV(it.Item(), key)
}

// itemKV decodes a version item; a tombstone is store.ErrNotFound.
func itemKV(item *badger.Item, key string) (store.KeyValue, error) {
	k, mod, err := parseVersionKey(item.Key())
	if err != nil {
		return store.KeyValue{}, err
	}
	if key != "" && k != key {
		return store.KeyValue{}, fmt.Errorf("%w: version key %q under %q", store.ErrCorrupt, k, key)
	}
	var kv store.KeyValue
	err = item.Value(func(v []byte) error {
		rec, err := decodeRecord(v)
		if err != nil {
			return fmt.Errorf("key %q at %d: %w", k, mod, err)
		}
		if rec.op == opDelete {
			return store.ErrNotFound
		}
		kv = store.KeyValue{Key: k, Value: append([]byte(nil), rec.value...), CreateRevision: rec.createRev, ModRevision: mod}
		return nil
	})
	return kv, err
}

// List returns one page of the keys under prefix at one revision.
func (s *Store) List(ctx context.Context, prefix string, opts store.ListOptions) (store.ListResult, error) {
	if err := store.ValidateListOptions(prefix, opts); err != nil {
		return store.ListResult{}, err
	}
	rev, err := s.readRev(opts.Revision)
	if err != nil {
		return store.ListResult{}, err
	}
	res := store.ListResult{Revision: rev}
	start := prefix
	if opts.Continue > start {
		start = opts.Continue
	}
	err = s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: append([]byte{prefixVersion}, prefix...)})
		defer it.Close()
		last := ""
		n := 0
		for it.Seek(append([]byte{prefixVersion}, start...)); it.Valid(); it.Next() {
			if n%1024 == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			n++
			key, mod, err := parseVersionKey(it.Item().Key())
			if err != nil {
				return err
			}
			if key == last || mod > rev {
				continue // an older version of a key already decided, or a version after rev
			}
			last = key
			if opts.Limit > 0 && int64(len(res.KVs)) == opts.Limit {
				// The page is full: find whether a live key follows.
				live, err := isLive(it.Item())
				if err != nil {
					return err
				}
				if live {
					res.More, res.Continue = true, key
					if opts.CountRemaining {
						it.Next()
						res.Remaining, err = countLive(ctx, it, key, rev)
						res.Remaining++
					}
					return err
				}
				continue
			}
			kv, err := itemKV(it.Item(), key)
			if errors.Is(err, store.ErrNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			res.KVs = append(res.KVs, kv)
		}
		return nil
	})
	if err != nil {
		return store.ListResult{}, fmt.Errorf("list %s: %w", prefix, err)
	}
	return res, s.afterRead(rev)
}

// countLive counts the keys live at rev from it's position on, each
// key's newest version at or before rev deciding; last is the key before
// it, already decided.
func countLive(ctx context.Context, it *badger.Iterator, last string, rev int64) (int64, error) {
	var n int64
	for i := 0; it.Valid(); it.Next() {
		if i++; i%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return 0, err
			}
		}
		key, mod, err := parseVersionKey(it.Item().Key())
		if err != nil {
			return 0, err
		}
		if key == last || mod > rev {
			continue
		}
		last = key
		live, err := isLive(it.Item())
		if err != nil {
			return 0, err
		}
		if live {
			n++
		}
	}
	return n, nil
}

func isLive(item *badger.Item) (bool, error) {
	var live bool
	err := item.Value(func(v []byte) error {
		rec, err := decodeRecord(v)
		live = err == nil && rec.op == opPut
		return err
	})
	return live, err
}

func getValue(txn *badger.Txn, key []byte) ([]byte, error) {
	item, err := txn.Get(key)
	if err != nil {
		return nil, err
	}
	return item.ValueCopy(nil)
}

// getRev reads a revision kept under a meta key; absent is 0.
func getRev(txn *badger.Txn, key []byte) (int64, error) {
	v, err := getValue(txn, key)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", key, err)
	}
	r, err := decodeRev(v)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", key, err)
	}
	return r, nil
}

// badgerLogger sends badger's messages to slog; its info and debug lines
// (compaction chatter) go to debug.
type badgerLogger struct{ l *slog.Logger }

func (b badgerLogger) Errorf(f string, a ...any)   { b.l.Error("badger: " + trim(fmt.Sprintf(f, a...))) }
func (b badgerLogger) Warningf(f string, a ...any) { b.l.Warn("badger: " + trim(fmt.Sprintf(f, a...))) }
func (b badgerLogger) Infof(f string, a ...any)    { b.l.Debug("badger: " + trim(fmt.Sprintf(f, a...))) }
func (b badgerLogger) Debugf(f string, a ...any)   { b.l.Debug("badger: " + trim(fmt.Sprintf(f, a...))) }

func trim(s string) string {
	for len(s) > 0 && (s[len(s)-1] == '\n' || s[len(s)-1] == ' ') {
		s = s[:len(s)-1]
	}
	return s
}
