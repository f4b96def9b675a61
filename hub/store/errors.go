package store

import (
	"errors"
	"fmt"
)

var (
	// ErrNotFound is returned when a key does not exist (at the revision read).
	ErrNotFound = errors.New("key not found")
	// ErrKeyExists is matched by the *ConflictError Create returns for a
	// key that already exists.
	ErrKeyExists = errors.New("key already exists")
	// ErrConflict is matched by the *ConflictError Update and Delete return
	// when the key's ModRevision is not the expected one.
	ErrConflict = errors.New("revision conflict")
	// ErrCompacted is matched by the *CompactedError returned for a read or
	// watch at a revision that is no longer retained.
	ErrCompacted = errors.New("revision compacted")
	// ErrFutureRevision is returned for a read or watch at a revision beyond
	// the current one.
	ErrFutureRevision = errors.New("revision is in the future")
	// ErrWatcherTooSlow ends a watch whose consumer fell too far behind; list
	// again and watch from the list's revision.
	ErrWatcherTooSlow = errors.New("watcher fell too far behind")
	// ErrInvalidKey is returned for an empty or malformed key or prefix.
	ErrInvalidKey = errors.New("invalid key")
	// ErrValueTooLarge is returned for a value over MaxValueSize.
	ErrValueTooLarge = errors.New("value too large")
	// ErrInvalidArgument is returned for a malformed option, such as a
	// negative revision or limit.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrCorrupt is matched by errors reading stored bytes that fail to
	// decode or checksum.
	ErrCorrupt = errors.New("stored data corrupt")
	// ErrClosed is returned by calls on a closed store.
	ErrClosed = errors.New("store closed")
)

// ConflictError reports a failed precondition of a write.
type ConflictError struct {
	Key string
	// Expected is the ModRevision the write required (0 for Create).
	Expected int64
	// Current is the key's current version.
	Current KeyValue
	// Exists distinguishes Create on an existing key (ErrKeyExists) from a
	// ModRevision mismatch (ErrConflict).
	Exists bool
}

func (e *ConflictError) Error() string {
	if e.Exists {
		return fmt.Sprintf("%s: %q (mod revision %d)", ErrKeyExists, e.Key, e.Current.ModRevision)
	}
	return fmt.Sprintf("%s: %q has mod revision %d, expected %d", ErrConflict, e.Key, e.Current.ModRevision, e.Expected)
}

// Is matches ErrKeyExists or ErrConflict.
func (e *ConflictError) Is(target error) bool {
	if e.Exists {
		return target == ErrKeyExists
	}
	return target == ErrConflict
}

// CompactedError reports a revision older than the retained history.
type CompactedError struct {
	Requested int64
	Compacted int64
}

func (e *CompactedError) Error() string {
	return fmt.Sprintf("%s: revision %d is older than compacted revision %d", ErrCompacted, e.Requested, e.Compacted)
}

// Is matches ErrCompacted.
func (e *CompactedError) Is(target error) bool { return target == ErrCompacted }
