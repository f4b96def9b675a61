// Package storebench measures the hub's two store backends side by side:
// durable write throughput and latency, watch delivery latency, and memory
// and disk at a given number of keys, for badger (embedded) and etcd. It
// backs `outpost bench store`, which runs every phase of every backend in a
// child process of its own (see Compare and ExecRunner).
package storebench

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/outpost-mesh/outpost/bench/report"
	"github.com/outpost-mesh/outpost/hub/store"
)

// Backend names a store implementation under test.
type Backend string

const (
	// Badger is hub/store/badgerstore, embedded in the measuring process.
	Badger Backend = "badger"
	// Etcd is hub/store/etcdstore talking over loopback to an etcd server
	// embedded in the measuring process.
	Etcd Backend = "etcd"
)

// Backends lists every backend in the order they are run and shown.
var Backends = []Backend{Badger, Etcd}

// ParseBackend returns the backend named s.
func ParseBackend(s string) (Backend, error) {
	for _, b := range Backends {
		if string(b) == s {
			return b, nil
		}
	}
	return "", fmt.Errorf("unknown backend %q: want badger or etcd", s)
}

// Phase is one independent measurement. Each phase starts from an empty
// store in a fresh directory.
type Phase string

const (
	// PhaseWrites measures Create throughput and latency at each count of
	// concurrent writers.
	PhaseWrites Phase = "writes"
	// PhaseWatch measures how long a write takes to reach many watchers.
	PhaseWatch Phase = "watch"
	// PhaseMemory measures the process's RSS and the data dir's size after
	// writing many keys.
	PhaseMemory Phase = "memory"
)

// Phases lists every phase in the order they are run.
var Phases = []Phase{PhaseWrites, PhaseWatch, PhaseMemory}

// ParsePhases parses a comma-separated list of phases; "all" or "" is every
// phase.
func ParsePhases(s string) ([]Phase, error) {
	if s == "" || s == "all" {
		return Phases, nil
	}
	var out []Phase
	for _, name := range strings.Split(s, ",") {
		name = strings.TrimSpace(name)
		found := false
		for _, p := range Phases {
			if string(p) == name {
				out = append(out, p)
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("unknown phase %q: want writes, watch, memory or all", name)
		}
	}
	return out, nil
}

// Config sets what is measured. Durations encode in JSON as nanoseconds.
type Config struct {
	// Dir is the parent of each phase's temporary data directory; "" means
	// os.TempDir(). The data directory is removed when the phase ends.
	Dir string `json:"dir,omitempty"`

	// Writers lists the counts of concurrent writers measured: 1, 16, 64.
	Writers []int `json:"writers"`
	// Duration is how long each count of writers is measured: 5s.
	Duration time.Duration `json:"duration_ns"`
	// Warmup runs the writers before each measurement, uncounted: 1s.
	Warmup time.Duration `json:"warmup_ns"`
	// ValueSize is the size of every value written: 1 KiB. Values are
	// random bytes, so no backend gains from compression.
	ValueSize int `json:"value_size"`

	// Watchers is the number of watches on one prefix: 100.
	Watchers int `json:"watchers"`
	// WatchRate is the writes per second made while watched: 500.
	WatchRate int `json:"watch_rate"`
	// WatchDuration is how long those writes go on: 5s.
	WatchDuration time.Duration `json:"watch_duration_ns"`
	// WatchDrain bounds the wait for the last deliveries once the writes
	// stop; events not delivered by then count as missed: 10s.
	WatchDrain time.Duration `json:"watch_drain_ns"`

	// Keys is the number of keys written before memory is measured: 100,000.
	Keys int `json:"keys"`
	// KeyWriters is the number of concurrent writers writing them: 64.
	KeyWriters int `json:"key_writers"`
	// Settle bounds how long memory is then watched, idle, for it to stop
	// falling as background work (badger's flushes and compactions, etcd's
	// snapshots) finishes: 30s. 0 skips it.
	Settle time.Duration `json:"settle_ns"`
}

// DefaultConfig returns the defaults above: a full comparison takes three
// to four minutes.
func DefaultConfig() Config {
	return Config{
		Writers:       []int{1, 16, 64},
		Duration:      5 * time.Second,
		Warmup:        time.Second,
		ValueSize:     1 << 10,
		Watchers:      100,
		WatchRate:     500,
		WatchDuration: 5 * time.Second,
		WatchDrain:    10 * time.Second,
		Keys:          100_000,
		KeyWriters:    64,
		Settle:        30 * time.Second,
	}
}

// QuickConfig returns DefaultConfig with shorter measurements, 10,000 keys
// and a 5s settle: a comparison of under a minute whose numbers are rough.
func QuickConfig() Config {
	c := DefaultConfig()
	c.Duration = time.Second
	c.Warmup = 200 * time.Millisecond
	c.WatchDuration = time.Second
	c.Keys = 10_000
	c.Settle = 5 * time.Second
	return c
}

// minValueSize leaves room for the send time a watched value carries.
const minValueSize = 16

// Validate reports the first invalid field.
func (c Config) Validate() error {
	if len(c.Writers) == 0 {
		return errors.New("no writer counts given")
	}
	for _, n := range c.Writers {
		if n < 1 {
			return fmt.Errorf("writer count %d is under 1", n)
		}
	}
	switch {
	case c.Duration <= 0:
		return fmt.Errorf("duration %v is not positive", c.Duration)
	case c.Warmup < 0:
		return fmt.Errorf("warm-up %v is negative", c.Warmup)
	case c.ValueSize < minValueSize || c.ValueSize > store.MaxValueSize:
		return fmt.Errorf("value size %d is outside %d..%d bytes", c.ValueSize, minValueSize, store.MaxValueSize)
	case c.Watchers < 1:
		return fmt.Errorf("watcher count %d is under 1", c.Watchers)
	case c.WatchRate < 1:
		return fmt.Errorf("watch write rate %d/s is under 1", c.WatchRate)
	case c.WatchDuration <= 0:
		return fmt.Errorf("watch duration %v is not positive", c.WatchDuration)
	case c.WatchDrain <= 0:
		return fmt.Errorf("watch drain %v is not positive", c.WatchDrain)
	case c.Keys < 1:
		return fmt.Errorf("key count %d is under 1", c.Keys)
	case c.KeyWriters < 1:
		return fmt.Errorf("key writer count %d is under 1", c.KeyWriters)
	case c.Settle < 0:
		return fmt.Errorf("settle time %v is negative", c.Settle)
	}
	return nil
}

// Result is what one backend measured. Phases not run are left empty, and
// Merge combines the results of phases run separately.
type Result struct {
	Backend Backend `json:"backend"`
	// Setup says how the backend was run.
	Setup  string        `json:"setup"`
	Writes []WriteResult `json:"writes,omitempty"`
	Watch  *WatchResult  `json:"watch,omitempty"`
	Memory *MemoryResult `json:"memory,omitempty"`
}

// Merge copies into r the phases that o measured.
func (r *Result) Merge(o *Result) {
	if r.Setup == "" {
		r.Setup = o.Setup
	}
	if len(o.Writes) > 0 {
		r.Writes = o.Writes
	}
	if o.Watch != nil {
		r.Watch = o.Watch
	}
	if o.Memory != nil {
		r.Memory = o.Memory
	}
}

// WriteLevel returns the write result for n concurrent writers, or nil.
func (r *Result) WriteLevel(n int) *WriteResult {
	if r == nil {
		return nil
	}
	for i := range r.Writes {
		if r.Writes[i].Writers == n {
			return &r.Writes[i]
		}
	}
	return nil
}

// WriteResult is the Create throughput and latency at one count of
// concurrent writers. Only writes that completed inside the measured window
// count.
type WriteResult struct {
	Writers int     `json:"writers"`
	Writes  int     `json:"writes"`
	Seconds float64 `json:"seconds"`
	PerSec  float64 `json:"writes_per_sec"`
	// Latency is of each Create call, which returns once the write is
	// durable.
	Latency report.Latency `json:"latency"`
}

// WatchResult is the delivery of writes to many watchers of one prefix.
type WatchResult struct {
	Watchers int `json:"watchers"`
	// Writes is the number of writes made while watched.
	Writes int `json:"writes"`
	// Expected is Watchers*Writes: every watcher must see every write.
	Expected int `json:"expected"`
	// Delivered counts the events received; Missing is Expected-Delivered
	// (never negative) and Extra what came beyond Expected.
	Delivered int `json:"delivered"`
	Missing   int `json:"missing"`
	Extra     int `json:"extra"`
	// OutOfOrder counts events whose revision was not above the previous
	// one seen by the same watcher.
	OutOfOrder int `json:"out_of_order"`
	// Latency runs from just before the write call (the time written into
	// the value) to the watcher receiving the event: it includes the
	// durable write.
	Latency report.Latency `json:"latency"`
	// Errors are the distinct errors that ended watches early.
	Errors []string `json:"errors,omitempty"`
}

// MemoryResult is the worker process's memory and the store's disk use
// after writing Keys keys, each reading of memory taken after a garbage
// collection that returned free memory to the OS.
type MemoryResult struct {
	Keys         int     `json:"keys"`
	WriteSeconds float64 `json:"write_seconds"`
	// BaselineRSSBytes is the process's RSS before the store was opened.
	BaselineRSSBytes uint64 `json:"baseline_rss_bytes"`
	// RSSBytes is VmRSS, split into RSSAnonBytes (heap, stacks) and
	// RSSFileBytes (mapped files, such as badger tables or bbolt's db).
	RSSBytes     uint64 `json:"rss_bytes"`
	RSSAnonBytes uint64 `json:"rss_anon_bytes"`
	RSSFileBytes uint64 `json:"rss_file_bytes"`
	// SettledRSSBytes and its split are VmRSS once it stopped falling, or
	// when Config.Settle ran out, SettleSeconds after the writes; zero when
	// Config.Settle is 0.
	SettledRSSBytes     uint64  `json:"settled_rss_bytes,omitempty"`
	SettledRSSAnonBytes uint64  `json:"settled_rss_anon_bytes,omitempty"`
	SettledRSSFileBytes uint64  `json:"settled_rss_file_bytes,omitempty"`
	SettleSeconds       float64 `json:"settle_seconds,omitempty"`
	// HWMBytes is VmHWM: the peak RSS of the process, writes included.
	HWMBytes uint64 `json:"hwm_bytes"`
	// GoHeapBytes is the Go heap in use (runtime.MemStats.HeapInuse).
	GoHeapBytes uint64 `json:"go_heap_bytes"`
	// DiskBytes is the space the data dir takes on disk (allocated blocks)
	// with the store open; DiskApparentBytes the sum of its file sizes,
	// which counts preallocated and sparse files in full.
	DiskBytes         uint64 `json:"disk_bytes"`
	DiskApparentBytes uint64 `json:"disk_apparent_bytes"`
}
