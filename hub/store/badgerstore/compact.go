package badgerstore

import (
	"context"
	"errors"
	"fmt"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/outpost-mesh/outpost/hub/store"
)

// Compact implements store.Compactor. It records the compaction point
// durably (from then on reads and watches before rev fail with
// store.ErrCompacted), then deletes the versions and log entries no read at
// rev or later can need, and lets badger reclaim value-log space. A crash
// part-way is finished by the next Open.
func (s *Store) Compact(ctx context.Context, rev int64) error {
	if s.closed.Load() {
		return store.ErrClosed
	}
	if err := store.ValidateRevision(rev); err != nil {
		return err
	}
	s.compactMu.Lock()
	defer s.compactMu.Unlock()
	if cur := s.rev.Load(); rev > cur {
		return fmt.Errorf("%w: compact to %d > current %d", store.ErrFutureRevision, rev, cur)
	}
	if rev <= s.compactRev.Load() {
		return nil
	}
	if err := s.db.Update(func(txn *badger.Txn) error {
		return txn.Set(metaCompact, encodeRev(rev))
	}); err != nil {
		return fmt.Errorf("record compaction to %d: %w", rev, err)
	}
	s.compactRev.Store(rev)
	if err := s.physicalCompact(ctx, rev); err != nil {
		return fmt.Errorf("compact to %d: %w", rev, err)
	}
	// Reclaim value-log space; ErrNoRewrite means there was nothing worth it.
	for s.db.RunValueLogGC(0.5) == nil {
		if ctx.Err() != nil {
			break
		}
	}
	return nil
}

// physicalCompact deletes every version superseded at or before rev (and a
// key's newest version at or before rev if it is a tombstone), and the log
// entries up to rev. Reads at rev or later never need them. Deletions are
// written in batches without sync: a crash leaves garbage that the next Open
// collects, never a wrong answer.
func (s *Store) physicalCompact(ctx context.Context, rev int64) error {
	wb := s.db.NewWriteBatch()
	defer wb.Cancel()
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefixVersion}})
		defer it.Close()
		last := ""
		keep := false // whether last's visible-at-rev version has been seen
		n := 0
		for it.Rewind(); it.Valid(); it.Next() {
			if n++; n%4096 == 0 && ctx.Err() != nil {
				return ctx.Err()
			}
			item := it.Item()
			key, mod, err := parseVersionKey(item.Key())
			if err != nil {
				return err
			}
			if key != last {
				last, keep = key, false
			}
			if mod > rev {
				continue // newer than the compaction point: kept
			}
			if !keep {
				// The version reads at rev see: kept unless a tombstone.
				keep = true
				live, err := isLive(item)
				if err != nil {
					return err
				}
				if live {
					continue
				}
			}
			if err := wb.Delete(item.KeyCopy(nil)); err != nil {
				return err
			}
		}
		it.Close()
		lit := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefixLog}})
		defer lit.Close()
		for lit.Rewind(); lit.Valid(); lit.Next() {
			r, err := parseLogKey(lit.Item().Key())
			if err != nil {
				return err
			}
			if r > rev {
				break
			}
			if err := wb.Delete(lit.Item().KeyCopy(nil)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := wb.Flush(); err != nil {
		return fmt.Errorf("delete compacted versions: %w", err)
	}
	if err := s.db.Update(func(txn *badger.Txn) error {
		return txn.Set(metaCompacted, encodeRev(rev))
	}); err != nil && !errors.Is(err, badger.ErrConflict) {
		return fmt.Errorf("record compacted revision: %w", err)
	}
	return nil
}
