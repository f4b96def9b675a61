package etcdstore

import (
	"bytes"
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/outpost-mesh/outpost/hub/store"
)

// Create implements store.Writer with one transaction: put if the key has no
// create revision, else read it for the conflict.
func (s *Store) Create(ctx context.Context, key string, value []byte) (store.KeyValue, error) {
	if err := store.ValidateKey(key); err != nil {
		return store.KeyValue{}, err
	}
	if err := store.ValidateValue(value); err != nil {
		return store.KeyValue{}, err
	}
	if s.closed.Load() {
		return store.KeyValue{}, store.ErrClosed
	}
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(value))).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return store.KeyValue{}, s.fail(ctx, "create", key, 0, err)
	}
	if !resp.Succeeded {
		cur, ok := rangeKV(resp, 0)
		if !ok {
			// Not possible in one transaction, but say what happened.
			return store.KeyValue{}, fmt.Errorf("create %q: key exists but could not be read", key)
		}
		return store.KeyValue{}, &store.ConflictError{Key: key, Current: cur, Exists: true}
	}
	rev := resp.Header.Revision
	return store.KeyValue{Key: key, Value: bytes.Clone(value), CreateRevision: rev, ModRevision: rev}, nil
}

// Update implements store.Writer with one transaction: put if the key's mod
// revision matches (or, for modRev 0, if it exists) and read back its
// revisions without the value; else read it for the conflict.
func (s *Store) Update(ctx context.Context, key string, value []byte, modRev int64) (store.KeyValue, error) {
	if err := store.ValidateKey(key); err != nil {
		return store.KeyValue{}, err
	}
	if err := store.ValidateValue(value); err != nil {
		return store.KeyValue{}, err
	}
	if err := store.ValidateRevision(modRev); err != nil {
		return store.KeyValue{}, err
	}
	if s.closed.Load() {
		return store.KeyValue{}, store.ErrClosed
	}
	resp, err := s.cli.Txn(ctx).
		If(precondition(key, modRev)).
		Then(clientv3.OpPut(key, string(value)), clientv3.OpGet(key, clientv3.WithKeysOnly())).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return store.KeyValue{}, s.fail(ctx, "update", key, 0, err)
	}
	if !resp.Succeeded {
		return store.KeyValue{}, conflict("update", key, modRev, resp)
	}
	kv, ok := rangeKV(resp, 1)
	if !ok {
		return store.KeyValue{}, fmt.Errorf("update %q: updated key could not be read back", key)
	}
	kv.Value = bytes.Clone(value)
	return kv, nil
}

// Delete implements store.Writer with one transaction: delete returning the
// previous version if the precondition holds, else read the key for the
// conflict.
func (s *Store) Delete(ctx context.Context, key string, modRev int64) (store.KeyValue, int64, error) {
	if err := store.ValidateKey(key); err != nil {
		return store.KeyValue{}, 0, err
	}
	if err := store.ValidateRevision(modRev); err != nil {
		return store.KeyValue{}, 0, err
	}
	if s.closed.Load() {
		return store.KeyValue{}, 0, store.ErrClosed
	}
	resp, err := s.cli.Txn(ctx).
		If(precondition(key, modRev)).
		Then(clientv3.OpDelete(key, clientv3.WithPrevKV())).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return store.KeyValue{}, 0, s.fail(ctx, "delete", key, 0, err)
	}
	if !resp.Succeeded {
		return store.KeyValue{}, 0, conflict("delete", key, modRev, resp)
	}
	del := resp.Responses[0].GetResponseDeleteRange()
	if del == nil || len(del.PrevKvs) == 0 {
		return store.KeyValue{}, 0, fmt.Errorf("delete %q: deleted key's previous version missing", key)
	}
	return toKV(del.PrevKvs[0]), resp.Header.Revision, nil
}

// precondition is the compare of Update and Delete: the key's mod revision
// is modRev, or for modRev 0 the key exists.
func precondition(key string, modRev int64) clientv3.Cmp {
	if modRev == 0 {
		return clientv3.Compare(clientv3.CreateRevision(key), ">", 0)
	}
	return clientv3.Compare(clientv3.ModRevision(key), "=", modRev)
}

// conflict turns the Else branch of a failed precondition into
// store.ErrNotFound or a *store.ConflictError.
func conflict(op, key string, modRev int64, resp *clientv3.TxnResponse) error {
	cur, ok := rangeKV(resp, 0)
	if !ok {
		return fmt.Errorf("%s %q: %w", op, key, store.ErrNotFound)
	}
	return &store.ConflictError{Key: key, Expected: modRev, Current: cur}
}

// rangeKV returns the key read by the i-th operation of a transaction's
// taken branch, and whether there was one.
func rangeKV(resp *clientv3.TxnResponse, i int) (store.KeyValue, bool) {
	if i >= len(resp.Responses) {
		return store.KeyValue{}, false
	}
	r := resp.Responses[i].GetResponseRange()
	if r == nil || len(r.Kvs) == 0 {
		return store.KeyValue{}, false
	}
	return toKV(r.Kvs[0]), true
}
