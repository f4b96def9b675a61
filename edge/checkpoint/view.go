package checkpoint

import (
	"errors"
	"fmt"
	"sync"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/outpost-mesh/outpost/sync/wire"
)

// Object is one object of the node's view, as the hub sent it.
type Object struct {
	Key wire.Key
	// Revision is the object's resourceVersion on the hub (for pod
	// tokens, what wire.PodTokens says).
	Revision int64
	// Raw is the object's Kubernetes protobuf encoding exactly as
	// received. The hub strips resourceVersion from it; Revision holds it.
	Raw []byte
}

// ApplyBatch applies a batch of the hub's changes in order (a put stores
// Object{Key, Revision, Raw: Object}; a delete ignores Revision, and of an
// absent object is a no-op) and then records revision as LastRevision. It returns once all of
// it is durable. The store does not retain changes.
//
// A batch that fits in one badger transaction (about 1.2 MiB of records
// under Config.ValueThreshold, with the defaults) is atomic: after a crash
// either all of it and the new revision are visible, or none. A larger one
// is written in several transactions, the revision last, so a crash can
// leave a prefix of the changes under the old revision. That is safe
// because the changes come in hub-revision order, so a prefix is a state
// the hub went through, and re-applying the batch from the old revision
// gives the same result. Reads running meanwhile may see such a batch in
// part, too.
//
// A revision below LastRevision fails with ErrStaleRevision; the same
// revision again is accepted, so a batch may be re-applied. Invalid input
// (a bad key or op, a put without an object, a value over the limit) fails
// before anything is written.
func (s *Store) ApplyBatch(changes []wire.Change, revision int64) error {
	if revision < 0 || revision > maxRevision {
		return fmt.Errorf("apply batch: revision %d out of range", revision)
	}
	ops := make([]op, 0, len(changes)+1)
	touched := map[string]bool{}
	for i, c := range changes {
		if err := validKey(c.Key); err != nil {
			return fmt.Errorf("apply batch: change %d: %w", i, err)
		}
		touched[c.Key.Resource] = true
		k := objectKey(c.Key)
		switch c.Op {
		case wire.OpPut:
			if err := s.checkObject(Object{Key: c.Key, Revision: c.Revision, Raw: c.Object}); err != nil {
				return fmt.Errorf("apply batch: change %d: %w", i, err)
			}
			ops = append(ops, op{key: k, value: encodeObject(k, c.Revision, c.Object)})
		case wire.OpDelete:
			ops = append(ops, op{key: k, del: true})
		default:
			return fmt.Errorf("apply batch: change %d of %v: unknown op %d", i, c.Key, c.Op)
		}
	}
	ops = append(ops, op{key: metaRev, value: encodeUint(metaRev, uint64(revision))})

	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	s.viewMu.Lock()
	defer s.viewMu.Unlock()
	defer s.viewGen.Add(1)
	defer s.resGen.bump(touched)
	if last := s.rev.Load(); revision < last {
		return fmt.Errorf("apply batch at %d: %w (%d)", revision, ErrStaleRevision, last)
	}
	if _, err := s.commit(ops, false); err != nil {
		return fmt.Errorf("apply batch at %d: %w", revision, err)
	}
	s.rev.Store(revision)
	return nil
}

// Rewind sets LastRevision to 0, durably, keeping every object: for a hub
// whose revisions went back (restored from a backup), whose history the
// node's revision no longer names. The node's next sync then resumes from
// its inventory, and ApplyBatch takes the hub's lower revisions.
func (s *Store) Rewind() error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	s.viewMu.Lock()
	defer s.viewMu.Unlock()
	if _, err := s.commit([]op{{key: metaRev, value: encodeUint(metaRev, 0)}}, false); err != nil {
		return fmt.Errorf("rewind revision: %w", err)
	}
	s.rev.Store(0)
	return nil
}

// checkObject refuses what cannot be stored as an object, apart from its
// key.
func (s *Store) checkObject(o Object) error {
	switch {
	case len(o.Raw) == 0:
		return fmt.Errorf("put of %v without an object", o.Key)
	case o.Revision < 0 || o.Revision > maxRevision:
		return fmt.Errorf("put of %v: revision %d out of range", o.Key, o.Revision)
	}
	if err := s.checkValue(len(o.Raw)); err != nil {
		return fmt.Errorf("put of %v: %w", o.Key, err)
	}
	return nil
}

// ReplaceAll makes objects the whole view, at revision: objects not among
// them are deleted. Unlike ApplyBatch it may move LastRevision backwards:
// it is for starting over from a view obtained elsewhere (tools, tests, a
// new hub). It returns once all of it is durable, and is atomic when it
// fits in one transaction. A larger one first sets LastRevision to 0 and
// then writes in several transactions, the revision last, so that a crash
// part-way leaves a store that asks the hub for everything. Of several
// objects with the same key the last wins. The store does not retain
// objects.
func (s *Store) ReplaceAll(objects []Object, revision int64) error {
	if revision < 0 || revision > maxRevision {
		return fmt.Errorf("replace view: revision %d out of range", revision)
	}
	puts := make([]op, 0, len(objects)+1)
	keep := make(map[string]bool, len(objects))
	for i, o := range objects {
		if err := validKey(o.Key); err != nil {
			return fmt.Errorf("replace view: object %d: %w", i, err)
		}
		if err := s.checkObject(o); err != nil {
			return fmt.Errorf("replace view: object %d: %w", i, err)
		}
		k := objectKey(o.Key)
		keep[string(k)] = true
		puts = append(puts, op{key: k, value: encodeObject(k, o.Revision, o.Raw)})
	}
	puts = append(puts, op{key: metaRev, value: encodeUint(metaRev, uint64(revision))})

	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	s.viewMu.Lock()
	defer s.viewMu.Unlock()
	defer s.viewGen.Add(1)
	defer s.resGen.bump(nil)
	var ops []op
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefixObject}})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			if k := it.Item().Key(); !keep[string(k)] {
				ops = append(ops, op{key: it.Item().KeyCopy(nil), del: true})
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("replace view: %w", err)
	}
	ops = append(ops, puts...)
	_, err = s.commit(ops, true)
	if errors.Is(err, badger.ErrTxnTooBig) {
		if _, err := s.commit([]op{{key: metaRev, value: encodeUint(metaRev, 0)}}, true); err != nil {
			return fmt.Errorf("replace view: reset revision: %w", err)
		}
		s.rev.Store(0)
		_, err = s.commit(ops, false)
	}
	if err != nil {
		return fmt.Errorf("replace view at %d: %w", revision, err)
	}
	s.rev.Store(revision)
	return nil
}

// LastRevision returns the hub revision through which the view is
// complete: that of the last ApplyBatch or ReplaceAll, 0 for a new
// checkpoint. It does not touch the disk, and works after Close.
func (s *Store) LastRevision() int64 { return s.rev.Load() }

// ViewGeneration returns a number that changes whenever the view's
// objects may have changed: read it before a List, and while it returns
// the same, the List's result is still the view. It does not touch the
// disk.
func (s *Store) ViewGeneration() uint64 { return s.viewGen.Load() }

// ResourceGeneration returns a number that changes whenever the view's
// objects of any of resources may have changed, as ViewGeneration does
// for all: a node's pods' volumes need refreshing when its ConfigMaps or
// Secrets change, not at each status of a pod the hub sends back. It
// does not touch the disk.
func (s *Store) ResourceGeneration(resources ...string) uint64 {
	return s.resGen.sum(resources)
}

// resourceGens counts the view's writes by the resources they touched.
// The zero value is ready.
type resourceGens struct {
	mu  sync.Mutex
	all uint64            // writes that may have touched any resource
	by  map[string]uint64 // writes that touched objects of the resource
}

// bump counts a write that touched the resources of touched, or any
// resource if touched is nil.
func (g *resourceGens) bump(touched map[string]bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if touched == nil {
		g.all++
		return
	}
	if g.by == nil {
		g.by = map[string]uint64{}
	}
	for r := range touched {
		g.by[r]++
	}
}

// sum returns the count of writes that touched any of resources. Each
// count only grows, so the sum changes whenever one of them does.
func (g *resourceGens) sum(resources []string) uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := g.all
	for _, r := range resources {
		n += g.by[r]
	}
	return n
}

// Get returns the object of key k, and whether there is one. The caller
// owns the returned bytes.
func (s *Store) Get(k wire.Key) (Object, bool, error) {
	if err := validKey(k); err != nil {
		return Object{}, false, fmt.Errorf("get: %w", err)
	}
	if err := s.enter(); err != nil {
		return Object{}, false, err
	}
	defer s.leave()
	key := objectKey(k)
	var o Object
	var found bool
	err := s.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(key)
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		found = true
		return item.Value(func(v []byte) error {
			rev, raw, err := decodeObject(key, v)
			o = Object{Key: k, Revision: rev, Raw: clone(raw)}
			return err
		})
	})
	if err != nil {
		return Object{}, false, fmt.Errorf("get %v: %w", k, err)
	}
	return o, found, nil
}

// List returns every object of resource (e.g. wire.ResourcePods), sorted
// by namespace, then name (bytewise). The caller owns the result.
func (s *Store) List(resource string) ([]Object, error) {
	if err := validResource(resource); err != nil {
		return nil, fmt.Errorf("list %q: %w", resource, err)
	}
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.leave()
	var objs []Object
	err := s.scanObjects(resourcePrefix(resource), func(k wire.Key, rev int64, raw []byte) {
		objs = append(objs, Object{Key: k, Revision: rev, Raw: clone(raw)})
	})
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", resource, err)
	}
	return objs, nil
}

// Scan calls fn with every object of resource, in List's order, without
// copying them: o.Raw is valid only during the call, and fn must not call
// the store. Readers that keep what they decode (the service proxy keeps
// Services and EndpointSlices decoded, and decodes only those whose
// revision changed) read the view this way in place of List.
func (s *Store) Scan(resource string, fn func(o Object)) error {
	if err := validResource(resource); err != nil {
		return fmt.Errorf("scan %q: %w", resource, err)
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	err := s.scanObjects(resourcePrefix(resource), func(k wire.Key, rev int64, raw []byte) {
		fn(Object{Key: k, Revision: rev, Raw: raw})
	})
	if err != nil {
		return fmt.Errorf("scan %s: %w", resource, err)
	}
	return nil
}

// Inventory returns the key and revision of every object of the view,
// sorted by resource, namespace, name (bytewise): what the edge sends when
// the hub cannot resume from LastRevision. The caller owns the result.
func (s *Store) Inventory() ([]wire.InventoryEntry, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.leave()
	var inv []wire.InventoryEntry
	err := s.scanObjects([]byte{prefixObject}, func(k wire.Key, rev int64, _ []byte) {
		inv = append(inv, wire.InventoryEntry{Key: k, Revision: rev})
	})
	if err != nil {
		return nil, fmt.Errorf("inventory: %w", err)
	}
	return inv, nil
}

// scanObjects calls fn with every object under prefix, in key order; raw
// is valid only during the call. Values are not prefetched: prefetching
// copies each, where Item.Value hands out the bytes in the memtable or
// the mapped table (or reads the value log), and a scan of the 20,000
// Services and EndpointSlices of a large cluster, which the service
// proxy makes at every rebuild, would otherwise allocate all their bytes
// again each time.
func (s *Store) scanObjects(prefix []byte, fn func(k wire.Key, rev int64, raw []byte)) error {
	return s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			k, err := parseObjectKey(item.Key())
			if err != nil {
				return err
			}
			err = item.Value(func(v []byte) error {
				rev, raw, err := decodeObject(item.Key(), v)
				if err == nil {
					fn(k, rev, raw)
				}
				return err
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
}
