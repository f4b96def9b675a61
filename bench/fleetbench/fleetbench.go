// Package fleetbench measures a hub with a fleet of simulated edge nodes: a
// hub started as a child process, and many edge agents on the fake runtime
// in this process, each with its own QUIC connection through a counting
// UDP relay. It times the fleet's join, pod starts, and its convergence
// after the hub is killed and restarted, and counts an idle fleet's bytes
// on the wire. It backs `outpost bench fleet`.
package fleetbench

import (
	"errors"
	"fmt"
	"time"

	"github.com/outpost-mesh/outpost/bench/report"
)

// Config sets what is measured. Durations encode in JSON as nanoseconds.
type Config struct {
	// Binary is the outpost binary run as `Binary hub ...` for the hub
	// under test. Required.
	Binary string `json:"-"`
	// Dir is the parent of the run's temporary directory, which holds the
	// hub's data dir and every agent's; "" means os.TempDir(). It is
	// removed when the run ends.
	Dir string `json:"dir,omitempty"`
	// AgentDir, unless "", is the parent of a temporary directory for the
	// agents' data (checkpoints, certificates), removed when the run
	// ends; "" keeps it in the run's directory. Every checkpoint write is
	// synced: a thousand agents syncing to one disk measure that disk,
	// which real nodes do not share, so point it at a tmpfs (`outpost
	// bench fleet` defaults to /dev/shm where there is one): "".
	AgentDir string `json:"agent_dir,omitempty"`
	// Namespace holds the pods; it is created on the fresh hub: "fleet".
	Namespace string `json:"namespace"`

	// Nodes is the number of simulated edge nodes: 1,000.
	Nodes int `json:"nodes"`
	// PodsPerNode is the number of pods created on each node, bound by
	// spec.nodeName: 10.
	PodsPerNode int `json:"pods_per_node"`
	// Workers is the number of concurrent pod creators, sharing one
	// client as one controller would: 50.
	Workers int `json:"workers"`
	// ProbeNodes is the number of nodes that get a probe pod after the
	// hub restarts, the first ones by name; 0 means every node: 0.
	ProbeNodes int `json:"probe_nodes"`

	// Settle is how long the fleet is left alone, once every pod runs,
	// before the idle window opens: 10s.
	Settle time.Duration `json:"settle_ns"`
	// Idle is the window over which the idle fleet's traffic, and the
	// hub's steady-state CPU, are measured: 60s.
	Idle time.Duration `json:"idle_ns"`
	// AgentResync is each agent's agent.Config.Resync, how often it
	// looks at its runtime unprompted: 10s rather than the agent's 1s
	// default. The fake runtime changes only when the agent acts, and the
	// agent reconciles at once on every change from the hub, so the
	// periodic round finds nothing to do; at 1s, a thousand agents spend
	// a CPU on it that the hub, on the same machine, would not get.
	AgentResync time.Duration `json:"agent_resync_ns"`

	// ProfileDir, unless "", receives CPU profiles of the hub
	// (hub.cpu.pprof, from its /debug/pprof) and of this process
	// (fleet.cpu.pprof) over the first ProfileDuration of ProfilePhase:
	// "".
	ProfileDir      string        `json:"-"`
	ProfileDuration time.Duration `json:"-"`
	// ProfilePhase is the phase profiled: "join", "pods", "idle" or
	// "restart" (from the restarted hub being ready): "pods".
	ProfilePhase string `json:"-"`

	// ReadyTimeout bounds each wait for the hub to print its KUBECONFIG
	// export line: 60s.
	ReadyTimeout time.Duration `json:"ready_timeout_ns"`
	// JoinTimeout bounds the wait for every node to be Ready: 5m.
	JoinTimeout time.Duration `json:"join_timeout_ns"`
	// RunningTimeout bounds the wait, once the creates are done, for
	// every pod to be seen Running: 2m.
	RunningTimeout time.Duration `json:"running_timeout_ns"`
	// ConvergeTimeout bounds the wait, from the kill, for the fleet to
	// converge on the restarted hub: 3m.
	ConvergeTimeout time.Duration `json:"converge_timeout_ns"`
	// StopTimeout is how long the hub gets to exit after SIGTERM before it
	// is killed: 30s.
	StopTimeout time.Duration `json:"stop_timeout_ns"`
}

// DefaultConfig returns the defaults above, the workload the targets are
// set for. Binary is left empty.
func DefaultConfig() Config {
	return Config{
		Namespace:       "fleet",
		Nodes:           1000,
		PodsPerNode:     10,
		Workers:         50,
		Settle:          10 * time.Second,
		Idle:            60 * time.Second,
		AgentResync:     10 * time.Second,
		ProfileDuration: 10 * time.Second,
		ProfilePhase:    PhasePods,
		ReadyTimeout:    60 * time.Second,
		JoinTimeout:     5 * time.Minute,
		RunningTimeout:  2 * time.Minute,
		ConvergeTimeout: 3 * time.Minute,
		StopTimeout:     30 * time.Second,
	}
}

// QuickConfig returns DefaultConfig scaled down to 50 nodes of 2 pods and
// a 20s idle window: a smoke run of well under a minute whose numbers are
// rough and are not held to the targets.
func QuickConfig() Config {
	c := DefaultConfig()
	c.Nodes = 50
	c.PodsPerNode = 2
	c.Workers = 10
	c.Settle = 2 * time.Second
	c.Idle = 20 * time.Second // two of the nodes' 10s keep-alive periods
	c.ProfileDuration = 2 * time.Second
	return c
}

// Phases that can be profiled.
const (
	PhaseJoin    = "join"
	PhasePods    = "pods"
	PhaseIdle    = "idle"
	PhaseRestart = "restart"
)

// Bounds on the workload: node and pod names keep a fixed width, and one
// process holds the agents.
const (
	maxNodes       = 10_000
	maxPodsPerNode = 1_000
)

// Validate reports the first invalid field.
func (c Config) Validate() error {
	switch {
	case c.Binary == "":
		return errors.New("no outpost binary to run the hub with")
	case c.Namespace == "":
		return errors.New("namespace is empty")
	case c.Nodes < 1 || c.Nodes > maxNodes:
		return fmt.Errorf("node count %d is outside 1..%d", c.Nodes, maxNodes)
	case c.PodsPerNode < 1 || c.PodsPerNode > maxPodsPerNode:
		return fmt.Errorf("pods per node %d is outside 1..%d", c.PodsPerNode, maxPodsPerNode)
	case c.Workers < 1:
		return fmt.Errorf("worker count %d is under 1", c.Workers)
	case c.ProbeNodes < 0 || c.ProbeNodes > c.Nodes:
		return fmt.Errorf("probe nodes %d is outside 0..%d (the node count)", c.ProbeNodes, c.Nodes)
	case c.Settle < 0:
		return fmt.Errorf("settle time %v is negative", c.Settle)
	case c.Idle < time.Second:
		return fmt.Errorf("idle window %v is under a second", c.Idle)
	case c.AgentResync <= 0:
		return fmt.Errorf("agent resync %v is not positive", c.AgentResync)
	case c.ReadyTimeout <= 0 || c.JoinTimeout <= 0 || c.RunningTimeout <= 0 || c.ConvergeTimeout <= 0 || c.StopTimeout <= 0:
		return errors.New("timeouts must be positive")
	case c.ProfileDir != "" && c.ProfileDuration < time.Second:
		return fmt.Errorf("profile duration %v is under a second", c.ProfileDuration)
	}
	switch c.ProfilePhase {
	case PhaseJoin, PhasePods, PhaseIdle, PhaseRestart:
	default:
		if c.ProfileDir != "" {
			return fmt.Errorf("profile phase %q is not one of %s, %s, %s, %s", c.ProfilePhase, PhaseJoin, PhasePods, PhaseIdle, PhaseRestart)
		}
	}
	return nil
}

// probes returns the number of probe pods of the restart.
func (c Config) probes() int {
	if c.ProbeNodes == 0 {
		return c.Nodes
	}
	return c.ProbeNodes
}

// Result is what one run measured.
type Result struct {
	Join    JoinResult    `json:"join"`
	Pods    PodsResult    `json:"pods"`
	Idle    IdleResult    `json:"idle"`
	Restart RestartResult `json:"restart"`
	Hub     HubResult     `json:"hub"`
	Fleet   FleetResult   `json:"fleet"`
	// Watch is the benchmark's watches on nodes and pods.
	Watch WatchResult `json:"watch"`
	// CPU is each phase's CPU use by the hub, the fleet and the rest of
	// the machine: join, pods (creates and drain), idle, restart (from
	// the kill to convergence).
	CPU []PhaseCPU `json:"cpu"`
}

// JoinResult is the fleet joining a fresh hub: every agent started at
// once, each joining with the same bootstrap token.
type JoinResult struct {
	Nodes int `json:"nodes"`
	// Ready counts the nodes seen Ready by the watch on nodes.
	Ready int `json:"ready"`
	// Seconds runs from the first agent's start to the last node seen
	// Ready, or to the join timeout if not every node was.
	Seconds float64 `json:"seconds"`
	// Latency is of each node, from the first agent's start to its Node
	// first seen with Ready=True.
	Latency report.Latency `json:"latency"`
	// AgentErrors holds the distinct errors agents' Run returned.
	AgentErrors []string `json:"agent_errors,omitempty"`
}

// PodsResult is the pods created through client-go and started by their
// nodes.
type PodsResult struct {
	Created int      `json:"created"`
	Failed  int      `json:"failed"`
	Errors  []string `json:"errors,omitempty"`
	// CreateSeconds runs from the first Create call to the last return;
	// CreatesPerSec is Created/CreateSeconds.
	CreateSeconds float64 `json:"create_seconds"`
	CreatesPerSec float64 `json:"creates_per_sec"`
	// CreateLatency is of each successful Create call.
	CreateLatency report.Latency `json:"create_latency"`
	// Running counts the created pods the watch saw with phase Running.
	Running int `json:"running"`
	// Start is of each pod, from just before its Create call to the watch
	// event that first showed it Running: the pod's trip to its node's
	// view, the agent's start of its container, and its status back.
	Start report.Latency `json:"start"`
	// AfterCreate is of each pod from its Create call's return, when the
	// pod is durable on the hub, to the watch event showing it Running:
	// Start less the Create call.
	AfterCreate report.Latency `json:"after_create"`
	// DrainSeconds is how long after the last Create returned every pod
	// was seen Running, or the running timeout if not every pod was.
	DrainSeconds float64 `json:"drain_seconds"`
}

// IdleResult is the converged fleet left alone for the idle window.
type IdleResult struct {
	Seconds float64 `json:"seconds"`
	// UpBytes and DownBytes are the UDP payload bytes the relays carried
	// toward the hub and back during the window, Datagrams the datagrams
	// both ways.
	UpBytes   int64 `json:"up_bytes"`
	DownBytes int64 `json:"down_bytes"`
	Datagrams int64 `json:"datagrams"`
	// WireBytesPerNodeMin counts each datagram with its IPv4 and UDP
	// headers (28 bytes), per node and minute; KbitPerNode is the same
	// as a rate, in kbit/s (1 kbit = 1,000 bits). PayloadBytesPerNodeMin
	// counts UDP payload only.
	WireBytesPerNodeMin    float64 `json:"wire_bytes_per_node_min"`
	KbitPerNode            float64 `json:"kbit_per_node"`
	PayloadBytesPerNodeMin float64 `json:"payload_bytes_per_node_min"`
	DatagramsPerNodeMin    float64 `json:"datagrams_per_node_min"`
	// MaxNodeWireBytesPerMin is the busiest node's wire bytes per minute.
	MaxNodeWireBytesPerMin float64 `json:"max_node_wire_bytes_per_min"`
	// SmallDatagrams counts the datagrams of at most smallDatagram (64)
	// bytes of payload, SmallWireBytes their wire bytes: the size of
	// QUIC's keep-alive PINGs and their acknowledgements.
	SmallDatagrams int64 `json:"small_datagrams"`
	SmallWireBytes int64 `json:"small_wire_bytes"`
	// StatusItems counts the status items the agents had acknowledged by
	// the hub during the window; SyncFrameBytes the sync frame bytes they
	// received. Both are what flowed besides QUIC's own packets (keep-
	// alives and acknowledgements).
	StatusItems    int64 `json:"status_items"`
	SyncFrameBytes int64 `json:"sync_frame_bytes"`
	// Reconnects counts the sessions agents started during the window.
	Reconnects int64 `json:"reconnects"`
}

// RestartResult is the reconnect storm: the hub killed with SIGKILL and
// started again on the same data dir and addresses.
type RestartResult struct {
	// HubReadySeconds runs from the kill to the restarted hub's
	// KUBECONFIG line.
	HubReadySeconds float64 `json:"hub_ready_seconds"`
	// SessionsSeconds runs from the kill to every agent having a new
	// session (connected, with more sessions started than before the
	// kill), or to the converge timeout; Sessions counts the agents that
	// had one.
	SessionsSeconds float64 `json:"sessions_seconds"`
	Sessions        int     `json:"sessions"`
	// Reconnect is of each agent, from the kill to its new session being
	// seen (polled every 20ms). Noticed is of each agent from the kill to
	// its old session being seen ended: until then it cannot know the hub
	// is gone and back.
	Reconnect report.Latency `json:"reconnect"`
	Noticed   report.Latency `json:"noticed"`
	// Probes counts the probe pods created, one per probe node, once the
	// restarted hub was ready; ProbesRunning those seen Running, and
	// ProbesSeconds runs from the kill to the last of them, or to the
	// converge timeout. ProbeStart is of each, from its Create call.
	Probes        int            `json:"probes"`
	ProbeErrors   []string       `json:"probe_errors,omitempty"`
	ProbesRunning int            `json:"probes_running"`
	ProbesSeconds float64        `json:"probes_seconds"`
	ProbeStart    report.Latency `json:"probe_start"`
	// ConvergedSeconds is the later of SessionsSeconds and ProbesSeconds:
	// the reconnect storm's length. Converged says whether it ended
	// within the timeout.
	ConvergedSeconds float64 `json:"converged_seconds"`
	Converged        bool    `json:"converged"`
	// WireBytes counts the relays' traffic with IP and UDP headers from
	// the kill to convergence, Inventories the sessions resumed from an
	// inventory rather than from a revision.
	WireBytes   int64 `json:"wire_bytes"`
	Inventories int64 `json:"inventories"`
	// SyncFrameBytes counts the sync frame bytes agents received from the
	// kill to convergence, ResumeBytes those of their new sessions'
	// resume steps (what the hub sent to bring each view up to date).
	SyncFrameBytes int64 `json:"sync_frame_bytes"`
	ResumeBytes    int64 `json:"resume_bytes"`
	// Checks after convergence: nodes whose Lease the restarted hub
	// renewed (LeasesRenewed), the pods created before the kill still
	// Running on the hub (PodsRunning), and containers the fake runtimes
	// restarted, over the whole run (ContainerRestarts).
	LeasesRenewed     int    `json:"leases_renewed"`
	PodsRunning       int    `json:"pods_running"`
	ContainerRestarts int    `json:"container_restarts"`
	CheckError        string `json:"check_error,omitempty"`
}

// WatchResult is the benchmark's own watches, which time joins and pod
// starts: they are resumed when they end, as the hub's kill ends them.
type WatchResult struct {
	Restarts int      `json:"restarts"`
	Errors   []string `json:"errors,omitempty"`
}

// HubResult is the hub process as /proc shows it (Linux only; zero
// elsewhere).
type HubResult struct {
	// ReadySeconds is from starting the process to its KUBECONFIG line.
	ReadySeconds float64 `json:"ready_seconds"`
	// RSSBytes is VmRSS at the end of the idle window, the steady state
	// with every node connected and every pod running; HWMBytes VmHWM
	// then.
	RSSBytes uint64 `json:"rss_bytes"`
	HWMBytes uint64 `json:"hwm_bytes"`
	// CPUSeconds is its user and system CPU time then, since it started;
	// Result.CPU has it by phase.
	CPUSeconds float64 `json:"cpu_seconds"`
	// RestartRSSBytes is the restarted hub's VmRSS once converged.
	RestartRSSBytes uint64 `json:"restart_rss_bytes"`
	ProcError       string `json:"proc_error,omitempty"`
	// Exit is how the restarted hub ended after SIGTERM.
	Exit string `json:"exit"`
}

// FleetResult is this process, which runs every agent, relay and client.
type FleetResult struct {
	// RSSBytes is VmRSS at the end of the idle window, HWMBytes VmHWM
	// then; PerNodeBytes is RSSBytes per node.
	RSSBytes     uint64 `json:"rss_bytes"`
	HWMBytes     uint64 `json:"hwm_bytes"`
	PerNodeBytes uint64 `json:"per_node_bytes"`
	// HeapBytes is the Go heap in use then (runtime HeapInuse). Each
	// agent's badger memtable is allocated whole when opened, about
	// 1.3 MiB at the sizes used, and counts in it.
	HeapBytes uint64 `json:"heap_bytes"`
	// TotalCPUSeconds is the CPU time used from the start of the run to
	// the reconnect storm's end.
	TotalCPUSeconds float64 `json:"total_cpu_seconds"`
	Goroutines      int     `json:"goroutines"`
	// AgentWarnings counts the warnings and errors agents logged;
	// AgentLogSamples holds some distinct messages.
	AgentWarnings   int64    `json:"agent_warnings"`
	AgentLogSamples []string `json:"agent_log_samples,omitempty"`
	// AgentLogs counts the agents' log records of level info and above
	// by level and message ("INFO connected to hub"), over the run: how
	// often they joined, connected, lost the hub, retried.
	AgentLogs map[string]int64 `json:"agent_logs,omitempty"`
	// RelayTruncated counts datagrams too large for a relay's buffer,
	// which it dropped: 0 unless something is wrong.
	RelayTruncated int64 `json:"relay_truncated"`
}
