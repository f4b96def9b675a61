package apiserver

import (
	"context"
	"errors"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/outpost-mesh/outpost/hub/store"
)

// AllocationsPrefix is where reservations live in the store: the
// reservation of value for a resource is the key AllocationsPrefix +
// plural + "/" + value, and holds the store key of the object that holds
// the value. Values are IPs and the like: valid in a key.
const AllocationsPrefix = KeyRoot + "allocations/"

// UpdateAllocator is implemented by Allocators whose objects may gain or
// lose values on update (a service that becomes NodePort gains node
// ports). The machinery calls AssignUpdate with the stored object old;
// values old holds count as the object's already. Allocators without it
// get Assign, whose values old holds are reserved at once.
type UpdateAllocator interface {
	AssignUpdate(obj, old runtime.Object, reserve func(value string) (bool, error)) error
}

// allocationKey is where a reservation of value for res lives.
func (res *resourceInfo) allocationKey(value string) string {
	return res.allocationPrefix() + value
}

func (res *resourceInfo) allocationPrefix() string {
	return AllocationsPrefix + res.Plural + "/"
}

// assign reserves obj's unique values before obj is written. It returns a
// release func that undoes the reservations (for a failed create).
func (s *Server) assign(ctx context.Context, res *resourceInfo, obj runtime.Object, owner string) (release func(), err error) {
	done, err := s.reassign(ctx, res, obj, nil, owner)
	if err != nil {
		return nil, err
	}
	return func() { done(false) }, nil
}

// reassign reserves the unique values obj holds that old (the stored
// version, or nil on create) does not, filling in those obj lacks, before
// obj is written in old's place. The caller calls done once with whether
// obj was written: done(true) releases what old held and obj no longer
// does, done(false) releases what reassign reserved.
//
// The order (reserve, write, release) means a crash leaves at worst a
// reservation no object holds, never an object whose value another may
// be given; RepairAllocations frees those at start.
func (s *Server) reassign(ctx context.Context, res *resourceInfo, obj, old runtime.Object, owner string) (done func(written bool), err error) {
	al, ok := res.Rules.(Allocator)
	if !ok {
		return func(bool) {}, nil
	}
	held := map[string]bool{}
	if old != nil {
		for _, v := range al.Held(old) {
			held[v] = true
		}
	}
	var taken []string
	release := func(vals []string) {
		for _, v := range vals {
			if _, _, err := s.store.Delete(context.WithoutCancel(ctx), res.allocationKey(v), 0); err != nil && !errors.Is(err, store.ErrNotFound) {
				s.log.Warn("release allocation", "resource", res.Plural, "value", v, "err", err)
			}
		}
	}
	reserve := func(v string) (bool, error) {
		if held[v] {
			return true, nil
		}
		_, err := s.store.Create(ctx, res.allocationKey(v), []byte(owner))
		var ce *store.ConflictError
		if errors.As(err, &ce) && ce.Exists {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		taken = append(taken, v)
		return true, nil
	}
	if ua, ok := al.(UpdateAllocator); ok && old != nil {
		err = ua.AssignUpdate(obj, old, reserve)
	} else {
		err = al.Assign(obj, reserve)
	}
	if err != nil {
		release(taken)
		var st apierrors.APIStatus
		if errors.As(err, &st) {
			return nil, err // the rules' own answer, e.g. 422 for a taken IP
		}
		return nil, apierrors.NewInternalError(fmt.Errorf("allocate: %w", err))
	}
	return func(written bool) {
		if !written {
			release(taken)
			return
		}
		if old == nil {
			return
		}
		keep := map[string]bool{}
		for _, v := range al.Held(obj) {
			keep[v] = true
		}
		var gone []string
		for v := range held {
			if !keep[v] {
				gone = append(gone, v)
			}
		}
		release(gone)
	}, nil
}

// releaseHeld frees the unique values of a deleted object.
func (s *Server) releaseHeld(ctx context.Context, res *resourceInfo, obj runtime.Object) {
	al, ok := res.Rules.(Allocator)
	if !ok {
		return
	}
	for _, v := range al.Held(obj) {
		if _, _, err := s.store.Delete(context.WithoutCancel(ctx), res.allocationKey(v), 0); err != nil && !errors.Is(err, store.ErrNotFound) {
			s.log.Warn("release allocation", "resource", res.Plural, "value", v, "err", err)
		}
	}
}

// RepairAllocations makes the reservations of every resource with an
// Allocator match its stored objects, as kube-apiserver's repair
// controllers do for cluster IPs and node ports: it re-creates the
// reservation of every value a stored object holds that has none (or
// names another owner), and, with releaseLeaks, releases every
// reservation that no stored object holds, such as those a crash left
// between reserving and writing an object, or between deleting it and
// releasing. Two objects that hold one value cannot be repaired; they are
// logged.
//
// A create in flight holds a reservation its object does not show yet, so
// releasing leaks is safe only while no other server writes the store:
// the hub releases them at start on its embedded store, and on a store
// shared by several hubs only repairs what is missing (a leak wastes a
// value; it never hands one out twice).
func (s *Server) RepairAllocations(ctx context.Context, releaseLeaks bool) error {
	for _, res := range s.res().byGVR {
		al, ok := res.Rules.(Allocator)
		if !ok {
			continue
		}
		if err := s.repair(ctx, res, al, releaseLeaks); err != nil {
			return fmt.Errorf("repair %s allocations: %w", res.Plural, err)
		}
	}
	return nil
}

// repairPage is how many keys one list of repair reads at a time.
const repairPage = 500

func (s *Server) repair(ctx context.Context, res *resourceInfo, al Allocator, releaseLeaks bool) error {
	// Reservations first, then objects: an object written between the two
	// reads is seen holding what it reserved.
	reserved := map[string]store.KeyValue{}
	prefix := res.allocationPrefix()
	if err := s.scan(ctx, prefix, func(kv store.KeyValue) error {
		reserved[strings.TrimPrefix(kv.Key, prefix)] = kv
		return nil
	}); err != nil {
		return err
	}
	holders := map[string]string{} // value -> store key of its object
	err := s.scan(ctx, res.prefix, func(kv store.KeyValue) error {
		obj, err := res.decode(kv)
		if err != nil {
			s.log.Warn("repair allocations: skipping an object that does not decode", "key", kv.Key, "err", err)
			return nil
		}
		for _, v := range al.Held(obj) {
			if other, dup := holders[v]; dup && other != kv.Key {
				s.log.Error("repair allocations: two objects hold one value; recreate one of them", "resource", res.Plural, "value", v, "object", kv.Key, "other", other)
				continue
			}
			holders[v] = kv.Key
		}
		return nil
	})
	if err != nil {
		return err
	}
	var created, fixed, released, leaked int
	for v, owner := range holders {
		kv, ok := reserved[v]
		switch {
		case !ok:
			if _, err := s.store.Create(ctx, res.allocationKey(v), []byte(owner)); err != nil {
				return fmt.Errorf("reserve %s for %s: %w", v, owner, err)
			}
			created++
		case string(kv.Value) != owner:
			if _, err := s.store.Update(ctx, kv.Key, []byte(owner), kv.ModRevision); err != nil {
				return fmt.Errorf("give %s to %s: %w", v, owner, err)
			}
			fixed++
		}
	}
	for v, kv := range reserved {
		if _, ok := holders[v]; ok {
			continue
		}
		if !releaseLeaks {
			leaked++
			continue
		}
		if _, _, err := s.store.Delete(ctx, kv.Key, kv.ModRevision); err != nil && !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("release %s: %w", v, err)
		}
		released++
	}
	if created+fixed+released+leaked > 0 {
		s.log.Info("repaired allocations", "resource", res.Plural, "recreated", created, "reassigned", fixed, "released", released, "kept unheld", leaked)
	}
	return nil
}

// scan calls fn for every key under prefix, a page at a time, all pages
// at the revision of the first.
func (s *Server) scan(ctx context.Context, prefix string, fn func(store.KeyValue) error) error {
	opts := store.ListOptions{Limit: repairPage}
	for {
		page, err := s.store.List(ctx, prefix, opts)
		if err != nil {
			return fmt.Errorf("list %s: %w", prefix, err)
		}
		for _, kv := range page.KVs {
			if err := fn(kv); err != nil {
				return err
			}
		}
		if !page.More {
			return nil
		}
		opts.Revision, opts.Continue = page.Revision, page.Continue
	}
}
