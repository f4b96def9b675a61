package streamsbench

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
	// Forward is the direct path first, then a port-forward per
	// protocol.
	Forward []PathResult     `json:"forward"`
	Exec    []ExecResult     `json:"exec"`
	Logs    LogsResult       `json:"logs"`
	Load    []report.LoadAvg `json:"load"`
}

// Report is what Run measured, with the machine it ran on and the
// targets evaluated: rendered as tables by Render and written as JSON.
type Report struct {
	Machine report.Machine  `json:"machine"`
	Config  Config          `json:"config"`
	Result  *Result         `json:"result"`
	Targets []report.Target `json:"targets"`
}

// targetForwardShare is the share of the direct path's throughput a
// port-forward must reach, on loopback.
const targetForwardShare = 0.5

// NewReport returns the report of res, measured with cfg on this machine,
// with the targets evaluated.
func NewReport(cfg Config, res *Result) *Report {
	return &Report{Machine: report.DescribeMachine(), Config: cfg, Result: res, Targets: evaluate(res)}
}

// evaluate checks each port-forward's throughput against the direct
// path's.
func evaluate(res *Result) []report.Target {
	direct := res.direct()
	var out []report.Target
	for _, p := range res.Forward {
		if p.Protocol == "" {
			continue
		}
		t := report.Target{
			Goal: fmt.Sprintf("port-forward over %s >= %.0f%% of direct throughput", p.Protocol, 100*targetForwardShare),
			Row:  p.Path,
		}
		switch {
		case direct == nil || direct.Throughput <= 0:
			t.Status, t.Detail = report.TargetNA, "no direct throughput to compare with"
		default:
			share := p.Throughput / direct.Throughput
			t.Detail = fmt.Sprintf("%.0f%%: %s against %s", 100*share, mbps(p.Throughput), mbps(direct.Throughput))
			t.Status = report.TargetMissed
			if share >= targetForwardShare {
				t.Status = report.TargetMet
			}
		}
		out = append(out, t)
	}
	return out
}

// direct returns the direct path's result, or nil.
func (res *Result) direct() *PathResult {
	for i := range res.Forward {
		if res.Forward[i].Protocol == "" {
			return &res.Forward[i]
		}
	}
	return nil
}

// mbps formats a rate in bytes per second as MB/s.
func mbps(bps float64) string { return strconv.FormatFloat(bps/1e6, 'f', 0, 64) + " MB/s" }

// cpuPerGB formats CPU seconds per GB.
func cpuPerGB(s float64) string { return strconv.FormatFloat(s, 'f', 2, 64) }

// added formats d - base, signed.
func added(d, base time.Duration) string {
	if d < base {
		return "-" + report.Duration(base-d)
	}
	return "+" + report.Duration(d-base)
}

// Render writes the report as tables: port-forward against the direct
// path, exec, logs -f, the targets and the machine.
func (r *Report) Render(w io.Writer) error {
	var b strings.Builder
	res := r.Result
	direct := res.direct()
	ft := report.NewTable("port-forward through the hub and the node's QUIC session, against the pod's IP straight over the node's bridge",
		"path", "throughput", "vs direct", "CPU s/GB hub", "agent", "client", "request p50", "request p99", "added p50", "echo p50", "echo p99", "added p50")
	for _, p := range res.Forward {
		share, addReq, addEcho := "-", "-", "-"
		if direct != nil && p.Protocol != "" {
			share = fmt.Sprintf("%.0f%%", 100*p.Throughput/direct.Throughput)
			addReq, addEcho = added(p.Request.P50, direct.Request.P50), added(p.Echo.P50, direct.Echo.P50)
		}
		ft.AddRow(p.Path, mbps(p.Throughput), share,
			cpuPerGB(p.CPU.Hub), cpuPerGB(p.CPU.Agent), cpuPerGB(p.CPU.Client),
			report.Duration(p.Request.P50), report.Duration(p.Request.P99), addReq,
			report.Duration(p.Echo.P50), report.Duration(p.Echo.P99), addEcho)
	}
	b.WriteString(ft.String())
	fmt.Fprintf(&b, "throughput: median of %d fetches of %s of random bytes from busybox httpd; CPU: seconds per GB fetched of the hub, the edge agent and this client; request: a GET of 6 bytes, a connection each (%d);\necho: a line's round trip through one open connection to nc -e cat (%d); everything on this machine's loopback and the node's bridge\n\n",
		r.Config.BulkRuns, report.Bytes(uint64(r.Config.BulkBytes)), r.Config.Requests, r.Config.Echoes)

	et := report.NewTable("exec through the hub", "path", "exec true p50", "p99", "max", "keystroke echo p50", "p99", "max")
	for _, e := range res.Exec {
		if e.Protocol == "" {
			et.AddRow("on the node's containerd", report.Duration(e.Run.P50), report.Duration(e.Run.P99), report.Duration(e.Run.Max), "-", "-", "-")
			continue
		}
		et.AddRow(e.Protocol, report.Duration(e.Run.P50), report.Duration(e.Run.P99), report.Duration(e.Run.Max),
			report.Duration(e.Echo.P50), report.Duration(e.Echo.P99), report.Duration(e.Echo.Max))
	}
	b.WriteString(et.String())
	fmt.Fprintf(&b, "exec true: from the request to the exit code, a session each (%d), through the hub and straight on the node's containerd, taking turns; keystroke echo: a line's round trip through one exec -i cat (%d)\n\n",
		r.Config.Execs, r.Config.Keystrokes)

	lt := report.NewTable("logs -f through the hub", "lines", "to the log file p50", "p99", "to logs -f p50", "p99", "max")
	lg := res.Logs
	lt.AddRow(strconv.Itoa(lg.Lines), report.Duration(lg.File.P50), report.Duration(lg.File.P99),
		report.Duration(lg.Follow.P50), report.Duration(lg.Follow.P99), report.Duration(lg.Follow.Max))
	b.WriteString(lt.String())
	fmt.Fprintf(&b, "from the write of a line into the pod's input (a FIFO on the node, copied to its output by cat) to the line in the node's log file (looked at every %v) and read from logs -f; a line every %v\n\n",
		filePoll, r.Config.LogInterval)

	b.WriteString(report.TargetTable(r.Targets))
	report.WriteLoad(&b, res.Load)
	report.WriteEnd(&b, r.Targets, r.Machine)
	_, err := io.WriteString(w, b.String())
	return err
}
