// Package checkpoint keeps the edge agent's state on local disk (badger): the
// node's desired objects and the hub revision they are complete through, the
// status outbox, and the agent's own records. It imports nothing of the hub.
package checkpoint

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
)

var (
	// ErrClosed is returned by the methods of a closed Store.
	ErrClosed = errors.New("checkpoint: store closed")
	// ErrCorrupt is matched, with errors.Is, by the *CorruptError returned
	// for a record that does not decode. The record stays where it is
	// until it is overwritten, deleted, or dropped by DropCorrupt.
	ErrCorrupt = errors.New("checkpoint: corrupt record")
	// ErrStaleRevision is returned (wrapped) by ApplyBatch for a revision
	// below LastRevision: the hub's history is not the one this view came
	// from, and the view must be rebuilt (ReplaceAll, or a new session from
	// revision 0).
	ErrStaleRevision = errors.New("checkpoint: revision before the last applied one")
	// ErrTooLarge is returned (wrapped) for a value over MaxValueSize
	// (less in memory, see Config.InMemory) or a local key over
	// MaxLocalKeySize. Nothing is written.
	ErrTooLarge = errors.New("checkpoint: too large")
	// ErrFormat is returned (wrapped) by Open for a directory in a layout
	// this build does not read, written by a newer agent.
	ErrFormat = errors.New("checkpoint: unknown layout version")
)

// Store is the checkpoint of one node. Its methods are safe for concurrent
// use. Every write is synced to disk before it returns, and reads see every
// write that has returned.
//
// Badger runs its memtable flusher until Close. Unless
// Config.NumCompactors asks for badger's compactors, which look at the
// tree twenty times a second each, the store compacts the tree itself:
// after every half memtable of writes it looks at the tree's first level,
// and if flushed memtables piled up there it compacts them in a goroutine
// of its own, which Close waits for. An idle node so costs no wake-ups.
type Store struct {
	db  *badger.DB
	cfg Config
	log *slog.Logger
	// maxValue is MaxValueSize, or less in memory.
	maxValue int

	// written counts the bytes committed since the tree was last looked
	// at; compacting is set while a look (and compaction) runs in bg.
	written    atomic.Int64
	compacting atomic.Bool
	bg         sync.WaitGroup

	// mu guards closed: methods hold it for reading while they use db,
	// Close for writing.
	mu     sync.RWMutex
	closed bool

	// viewMu serializes the writers of the view, so that the revision
	// each checks is the one it replaces.
	viewMu sync.Mutex
	rev    atomic.Int64 // LastRevision, published after the write is durable
	// viewGen counts the view's writes, each bumped once its write has
	// ended, however it ended: see ViewGeneration.
	viewGen atomic.Uint64
	// resGen counts them by the resources they touched: see
	// ResourceGeneration.
	resGen resourceGens

	// outMu serializes the writers of the outbox and guards out, which
	// mirrors the outbox on disk.
	outMu sync.Mutex
	out   outbox
}

// Open opens the checkpoint in dir, creating dir (mode 0700) and an empty
// checkpoint if missing. With cfg.InMemory, dir is ignored and nothing
// touches the disk. A record Open must read to start (the revision, the
// outbox seq, outbox keys) that does not decode fails Open with a
// *CorruptError.
func Open(dir string, cfg Config) (*Store, error) {
	s, where, err := openDB(dir, cfg)
	if err != nil {
		return nil, err
	}
	if err := s.load(); err != nil {
		s.closeDB()
		return nil, fmt.Errorf("open checkpoint %s: %w", where, err)
	}
	return s, nil
}

// openDB opens the badger database of a checkpoint in dir and returns the
// store on it, not loaded, and where it is for messages.
func openDB(dir string, cfg Config) (*Store, string, error) {
	if err := cfg.Validate(); err != nil {
		return nil, "", err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	threshold := cfg.ValueThreshold
	maxValue := MaxValueSize
	var opts badger.Options
	if cfg.InMemory {
		// Badger refuses in-memory values over the threshold, having no
		// value log: keep every record in the tree, up to its maximum.
		opts = badger.DefaultOptions("").WithInMemory(true)
		threshold = 1 << 20
		maxValue = 1<<20 - recordOverhead
	} else {
		if dir == "" {
			return nil, "", errors.New("checkpoint: open: no directory")
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, "", fmt.Errorf("create checkpoint dir: %w", err)
		}
		opts = badger.DefaultOptions(dir)
	}
	opts = opts.
		WithSyncWrites(true).
		WithDetectConflicts(false). // writers are serialized here
		WithNumVersionsToKeep(1).
		WithMemTableSize(cfg.MemTableSize).
		WithNumMemtables(cfg.NumMemtables).
		WithNumLevelZeroTables(2).
		WithNumLevelZeroTablesStall(8).
		WithBaseTableSize(cfg.BaseTableSize).
		WithBaseLevelSize(4 * cfg.BaseTableSize).
		WithNumCompactors(cfg.NumCompactors).
		WithValueThreshold(threshold).
		WithValueLogFileSize(cfg.ValueLogFileSize).
		WithCompression(options.None).
		WithBlockCacheSize(0). // only compression or encryption need it
		WithIndexCacheSize(0). // indexes of a few small tables
		WithMetricsEnabled(false).
		WithLogger(badgerLogger{logger})
	where := "at " + dir
	if cfg.InMemory {
		where = "in memory"
	}
	db, err := badger.Open(opts)
	if err != nil {
		return nil, "", fmt.Errorf("open checkpoint %s: %w", where, err)
	}
	s := &Store{db: db, cfg: cfg, log: logger, maxValue: maxValue}
	s.out.init()
	return s, where, nil
}

// Repair makes the checkpoint in dir one that Open accepts after Open
// failed with ErrCorrupt: it deletes the revision and outbox seq records
// if they do not decode (the revision is then 0, so the node resumes from
// its inventory; the seq is recomputed from the outbox), then every
// record DropCorrupt would, and returns how many records it deleted. What
// decodes is kept. A checkpoint of a newer layout (ErrFormat) is not
// damaged and is left alone: Repair returns that error. The checkpoint
// must not be open.
func Repair(dir string, cfg Config) (int, error) {
	if cfg.InMemory {
		return 0, errors.New("checkpoint: repair: nothing to repair in memory")
	}
	s, where, err := openDB(dir, cfg)
	if err != nil {
		return 0, err
	}
	defer s.closeDB()
	var bad [][]byte
	err = s.db.View(func(txn *badger.Txn) error {
		format, found, err := getUint(txn, metaFormat)
		switch {
		case errors.Is(err, ErrCorrupt):
			bad = append(bad, metaFormat)
		case err != nil:
			return err
		case found && format != layoutVersion:
			return fmt.Errorf("%w %d: this build reads %d", ErrFormat, format, layoutVersion)
		}
		rev, _, err := getUint(txn, metaRev)
		switch {
		case errors.Is(err, ErrCorrupt) || err == nil && rev > maxRevision:
			bad = append(bad, metaRev)
		case err != nil:
			return err
		}
		if _, _, err := getUint(txn, metaSeq); errors.Is(err, ErrCorrupt) {
			bad = append(bad, metaSeq)
		} else if err != nil {
			return err
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("repair checkpoint %s: %w", where, err)
	}
	ops := make([]op, len(bad))
	for i, k := range bad {
		ops[i] = op{key: k, del: true}
	}
	if _, err := s.commit(ops, true); err != nil {
		return 0, fmt.Errorf("repair checkpoint %s: %w", where, err)
	}
	n, err := s.DropCorrupt()
	if err != nil {
		return len(bad) + n, fmt.Errorf("repair checkpoint %s: %w", where, err)
	}
	return len(bad) + n, nil
}

// load reads the layout version, the revision and the outbox index, writes
// the layout version of a new checkpoint, and drops the events over
// MaxOutboxEvents (after the cap was lowered).
func (s *Store) load() error {
	var format, seq uint64
	var fresh bool
	err := s.db.View(func(txn *badger.Txn) error {
		var err error
		var found bool
		if format, found, err = getUint(txn, metaFormat); err != nil {
			return err
		}
		fresh = !found
		if found && format != layoutVersion {
			return fmt.Errorf("%w %d: this build reads %d", ErrFormat, format, layoutVersion)
		}
		rev, _, err := getUint(txn, metaRev)
		if err != nil {
			return err
		}
		if rev > maxRevision {
			return corrupt(metaRev, "revision %d out of range", rev)
		}
		s.rev.Store(int64(rev))
		if seq, _, err = getUint(txn, metaSeq); err != nil {
			return err
		}
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefixOutbox}})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			r, err := parseOutboxKey(it.Item().Key())
			if err != nil {
				return err
			}
			s.out.add(r)
			seq = max(seq, r.seq)
		}
		return nil
	})
	if err != nil {
		return err
	}
	s.out.next = seq + 1
	if fresh {
		if _, err := s.commit([]op{{key: metaFormat, value: encodeUint(metaFormat, layoutVersion)}}, true); err != nil {
			return fmt.Errorf("write layout version: %w", err)
		}
	}
	if n := len(s.out.events) - s.cfg.MaxOutboxEvents; n > 0 {
		drop := append([]uint64(nil), s.out.events[:n]...)
		ops := make([]op, len(drop))
		for i, seq := range drop {
			r := s.out.bySeq[seq]
			ops[i] = op{key: outboxKey(seq, r.kind, r.key), del: true}
		}
		done, err := s.commit(ops, false)
		s.out.remove(drop[:done]...)
		if err != nil {
			return fmt.Errorf("drop events over the cap: %w", err)
		}
	}
	return nil
}

// Close closes the database, waiting for the methods running. It is safe
// to call more than once; later calls return nil.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if err := s.closeDB(); err != nil {
		return fmt.Errorf("close checkpoint: %w", err)
	}
	return nil
}

// closeDB closes the database once a compaction under way is over.
func (s *Store) closeDB() error {
	s.bg.Wait()
	return s.db.Close()
}

// l0Tables is how many tables may pile up in the tree's first level before
// the store compacts them away (see Store); badger stalls writes at 8.
const l0Tables = 2

// wrote notes n bytes committed, and every half memtable of them has the
// tree looked at, and compacted if need be, in the background.
func (s *Store) wrote(n int) {
	if s.cfg.NumCompactors > 0 || s.written.Add(int64(n)) < s.cfg.MemTableSize/2 {
		return
	}
	s.written.Store(0)
	if !s.compacting.CompareAndSwap(false, true) {
		return // the running one will do
	}
	s.bg.Go(func() {
		defer s.compacting.Store(false)
		if l := s.db.Levels(); len(l) == 0 || l[0].NumTables <= l0Tables {
			return
		}
		if err := s.db.Flatten(1); err != nil {
			s.log.Warn("compact checkpoint", "err", err) // the next look tries again
		}
	})
}

// enter starts a method that uses the database; leave ends it.
func (s *Store) enter() error {
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return ErrClosed
	}
	return nil
}

func (s *Store) leave() { s.mu.RUnlock() }

// checkValue refuses a value of n bytes over the limit.
func (s *Store) checkValue(n int) error {
	if n > s.maxValue {
		return fmt.Errorf("%w: value of %d bytes, limit %d", ErrTooLarge, n, s.maxValue)
	}
	return nil
}

// CollectGarbage reclaims the disk space of overwritten and deleted records
// in badger's value log, which holds the records of at least
// Config.ValueThreshold bytes (the tree reclaims the others by itself). It
// rewrites at most a few value-log files and blocks while it does; call it
// now and then, say hourly, from the agent's maintenance loop. Other
// methods may run meanwhile.
func (s *Store) CollectGarbage() error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	for range 4 {
		err := s.db.RunValueLogGC(0.5)
		switch {
		case errors.Is(err, badger.ErrNoRewrite), errors.Is(err, badger.ErrRejected), errors.Is(err, badger.ErrGCInMemoryMode):
			return nil // nothing (more) to reclaim, or another run is at it
		case err != nil:
			return fmt.Errorf("collect value-log garbage: %w", err)
		}
	}
	return nil
}

// DropCorrupt deletes every object, outbox entry and local record that does
// not decode, and returns how many it deleted. When it deletes an object it
// first sets LastRevision to 0, so that the next session starts over from
// an inventory and the hub sends back what was lost. It is how the agent
// recovers from ErrCorrupt without giving up the rest of its state.
func (s *Store) DropCorrupt() (int, error) {
	if err := s.enter(); err != nil {
		return 0, err
	}
	defer s.leave()
	s.viewMu.Lock()
	defer s.viewMu.Unlock()
	defer s.viewGen.Add(1)
	defer s.resGen.bump(nil)
	s.outMu.Lock()
	defer s.outMu.Unlock()

	var bad [][]byte
	var objects bool
	err := s.db.View(func(txn *badger.Txn) error {
		for _, p := range []byte{prefixObject, prefixOutbox, prefixLocal} {
			it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{p}})
			for it.Rewind(); it.Valid(); it.Next() {
				item := it.Item()
				err := item.Value(func(v []byte) error { return checkRecord(item.Key(), v) })
				if errors.Is(err, ErrCorrupt) {
					bad = append(bad, item.KeyCopy(nil))
					objects = objects || p == prefixObject
				} else if err != nil {
					it.Close()
					return err
				}
			}
			it.Close()
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("find corrupt records: %w", err)
	}
	if objects {
		if _, err := s.commit([]op{{key: metaRev, value: encodeUint(metaRev, 0)}}, true); err != nil {
			return 0, fmt.Errorf("reset revision: %w", err)
		}
		s.rev.Store(0)
	}
	ops := make([]op, len(bad))
	for i, k := range bad {
		ops[i] = op{key: k, del: true}
	}
	done, err := s.commit(ops, false)
	for _, k := range bad[:done] {
		if r, why := splitOutboxKey(k); why == "" {
			s.out.remove(r.seq)
		}
	}
	if err != nil {
		return done, fmt.Errorf("drop corrupt records: %w", err)
	}
	return done, nil
}

// checkRecord decodes the record v stored under the badger key k, by the
// kind of k.
func checkRecord(k, v []byte) error {
	switch k[0] {
	case prefixObject:
		if _, err := parseObjectKey(k); err != nil {
			return err
		}
		_, _, err := decodeObject(k, v)
		return err
	case prefixOutbox:
		if _, err := parseOutboxKey(k); err != nil {
			return err
		}
		_, err := decodeBytes(k, v, typeStatus)
		return err
	case prefixLocal:
		if _, err := parseLocalKey(k); err != nil {
			return err
		}
		_, err := decodeBytes(k, v, typeLocal)
		return err
	}
	return nil
}

// op is one write: a set, or a delete.
type op struct {
	key, value []byte
	del        bool
}

// commit writes ops, in order, in synced transactions, and returns how many
// of them are durable. With whole, all go in one transaction, or none and
// the error matches badger.ErrTxnTooBig. Otherwise ops that do not fit in
// one transaction go in several, each as full as badger allows; a crash
// part-way leaves a prefix of ops.
func (s *Store) commit(ops []op, whole bool) (int, error) {
	txn := s.db.NewTransaction(true)
	defer func() { txn.Discard() }()
	start, size := 0, 0
	for i, o := range ops {
		err := o.apply(txn)
		if errors.Is(err, badger.ErrTxnTooBig) && !whole && i > start {
			if err := txn.Commit(); err != nil {
				return start, err
			}
			s.wrote(size)
			start, size = i, 0
			txn = s.db.NewTransaction(true)
			err = o.apply(txn)
		}
		if err != nil {
			return start, err
		}
		size += len(o.key) + len(o.value)
	}
	if err := txn.Commit(); err != nil {
		return start, err
	}
	s.wrote(size)
	return len(ops), nil
}

func (o op) apply(txn *badger.Txn) error {
	if o.del {
		return txn.Delete(o.key)
	}
	return txn.Set(o.key, o.value)
}

// getUint reads a uint record; absent is 0, false.
func getUint(txn *badger.Txn, key []byte) (uint64, bool, error) {
	item, err := txn.Get(key)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("read %s: %w", key, err)
	}
	var v uint64
	err = item.Value(func(b []byte) error {
		v, err = decodeUint(key, b)
		return err
	})
	return v, true, err
}

// clone copies b; empty is nil.
func clone(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return append([]byte(nil), b...)
}

// badgerLogger sends badger's messages to slog; its info and debug lines
// (compaction chatter) go to debug.
type badgerLogger struct{ l *slog.Logger }

func (b badgerLogger) Errorf(f string, a ...any)   { b.l.Error(badgerMsg(f, a)) }
func (b badgerLogger) Warningf(f string, a ...any) { b.l.Warn(badgerMsg(f, a)) }
func (b badgerLogger) Infof(f string, a ...any)    { b.l.Debug(badgerMsg(f, a)) }
func (b badgerLogger) Debugf(f string, a ...any)   { b.l.Debug(badgerMsg(f, a)) }

func badgerMsg(f string, a []any) string {
	return "checkpoint: badger: " + strings.TrimRight(fmt.Sprintf(f, a...), "\n ")
}
