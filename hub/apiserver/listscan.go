package apiserver

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/outpost-mesh/outpost/hub/store"
)

// scanPages sizes the store pages of a list scan, so that a scan holds a
// few MB of values at a time whether the objects are 1 KB or 1.5 MB.
var scanPages = store.PageSizer{First: 16, Max: 500, Bytes: 4 << 20}

// listScan reads the objects of one list request from the store a page at
// a time, all at one revision: those under a prefix, from a continue key,
// that pass the request's selectors, up to its limit. It can be read more
// than once (an encoder that needs the response's size reads it twice)
// and yields the same objects each time. It belongs to one request's
// goroutine.
type listScan struct {
	s      *Server
	res    *resourceInfo
	prefix string
	o      listOptions
	from   string // the key the list starts at ("" for the prefix)

	// rev is the revision every page is read at, known once open returns.
	rev int64
	// first is the first page, read by open so that its errors are
	// answered as a Status; it is dropped after the first pass.
	first *store.ListResult
	// After a complete pass: the items yielded, where the next list of a
	// limited one starts ("" when nothing follows), and how many objects
	// follow it (-1 when not known: a list with selectors, which upstream
	// does not count either).
	count     int
	next      string
	remaining int64
	scanned   bool
}

// listItem is one object of a scan: its stored form, and the object
// decoded from it when the scan needed to (selectors) or the caller asked.
type listItem struct {
	kv  store.KeyValue
	obj runtime.Object // nil until decoded
}

// object returns the item decoded, decoding it once.
func (it *listItem) object(res *resourceInfo) (runtime.Object, error) {
	if it.obj == nil {
		obj, err := res.decode(it.kv)
		if err != nil {
			return nil, err
		}
		it.obj = obj
	}
	return it.obj, nil
}

// openList checks o's continue token and resourceVersion against the
// store and reads the first page of the list under namespace, so that
// what makes the list fail is known before anything is written.
func (s *Server) openList(ctx context.Context, res *resourceInfo, ns string, o listOptions) (*listScan, error) {
	sc := &listScan{s: s, res: res, prefix: res.listPrefix(ns), o: o}
	switch {
	case o.cont != nil:
		sc.rev, sc.from = max(o.cont.RV, 0), o.cont.Start // latestContinueRV: the latest
		if len(sc.from) < len(sc.prefix) || sc.from[:len(sc.prefix)] != sc.prefix {
			return nil, apierrors.NewBadRequest("continue key is not valid: it is for another list")
		}
	case o.rvMatch == "Exact":
		sc.rev, _ = strconv.ParseInt(o.rv, 10, 64)
	case o.rv != "" && o.rv != "0":
		// NotOlderThan: the latest state is never older, unless the
		// client has seen a revision this store has not.
		want, _ := strconv.ParseInt(o.rv, 10, 64)
		cur, err := s.store.Revision(ctx)
		if err != nil {
			return nil, storeError(err, res.gr, "")
		}
		if want > cur {
			return nil, apierrors.NewTimeoutError(fmt.Sprintf("Too large resource version: %d, current: %d", want, cur), 1)
		}
	}
	page, err := sc.page(ctx, sc.from, 0, sc.pageSize(0, 0, 0))
	if err != nil {
		return nil, err
	}
	sc.rev = page.Revision
	sc.first = &page
	return sc, nil
}

// pageSize returns how many keys to ask of the next page, given the
// values seen so far and the items yielded.
func (sc *listScan) pageSize(seen, seenBytes, count int) int64 {
	n := scanPages.Next(seen, seenBytes)
	if sc.o.limit > 0 && sc.o.label.Empty() && sc.o.field.Empty() {
		// One more than the rest of the limit tells whether more follow.
		n = min(n, sc.o.limit-int64(count)+1)
	}
	return max(n, 1)
}

// unselected reports whether the list has no label or field selector, so
// that every object read is an item.
func (sc *listScan) unselected() bool { return sc.o.label.Empty() && sc.o.field.Empty() }

// page reads n keys from from, count items into the list; the page the
// list's limit ends on also counts the keys after it, when every key is
// an item (see remainingItemCount).
func (sc *listScan) page(ctx context.Context, from string, count int, n int64) (store.ListResult, error) {
	opts := store.ListOptions{Revision: sc.rev, Limit: n, Continue: from}
	opts.CountRemaining = sc.o.limit > 0 && sc.unselected() && n == sc.o.limit-int64(count)+1
	page, err := sc.s.store.List(ctx, sc.prefix, opts)
	switch {
	case err == nil:
		return page, nil
	case errors.Is(err, store.ErrCompacted) && sc.o.cont != nil:
		return page, expiredContinue(sc.from)
	case errors.Is(err, store.ErrCompacted):
		return page, apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d", sc.rev))
	}
	return page, storeError(err, sc.res.gr, "")
}

// each calls yield with every item of the list, in key order; an error of
// yield ends the pass and is returned. After the first complete pass, later
// ones yield the same items. The item and its object are the caller's to
// keep only until yield returns.
func (sc *listScan) each(ctx context.Context, yield func(*listItem) error) error {
	from := sc.from
	page := sc.first
	sc.first = nil
	count, seen, seenBytes := 0, 0, 0
	for {
		if page == nil {
			if sc.scanned && count == sc.count {
				return nil
			}
			p, err := sc.page(ctx, from, count, sc.pageSize(seen, seenBytes, count))
			if err != nil {
				return err
			}
			page = &p
		}
		for i := range page.KVs {
			kv := page.KVs[i]
			page.KVs[i] = store.KeyValue{} // the page holds no value it yielded
			seen++
			seenBytes += len(kv.Value)
			if sc.o.limit > 0 && int64(count) == sc.o.limit || sc.scanned && count == sc.count {
				remaining := int64(-1)
				if sc.unselected() {
					remaining = int64(len(page.KVs)-i) + page.Remaining
				}
				sc.finish(count, kv.Key, remaining)
				return nil
			}
			it := &listItem{kv: kv}
			if !sc.unselected() {
				obj, err := it.object(sc.res)
				if err != nil {
					return apierrors.NewInternalError(err)
				}
				if !sc.res.matches(obj, sc.o) {
					continue
				}
			}
			count++
			if err := yield(it); err != nil {
				return err
			}
		}
		if !page.More {
			sc.finish(count, "", 0)
			return nil
		}
		from = page.Continue
		page = nil
		if err := ctx.Err(); err != nil {
			return storeError(err, sc.res.gr, "")
		}
	}
}

// finish records the end of a complete pass: count items; next, the key
// after the last, where the continuation of a limited list starts; and
// remaining, the objects from next on (-1: not counted).
func (sc *listScan) finish(count int, next string, remaining int64) {
	if !sc.scanned {
		sc.count, sc.next, sc.remaining, sc.scanned = count, next, remaining, true
	}
}

// remainingItemCount is the list's remainingItemCount: how many objects a
// limited list without selectors left for its continuations, as upstream
// reports it; nil when nothing follows or the count is not known.
func (sc *listScan) remainingItemCount() *int64 {
	if sc.next == "" || sc.remaining < 0 {
		return nil
	}
	n := sc.remaining
	return &n
}

// expiredContinue is the 410 Gone of a continue token whose revision was
// compacted away. As upstream's, it carries a token that continues the
// list from the same key at the latest revision (an inconsistent list:
// the client chooses whether to take it).
func expiredContinue(from string) error {
	err := apierrors.NewResourceExpired("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.")
	err.ErrStatus.ListMeta.Continue = encodeContinue(latestContinueRV, from)
	return err
}

// continueToken returns the list's continue value after a complete pass,
// "" when nothing follows.
func (sc *listScan) continueToken() string {
	if sc.next == "" {
		return ""
	}
	return encodeContinue(sc.rev, sc.next)
}
