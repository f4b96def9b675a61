package checkpoint

import (
	"errors"
	"fmt"

	badger "github.com/dgraph-io/badger/v4"
)

// Local records are the agent's own small values, by string key: per-pod
// restart counts and back-off, the state of static-pod mirrors, bits of the
// node's identity. Keys are 1 to MaxLocalKeySize bytes; values up to
// MaxValueSize, empty included.

func checkLocalKey(key string) error {
	switch {
	case key == "":
		return errors.New("empty local key")
	case len(key) > MaxLocalKeySize:
		return fmt.Errorf("%w: local key of %d bytes, limit %d", ErrTooLarge, len(key), MaxLocalKeySize)
	}
	return nil
}

// PutLocal sets the local record key to value and returns once it is
// durable. The store does not retain value.
func (s *Store) PutLocal(key string, value []byte) error {
	if err := checkLocalKey(key); err != nil {
		return fmt.Errorf("put local: %w", err)
	}
	if err := s.checkValue(len(value)); err != nil {
		return fmt.Errorf("put local %q: %w", key, err)
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	k := localKey(key)
	if _, err := s.commit([]op{{key: k, value: encodeBytes(k, typeLocal, value)}}, true); err != nil {
		return fmt.Errorf("put local %q: %w", key, err)
	}
	return nil
}

// GetLocal returns the local record key, and whether there is one; a value
// stored empty reads as nil, true. The caller owns the returned bytes.
func (s *Store) GetLocal(key string) ([]byte, bool, error) {
	if err := checkLocalKey(key); err != nil {
		return nil, false, fmt.Errorf("get local: %w", err)
	}
	if err := s.enter(); err != nil {
		return nil, false, err
	}
	defer s.leave()
	k := localKey(key)
	var value []byte
	var found bool
	err := s.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(k)
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		found = true
		return item.Value(func(v []byte) error {
			b, err := decodeBytes(k, v, typeLocal)
			value = clone(b)
			return err
		})
	})
	if err != nil {
		return nil, false, fmt.Errorf("get local %q: %w", key, err)
	}
	return value, found, nil
}

// DeleteLocal deletes the local record key, if any, and returns once that
// is durable.
func (s *Store) DeleteLocal(key string) error {
	if err := checkLocalKey(key); err != nil {
		return fmt.Errorf("delete local: %w", err)
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	if _, err := s.commit([]op{{key: localKey(key), del: true}}, true); err != nil {
		return fmt.Errorf("delete local %q: %w", key, err)
	}
	return nil
}

// ListLocal returns every local record whose key starts with prefix ("" for
// all). The caller owns the result; empty values are nil.
func (s *Store) ListLocal(prefix string) (map[string][]byte, error) {
	if len(prefix) > MaxLocalKeySize {
		return nil, fmt.Errorf("list local: %w: prefix of %d bytes, limit %d", ErrTooLarge, len(prefix), MaxLocalKeySize)
	}
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.leave()
	out := make(map[string][]byte)
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: localKey(prefix), PrefetchValues: true, PrefetchSize: 16})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			key, err := parseLocalKey(item.Key())
			if err != nil {
				return err
			}
			err = item.Value(func(v []byte) error {
				b, err := decodeBytes(item.Key(), v, typeLocal)
				out[key] = clone(b)
				return err
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list local %q: %w", prefix, err)
	}
	return out, nil
}
