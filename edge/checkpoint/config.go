package checkpoint

import (
	"errors"
	"fmt"
	"log/slog"
)

// Config sizes the checkpoint for a small gateway. Badger's defaults are
// sized for servers (64 MiB memtables, a 256 MiB block cache, 1 GiB value-log
// files mapped twice over); a node's view is a few megabytes, and on 32-bit
// ARM every mapped file takes address space from a process that has 3 GiB
// of it. The defaults keep the whole store to a few tens of MiB of memory.
type Config struct {
	// InMemory keeps everything in memory and nothing on disk: for unit
	// tests only. Open then ignores its dir, and values over 1 MiB less
	// 16 bytes are refused with ErrTooLarge, because badger keeps no value
	// log in memory.
	InMemory bool
	// Logger receives badger's warnings and errors; its chatter goes to
	// debug. Nil discards them.
	Logger *slog.Logger

	// MemTableSize is the size of one badger memtable: 4 MiB on disk, 8
	// MiB in memory (MemoryConfig). One transaction may hold 15% of it
	// (about 600 KiB of records kept in the tree, see ValueThreshold),
	// which bounds what ApplyBatch commits at once. Its write-ahead file is
	// mapped at twice this size. The memtable's arena counts in the Go
	// heap whole: at 8 MiB, with two memtables, it was a third of what an
	// agent holding 10,000 Services kept.
	MemTableSize int64
	// NumMemtables is how many memtables may be in memory at once, the
	// one being written included: 2.
	NumMemtables int
	// BaseTableSize is the size of an LSM table in the first level;
	// building one holds a buffer of about that size: 1 MiB.
	BaseTableSize int64
	// NumCompactors is the number of badger's compaction goroutines,
	// each of which looks at the tree twenty times a second: 0, none,
	// for the store compacts the tree itself when writes have filled it
	// (see Store). Badger accepts no fewer than 2 otherwise.
	NumCompactors int
	// ValueThreshold: records at least this large go to the value log and
	// the tree keeps a pointer; smaller ones live in the tree: 32 KiB.
	// Pods, statuses and events stay in the tree, where compaction
	// reclaims overwritten ones by itself; only large configmaps and
	// secrets reach the value log, which needs CollectGarbage.
	ValueThreshold int64
	// ValueLogFileSize is the size of one value-log file: 16 MiB. It must
	// hold the largest record (MaxValueSize); the file being written is
	// mapped at twice this size.
	ValueLogFileSize int64

	// MaxOutboxEvents caps the wire.KindEvent entries kept in the outbox:
	// 1000. Beyond it the oldest events are dropped; statuses are
	// coalesced instead and never dropped.
	MaxOutboxEvents int
}

// DefaultConfig returns the defaults above, for a store on disk.
func DefaultConfig() Config {
	return Config{
		MemTableSize:     4 << 20,
		NumMemtables:     2,
		BaseTableSize:    1 << 20,
		NumCompactors:    0,
		ValueThreshold:   32 << 10,
		ValueLogFileSize: 16 << 20,
		MaxOutboxEvents:  1000,
	}
}

// MemoryConfig returns the defaults for a store in memory, for tests: its
// values live in the memtable, which must hold a 1 MiB one.
func MemoryConfig() Config {
	c := DefaultConfig()
	c.InMemory, c.MemTableSize = true, 8<<20
	return c
}

// Validate reports the first invalid field. The upper bounds keep mapped
// files within reach of a 32-bit process.
func (c Config) Validate() error {
	switch {
	case c.MemTableSize < 1<<20 || c.MemTableSize > 256<<20:
		return fmt.Errorf("checkpoint: MemTableSize %d is outside 1 MiB..256 MiB", c.MemTableSize)
	case c.NumMemtables < 1:
		return fmt.Errorf("checkpoint: NumMemtables %d is under 1", c.NumMemtables)
	case c.BaseTableSize < 64<<10 || c.BaseTableSize > 64<<20:
		return fmt.Errorf("checkpoint: BaseTableSize %d is outside 64 KiB..64 MiB", c.BaseTableSize)
	case c.NumCompactors < 0 || c.NumCompactors == 1:
		return fmt.Errorf("checkpoint: NumCompactors %d is neither 0 nor at least 2", c.NumCompactors)
	case c.ValueThreshold < 1 || c.ValueThreshold > 1<<20:
		return fmt.Errorf("checkpoint: ValueThreshold %d is outside 1 B..1 MiB", c.ValueThreshold)
	case c.ValueThreshold > c.MemTableSize*15/100/2:
		return fmt.Errorf("checkpoint: ValueThreshold %d exceeds half of badger's transaction limit (15%% of MemTableSize, %d)", c.ValueThreshold, c.MemTableSize*15/100)
	case c.ValueLogFileSize < 4<<20 || c.ValueLogFileSize > 512<<20:
		return fmt.Errorf("checkpoint: ValueLogFileSize %d is outside 4 MiB..512 MiB", c.ValueLogFileSize)
	case c.MaxOutboxEvents < 1:
		return fmt.Errorf("checkpoint: MaxOutboxEvents %d is under 1", c.MaxOutboxEvents)
	case c.InMemory && c.MemTableSize*15/100 < 1<<20:
		return errors.New("checkpoint: InMemory needs a MemTableSize of at least 7 MiB, so that a transaction holds a 1 MiB value")
	}
	return nil
}
