package badgerstore

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/outpost-mesh/outpost/hub/store/internal/fanout"
)

// Config sizes the store for small machines. The badger defaults are sized
// for servers with gigabytes to spare (64 MiB memtables, 256 MiB caches, 1 MiB
// values inline in the LSM tree); these keep a hub with 100,000 objects of
// 1 KiB under 150 MB of RSS (see `outpost bench store`).
type Config struct {
	// Dir holds the database; created if missing. Required.
	Dir string
	// Logger receives badger's warnings and the store's own. Nil discards.
	Logger *slog.Logger

	// MemTableSize is the size of one badger memtable: 16 MiB. It also
	// bounds one group commit (badger allows 15% of it per transaction).
	MemTableSize int64
	// BaseTableSize is the size of an LSM table in the first level; deeper
	// levels grow by 2x. Each table being built holds a buffer of about its
	// size: 2 MiB.
	BaseTableSize int64
	// NumMemtables is how many memtables may be in memory at once: 2.
	NumMemtables int
	// BlockCacheSize caches decompressed table blocks: 16 MiB.
	BlockCacheSize int64
	// IndexCacheSize caches table indexes and bloom filters: 8 MiB (0 keeps
	// them all in memory, which grows with the data).
	IndexCacheSize int64
	// ValueLogFileSize is the size of one value log file: 64 MiB.
	ValueLogFileSize int64
	// ValueThreshold: stored records at least this large go to the value
	// log and the LSM tree keeps only a pointer: 512 B. Most Kubernetes
	// objects are larger, so the tree stays small (cheap compaction, small
	// table buffers) and values are written once.
	ValueThreshold int64

	// MaxBatchOps caps the writes committed together in one sync: 512.
	MaxBatchOps int
	// MaxBatchBytes caps the inline bytes of one group commit: 1 MiB.
	MaxBatchBytes int
	// HistoryEvents and HistoryBytes bound the recent events kept in memory
	// to start watches without reading the disk: 4,096 events, 8 MiB.
	// Older revisions are read from the on-disk log.
	HistoryEvents int
	HistoryBytes  int
	// ReleaseValueLogPages pages out the process's mappings of value-log
	// files badger has finished writing (Linux 5.4+): true. Badger writes
	// through mmap, so without it every value written stays in the
	// process's RSS until the kernel is short of memory.
	ReleaseValueLogPages bool
	// Watch bounds each watcher's backlog (defaults in fanout.Limits).
	Watch fanout.Limits
}

// DefaultConfig returns the defaults above for a store in dir.
func DefaultConfig(dir string) Config {
	return Config{
		Dir:              dir,
		MemTableSize:     16 << 20,
		BaseTableSize:    2 << 20,
		NumMemtables:     2,
		BlockCacheSize:   16 << 20,
		IndexCacheSize:   8 << 20,
		ValueLogFileSize: 64 << 20,
		ValueThreshold:   512,
		MaxBatchOps:      512,
		MaxBatchBytes:    1 << 20,
		HistoryEvents:    4096,
		HistoryBytes:     8 << 20,

		ReleaseValueLogPages: true,
	}
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	switch {
	case c.Dir == "":
		return errors.New("badgerstore: Dir is required")
	case c.MemTableSize < 1<<20:
		return fmt.Errorf("badgerstore: MemTableSize %d is under 1 MiB", c.MemTableSize)
	case c.BaseTableSize < 64<<10:
		return fmt.Errorf("badgerstore: BaseTableSize %d is under 64 KiB", c.BaseTableSize)
	case c.NumMemtables < 1:
		return fmt.Errorf("badgerstore: NumMemtables %d is under 1", c.NumMemtables)
	case c.BlockCacheSize < 0 || c.IndexCacheSize < 0:
		return errors.New("badgerstore: cache sizes must not be negative")
	case c.ValueLogFileSize < 1<<20:
		return fmt.Errorf("badgerstore: ValueLogFileSize %d is under 1 MiB", c.ValueLogFileSize)
	case c.ValueThreshold < 1 || c.ValueThreshold > 1<<20:
		return fmt.Errorf("badgerstore: ValueThreshold %d is outside 1 B..1 MiB", c.ValueThreshold)
	case c.MaxBatchOps < 1:
		return fmt.Errorf("badgerstore: MaxBatchOps %d is under 1", c.MaxBatchOps)
	case int64(c.MaxBatchBytes) > c.MemTableSize*15/100/2:
		return fmt.Errorf("badgerstore: MaxBatchBytes %d exceeds half of badger's transaction limit (15%% of MemTableSize)", c.MaxBatchBytes)
	case c.MaxBatchBytes < 1:
		return fmt.Errorf("badgerstore: MaxBatchBytes %d is under 1", c.MaxBatchBytes)
	case c.HistoryEvents < 0 || c.HistoryBytes < 0:
		return errors.New("badgerstore: history bounds must not be negative")
	}
	return nil
}
