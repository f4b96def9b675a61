package job

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/clock"
)

// expectationsTimeout is how long a sync waits for the cache to show pods
// it created or deleted before it acts again regardless, as upstream.
const expectationsTimeout = 5 * time.Minute

// expectations remember, per job key, the pod creations and deletions a
// sync made that the pod cache has not shown yet, and the pods whose
// finalizer it removed, so that the next sync neither repeats nor
// recounts them. All methods are safe for concurrent use.
type expectations struct {
	clock clock.PassiveClock

	mu sync.Mutex
	m  map[string]*expectation
}

type expectation struct {
	add, del int
	at       time.Time
	rm       sets.Set[types.UID]
}

func newExpectations(c clock.PassiveClock) *expectations {
	return &expectations{clock: c, m: map[string]*expectation{}}
}

func (e *expectations) get(key string) *expectation {
	x := e.m[key]
	if x == nil {
		x = &expectation{rm: sets.New[types.UID]()}
		e.m[key] = x
	}
	return x
}

// expect records that a sync of key is creating add pods and deleting
// del, replacing what it expected before.
func (e *expectations) expect(key string, add, del int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	x := e.get(key)
	x.add, x.del, x.at = add, del, e.clock.Now()
}

// created and deleted record that the cache showed, or a failed call
// means it never will show, one creation or deletion of key's.
func (e *expectations) created(key string) { e.lower(key, 1, 0) }
func (e *expectations) deleted(key string) { e.lower(key, 0, 1) }

func (e *expectations) lower(key string, add, del int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if x := e.m[key]; x != nil {
		x.add -= add
		x.del -= del
	}
}

// satisfied reports whether key has nothing outstanding, or has waited
// out expectationsTimeout.
func (e *expectations) satisfied(key string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	x := e.m[key]
	return x == nil || (x.add <= 0 && x.del <= 0) || e.clock.Since(x.at) > expectationsTimeout
}

// expectRemoved records that the finalizers of uids are being removed.
func (e *expectations) expectRemoved(key string, uids []types.UID) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.get(key).rm.Insert(uids...)
}

// removed records that the cache shows uid without its finalizer, or
// gone.
func (e *expectations) removed(key string, uid types.UID) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if x := e.m[key]; x != nil {
		x.rm.Delete(uid)
	}
}

// pendingRemovals returns the pods whose finalizer removal the cache has
// not shown yet. The caller owns the returned set.
func (e *expectations) pendingRemovals(key string) sets.Set[types.UID] {
	e.mu.Lock()
	defer e.mu.Unlock()
	if x := e.m[key]; x != nil {
		return x.rm.Clone()
	}
	return sets.New[types.UID]()
}

// forget drops what is remembered of key, a job deleted.
func (e *expectations) forget(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.m, key)
}

// backoffs keeps each job's back-off record between syncs, in memory as
// upstream does: a restarted controller starts every back-off afresh.
// All methods are safe for concurrent use.
type backoffs struct {
	mu sync.Mutex
	m  map[string]backoffRecord
}

func (b *backoffs) get(key string) backoffRecord {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.m[key]
}

func (b *backoffs) set(key string, r backoffRecord) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil {
		b.m = map[string]backoffRecord{}
	}
	b.m[key] = r
}

func (b *backoffs) forget(key string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.m, key)
}
