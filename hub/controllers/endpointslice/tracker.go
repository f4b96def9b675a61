package endpointslice

import (
	"strconv"
	"sync"

	discoveryv1 "k8s.io/api/discovery/v1"
)

// tracker remembers the slices the controller wrote, so that it does not
// act on an informer cache that has not seen its own writes yet (and, say,
// create a second slice for endpoints it just placed), as upstream's
// EndpointSliceTracker does. Resource versions are the hub's store
// revisions, which only grow, so a cached slice older than a write
// compares lower. All methods are safe for concurrent use.
type tracker struct {
	mu sync.Mutex
	// written maps service key -> slice name -> resourceVersion written;
	// -1 is a slice deleted.
	written map[string]map[string]int64
}

func newTracker() *tracker { return &tracker{written: map[string]map[string]int64{}} }

func rv(s *discoveryv1.EndpointSlice) int64 {
	n, err := strconv.ParseInt(s.ResourceVersion, 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// wrote records a create or update of s for service key.
func (t *tracker) wrote(key string, s *discoveryv1.EndpointSlice) {
	t.set(key, s.Name, rv(s))
}

// deleted records a delete of the slice name for service key.
func (t *tracker) deleted(key, name string) { t.set(key, name, -1) }

func (t *tracker) set(key, name string, v int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.written[key]
	if m == nil {
		m = map[string]int64{}
		t.written[key] = m
	}
	m[name] = v
}

// observedDelete forgets what was written of a slice the cache saw
// deleted: whoever deleted it, there is nothing newer to wait for.
func (t *tracker) observedDelete(key, name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.written[key], name)
	if len(t.written[key]) == 0 {
		delete(t.written, key)
	}
}

// stale reports whether cached (the service's slices in the cache) lacks
// one of the controller's writes. Writes the cache reflects are
// forgotten.
func (t *tracker) stale(key string, cached []*discoveryv1.EndpointSlice) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.written[key]
	if len(m) == 0 {
		return false
	}
	have := map[string]int64{}
	for _, s := range cached {
		have[s.Name] = rv(s)
	}
	stale := false
	for name, want := range m {
		got, ok := have[name]
		switch {
		case want < 0 && !ok, want >= 0 && ok && got >= want:
			delete(m, name)
		default:
			stale = true
		}
	}
	if len(m) == 0 {
		delete(t.written, key)
	}
	return stale
}

// forget drops what was written for a service that is gone.
func (t *tracker) forget(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.written, key)
}
