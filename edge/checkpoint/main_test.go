package checkpoint

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/outpost-mesh/outpost/sync/wire"
)

// TestMain fails the run if a test leaves goroutines behind: every store a
// test opens is closed by then, and Close must stop all of badger.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// openT opens a store on disk in dir, closed when the test ends.
func openT(t *testing.T, dir string, cfg Config) *Store {
	t.Helper()
	s, err := Open(dir, cfg)
	if err != nil {
		t.Fatalf("Open(%s) = %v", dir, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// memT opens a store in memory, closed when the test ends.
func memT(t *testing.T) *Store {
	t.Helper()
	return openT(t, "", MemoryConfig())
}

func podKey(ns, name string) wire.Key {
	return wire.Key{Resource: wire.ResourcePods, Namespace: ns, Name: name}
}

func put(k wire.Key, rev int64, raw string) wire.Change {
	return wire.Change{Op: wire.OpPut, Key: k, Revision: rev, Object: []byte(raw)}
}

func del(k wire.Key, rev int64) wire.Change {
	return wire.Change{Op: wire.OpDelete, Key: k, Revision: rev}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("DefaultConfig().Validate() = %v", err)
	}
	for name, mod := range map[string]func(*Config){
		"small memtable":       func(c *Config) { c.MemTableSize = 1 << 19 },
		"huge memtable":        func(c *Config) { c.MemTableSize = 1 << 30 },
		"no memtables":         func(c *Config) { c.NumMemtables = 0 },
		"small tables":         func(c *Config) { c.BaseTableSize = 1 << 10 },
		"one compactor":        func(c *Config) { c.NumCompactors = 1 },
		"zero threshold":       func(c *Config) { c.ValueThreshold = 0 },
		"threshold over txn":   func(c *Config) { c.MemTableSize = 2 << 20; c.ValueThreshold = 512 << 10 },
		"small value log":      func(c *Config) { c.ValueLogFileSize = 1 << 20 },
		"huge value log":       func(c *Config) { c.ValueLogFileSize = 1 << 30 },
		"no events":            func(c *Config) { c.MaxOutboxEvents = 0 },
		"in memory, small txn": func(c *Config) { c.InMemory = true; c.MemTableSize = 4 << 20 },
	} {
		cfg := DefaultConfig()
		mod(&cfg)
		if err := cfg.Validate(); err == nil {
			t.Errorf("Validate() of %s = nil, want an error", name)
		}
		if s, err := Open(t.TempDir(), cfg); err == nil {
			s.Close()
			t.Errorf("Open() with %s = nil error, want one", name)
		}
	}
}
