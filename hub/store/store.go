// Package store defines the hub's MVCC key-value storage: etcd's semantics
// (one global revision, compare-and-swap, consistent paged lists, ordered
// watches, compaction) as a set of small interfaces. The badger backend
// (default, embedded) and the etcd backend (HA) implement them; the API server
// is their only user. This package imports no other project package.
package store

import (
	"context"
	"io"
)

// KeyValue is one version of a key. The caller owns Value.
type KeyValue struct {
	Key   string
	Value []byte
	// CreateRevision is the revision of the write that created this
	// incarnation of the key (a key deleted and created again gets a new one).
	CreateRevision int64
	// ModRevision is the revision of the write that produced this version.
	ModRevision int64
}

// EventType says what a watch event did to its key.
type EventType int

const (
	// EventPut is a create or an update; Event.IsCreate tells them apart.
	EventPut EventType = iota + 1
	// EventDelete removed the key.
	EventDelete
)

func (t EventType) String() string {
	switch t {
	case EventPut:
		return "PUT"
	case EventDelete:
		return "DELETE"
	}
	return "UNKNOWN"
}

// Event is one change delivered by Watch.
type Event struct {
	Type EventType
	// KV is the key after the change. On EventDelete, KV.Value is nil,
	// KV.ModRevision is the revision of the delete and KV.CreateRevision that
	// of the deleted incarnation.
	KV KeyValue
	// PrevKV is the key before the change: set on updates and deletes, nil on
	// creates.
	PrevKV *KeyValue
}

// Revision returns the revision of the write that produced e.
func (e Event) Revision() int64 { return e.KV.ModRevision }

// IsCreate reports whether e created its key.
func (e Event) IsCreate() bool {
	return e.Type == EventPut && e.KV.CreateRevision == e.KV.ModRevision
}

// WatchResponse carries events in revision order, or a final error. The
// channel returned by Watch is closed after a response with a non-nil Err, or
// when the watch's context ends.
type WatchResponse struct {
	Events []Event
	// Err ends the watch. ErrWatcherTooSlow and ErrCompacted are recovered
	// from by listing again and watching from the list's revision.
	Err error
}

// ListOptions select a page of a prefix list.
type ListOptions struct {
	// Revision reads the list as of this revision; 0 means the latest.
	// Every page of one paged list must use the Revision of the first.
	Revision int64
	// Limit caps the number of keys returned; 0 means no cap.
	Limit int64
	// Continue is the key to start from (inclusive), as returned in
	// ListResult.Continue; empty starts at the prefix.
	Continue string
	// CountRemaining asks a limited list that has more keys to count
	// them (ListResult.Remaining), as the API's remainingItemCount
	// reports. Counting reads the keys after the page, so it is asked
	// only of the page a client's limit ends on.
	CountRemaining bool
}

// ListResult is one page of a list.
type ListResult struct {
	KVs []KeyValue
	// Revision is the revision the page is consistent at.
	Revision int64
	// More reports whether keys follow this page; Continue then names the
	// first of them.
	More     bool
	Continue string
	// Remaining is the number of keys after this page, when More and
	// ListOptions.CountRemaining are set (a backend may fill it anyway).
	Remaining int64
}

// Reader reads the store at the latest or a retained revision.
type Reader interface {
	// Get returns key at rev (0 for the latest). It returns ErrNotFound when
	// the key does not exist at rev, ErrCompacted when rev was compacted and
	// ErrFutureRevision when rev is beyond the current revision.
	Get(ctx context.Context, key string, rev int64) (KeyValue, error)
	// List returns the keys under prefix in key order, consistent at one
	// revision. prefix must end in "/".
	List(ctx context.Context, prefix string, opts ListOptions) (ListResult, error)
	// Revision returns the current revision: that of the latest acknowledged
	// write.
	Revision(ctx context.Context) (int64, error)
}

// Writer changes keys. Each successful write gets the next revision and is
// durable when it returns.
type Writer interface {
	// Create writes key if it does not exist; otherwise it returns a
	// *ConflictError that Is ErrKeyExists.
	Create(ctx context.Context, key string, value []byte) (KeyValue, error)
	// Update replaces key if its ModRevision equals modRev (0 accepts any),
	// else returns a *ConflictError that Is ErrConflict. A missing key is
	// ErrNotFound.
	Update(ctx context.Context, key string, value []byte, modRev int64) (KeyValue, error)
	// Delete removes key if its ModRevision equals modRev (0 accepts any) and
	// returns the deleted version and the revision of the delete. Conflicts
	// and missing keys are reported as by Update.
	Delete(ctx context.Context, key string, modRev int64) (prev KeyValue, rev int64, err error)
}

// Watcher streams changes.
type Watcher interface {
	// Watch delivers every change to keys under prefix with a revision
	// greater than rev (0: changes after the current revision), in revision
	// order, until ctx ends or an error is delivered. It returns ErrCompacted
	// at once when rev is older than the compacted revision.
	Watch(ctx context.Context, prefix string, rev int64) (<-chan WatchResponse, error)
}

// Compactor drops history.
type Compactor interface {
	// Compact discards the versions superseded at or before rev. Reads and
	// watches from before rev then fail with ErrCompacted. Compacting to a
	// revision at or below the compacted one is a no-op.
	Compact(ctx context.Context, rev int64) error
}

// Store is the full storage interface the API server needs. All methods are
// safe for concurrent use.
type Store interface {
	Reader
	Writer
	Watcher
	Compactor
	io.Closer
}
