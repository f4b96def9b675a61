package checkpoint

import (
	"fmt"
	"slices"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/outpost-mesh/outpost/sync/wire"
)

// outbox mirrors the outbox's keys on disk, so that Enqueue finds what it
// replaces or drops, and Ack what it deletes, without reading.
type outbox struct {
	next   uint64               // seq of the next entry
	bySeq  map[uint64]outboxRef // every pending entry
	latest map[statusKey]uint64 // the pending seq of each coalesced (kind, key)
	events []uint64             // the seqs of pending events, ascending
}

type statusKey struct {
	kind wire.StatusKind
	key  wire.Key
}

func (o *outbox) init() {
	o.bySeq = make(map[uint64]outboxRef)
	o.latest = make(map[statusKey]uint64)
}

// add records r, which is newer than every entry.
func (o *outbox) add(r outboxRef) {
	o.bySeq[r.seq] = r
	if r.kind == wire.KindEvent {
		o.events = append(o.events, r.seq)
	} else {
		o.latest[statusKey{r.kind, r.key}] = r.seq
	}
}

// remove forgets the entries of seqs; unknown ones are ignored.
func (o *outbox) remove(seqs ...uint64) {
	for _, seq := range seqs {
		r, ok := o.bySeq[seq]
		if !ok {
			continue
		}
		delete(o.bySeq, seq)
		if r.kind == wire.KindEvent {
			if i, ok := slices.BinarySearch(o.events, seq); ok {
				o.events = slices.Delete(o.events, i, i+1)
			}
		} else if sk := (statusKey{r.kind, r.key}); o.latest[sk] == seq {
			delete(o.latest, sk)
		}
	}
}

// Enqueue adds an entry to the status outbox and returns its seq once it is
// durable. Seqs increase strictly, across restarts too.
//
// For every kind but wire.KindEvent, an entry replaces the pending one of
// the same kind and key, if any: the old seq is gone and the new one is
// higher, so after an hour offline the hub gets each object's latest status
// once, in the order of the last changes. Events are never coalesced;
// beyond Config.MaxOutboxEvents pending events, the oldest are dropped.
// Kind must not be 0. The store does not retain object.
func (s *Store) Enqueue(kind wire.StatusKind, key wire.Key, object []byte) (seq uint64, err error) {
	if kind == 0 {
		return 0, fmt.Errorf("enqueue %v: status kind 0", key)
	}
	if err := validKey(key); err != nil {
		return 0, fmt.Errorf("enqueue: %w", err)
	}
	if err := s.checkValue(len(object)); err != nil {
		return 0, fmt.Errorf("enqueue %v: %w", key, err)
	}
	if err := s.enter(); err != nil {
		return 0, err
	}
	defer s.leave()
	s.outMu.Lock()
	defer s.outMu.Unlock()

	// Taken even if the write fails: it may be on disk all the same.
	seq = s.out.next
	s.out.next++
	k := outboxKey(seq, kind, key)
	ops := []op{
		{key: k, value: encodeBytes(k, typeStatus, object)},
		{key: metaSeq, value: encodeUint(metaSeq, seq)},
	}
	var drop []uint64
	if kind == wire.KindEvent {
		if n := len(s.out.events) + 1 - s.cfg.MaxOutboxEvents; n > 0 {
			drop = append(drop, s.out.events[:n]...)
		}
	} else if old, ok := s.out.latest[statusKey{kind, key}]; ok {
		drop = append(drop, old)
	}
	for _, d := range drop {
		r := s.out.bySeq[d]
		ops = append(ops, op{key: outboxKey(d, r.kind, r.key), del: true})
	}
	if _, err := s.commit(ops, true); err != nil {
		return 0, fmt.Errorf("enqueue %v: %w", key, err)
	}
	s.out.remove(drop...)
	s.out.add(outboxRef{seq: seq, kind: kind, key: key})
	return seq, nil
}

// Pending returns up to max pending outbox entries (all if max <= 0), in
// seq order. The entries stay until acknowledged. The caller owns the
// result.
func (s *Store) Pending(max int) ([]wire.StatusItem, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.leave()
	var items []wire.StatusItem
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefixOutbox}, PrefetchValues: true, PrefetchSize: 16})
		defer it.Close()
		for it.Rewind(); it.Valid() && (max <= 0 || len(items) < max); it.Next() {
			item := it.Item()
			r, err := parseOutboxKey(item.Key())
			if err != nil {
				return err
			}
			err = item.Value(func(v []byte) error {
				obj, err := decodeBytes(item.Key(), v, typeStatus)
				if err == nil {
					items = append(items, wire.StatusItem{Seq: r.seq, Kind: r.kind, Key: r.key, Object: clone(obj)})
				}
				return err
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("pending outbox: %w", err)
	}
	return items, nil
}

// Ack removes the outbox entries with exactly these seqs, once the hub has
// answered for them. Unknown seqs are ignored, among them those of entries
// replaced by a newer Enqueue since they were read: the newer entry stays.
func (s *Store) Ack(seqs ...uint64) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	s.outMu.Lock()
	defer s.outMu.Unlock()
	var ops []op
	var hit []uint64
	for _, seq := range seqs {
		if r, ok := s.out.bySeq[seq]; ok {
			ops = append(ops, op{key: outboxKey(seq, r.kind, r.key), del: true})
			hit = append(hit, seq)
		}
	}
	if len(ops) == 0 {
		return nil
	}
	done, err := s.commit(ops, false)
	s.out.remove(hit[:done]...)
	if err != nil {
		return fmt.Errorf("ack outbox: %w", err)
	}
	return nil
}

// OutboxLen returns the number of pending outbox entries.
func (s *Store) OutboxLen() (int, error) {
	if err := s.enter(); err != nil {
		return 0, err
	}
	defer s.leave()
	s.outMu.Lock()
	defer s.outMu.Unlock()
	return len(s.out.bySeq), nil
}
