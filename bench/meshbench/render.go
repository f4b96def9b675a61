package meshbench

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/outpost-mesh/outpost/bench/report"
	"github.com/outpost-mesh/outpost/edge/mesh"
	"github.com/outpost-mesh/outpost/edge/proxy"
	"github.com/outpost-mesh/outpost/edge/relay"
)

// Result is what Run measured.
type Result struct {
	// Mesh is the timings every node ran with.
	Mesh  Timings      `json:"mesh"`
	Sizes []SizeResult `json:"sizes"`
	// Sync is the relayed sync measure, nil if it was skipped.
	Sync *SyncResult      `json:"sync,omitempty"`
	Load []report.LoadAvg `json:"load"`
}

// Timings are the mesh configuration's timings, as mesh.Config documents
// them.
type Timings struct {
	ProbeInterval           time.Duration `json:"probe_interval_ns"`
	ProbeTimeout            time.Duration `json:"probe_timeout_ns"`
	IndirectChecks          int           `json:"indirect_checks"`
	AwarenessMaxMultiplier  int           `json:"awareness_max_multiplier"`
	SuspicionMult           int           `json:"suspicion_mult"`
	SuspicionMaxTimeoutMult int           `json:"suspicion_max_timeout_mult"`
	GossipInterval          time.Duration `json:"gossip_interval_ns"`
	GossipNodes             int           `json:"gossip_nodes"`
	PushPullInterval        time.Duration `json:"push_pull_interval_ns"`
}

func timingsOf(c mesh.Config) Timings {
	return Timings{
		ProbeInterval:           c.ProbeInterval,
		ProbeTimeout:            c.ProbeTimeout,
		IndirectChecks:          c.IndirectChecks,
		AwarenessMaxMultiplier:  c.AwarenessMaxMultiplier,
		SuspicionMult:           c.SuspicionMult,
		SuspicionMaxTimeoutMult: c.SuspicionMaxTimeoutMult,
		GossipInterval:          c.GossipInterval,
		GossipNodes:             c.GossipNodes,
		PushPullInterval:        c.PushPullInterval,
	}
}

// SizeResult is what was measured on sites of one size.
type SizeResult struct {
	Nodes int `json:"nodes"`
	// Join is from the start of a node joining the others, converged,
	// until every node (it too) sees every other alive.
	Join Times `json:"join"`
	// Crash is from a node's Close without Leave until no other lists it
	// alive; Leave the same from its Leave, then Close.
	Crash Times `json:"crash"`
	Leave Times `json:"leave"`
	// Dropped is from the same Close until the service proxy of every
	// other node (edge/proxy with proxy.DefaultConfig's timings, kicked
	// by its node's mesh, as the agent runs it) has handed its dataplane
	// a table without the crashed node's endpoint.
	Dropped Times `json:"endpoints_dropped"`
	// SuspicionMin and SuspicionMax are how long memberlist gives a
	// suspected node to refute at this size: once the confirmations it
	// awaits have come, and before (one when it awaits none).
	SuspicionMin time.Duration `json:"suspicion_min_ns"`
	SuspicionMax time.Duration `json:"suspicion_max_ns"`
	Idle         IdleResult    `json:"idle"`
}

// Times are the times of the runs, in their order, with their median,
// 95th percentile (nearest rank: the max under 20 runs) and max.
type Times struct {
	Runs   []time.Duration `json:"runs_ns"`
	Median time.Duration   `json:"median_ns"`
	P95    time.Duration   `json:"p95_ns"`
	Max    time.Duration   `json:"max_ns"`
}

// IdleResult is what the nodes of an idle site sent.
type IdleResult struct {
	// Duration is how long it was counted.
	Duration time.Duration `json:"duration_ns"`
	// Converged is whether every node still saw every other alive at the
	// end: if not, a node was found dead meanwhile and the counts are
	// those of a troubled site.
	Converged bool       `json:"converged"`
	Nodes     []NodeSent `json:"nodes"`
	// Per node: the mean and max of bytes a minute and of kbit/s (1,000
	// bits a second), of UDP packets a minute, and the streams dialed a
	// minute.
	MeanBytesPerMin   float64 `json:"mean_bytes_per_min"`
	MaxBytesPerMin    float64 `json:"max_bytes_per_min"`
	MeanKbits         float64 `json:"mean_kbit_per_s"`
	MaxKbits          float64 `json:"max_kbit_per_s"`
	MeanPacketsPerMin float64 `json:"mean_udp_packets_per_min"`
	MeanStreamsPerMin float64 `json:"mean_streams_per_min"`
	// MaxKbitsHeaders is MaxKbits counting the 28 bytes of IPv4 and UDP
	// header of each UDP packet too (not TCP's).
	MaxKbitsHeaders float64 `json:"max_kbit_per_s_with_udp_headers"`
}

// NodeSent is what one node sent.
type NodeSent struct {
	Name string `json:"name"`
	Sent Sent   `json:"sent"`
}

// udpHeader is the size of an IPv4 and a UDP header.
const udpHeader = 20 + 8

// summarize sets the means and maxima from Nodes and Duration.
func (r *IdleResult) summarize() {
	if len(r.Nodes) == 0 || r.Duration <= 0 {
		return
	}
	mins := r.Duration.Minutes()
	kbits := func(bytes int64) float64 { return float64(bytes) * 8 / 1000 / r.Duration.Seconds() }
	var bytes, packets, streams float64
	for _, n := range r.Nodes {
		s := n.Sent
		bytes, packets, streams = bytes+float64(s.Bytes), packets+float64(s.UDPPackets), streams+float64(s.Streams)
		r.MaxBytesPerMin = max(r.MaxBytesPerMin, float64(s.Bytes)/mins)
		r.MaxKbits = max(r.MaxKbits, kbits(s.Bytes))
		r.MaxKbitsHeaders = max(r.MaxKbitsHeaders, kbits(s.Bytes+udpHeader*s.UDPPackets))
	}
	nodes := float64(len(r.Nodes))
	r.MeanBytesPerMin = bytes / nodes / mins
	r.MeanKbits = bytes / nodes * 8 / 1000 / r.Duration.Seconds()
	r.MeanPacketsPerMin = packets / nodes / mins
	r.MeanStreamsPerMin = streams / nodes / mins
}

// Report is what Run measured, with the machine it ran on and the targets
// evaluated: rendered as tables by Render and written as JSON.
type Report struct {
	Machine report.Machine  `json:"machine"`
	Config  Config          `json:"config"`
	Result  *Result         `json:"result"`
	Targets []report.Target `json:"targets"`
}

// The targets, from the acceptance item, both at 10 nodes.
const (
	targetNodes = 10
	targetDead  = 5 * time.Second
	targetKbits = 2.0
)

// NewReport returns the report of res, measured with cfg on this machine,
// with the targets evaluated.
func NewReport(cfg Config, res *Result) *Report {
	return &Report{Machine: report.DescribeMachine(), Config: cfg, Result: res, Targets: evaluate(res)}
}

func (res *Result) size(n int) *SizeResult {
	for i := range res.Sizes {
		if res.Sizes[i].Nodes == n {
			return &res.Sizes[i]
		}
	}
	return nil
}

// evaluate judges res against the targets; what the run did not measure
// is n/a.
func evaluate(res *Result) []report.Target {
	notRun := fmt.Sprintf("no site of %d nodes in this run", targetNodes)
	dead := report.Target{Goal: fmt.Sprintf("a crashed node found dead and its endpoints dropped by every peer within %s at %d nodes", report.Duration(targetDead), targetNodes),
		Status: report.TargetNA, Detail: notRun}
	idle := report.Target{Goal: fmt.Sprintf("idle gossip under %g kbit/s per node at %d nodes", targetKbits, targetNodes),
		Status: report.TargetNA, Detail: notRun}
	if s := res.size(targetNodes); s != nil {
		// Judged on the p95, the max under 20 runs: memberlist's probe
		// schedule is random, and with enough runs one may be unlucky.
		dead.Detail = fmt.Sprintf("endpoints dropped: p95 %s of %d runs (median %s, max %s); found dead: p95 %s (median %s, max %s)",
			report.Duration(s.Dropped.P95), len(s.Dropped.Runs), report.Duration(s.Dropped.Median), report.Duration(s.Dropped.Max),
			report.Duration(s.Crash.P95), report.Duration(s.Crash.Median), report.Duration(s.Crash.Max))
		dead.Status = status(s.Crash.P95 > 0 && s.Dropped.P95 > 0 && max(s.Crash.P95, s.Dropped.P95) <= targetDead)
		idle.Detail = fmt.Sprintf("max %.2f kbit/s over the nodes (mean %.2f; %.2f with UDP/IP headers)", s.Idle.MaxKbits, s.Idle.MeanKbits, s.Idle.MaxKbitsHeaders)
		idle.Status = status(len(s.Idle.Nodes) > 0 && s.Idle.MaxKbits < targetKbits)
		if !s.Idle.Converged {
			idle.Detail += "; a node lost sight of a peer meanwhile"
		}
	}
	return []report.Target{dead, idle}
}

func status(met bool) string {
	if met {
		return report.TargetMet
	}
	return report.TargetMissed
}

// Render writes the report as tables: the membership times, the idle
// gossip, the targets and the machine.
func (r *Report) Render(w io.Writer) error {
	var b strings.Builder
	res := r.Result
	m := res.Mesh
	confirm := "no confirmation awaited"
	if k := m.SuspicionMult - 2; k >= 1 {
		confirm = fmt.Sprintf("up to %dx that until %d more peer(s) confirm", m.SuspicionMaxTimeoutMult, k)
	}
	fmt.Fprintf(&b, "site mesh (edge/mesh) on loopback, every node with mesh.DefaultConfig's timings: probe every %s (timeout %s, %d indirect),\nsuspicion %dx the probe interval (%s), gossip every %s to %d, push/pull every %s\n\n",
		report.Duration(m.ProbeInterval), report.Duration(m.ProbeTimeout), m.IndirectChecks, m.SuspicionMult, confirm,
		report.Duration(m.GossipInterval), m.GossipNodes, report.Duration(m.PushPullInterval))

	pc := proxy.DefaultConfig()
	mt := report.NewTable(fmt.Sprintf("membership: median and max of %d runs, each on a fresh site", r.Config.Runs),
		"nodes", "join p50", "join max", "crash p50", "crash max", "dropped p50", "dropped max", "leave p50", "leave max", "suspicion")
	for _, s := range res.Sizes {
		mt.AddRow(fmt.Sprint(s.Nodes), report.Duration(s.Join.Median), report.Duration(s.Join.Max),
			report.Duration(s.Crash.Median), report.Duration(s.Crash.Max), report.Duration(s.Dropped.Median), report.Duration(s.Dropped.Max),
			report.Duration(s.Leave.Median), report.Duration(s.Leave.Max),
			report.Duration(s.SuspicionMin)+" to "+report.Duration(s.SuspicionMax))
	}
	b.WriteString(mt.String())
	fmt.Fprintf(&b, "join: a node joins one member of a converged site of one node fewer, timed from its start until every node sees every other alive;\ncrash: a node is closed without a word, timed until no other lists it alive (memberlist's dead, after suspicion); dropped: from the same\nclose until every other node's service proxy (edge/proxy: poll %s, min sync %s, kicked by its mesh) has routing without the dead node's\nendpoint, of a Service with one on each node; then a node is added back and another leaves (Leave, then Close), timed as the crash;\nsuspicion: how long a suspected node has to refute, once the confirmations memberlist awaits have come and before; views polled every %s\n\n",
		report.Duration(pc.Poll), report.Duration(pc.MinSync), report.Duration(pollEvery))

	it := report.NewTable("idle gossip sent per node",
		"nodes", "bytes/min mean", "bytes/min max", "kbit/s mean", "kbit/s max", "UDP packets/min", "streams/min", "counted", "converged")
	for _, s := range res.Sizes {
		i := s.Idle
		it.AddRow(fmt.Sprint(s.Nodes), report.Bytes(uint64(i.MeanBytesPerMin)), report.Bytes(uint64(i.MaxBytesPerMin)),
			fmt.Sprintf("%.2f", i.MeanKbits), fmt.Sprintf("%.2f", i.MaxKbits), fmt.Sprintf("%.0f", i.MeanPacketsPerMin),
			fmt.Sprintf("%.1f", i.MeanStreamsPerMin), report.Duration(i.Duration), yesNo(i.Converged))
	}
	b.WriteString(it.String())
	fmt.Fprintf(&b, "on a fresh site, converged, then left %s to settle: the bytes each node sends, as memberlist hands them to the kernel (encrypted,\nlabelled with a site name of %d bytes): UDP packets (probes, acks, gossip) and what it writes on TCP streams, those it dials (push/pull) and accepts (their replies);\nIP, UDP and TCP headers not counted (28 B a UDP packet would add; the target's detail says how much); streams/min: streams dialed\n\n", report.Duration(r.Config.Settle), len(siteName))

	if sy := res.Sync; sy != nil {
		st := report.NewTable(fmt.Sprintf("sync through a site peer's relay: %d pods (%s) to one node, %d runs each way", sy.Objects, fmtMB(sy.Bytes), len(sy.Direct.Runs)),
			"route", "p50", "max", "MB/s at p50")
		st.AddRow("direct", report.Duration(sy.Direct.Median), report.Duration(sy.Direct.Max), fmt.Sprintf("%.1f", sy.DirectMBps))
		st.AddRow("relayed", report.Duration(sy.Relayed.Median), report.Duration(sy.Relayed.Max), fmt.Sprintf("%.1f", sy.RelayedMBps))
		b.WriteString(st.String())
		rc := relay.DefaultConfig()
		fmt.Fprintf(&b, "relayed/direct: %.2f. A sync server (sync/server over a view index fed in process, as the hub runs it over its store) and a sync\nclient (sync/client, its store in memory) on 127.0.0.1, each run a fresh client: timed from the index taking the pods, bound to the\nclient's node, until the client's store holds them all (MB/s of the pods as stored; the stream compresses them with zstd).\nRelayed: the client's direct dial fails and it fails over to a relay\n(edge/relay with its defaults, fresh each run) forwarding its QUIC datagrams to the server: %s up, %s down, %d dropped over the runs.\nThe relay caps a peer at %d MiB a minute, both ways, in bursts of as much: a longer transfer is throttled to that.\n\n",
			sy.Ratio, report.Bytes(uint64(sy.RelayUp)), report.Bytes(uint64(sy.RelayDown)), sy.RelayDropped, rc.BytesPerMinute>>20)
	}

	b.WriteString(report.TargetTable(r.Targets))
	report.WriteLoad(&b, res.Load)
	report.WriteEnd(&b, r.Targets, r.Machine)
	_, err := io.WriteString(w, b.String())
	return err
}

func yesNo(ok bool) string {
	if ok {
		return "yes"
	}
	return "no"
}
