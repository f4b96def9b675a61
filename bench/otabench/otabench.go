// Package otabench measures over-the-air updates of a fleet: a hub run as
// a child process (`outpost hub`), and many edge agents on the fake
// runtime in this process, each with its own QUIC connection through a
// counting UDP relay (bench/internal/relay), taking releases in waves. The
// simulated nodes install nothing: their slots (SimSlots) record the trial
// and commit it, and the artifact, fetched and verified chunk by chunk by
// the agent's own transfer, is deleted once handed over. The full release
// is a pseudo-random "agent" artifact, rolled out to every node. The delta
// is of a small change of it, rolled out to every node; or, given two
// builds of the agent (Config.BaseArtifact, Config.Artifact), of the
// rebuild, rolled out to a few nodes after the base build. It times each
// wave and the whole fleet, samples the hub's CPU and memory, counts each
// node's bytes for a full and for a delta update, and the cost of resuming
// transfers cut mid-way. It backs `outpost bench ota`.
package otabench

import (
	"errors"
	"fmt"
	"time"

	"github.com/outpost-mesh/outpost/bench/report"
)

// Config sets what is measured. Durations encode in JSON as nanoseconds.
type Config struct {
	// Binary is the outpost binary, run as the hub and for its release
	// and rollout commands. Required.
	Binary string `json:"-"`
	// Dir is the parent of the run's temporary directory (hub data, keys,
	// artifacts); "" means os.TempDir(). Removed when the run ends.
	Dir string `json:"dir,omitempty"`
	// AgentDir, unless "", is the parent of the agents' temporary data
	// dirs, where each download is staged until handed to the slots: a
	// tmpfs, so that the disk is spared: "".
	AgentDir string `json:"agent_dir,omitempty"`

	// Nodes is the number of simulated nodes: 1,000.
	Nodes int `json:"nodes"`
	// ArtifactSize is the size of the agent artifact: 5 MB.
	ArtifactSize int `json:"artifact_size"`
	// ChangedRegions regions of ChangedBytes bytes each differ between the
	// full release and the delta one: 4 of 200 bytes, a rebuilt agent with
	// a small change.
	ChangedRegions int `json:"changed_regions"`
	ChangedBytes   int `json:"changed_bytes"`
	// Waves are the rollouts' cumulative wave targets: "1%,10%,100%".
	Waves string `json:"waves"`
	// HealthWindow is the rollouts' health window: 5s.
	HealthWindow time.Duration `json:"health_window_ns"`
	// BaseArtifact and Artifact, unless "", are two builds of the agent:
	// an earlier one and a rebuild of it with a small change (`make
	// bench-ota` links two versions into outpost-edge). The delta is then
	// measured on them: after the full rollout, the base build is rolled
	// out to RebuiltNodes nodes (whole: the nodes hold no base for it),
	// then the rebuild (a delta against the base build). Both or neither;
	// without them the delta is the fleet's, of the pseudo-random artifact
	// with ChangedRegions rewritten.
	BaseArtifact string `json:"base_artifact,omitempty"`
	Artifact     string `json:"artifact,omitempty"`
	// RebuiltNodes is how many nodes take the builds: 5. Each holds the
	// base build in memory, as the delta's dictionary, while it fetches
	// the rebuild.
	RebuiltNodes int `json:"rebuilt_nodes,omitempty"`
	// CutNodes nodes of the last wave of the full rollout have their
	// link black-holed for CutFor once they have received about half the
	// artifact: 10 for 10s+, long enough for the transfer to give up on
	// its stream and resume on a new one.
	CutNodes int           `json:"cut_nodes"`
	CutFor   time.Duration `json:"cut_for_ns"`
	// AgentResync is each agent's agent.Config.Resync: 10s.
	AgentResync time.Duration `json:"agent_resync_ns"`

	// ReadyTimeout bounds the wait for the hub to be ready: 60s;
	// JoinTimeout for every node to be Ready: 5m; RolloutTimeout for each
	// rollout to reach every node: 15m; StopTimeout the hub's exit after
	// SIGTERM: 30s.
	ReadyTimeout   time.Duration `json:"ready_timeout_ns"`
	JoinTimeout    time.Duration `json:"join_timeout_ns"`
	RolloutTimeout time.Duration `json:"rollout_timeout_ns"`
	StopTimeout    time.Duration `json:"stop_timeout_ns"`
}

// DefaultConfig returns the workload the targets are set for. Binary is
// left empty.
func DefaultConfig() Config {
	return Config{
		Nodes:          1000,
		ArtifactSize:   5_000_000,
		ChangedRegions: 4,
		ChangedBytes:   200,
		RebuiltNodes:   5,
		Waves:          "1%,10%,100%",
		HealthWindow:   5 * time.Second,
		CutNodes:       10,
		CutFor:         12 * time.Second,
		AgentResync:    10 * time.Second,
		ReadyTimeout:   60 * time.Second,
		JoinTimeout:    5 * time.Minute,
		RolloutTimeout: 15 * time.Minute,
		StopTimeout:    30 * time.Second,
	}
}

// QuickConfig returns DefaultConfig scaled down to 50 nodes and 2 cuts: a
// smoke run whose numbers are not held to the targets.
func QuickConfig() Config {
	c := DefaultConfig()
	c.Nodes = 50
	c.CutNodes = 2
	c.RolloutTimeout = 5 * time.Minute
	return c
}

// Bounds on the workload.
const (
	maxNodes    = 10_000
	maxArtifact = 256 << 20
)

// Validate reports the first invalid field.
func (c Config) Validate() error {
	switch {
	case c.Binary == "":
		return errors.New("no outpost binary to run the hub with")
	case c.Nodes < 1 || c.Nodes > maxNodes:
		return fmt.Errorf("node count %d is outside 1..%d", c.Nodes, maxNodes)
	case c.ArtifactSize < 1<<16 || c.ArtifactSize > maxArtifact:
		return fmt.Errorf("artifact size %d is outside %d..%d", c.ArtifactSize, 1<<16, maxArtifact)
	case c.ChangedRegions < 1 || c.ChangedBytes < 1 || c.ChangedRegions*c.ChangedBytes > c.ArtifactSize/2:
		return fmt.Errorf("%d changed regions of %d bytes do not fit a small change of a %d-byte artifact", c.ChangedRegions, c.ChangedBytes, c.ArtifactSize)
	case (c.BaseArtifact == "") != (c.Artifact == ""):
		return errors.New("give both builds of the agent (the base and the rebuild), or neither")
	case c.Rebuilt() && (c.RebuiltNodes < 1 || c.RebuiltNodes > c.Nodes):
		return fmt.Errorf("rebuilt nodes %d is outside 1..%d", c.RebuiltNodes, c.Nodes)
	case c.Waves == "":
		return errors.New("no waves")
	case c.HealthWindow < time.Second:
		return fmt.Errorf("health window %v is under a second", c.HealthWindow)
	case c.CutNodes < 0 || c.CutNodes > c.Nodes:
		return fmt.Errorf("cut nodes %d is outside 0..%d", c.CutNodes, c.Nodes)
	case c.CutNodes > 0 && c.CutFor <= 0:
		return fmt.Errorf("cut length %v is not positive", c.CutFor)
	case c.AgentResync <= 0:
		return fmt.Errorf("agent resync %v is not positive", c.AgentResync)
	case c.ReadyTimeout <= 0 || c.JoinTimeout <= 0 || c.RolloutTimeout <= 0 || c.StopTimeout <= 0:
		return errors.New("timeouts must be positive")
	}
	return nil
}

// Rebuilt reports whether the delta is measured on two builds of the
// agent (BaseArtifact and Artifact).
func (c Config) Rebuilt() bool { return c.Artifact != "" }

// What Result.DeltaOf says the delta was measured on.
const (
	DeltaOfSynthetic = "synthetic" // the pseudo-random artifact with small regions rewritten, fleet-wide
	DeltaOfRebuilt   = "rebuilt"   // two builds of the agent, on Config.RebuiltNodes nodes
)

// Result is what one run measured.
type Result struct {
	// JoinSeconds is from the first agent's start to every node Ready.
	JoinSeconds float64 `json:"join_seconds"`
	// Full is the rollout of the pseudo-random artifact to every node,
	// holding nothing. Delta is the rollout of a small change of it to
	// every node (DeltaOf "synthetic"), or of the rebuilt agent to the
	// nodes holding its base build (DeltaOf "rebuilt"), which RebuiltBase
	// rolled out to them before.
	Full        RolloutResult  `json:"full"`
	RebuiltBase *RolloutResult `json:"rebuilt_base,omitempty"`
	Delta       RolloutResult  `json:"delta"`
	DeltaOf     string         `json:"delta_of"`
	// Artifacts are the delta's base and new artifact; ChangedBytes
	// counts the bytes of the new one that differ from the base at the
	// same offset, or are past its end.
	Artifacts    [2]ArtifactInfo `json:"artifacts"`
	ChangedBytes int64           `json:"changed_bytes"`
	// DeltaPercent is Delta's mean bytes per node of a delta transfer as
	// a percentage of its artifact's size.
	DeltaPercent float64   `json:"delta_percent"`
	Hub          HubResult `json:"hub"`
	// AgentWarnings counts the warnings agents logged; AgentLogSamples
	// holds some distinct ones.
	AgentWarnings   int64    `json:"agent_warnings"`
	AgentLogSamples []string `json:"agent_log_samples,omitempty"`
}

// ArtifactInfo is one artifact released: its file (a base name; the
// synthetic ones are generated), size and SHA-256.
type ArtifactInfo struct {
	File   string `json:"file"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// RolloutResult is one rollout, from its creation to every node it
// selected committed.
type RolloutResult struct {
	Release      string `json:"release"`
	Version      string `json:"version"`
	Nodes        int    `json:"nodes"`
	ArtifactSize int64  `json:"artifact_size"`
	// Updated counts the nodes that committed the version; Failed those
	// that reported a failure.
	Updated int      `json:"updated"`
	Failed  int      `json:"failed"`
	Errors  []string `json:"errors,omitempty"`
	// Seconds runs from the Rollout's creation to the last node's commit
	// (or the timeout); Waves has each wave.
	Seconds float64      `json:"seconds"`
	Waves   []WaveResult `json:"waves"`
	// Update is of each node, from its fetch starting (the agent asks
	// its slots for a base just before) to its commit: download, install
	// and trial.
	Update report.Latency `json:"update"`
	// BytesPerNode is the mean artifact bytes each node received (its
	// transfer stats), ReceivedMax the most; WirePerNode the mean bytes its
	// relay carried both ways during the rollout, QUIC and sync included.
	BytesPerNode float64 `json:"bytes_per_node"`
	ReceivedMax  int64   `json:"received_max"`
	WirePerNode  float64 `json:"wire_per_node"`
	// DeltaNodes counts the nodes whose transfer was a delta,
	// DeltaBytesPerNode their mean bytes received.
	DeltaNodes        int     `json:"delta_nodes"`
	DeltaBytesPerNode float64 `json:"delta_bytes_per_node"`
	// Cuts is the nodes whose link was black-holed mid-transfer.
	Cuts []CutResult `json:"cuts,omitempty"`
	// HubCPUs is the hub's CPU use over the rollout, in CPUs; HubCPUSeconds
	// the total; HubRSSMax the largest VmRSS sampled (every second).
	HubCPUs       float64 `json:"hub_cpus"`
	HubCPUSeconds float64 `json:"hub_cpu_seconds"`
	HubRSSMax     uint64  `json:"hub_rss_max"`
	// FleetCPUs is this process's CPU use, in CPUs.
	FleetCPUs float64 `json:"fleet_cpus"`
}

// WaveResult is one wave: from its start (the Rollout's status) to the
// commit of the node that made its target.
type WaveResult struct {
	Target  int     `json:"target"`
	Seconds float64 `json:"seconds"`
	// StartedAt is seconds from the Rollout's creation.
	StartedAt float64 `json:"started_at"`
}

// CutResult is one node whose link was cut mid-transfer.
type CutResult struct {
	Node  string `json:"node"`
	index int
	// At is the bytes the node's relay had carried toward it during the
	// rollout when cut; 0 if the cut never came (the node fetched
	// before, or the rollout ended first).
	At int64 `json:"at"`
	// Received is the artifact bytes the node received in all, Resumes
	// the streams it opened again; Cost is Received / artifact size.
	Received int64   `json:"received"`
	Resumes  int32   `json:"resumes"`
	Cost     float64 `json:"cost"`
	Updated  bool    `json:"updated"`
}

// HubResult is the hub process as /proc shows it (Linux only).
type HubResult struct {
	ReadySeconds float64 `json:"ready_seconds"`
	// IdleRSS is VmRSS with every node joined, before any rollout;
	// HWM is VmHWM at the end.
	IdleRSS    uint64  `json:"idle_rss"`
	HWM        uint64  `json:"hwm"`
	CPUSeconds float64 `json:"cpu_seconds"`
	ProcError  string  `json:"proc_error,omitempty"`
	Exit       string  `json:"exit"`
}
