package replicaset

import (
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// ExpectationsTimeout is how long a controller waits for the watch to show
// the creations and deletions it made before it syncs anyway, as
// upstream's: a lost watch event does not stall a ReplicaSet for good.
const ExpectationsTimeout = 5 * time.Minute

// Expectations remembers, per controller key, the pod creations and
// deletions a sync made that the informer has not shown yet, so that the
// next sync does not act on a cache that lags and create (or delete) the
// same pods twice. Deletions are tracked by pod key, since a pod may be
// seen deleted for reasons other than ours. All methods are safe for
// concurrent use.
type Expectations struct {
	clock clock.PassiveClock

	mu sync.Mutex
	m  map[string]*expectation
}

type expectation struct {
	add  int
	dels map[string]bool // pod keys whose deletion is awaited
	at   time.Time
}

// NewExpectations returns empty expectations timed by c.
func NewExpectations(c clock.PassiveClock) *Expectations {
	return &Expectations{clock: c, m: map[string]*expectation{}}
}

// ExpectCreations records that key's sync is creating n pods, replacing
// what was expected before.
func (e *Expectations) ExpectCreations(key string, n int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.m[key] = &expectation{add: n, at: e.clock.Now()}
}

// ExpectDeletions records that key's sync is deleting the pods with
// podKeys (namespace/name), replacing what was expected before.
func (e *Expectations) ExpectDeletions(key string, podKeys []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	x := &expectation{dels: make(map[string]bool, len(podKeys)), at: e.clock.Now()}
	for _, k := range podKeys {
		x.dels[k] = true
	}
	e.m[key] = x
}

// CreationObserved records that one expected creation of key was seen, or
// will never be (it failed, or was not attempted).
func (e *Expectations) CreationObserved(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if x := e.m[key]; x != nil {
		x.add--
	}
}

// DeletionObserved records that the pod with podKey is gone, or that
// key's deletion of it failed.
func (e *Expectations) DeletionObserved(key, podKey string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if x := e.m[key]; x != nil {
		delete(x.dels, podKey)
	}
}

// Satisfied reports whether key may sync: everything expected has been
// seen, or nothing is expected, or the expectations are older than
// ExpectationsTimeout.
func (e *Expectations) Satisfied(key string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	x := e.m[key]
	if x == nil {
		return true
	}
	return (x.add <= 0 && len(x.dels) == 0) || e.clock.Since(x.at) > ExpectationsTimeout
}

// Delete forgets key's expectations, as when its ReplicaSet is deleted.
func (e *Expectations) Delete(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.m, key)
}
