package servicesbench

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/outpost-mesh/outpost/bench/report"
)

// Result is what Run measured.
type Result struct {
	Program []ProgramResult `json:"program"`
	Connect []ConnectResult `json:"connect"`
	DNS     *DNSResult      `json:"dns,omitempty"`
	Agent   *AgentResult    `json:"agent,omitempty"`
	// RealAgent is a real agent's, joined to a real hub.
	RealAgent *RealAgentResult `json:"real_agent,omitempty"`
	Load      []report.LoadAvg `json:"load"`
}

// Report is what Run measured, with the machine it ran on and the targets
// evaluated: rendered as tables by Render and written as JSON.
type Report struct {
	Machine report.Machine  `json:"machine"`
	Config  Config          `json:"config"`
	Result  *Result         `json:"result"`
	Targets []report.Target `json:"targets"`
}

// The targets, from the acceptance item.
const (
	targetServices   = 10000
	targetFewest     = 10
	targetEBPFSync   = time.Second
	targetSpeedup    = 50
	targetConnectPct = 10
	targetRSS        = 60e6 // bytes, decimal as report.Bytes shows them
)

// NewReport returns the report of res, measured with cfg on this machine,
// with the targets evaluated.
func NewReport(cfg Config, res *Result) *Report {
	return &Report{Machine: report.DescribeMachine(), Config: cfg, Result: res, Targets: evaluate(res)}
}

func (res *Result) program(n int) *ProgramResult {
	for i := range res.Program {
		if res.Program[i].Services == n {
			return &res.Program[i]
		}
	}
	return nil
}

func (res *Result) connect(n int) *ConnectResult {
	for i := range res.Connect {
		if res.Connect[i].Services == n {
			return &res.Connect[i]
		}
	}
	return nil
}

// evaluate judges res against the targets; what the run did not measure
// is n/a.
func evaluate(res *Result) []report.Target {
	notRun := fmt.Sprintf("not measured at %s Services in this run", report.Count(targetServices))
	var out []report.Target

	sync := report.Target{Goal: fmt.Sprintf("%s Services programmed with eBPF in under %s", report.Count(targetServices), report.Duration(targetEBPFSync)), Status: report.TargetNA, Detail: notRun}
	speed := report.Target{Goal: fmt.Sprintf("eBPF programs %s Services at least %dx faster than nftables", report.Count(targetServices), targetSpeedup), Status: report.TargetNA, Detail: notRun}
	if p := res.program(targetServices); p != nil {
		sync.Detail = report.Duration(p.EBPF.First) + " (first Sync, median)"
		sync.Status = status(p.EBPF.First > 0 && p.EBPF.First < targetEBPFSync)
		x := float64(p.Nftables.First) / float64(p.EBPF.First)
		speed.Detail = fmt.Sprintf("%.1fx: nftables %s, eBPF %s", x, report.Duration(p.Nftables.First), report.Duration(p.EBPF.First))
		speed.Status = status(p.EBPF.First > 0 && x >= targetSpeedup)
	}
	out = append(out, sync, speed)

	conn := report.Target{Goal: fmt.Sprintf("eBPF connect latency p50 through a ClusterIP within %d%% from %d to %s Services, against direct", targetConnectPct, targetFewest, report.Count(targetServices)),
		Status: report.TargetNA, Detail: notRun}
	few, many := res.connect(targetFewest), res.connect(targetServices)
	if few != nil && many != nil {
		a, b := few.path(ModeEBPF), many.path(ModeEBPF)
		da, db := few.path(ModeDirect), many.path(ModeDirect)
		if a != nil && b != nil && da != nil && db != nil && a.Connect.P50 > 0 && da.Connect.P50 > 0 && db.Connect.P50 > 0 {
			// Each size's p50 as a share of the direct path's, measured
			// in the same turns: what the machine does to every path at
			// once (a busy neighbour, the kernel freeing the last table)
			// falls out.
			change := connectChange(a.Connect.P50, da.Connect.P50, b.Connect.P50, db.Connect.P50)
			conn.Detail = fmt.Sprintf("%+.1f%%: %s at %d, %s at %s; direct %s, %s", change,
				report.Duration(a.Connect.P50), targetFewest, report.Duration(b.Connect.P50), report.Count(targetServices),
				report.Duration(da.Connect.P50), report.Duration(db.Connect.P50))
			conn.Status = status(change <= targetConnectPct && change >= -targetConnectPct)
		}
	}
	out = append(out, conn)

	rss := report.Target{Goal: fmt.Sprintf("agent peak RSS under %s while programming %s Services", report.Bytes(targetRSS), report.Count(targetServices)), Status: report.TargetNA, Detail: notRun}
	if a := res.RealAgent; a != nil && a.Services == targetServices {
		rss.Detail = fmt.Sprintf("real agent: peak %s (idle %s)", report.Bytes(a.PeakRSS), report.Bytes(a.IdleRSS))
		rss.Status = status(a.PeakRSS < targetRSS)
	} else if a := res.Agent; a != nil && a.Services == targetServices {
		// The stand-in is the outpost binary, whose idle RSS is larger
		// than the agent's: its peak bounds the agent's from above, what
		// the work adds to it from below.
		adds := a.PeakRSS - min(a.IdleRSS, a.PeakRSS)
		rss.Detail = fmt.Sprintf("stand-in peak %s, idle %s, the work adds %s", report.Bytes(a.PeakRSS), report.Bytes(a.IdleRSS), report.Bytes(adds))
		switch {
		case a.PeakRSS < targetRSS:
			rss.Status = report.TargetMet
		case adds >= targetRSS:
			rss.Status = report.TargetMissed
		default:
			rss.Detail += ": the agent's own idle RSS decides, not measured here"
		}
	}
	return append(out, rss)
}

// connectChange returns in percent how much more (or less) p50 at the
// larger size is against p50 at the smaller, each first divided by the
// direct path's p50 at its size.
func connectChange(few, directFew, many, directMany time.Duration) float64 {
	return 100 * ((float64(many)/float64(directMany))/(float64(few)/float64(directFew)) - 1)
}

func status(met bool) string {
	if met {
		return report.TargetMet
	}
	return report.TargetMissed
}

// ratio formats a/b as "123x" or "1.5x".
func ratio(a, b time.Duration) string {
	if a <= 0 || b <= 0 {
		return "-"
	}
	x := float64(a) / float64(b)
	if x >= 10 {
		return strconv.FormatFloat(x, 'f', 0, 64) + "x"
	}
	return strconv.FormatFloat(x, 'f', 1, 64) + "x"
}

// added formats d - base, signed.
func added(d, base time.Duration) string {
	if d < base {
		return "-" + report.Duration(base-d)
	}
	return "+" + report.Duration(d-base)
}

// Render writes the report as tables: programming time, connect
// latency, DNS, the agent's stand-in, the targets and the machine.
func (r *Report) Render(w io.Writer) error {
	var b strings.Builder
	res := r.Result
	if len(res.Program) > 0 {
		pt := report.NewTable("time to program ClusterIP Services of 4 backends each: eBPF socket load-balancing against the nftables fallback",
			"services", "build", "eBPF open", "eBPF sync", "one changed", "nftables sync", "one changed", "nft/eBPF sync", "nft/eBPF one")
		for _, p := range res.Program {
			pt.AddRow(report.Count(int64(p.Services)), report.Duration(p.Build),
				report.Duration(p.EBPF.Open), report.Duration(p.EBPF.First), report.Duration(p.EBPF.One),
				report.Duration(p.Nftables.First), report.Duration(p.Nftables.One),
				ratio(p.Nftables.First, p.EBPF.First), ratio(p.Nftables.One, p.EBPF.One))
		}
		b.WriteString(pt.String())
		fmt.Fprintf(&b, "medians of %d runs, taking turns, each into a fresh dataplane in a fresh network namespace; build: services.Build from the Services and EndpointSlices;\neBPF open: loading and attaching the programs; sync: the first Sync of the whole table; one changed: the next Sync, one Service's backends changed\n\n", r.Config.Runs)
	}
	if len(res.Connect) > 0 {
		ct := report.NewTable("TCP connect latency through Service 0's ClusterIP, from the node's namespace, against a connect straight to a backend",
			"services", "path", "p50", "p90", "p99", "max", "added p50", "connects by backend")
		for _, c := range res.Connect {
			direct := c.path(ModeDirect)
			for _, p := range c.Paths {
				add := "-"
				if direct != nil && p.Path != ModeDirect {
					add = added(p.Connect.P50, direct.Connect.P50)
				}
				by := make([]string, len(p.Backends))
				for i, n := range p.Backends {
					by[i] = strconv.Itoa(n)
				}
				ct.AddRow(report.Count(int64(c.Services)), p.Path, report.Duration(p.Connect.P50), report.Duration(p.Connect.P90),
					report.Duration(p.Connect.P99), report.Duration(p.Connect.Max), add, strings.Join(by, "/"))
			}
		}
		b.WriteString(ct.String())
		fmt.Fprintf(&b, "socket and a blocking connect, timed, then the backend's byte read and the socket reset, %d times a path and size, the paths taking turns every %d,\nthe sizes in %d rounds, one order then the other; each path in a namespace of its own with 4 servers on its loopback;\n\"within %d%%\" is judged on p50, as the tail of so short a connect is the machine's scheduling more than the dataplane's, each size's against the direct path's\nat that size, measured in the same turns, so that what the machine does to every path at once falls out\n\n",
			r.Config.Connects, r.Config.ConnectBatch, r.Config.ConnectRounds, targetConnectPct)
	}
	if d := res.DNS; d != nil {
		dt := report.NewTable(fmt.Sprintf("node DNS server from a pod, a zone of %s Services (%s names)", report.Count(int64(d.Services)), report.Count(int64(d.Names))),
			"query", "queries", "rate", "p50", "p90", "p99", "max", "failed")
		for _, q := range d.Kinds {
			dt.AddRow(q.Kind, report.Count(int64(q.Queries)), report.Rate(q.PerSec), report.Duration(q.Latency.P50),
				report.Duration(q.Latency.P90), report.Duration(q.Latency.P99), report.Duration(q.Latency.Max), strconv.Itoa(q.Failures))
		}
		b.WriteString(dt.String())
		fmt.Fprintf(&b, "A queries over UDP from a pod namespace over a veth, %d clients each waiting for its answer, for %v a kind; cluster names drawn at random,\nthe external name answered from the cache (a fake upstream answered it once)\n\n", d.Clients, r.Config.DNSDuration)
	}
	if a := res.Agent; a != nil {
		at := report.NewTable("the agent's work to program Services, in a fresh process",
			"services", "read", "decode", "build", "DNS zone", "eBPF open", "eBPF sync", "total", "CPU", "idle RSS", "peak RSS", "live heap")
		at.AddRow(report.Count(int64(a.Services)), report.Duration(a.Read), report.Duration(a.Decode), report.Duration(a.Build),
			report.Duration(a.Zone), report.Duration(a.Open), report.Duration(a.Sync), report.Duration(a.Total), report.Duration(a.CPU),
			report.Bytes(a.IdleRSS), report.Bytes(a.PeakRSS), report.Bytes(a.LiveHeap))
		b.WriteString(at.String())
		b.WriteString("this binary run again as the agent's stand-in: it reads the Services and EndpointSlices in their Kubernetes protobuf encoding from a file, decodes them\n(edge/objects), builds the table (services.Build) and the DNS zone (dns.NewZone) and Syncs a fresh eBPF dataplane, keeping all of it;\nCPU: user and system time (getrusage); peak RSS: VmHWM at the end; live heap: the Go heap's live objects after a collection at the end;\nidle RSS: VmRSS before it starts, most of it this binary's (the hub's too), larger than outpost-edge's: without a real agent measured, the RSS target is met when even this peak is under it, missed when what the work adds alone is not\n\n")
	}
	if a := res.RealAgent; a != nil {
		rt := report.NewTable("a real edge agent joined to a real hub, the Services created through the hub's API",
			"services", "routing", "create", "programmed", "after the creates", "agent CPU", "idle RSS", "peak RSS", "RSS after")
		rt.AddRow(report.Count(int64(a.Services)), a.Routing, report.Duration(a.Create), report.Duration(a.Programmed), report.Duration(a.Programmed-a.Create),
			report.Duration(a.CPU), report.Bytes(a.IdleRSS), report.Bytes(a.PeakRSS), report.Bytes(a.RSS))
		b.WriteString(rt.String())
		b.WriteString("outpost-edge with its containerd; routing: as the node says on itself; create, the Services and EndpointSlices through client-go, 16 at once, then one more; programmed: from the first\ncreate until the agent's DNS server answers for that last one (the agent syncs its dataplanes before it sets the zone); agent CPU, peak RSS (VmHWM, reset before) over that time\n\n")
	}
	b.WriteString(report.TargetTable(r.Targets))
	report.WriteLoad(&b, res.Load)
	report.WriteEnd(&b, r.Targets, r.Machine)
	_, err := io.WriteString(w, b.String())
	return err
}
