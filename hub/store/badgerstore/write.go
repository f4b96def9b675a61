package badgerstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/outpost-mesh/outpost/hub/store"
)

type writeOp int

const (
	writeCreate writeOp = iota + 1
	writeUpdate
	writeDelete
)

// writeReq is one write waiting for the committer.
type writeReq struct {
	ctx    context.Context
	op     writeOp
	key    string
	value  []byte
	modRev int64 // expected; 0 accepts any
	done   chan writeResult
}

type writeResult struct {
	kv   store.KeyValue // the written version, or the deleted one
	rev  int64
	err  error
	fail *store.ConflictError
}

// Create implements store.Writer.
func (s *Store) Create(ctx context.Context, key string, value []byte) (store.KeyValue, error) {
	if err := store.ValidateValue(value); err != nil {
		return store.KeyValue{}, err
	}
	// The committer shares value with watchers: take a copy the caller
	// cannot change.
	r, err := s.write(ctx, &writeReq{op: writeCreate, key: key, value: bytes.Clone(value)})
	return r.kv, err
}

// Update implements store.Writer.
func (s *Store) Update(ctx context.Context, key string, value []byte, modRev int64) (store.KeyValue, error) {
	if err := store.ValidateValue(value); err != nil {
		return store.KeyValue{}, err
	}
	r, err := s.write(ctx, &writeReq{op: writeUpdate, key: key, value: bytes.Clone(value), modRev: modRev})
	return r.kv, err
}

// Delete implements store.Writer.
func (s *Store) Delete(ctx context.Context, key string, modRev int64) (store.KeyValue, int64, error) {
	r, err := s.write(ctx, &writeReq{op: writeDelete, key: key, modRev: modRev})
	return r.kv, r.rev, err
}

// write hands req to the committer and waits for its result. A write whose
// ctx ends while it waits may or may not have been applied, as with etcd.
func (s *Store) write(ctx context.Context, req *writeReq) (writeResult, error) {
	if err := store.ValidateKey(req.key); err != nil {
		return writeResult{}, err
	}
	if err := store.ValidateRevision(req.modRev); err != nil {
		return writeResult{}, err
	}
	if s.closed.Load() {
		return writeResult{}, store.ErrClosed
	}
	if p := s.fatal.Load(); p != nil {
		return writeResult{}, fmt.Errorf("store failed earlier: %w", *p)
	}
	req.ctx = ctx
	req.done = make(chan writeResult, 1)
	select {
	case s.writes <- req:
	case <-s.closing:
		return writeResult{}, store.ErrClosed
	case <-ctx.Done():
		return writeResult{}, ctx.Err()
	}
	select {
	case r := <-req.done:
		return r.unwrap()
	case <-s.committerDone:
		// The committer answers every write it took before it exits; one
		// that arrived after its last look was never applied.
		select {
		case r := <-req.done:
			return r.unwrap()
		default:
			return writeResult{}, store.ErrClosed
		}
	case <-ctx.Done():
		return writeResult{}, ctx.Err()
	}
}

func (r writeResult) unwrap() (writeResult, error) {
	if r.fail != nil {
		return r, r.fail
	}
	return r, r.err
}

// commitLoop is the committer: it runs until Close.
func (s *Store) commitLoop() {
	var carry *writeReq
	batch := make([]*writeReq, 0, s.cfg.MaxBatchOps)
	for {
		batch = batch[:0]
		if carry != nil {
			batch, carry = append(batch, carry), nil
		} else {
			select {
			case r := <-s.writes:
				batch = append(batch, r)
			case <-s.closing:
				s.drain()
				return
			}
		}
		size := estimate(batch[0], s.cfg.ValueThreshold)
	collect:
		for len(batch) < s.cfg.MaxBatchOps {
			select {
			case r := <-s.writes:
				n := estimate(r, s.cfg.ValueThreshold)
				if size+n > s.cfg.MaxBatchBytes {
					carry = r
					break collect
				}
				size += n
				batch = append(batch, r)
			default:
				break collect
			}
		}
		s.commit(batch)
	}
}

// drain answers the writes still queued at Close.
func (s *Store) drain() {
	for {
		select {
		case r := <-s.writes:
			r.done <- writeResult{err: store.ErrClosed}
		default:
			return
		}
	}
}

// estimate approximates the bytes a write adds to a badger transaction.
func estimate(r *writeReq, threshold int64) int {
	n := 2*len(r.key) + 64
	if int64(len(r.value)) < threshold {
		n += len(r.value)
	}
	return n
}

// pending is the state of a key as the batch being built leaves it.
type pending struct {
	kv   store.KeyValue
	live bool
}

// commit applies one group of writes: check each precondition against the
// state left by the writes before it, assign revisions, commit and sync once,
// publish to watchers, then answer the writers.
func (s *Store) commit(batch []*writeReq) {
	txn := s.db.NewTransaction(true)
	defer txn.Discard()

	results := make([]writeResult, len(batch))
	events := make([]eventRec, 0, len(batch))
	touched := make(map[string]*pending, len(batch))
	next := s.rev.Load()
	var commitErr error

	// current returns the state of key before the write being checked.
	current := func(key string) (*pending, error) {
		if p, ok := touched[key]; ok {
			return p, nil
		}
		p := &pending{}
		if e, ok := s.index[key]; ok {
			item, err := txn.Get(versionKey(key, e.modRev))
			if err != nil {
				return nil, fmt.Errorf("read %q at %d: %w", key, e.modRev, err)
			}
			kv, err := itemKV(item, key)
			if err != nil {
				return nil, err
			}
			p.kv, p.live = kv, true
		}
		touched[key] = p
		return p, nil
	}

	for i, r := range batch {
		if r.ctx.Err() != nil {
			results[i].err = r.ctx.Err()
			continue
		}
		cur, err := current(r.key)
		if err != nil {
			commitErr = err
			break
		}
		switch {
		case r.op == writeCreate && cur.live:
			results[i].fail = &store.ConflictError{Key: r.key, Current: cur.kv, Exists: true}
			continue
		case r.op != writeCreate && !cur.live:
			results[i].err = fmt.Errorf("%w: %q", store.ErrNotFound, r.key)
			continue
		case r.op != writeCreate && r.modRev != 0 && r.modRev != cur.kv.ModRevision:
			results[i].fail = &store.ConflictError{Key: r.key, Expected: r.modRev, Current: cur.kv}
			continue
		}
		next++
		ev := eventRec{rev: next}
		var rec []byte
		switch r.op {
		case writeCreate, writeUpdate:
			createRev := next
			if r.op == writeUpdate {
				createRev = cur.kv.CreateRevision
				prev := cur.kv
				ev.prev = &prev
			}
			ev.ev = store.Event{Type: store.EventPut, KV: store.KeyValue{Key: r.key, Value: r.value, CreateRevision: createRev, ModRevision: next}}
			rec = encodeRecord(opPut, createRev, r.value)
			results[i].kv = ev.ev.KV
			touched[r.key] = &pending{kv: ev.ev.KV, live: true}
		case writeDelete:
			prev := cur.kv
			ev.prev = &prev
			ev.ev = store.Event{Type: store.EventDelete, KV: store.KeyValue{Key: r.key, CreateRevision: prev.CreateRevision, ModRevision: next}}
			rec = encodeRecord(opDelete, prev.CreateRevision, nil)
			results[i].kv = prev
			touched[r.key] = &pending{}
		}
		results[i].rev = next
		op := opPut
		if r.op == writeDelete {
			op = opDelete
		}
		if err := txn.Set(versionKey(r.key, next), rec); err != nil {
			commitErr = err
			break
		}
		if err := txn.Set(logKey(next), encodeLogEntry(op, r.key)); err != nil {
			commitErr = err
			break
		}
		events = append(events, ev)
	}

	if commitErr == nil && len(events) > 0 {
		commitErr = txn.Set(metaRev, encodeRev(next))
		if commitErr == nil {
			commitErr = txn.Commit()
		}
	}
	if commitErr != nil {
		// Nothing of this batch is acknowledged. Whether badger kept part of
		// it is unknown, so stop taking writes rather than risk reusing a
		// revision; reopening the store recovers the true state.
		err := fmt.Errorf("commit revisions %d..%d: %w", s.rev.Load()+1, next, commitErr)
		if errors.Is(commitErr, badger.ErrTxnTooBig) {
			err = fmt.Errorf("%w (raise MemTableSize or lower MaxBatchBytes)", err)
		}
		s.fatal.CompareAndSwap(nil, &err)
		s.log.Error("store write failed; refusing further writes", "err", err)
		for i := range batch {
			batch[i].done <- writeResult{err: err}
		}
		return
	}

	for key, p := range touched {
		if p.live {
			s.index[key] = indexEntry{createRev: p.kv.CreateRevision, modRev: p.kv.ModRevision}
		} else {
			delete(s.index, key)
		}
	}
	if len(events) > 0 {
		s.hub.publish(events, next, &s.rev)
	}
	for _, e := range events {
		s.unwritten += int64(len(e.ev.KV.Value) + len(e.ev.KV.Key))
	}
	if s.unwritten >= s.cfg.ValueLogFileSize/4 {
		s.unwritten = 0
		select {
		case s.releaseKick <- struct{}{}:
		default:
		}
	}
	for i, r := range batch {
		r.done <- results[i]
	}
}
