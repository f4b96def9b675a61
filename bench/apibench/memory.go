package apibench

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/outpost-mesh/outpost/hub/store"
)

// MemoryConfig sets what the memory benchmark (RunMemory) measures: how the
// hub's memory grows with the bytes it stores, serves in lists and sends to
// watches. Durations encode in JSON as nanoseconds.
type MemoryConfig struct {
	// Binary is the outpost binary run as `Binary hub --data-dir ...` for
	// the hub under test. Required.
	Binary string `json:"-"`
	// HubArgs are further flags of `outpost hub`, such as a memory limit,
	// given to both the first hub and the restarted one: none.
	HubArgs []string `json:"hub_args,omitempty"`
	// Dir is the parent of the hub's temporary data directory; "" means
	// os.TempDir(). The data directory is removed when the run ends.
	Dir string `json:"dir,omitempty"`
	// Namespace holds the ConfigMaps; it is created on the fresh hub:
	// "bench".
	Namespace string `json:"namespace"`

	// Objects is the number of ConfigMaps stored: 400.
	Objects int `json:"objects"`
	// ObjectSize is the size of each ConfigMap's one data value, in bytes:
	// 500,000 (500 KB; 400 of them are the 200 MB the targets are set
	// for). At most MaxObjectSize.
	ObjectSize int `json:"object_size"`
	// Writers is the number of concurrent creators, sharing one client: 4.
	Writers int `json:"writers"`
	// JSONWatches and ProtobufWatches are the watches on the namespace's
	// ConfigMaps, open from before the creates to the end of the settle,
	// each over a connection of its own: 1 and 1.
	JSONWatches     int `json:"json_watches"`
	ProtobufWatches int `json:"protobuf_watches"`
	// PageSize is the limit of the paged lists and of the Table list, as
	// client-go's informers and kubectl ask for: 500. SmallPageSize is
	// that of one more paged JSON list: 50; 0 skips it.
	PageSize      int `json:"page_size"`
	SmallPageSize int `json:"small_page_size"`
	// Table adds a list as kubectl get makes it: JSON as a Table, in pages
	// of PageSize: true.
	Table bool `json:"table"`

	// MinIdle is how long the hub is left idle after the lists before its
	// memory is watched for settling: 10s. SettleLimit then bounds that
	// watch, which ends once RSS has stopped falling for five seconds:
	// 60s.
	MinIdle     time.Duration `json:"min_idle_ns"`
	SettleLimit time.Duration `json:"settle_limit_ns"`
	// SampleInterval is how often the hub's RSS is read during a phase,
	// for its peak where VmHWM cannot be reset, and as a check where it
	// can: 50ms.
	SampleInterval time.Duration `json:"sample_interval_ns"`

	// ProfileDir, unless "", receives a heap profile of the hub at the end
	// of every phase, hub.heap.PHASE.pprof; the one of PhaseSettle is
	// taken after a forced collection, once the phase is measured: "".
	ProfileDir string `json:"-"`

	// ReadyTimeout bounds the wait for the hub to be ready, at the start
	// and after the restart: 60s.
	ReadyTimeout time.Duration `json:"ready_timeout_ns"`
	// DeliveryTimeout bounds the wait, once the creates are done, for every
	// watch to have every object: 60s.
	DeliveryTimeout time.Duration `json:"delivery_timeout_ns"`
	// StopTimeout is how long the hub gets to exit after SIGTERM before it
	// is killed: 30s.
	StopTimeout time.Duration `json:"stop_timeout_ns"`
}

// MaxObjectSize is the largest MemoryConfig.ObjectSize: the store's limit
// on a value less 8 KiB for the object's metadata and encoding.
const MaxObjectSize = store.MaxValueSize - 8<<10

// maxObjects bounds MemoryConfig.Objects so that names keep a fixed width.
const maxObjects = 10_000_000

// DefaultMemoryConfig returns the defaults above, the workload of the
// issue that set the targets. Binary is left empty.
func DefaultMemoryConfig() MemoryConfig {
	return MemoryConfig{
		Namespace:       "bench",
		Objects:         400,
		ObjectSize:      500_000,
		Writers:         4,
		JSONWatches:     1,
		ProtobufWatches: 1,
		PageSize:        500,
		SmallPageSize:   50,
		Table:           true,
		MinIdle:         10 * time.Second,
		SettleLimit:     60 * time.Second,
		SampleInterval:  50 * time.Millisecond,
		ReadyTimeout:    60 * time.Second,
		DeliveryTimeout: 60 * time.Second,
		StopTimeout:     30 * time.Second,
	}
}

// QuickMemoryConfig returns DefaultMemoryConfig scaled down to 20 objects
// of 20 kB, pages of 8 and 3 and a short idle: a smoke run of a few
// seconds whose numbers are not held to the targets.
func QuickMemoryConfig() MemoryConfig {
	c := DefaultMemoryConfig()
	c.Objects = 20
	c.ObjectSize = 20_000
	c.PageSize = 8
	c.SmallPageSize = 3
	c.MinIdle = 200 * time.Millisecond
	c.SettleLimit = time.Second
	return c
}

// Validate reports the first invalid field.
func (c MemoryConfig) Validate() error {
	switch {
	case c.Binary == "":
		return errors.New("no outpost binary to run the hub with")
	case c.Namespace == "":
		return errors.New("namespace is empty")
	case c.Objects < 1:
		return fmt.Errorf("object count %d is under 1", c.Objects)
	case c.Objects > maxObjects:
		return fmt.Errorf("object count %d is over %d", c.Objects, maxObjects)
	case c.ObjectSize < 1:
		return fmt.Errorf("object size %d is under 1 byte", c.ObjectSize)
	case c.ObjectSize > MaxObjectSize:
		return fmt.Errorf("object size %d is over %d bytes, the most the hub's store takes in one object", c.ObjectSize, MaxObjectSize)
	case c.Writers < 1:
		return fmt.Errorf("writer count %d is under 1", c.Writers)
	case c.JSONWatches < 0 || c.ProtobufWatches < 0:
		return fmt.Errorf("watch counts %d and %d: neither may be negative", c.JSONWatches, c.ProtobufWatches)
	case c.PageSize < 1:
		return fmt.Errorf("page size %d is under 1", c.PageSize)
	case c.SmallPageSize < 0:
		return fmt.Errorf("small page size %d is negative", c.SmallPageSize)
	case c.MinIdle < 0:
		return fmt.Errorf("idle time %v is negative", c.MinIdle)
	case c.SettleLimit <= 0:
		return fmt.Errorf("settle limit %v is not positive", c.SettleLimit)
	case c.SampleInterval <= 0:
		return fmt.Errorf("sample interval %v is not positive", c.SampleInterval)
	case c.ReadyTimeout <= 0:
		return fmt.Errorf("ready timeout %v is not positive", c.ReadyTimeout)
	case c.DeliveryTimeout <= 0:
		return fmt.Errorf("delivery timeout %v is not positive", c.DeliveryTimeout)
	case c.StopTimeout <= 0:
		return fmt.Errorf("stop timeout %v is not positive", c.StopTimeout)
	}
	for _, a := range c.HubArgs {
		if !strings.HasPrefix(a, "-") {
			return fmt.Errorf("hub argument %q is not a flag", a)
		}
	}
	return nil
}

// The phases of a memory run, in order. The lists (listSpecs) come
// between PhaseCreate and PhaseSettle.
const (
	// PhaseReady is the fresh hub from its start to ready.
	PhaseReady = "ready"
	// PhaseCreate opens the watches, creates the objects and waits for
	// every watch to have them.
	PhaseCreate = "create"
	// PhaseSettle leaves the hub idle, the watches still open, until its
	// RSS stops falling.
	PhaseSettle = "settle"
	// PhaseRestart is the hub started again on the same data dir, from
	// its start to ready.
	PhaseRestart = "restart"
)

// MemoryResult is what one memory run measured.
type MemoryResult struct {
	// Created counts the objects stored, Failed the creates that failed;
	// CreateErrors holds their distinct messages, at most report.MaxErrors.
	Created      int      `json:"created"`
	Failed       int      `json:"failed"`
	CreateErrors []string `json:"create_errors,omitempty"`
	// StoredBytes is the sum of the created objects' sizes, as the hub
	// returned them, in protobuf, the form its store keeps them in: their
	// data and their metadata. The ratios to the targets are to it.
	StoredBytes uint64 `json:"stored_bytes"`
	// DataDirBytes is the space the hub's data dir (store, certificates)
	// takes on disk once the first hub has stopped; DataDirApparentBytes
	// the sum of its file sizes.
	DataDirBytes         uint64 `json:"data_dir_bytes"`
	DataDirApparentBytes uint64 `json:"data_dir_apparent_bytes"`

	// Phases are the phases in the order run.
	Phases []MemoryPhase `json:"phases"`
	// PeakFrom says how per-phase peaks were taken: "VmHWM" when the
	// kernel let it be reset at the start of each phase, or "sampled"
	// every SampleInterval when it did not (ResetError says why).
	PeakFrom   string `json:"peak_from"`
	ResetError string `json:"reset_error,omitempty"`

	Watches []StreamWatch `json:"watches"`

	// ReadySeconds is from starting the first hub to its being ready,
	// RestartReadySeconds the same of the second.
	ReadySeconds        float64 `json:"ready_seconds"`
	RestartReadySeconds float64 `json:"restart_ready_seconds"`
	// SettleSeconds is how long the settle phase watched RSS after
	// MinIdle.
	SettleSeconds float64 `json:"settle_seconds"`
	// ClientPeakRSSBytes is the benchmark process's own VmHWM at the end:
	// it shares the machine's memory with the hub.
	ClientPeakRSSBytes uint64 `json:"client_peak_rss_bytes"`
	// ProcError says why the hub's memory could not be read, if so.
	ProcError string `json:"proc_error,omitempty"`
	// ProfileErrors holds why heap profiles could not be taken, if so.
	ProfileErrors []string `json:"profile_errors,omitempty"`
	// Exit and RestartExit are how each hub ended after SIGTERM.
	Exit        string `json:"exit"`
	RestartExit string `json:"restart_exit"`
}

// MemoryPhase is one phase: the hub's memory at its end and its peak, and
// for lists what was read.
type MemoryPhase struct {
	Name     string        `json:"name"`
	Duration time.Duration `json:"duration_ns"`
	// RSSBytes is the hub's VmRSS at the end of the phase, split into
	// RSSAnonBytes (heap, stacks) and RSSFileBytes (the binary and mapped
	// files such as badger's tables and value log).
	RSSBytes     uint64 `json:"rss_bytes"`
	RSSAnonBytes uint64 `json:"rss_anon_bytes"`
	RSSFileBytes uint64 `json:"rss_file_bytes"`
	// PeakBytes is the hub's peak RSS during the phase; for PhaseReady
	// and PhaseRestart, of the process so far.
	PeakBytes uint64 `json:"peak_bytes"`
	// List is set for list phases.
	List *StreamList `json:"list,omitempty"`
}

// peak returns the phase's peak, or its end RSS where that is higher (a
// peak is never under the RSS read after it).
func (p MemoryPhase) peak() uint64 { return max(p.PeakBytes, p.RSSBytes) }

// StreamList is one list read as a stream and discarded: its pages,
// items and bytes.
type StreamList struct {
	// Accept is the Accept header sent; Limit the page size, 0 unpaged.
	Accept string `json:"accept"`
	Limit  int    `json:"limit"`
	// Requests is the pages asked for; Items the items (Table rows)
	// counted in them; BodyBytes their bodies' bytes.
	Requests  int    `json:"requests"`
	Items     int    `json:"items"`
	BodyBytes uint64 `json:"body_bytes"`
	// FirstByte is how long the first page took to start arriving: a hub
	// that encodes a list as it streams it answers long before it is done.
	FirstByte time.Duration `json:"first_byte_ns"`
	Error     string        `json:"error,omitempty"`
}

// StreamWatch is one watch read as a stream and discarded.
type StreamWatch struct {
	Encoding string `json:"encoding"` // "json" or "protobuf"
	// Added counts ADDED events, Other the other events; Bytes is the
	// stream's bytes.
	Added int    `json:"added"`
	Other int    `json:"other"`
	Bytes uint64 `json:"bytes"`
	// Error is why the watch ended before the run did, or an error event.
	Error string `json:"error,omitempty"`
}
