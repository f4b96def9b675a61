package apibench

import (
	"fmt"
	"io"
	"strings"

	"github.com/outpost-mesh/outpost/bench/report"
)

// Report is what Run measured, with the machine it ran on and the targets
// evaluated: rendered as a table by Render and written as JSON.
type Report struct {
	Machine report.Machine `json:"machine"`
	Config  Config         `json:"config"`
	Result  *Result        `json:"result"`
	Targets []Target       `json:"targets"`
	// Runs summarizes every run when several were made (RunMedian); the
	// rest of the report is the median run's.
	Runs []RunSummary `json:"runs,omitempty"`
}

// Target is a goal the hub is held to; see report.Target.
type Target = report.Target

// Target statuses, as in package report.
const (
	TargetMet    = report.TargetMet
	TargetMissed = report.TargetMissed
	TargetNA     = report.TargetNA
)

// The targets set by the issue that asked for this benchmark, for the
// workload of DefaultConfig.
const (
	targetCreatesPerSec = 1500
	targetCreateP99     = 100_000_000 // ns: 100ms
	targetRSS           = 300_000_000 // bytes: 300 MB
)

// Table rows that targets attach to.
const (
	createsRow    = "creates/s"
	createP99Row  = "create p99"
	deliveriesRow = "watch deliveries seen"
	rssRow        = "hub RSS at end"
)

// NewReport returns the report of res, measured with cfg on this machine,
// with the targets evaluated.
func NewReport(cfg Config, res *Result) *Report {
	r := &Report{Machine: report.DescribeMachine(), Config: cfg, Result: res}
	r.Targets = evaluate(cfg, res)
	return r
}

// targetWorkload returns why cfg's workload is not the one the targets are
// set for, or "" when it is.
func targetWorkload(cfg Config) string {
	d := DefaultConfig()
	if cfg.Pods == d.Pods && cfg.Workers == d.Workers && cfg.Watchers == d.Watchers {
		return ""
	}
	return fmt.Sprintf("run with %s pods, %d workers, %d watchers; the target is for %s, %d, %d",
		report.Count(int64(cfg.Pods)), cfg.Workers, cfg.Watchers,
		report.Count(int64(d.Pods)), d.Workers, d.Watchers)
}

// evaluate checks res against the targets.
func evaluate(cfg Config, res *Result) []Target {
	other := targetWorkload(cfg)
	judge := func(t Target, met bool) Target {
		switch {
		case other != "":
			t.Status = TargetNA
			t.Detail = other
		case met:
			t.Status = TargetMet
		default:
			t.Status = TargetMissed
		}
		return t
	}
	c := res.Creates
	out := []Target{
		judge(Target{Goal: fmt.Sprintf(">= %s creates/s", report.Count(targetCreatesPerSec)), Row: createsRow,
			Detail: report.Rate(c.PerSec)}, c.Failed == 0 && c.PerSec >= targetCreatesPerSec),
		judge(Target{Goal: "p99 < " + report.Duration(targetCreateP99), Row: createP99Row,
			Detail: report.Duration(c.Latency.P99)}, c.Failed == 0 && c.Latency.P99 < targetCreateP99),
	}
	rss := Target{Goal: "RSS < " + report.Bytes(targetRSS), Row: rssRow, Detail: report.Bytes(res.Hub.RSSBytes)}
	if res.Hub.RSSBytes == 0 {
		rss.Status, rss.Detail = TargetNA, "not measured: "+res.Hub.ProcError
		out = append(out, rss)
	} else {
		out = append(out, judge(rss, res.Hub.RSSBytes < targetRSS))
	}
	// Every watcher seeing every pod is not a number but correctness; it
	// holds whatever the workload.
	w := res.Watch
	t := Target{Goal: "every watcher sees every pod", Status: TargetMet, Row: deliveriesRow}
	if w.Missing > 0 || w.Duplicates > 0 || w.Foreign > 0 || c.Failed > 0 {
		t.Status = TargetMissed
		t.Detail = fmt.Sprintf("%s missing, %d duplicates, %d foreign, %d creates failed",
			report.Count(int64(w.Missing)), w.Duplicates, w.Foreign, c.Failed)
	}
	return append(out, t)
}

// targetCell returns the target column's text for a row.
func (r *Report) targetCell(row string) string { return targetCells(r.Targets, row) }

// targetCells returns the target column's text for a row: each target
// shown there, with its status.
func targetCells(ts []Target, row string) string {
	var cells []string
	for _, t := range ts {
		if t.Row == row {
			cells = append(cells, t.Goal+": "+t.Status)
		}
	}
	return strings.Join(cells, "; ")
}

// Table returns the results, one row per metric, with the target that
// applies to the row.
func (r *Report) Table() *report.Table {
	res, cfg := r.Result, r.Config
	tb := report.NewTable("", "metric", "value", "target")
	tb.Columns[2].Align = report.AlignLeft
	add := func(label, value string) { tb.AddRow(label, value, r.targetCell(label)) }
	c := res.Creates

	add("hub ready after", fmt.Sprintf("%.2fs", res.Hub.ReadySeconds))
	add("pods created", fmt.Sprintf("%s/%s", report.Count(int64(c.Created)), report.Count(int64(cfg.Pods))))
	add(createsRow, report.Rate(c.PerSec))
	add("create p50", report.Duration(c.Latency.P50))
	add(createP99Row, report.Duration(c.Latency.P99))
	add("create max", report.Duration(c.Latency.Max))
	add(listRow(0), listCell(res.List))
	add(listRow(cfg.PageSize), listCell(res.PagedList))
	add("watch delivery p50", report.Duration(res.Watch.Latency.P50))
	add("watch delivery p99", report.Duration(res.Watch.Latency.P99))
	add("watch delivery max", report.Duration(res.Watch.Latency.Max))
	add(deliveriesRow, fmt.Sprintf("%s/%s", report.Count(int64(res.Watch.Delivered)), report.Count(int64(res.Watch.Expected))))
	add("all seen after last create", fmt.Sprintf("%.2fs", res.Watch.DrainSeconds))
	add("hub RSS when ready", bytesCell(res.Hub.StartRSSBytes))
	add(rssRow, bytesCell(res.Hub.RSSBytes))
	add("hub peak RSS (VmHWM)", bytesCell(res.Hub.HWMBytes))
	add("hub CPU seconds", cpuCell(res.Hub.CPUSeconds, res.Hub.RSSBytes))
	add("  of which while creating", cpuCell(res.Hub.CreateCPUSeconds, res.Hub.RSSBytes))
	if c.Seconds > 0 && res.Hub.RSSBytes > 0 {
		add("hub CPUs busy while creating", fmt.Sprintf("%.2f", res.Hub.CreateCPUSeconds/c.Seconds))
	}
	add("client CPU seconds", fmt.Sprintf("%.2f", res.ClientCPUSeconds))
	return tb
}

// listRow returns the label of a list in pages of limit, 0 for unpaged.
func listRow(limit int) string {
	if limit == 0 {
		return "full list"
	}
	return fmt.Sprintf("paged list (limit %d)", limit)
}

func listCell(l ListResult) string {
	if l.Error != "" {
		return "failed"
	}
	s := report.Duration(l.Duration) + ", " + report.Count(int64(l.Items)) + " pods"
	if l.Pages > 1 {
		s += fmt.Sprintf(", %d pages", l.Pages)
	}
	return s
}

// bytesCell formats n, or "-" when it was not measured.
func bytesCell(n uint64) string {
	if n == 0 {
		return "-"
	}
	return report.Bytes(n)
}

// cpuCell formats CPU seconds, or "-" when /proc could not be read (the
// RSS, which is never 0 when read, tells).
func cpuCell(secs float64, rss uint64) string {
	if rss == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", secs)
}

// Render writes the table, notes on the workload, errors, the targets not
// met, and the machine description.
func (r *Report) Render(w io.Writer) error {
	res, c := r.Result, r.Config
	var b strings.Builder
	b.WriteString("API benchmark: pods through client-go against a hub in a child process\n\n")
	b.WriteString(r.Table().String())
	b.WriteByte('\n')
	enc := "protobuf (client-go's default)"
	if c.JSON {
		enc = "JSON"
	}
	kind := "typed"
	if c.MetadataWatchers {
		kind = "metadata-only (PartialObjectMetadata)"
	}
	fmt.Fprintf(&b, "%s pods (one busybox container, unscheduled) created in namespace %q by %d workers sharing one client; %d %s watchers, one client each; %s on the wire.\n",
		report.Count(int64(c.Pods)), c.Namespace, c.Workers, c.Watchers, kind, enc)
	b.WriteString("Create latency is of each Create call, which returns once the pod is durable; watch delivery runs from just before the Create call to the decoded ADDED event.\n")
	b.WriteString("Lists are timed with decoding, after the creates and while watchers may still be receiving. RSS and CPU are the hub process's, from /proc, at the end.\n")
	b.WriteString("Client and hub share this machine's CPUs.\n")
	if len(r.Runs) > 1 {
		fmt.Fprintf(&b, "\nThe table is the median of %d runs by creates/s, each against a fresh hub:\n", len(r.Runs))
		rt := report.NewTable("", "run", "creates/s", "create p99", "watch p99", "hub CPU s", "client CPU s", "")
		for i, s := range r.Runs {
			mark := ""
			if s.Median {
				mark = "median"
			}
			rt.AddRow(fmt.Sprint(i+1), report.Rate(s.CreatesPerSec), report.Duration(s.CreateP99), report.Duration(s.WatchP99),
				fmt.Sprintf("%.2f", s.HubCPUSeconds), fmt.Sprintf("%.2f", s.ClientCPUSeconds), mark)
		}
		b.WriteString(rt.String())
	}
	for _, e := range res.Creates.Errors {
		fmt.Fprintf(&b, "create error: %s\n", e)
	}
	for _, l := range []ListResult{res.List, res.PagedList} {
		if l.Error != "" {
			fmt.Fprintf(&b, "list error: %s\n", l.Error)
		}
	}
	if res.Watch.Restarts > 0 {
		fmt.Fprintf(&b, "watches resumed after ending early: %d\n", res.Watch.Restarts)
	}
	for _, e := range res.Watch.Errors {
		fmt.Fprintf(&b, "watch error: %s\n", e)
	}
	if res.Hub.Exit != "" {
		fmt.Fprintf(&b, "hub stopped: %s\n", res.Hub.Exit)
	}
	if res.Hub.ProcError != "" {
		fmt.Fprintf(&b, "hub memory and cpu: %s\n", res.Hub.ProcError)
	}
	report.WriteEnd(&b, r.Targets, r.Machine)
	_, err := io.WriteString(w, b.String())
	return err
}
