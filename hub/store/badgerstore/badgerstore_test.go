package badgerstore

import (
	"testing"

	"github.com/outpost-mesh/outpost/hub/store"
	"github.com/outpost-mesh/outpost/hub/store/internal/fanout"
	"github.com/outpost-mesh/outpost/hub/store/storetest"
)

// testConfig is DefaultConfig with a small watch backlog, so the slow-watcher
// test needs few writes.
func testConfig(dir string) Config {
	cfg := DefaultConfig(dir)
	cfg.Watch = fanout.Limits{MaxEvents: 500}
	return cfg
}

func openT(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(testConfig(dir))
	if err != nil {
		t.Fatalf("Open(%s) = %v", dir, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	dirs := map[store.Store]string{}
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) store.Store {
			dir := t.TempDir()
			s := openT(t, dir)
			dirs[s] = dir
			return s
		},
		Reopen: func(t *testing.T, s store.Store) store.Store {
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s2 := openT(t, dirs[s])
			dirs[s2] = dirs[s]
			return s2
		},
		SlowWatcherEvents: 2000,
	})
}
