// Package apibench measures the hub's Kubernetes API end to end, as clients
// see it: a hub started as a child process, pods created through client-go
// by concurrent workers while many watchers receive them, full and paged
// lists, and the hub's memory and CPU (Run); and, with large ConfigMaps
// stored, watched and listed, the hub's memory phase by phase against the
// bytes it stores (RunMemory). It backs `outpost bench api` and `outpost
// bench api memory`.
package apibench

import (
	"errors"
	"fmt"
	"time"

	"github.com/outpost-mesh/outpost/bench/report"
)

// Config sets what is measured. Durations encode in JSON as nanoseconds.
type Config struct {
	// Binary is the outpost binary run as `Binary hub --data-dir ...` for
	// the hub under test. Required.
	Binary string `json:"-"`
	// Dir is the parent of the hub's temporary data directory; "" means
	// os.TempDir(). The data directory is removed when the run ends.
	Dir string `json:"dir,omitempty"`
	// Namespace holds the pods; it is created on the fresh hub: "bench".
	Namespace string `json:"namespace"`

	// Pods is the number of pods created: 10,000.
	Pods int `json:"pods"`
	// Workers is the number of concurrent creators, sharing one client
	// (one HTTP/2 connection), as one controller would: 50.
	Workers int `json:"workers"`
	// Watchers is the number of watches on the namespace's pods, each its
	// own client with its own connection, as separate agents would: 100.
	Watchers int `json:"watchers"`
	// PageSize is the limit of each page of the paged list: 500.
	PageSize int `json:"page_size"`
	// JSON makes every client send and accept JSON, as kubectl does,
	// instead of Kubernetes protobuf, which client-go's typed clients use
	// for built-in types by default (and so controllers and kubelets do):
	// false.
	JSON bool `json:"json"`
	// MetadataWatchers makes the watchers metadata-only, as client-go's
	// metadata informers are (garbage collection, namespace cleanup): the
	// hub sends, and each watcher decodes, only object metadata: false.
	MetadataWatchers bool `json:"metadata_watchers"`
	// RBAC makes the creator and watchers act as RBACUser, authorized by
	// RBAC, instead of system:masters (see RunCompare).
	RBAC bool `json:"rbac"`

	// ProfileDir, unless "", receives CPU profiles of the hub
	// (hub.cpu.pprof, from its /debug/pprof) and of this process
	// (client.cpu.pprof) over the first ProfileDuration of the creates:
	// "".
	ProfileDir      string        `json:"-"`
	ProfileDuration time.Duration `json:"-"`

	// ReadyTimeout bounds the wait for the hub to print its KUBECONFIG
	// export line: 60s.
	ReadyTimeout time.Duration `json:"ready_timeout_ns"`
	// DeliveryTimeout bounds the wait, once the creates are done, for every
	// watcher to have seen every pod; what is not seen by then counts as
	// missing: 60s.
	DeliveryTimeout time.Duration `json:"delivery_timeout_ns"`
	// StopTimeout is how long the hub gets to exit after SIGTERM before it
	// is killed: 30s.
	StopTimeout time.Duration `json:"stop_timeout_ns"`
}

// DefaultConfig returns the defaults above, the workload the targets are
// set for. Binary is left empty.
func DefaultConfig() Config {
	return Config{
		Namespace:       "bench",
		Pods:            10_000,
		Workers:         50,
		Watchers:        100,
		PageSize:        500,
		ReadyTimeout:    60 * time.Second,
		DeliveryTimeout: 60 * time.Second,
		StopTimeout:     30 * time.Second,
		ProfileDuration: 5 * time.Second,
	}
}

// QuickConfig returns DefaultConfig scaled down to 500 pods, 10 workers and
// 10 watchers: a smoke run of a few seconds whose numbers are rough and are
// not held to the targets.
func QuickConfig() Config {
	c := DefaultConfig()
	c.Pods = 500
	c.Workers = 10
	c.Watchers = 10
	c.PageSize = 100
	return c
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	switch {
	case c.Binary == "":
		return errors.New("no outpost binary to run the hub with")
	case c.Namespace == "":
		return errors.New("namespace is empty")
	case c.Pods < 1:
		return fmt.Errorf("pod count %d is under 1", c.Pods)
	case c.Pods > maxPods:
		return fmt.Errorf("pod count %d is over %d", c.Pods, maxPods)
	case c.Workers < 1:
		return fmt.Errorf("worker count %d is under 1", c.Workers)
	case c.Watchers < 0:
		return fmt.Errorf("watcher count %d is negative", c.Watchers)
	case c.PageSize < 1:
		return fmt.Errorf("page size %d is under 1", c.PageSize)
	case c.ReadyTimeout <= 0:
		return fmt.Errorf("ready timeout %v is not positive", c.ReadyTimeout)
	case c.DeliveryTimeout <= 0:
		return fmt.Errorf("delivery timeout %v is not positive", c.DeliveryTimeout)
	case c.ProfileDir != "" && c.ProfileDuration < time.Second:
		return fmt.Errorf("profile duration %v is under a second", c.ProfileDuration)
	case c.StopTimeout <= 0:
		return fmt.Errorf("stop timeout %v is not positive", c.StopTimeout)
	}
	return nil
}

// maxPods bounds Pods so that pod names keep a fixed width.
const maxPods = 10_000_000

// Result is what one run measured.
type Result struct {
	Hub     HubResult    `json:"hub"`
	Creates CreateResult `json:"creates"`
	// List is one unpaged list of every pod; PagedList the same pods read
	// in pages of Config.PageSize.
	List      ListResult  `json:"list"`
	PagedList ListResult  `json:"paged_list"`
	Watch     WatchResult `json:"watch"`
	// ClientCPUSeconds is the user and system CPU time the measuring
	// process (clients, watchers, decoding) used from the hub being ready to
	// the last delivery: on a small machine it competes with the hub.
	ClientCPUSeconds float64 `json:"client_cpu_seconds"`
}

// CreateResult is the pods' Creates. Each Create returns once the pod is
// durable in the hub's store.
type CreateResult struct {
	// Created counts successful Creates, Failed the others; Errors holds
	// their distinct messages, at most report.MaxErrors of them.
	Created int      `json:"created"`
	Failed  int      `json:"failed"`
	Errors  []string `json:"errors,omitempty"`
	// Seconds runs from the first Create call to the last return; PerSec
	// is Created/Seconds.
	Seconds float64 `json:"seconds"`
	PerSec  float64 `json:"creates_per_sec"`
	// Latency is of each successful Create call.
	Latency report.Latency `json:"latency"`
}

// ListResult is one list of the namespace's pods, decoding included.
type ListResult struct {
	Items int `json:"items"`
	// Pages is the number of requests made: 1 for an unpaged list.
	Pages    int           `json:"pages"`
	Duration time.Duration `json:"duration_ns"`
	Error    string        `json:"error,omitempty"`
}

// WatchResult is the delivery of the created pods to the watchers.
type WatchResult struct {
	Watchers int `json:"watchers"`
	// Expected is Watchers*Creates.Created: every watcher must see every
	// pod created. Delivered counts the distinct (watcher, pod) ADDED
	// events received; Missing is Expected-Delivered, never negative.
	Expected  int `json:"expected"`
	Delivered int `json:"delivered"`
	Missing   int `json:"missing"`
	// Duplicates counts ADDED events for a pod the watcher had already
	// seen, Foreign those for pods this run did not create.
	Duplicates int `json:"duplicates"`
	Foreign    int `json:"foreign"`
	// Latency runs from just before the Create call to the watcher
	// receiving the decoded event: it includes the durable write.
	Latency report.Latency `json:"latency"`
	// DrainSeconds is how long after the last Create returned every
	// watcher had seen every pod, or the delivery timeout if not all had.
	DrainSeconds float64 `json:"drain_seconds"`
	// Restarts counts watches that ended early and were resumed from the
	// last resourceVersion seen; Errors holds the distinct reasons, at most
	// report.MaxErrors of them.
	Restarts int      `json:"restarts"`
	Errors   []string `json:"errors,omitempty"`
}

// HubResult is the hub process: its memory and CPU time as /proc shows
// them (Linux only; zero elsewhere) and how it started and stopped.
type HubResult struct {
	// ReadySeconds is from starting the process to its KUBECONFIG line.
	ReadySeconds float64 `json:"ready_seconds"`
	// StartRSSBytes is VmRSS once ready; RSSBytes VmRSS after every
	// watcher has had its deliveries; HWMBytes VmHWM then, the peak.
	StartRSSBytes uint64 `json:"start_rss_bytes"`
	RSSBytes      uint64 `json:"rss_bytes"`
	HWMBytes      uint64 `json:"hwm_bytes"`
	// StartCPUSeconds is the user and system CPU time used once ready,
	// CPUSeconds the total at the end, the same time as RSSBytes.
	StartCPUSeconds float64 `json:"start_cpu_seconds"`
	CPUSeconds      float64 `json:"cpu_seconds"`
	// CreateCPUSeconds is the CPU time the hub used while the pods were
	// created, to compare with CreateResult.Seconds.
	CreateCPUSeconds float64 `json:"create_cpu_seconds"`
	// ProcError says why memory or CPU could not be read, if so.
	ProcError string `json:"proc_error,omitempty"`
	// Exit is how the hub ended after SIGTERM: "exit status 0", or the
	// error, or "killed after ..." when it had to be killed.
	Exit string `json:"exit"`
}
