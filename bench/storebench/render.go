package storebench

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/outpost-mesh/outpost/bench/report"
)

// Report is what Compare measured: rendered as tables by Render and
// written as JSON.
type Report struct {
	Machine report.Machine `json:"machine"`
	Config  Config         `json:"config"`
	// Results has one entry per backend, in the order of Backends.
	Results []*Result `json:"results"`
	Targets []Target  `json:"targets"`
}

// Target is a goal the store is held to; see report.Target.
type Target = report.Target

// Target statuses, as in package report.
const (
	TargetMet    = report.TargetMet
	TargetMissed = report.TargetMissed
	TargetNA     = report.TargetNA
)

// The targets set by the issue that asked for this benchmark.
const (
	// targetWriters is the writer count at which badger must write at
	// least as fast as etcd.
	targetWriters = 64
	// targetRSSKeys and targetRSS: badger's RSS under 150 MB at 100,000 keys.
	targetRSSKeys = 100_000
	targetRSS     = 150_000_000
)

// NewReport returns the report of results measured with cfg on this
// machine, with the targets evaluated.
func NewReport(cfg Config, results ...*Result) *Report {
	r := &Report{Machine: report.DescribeMachine(), Config: cfg, Results: results}
	r.Targets = evaluate(r)
	return r
}

// Result returns the result for backend b, or nil.
func (r *Report) Result(b Backend) *Result {
	for _, res := range r.Results {
		if res != nil && res.Backend == b {
			return res
		}
	}
	return nil
}

// row labels that targets attach to.
func writesRow(n int) string { return fmt.Sprintf("writes/s, %d writer%s", n, plural(n)) }

const (
	deliveriesRow = "watch deliveries"
)

func rssRow(keys int) string { return fmt.Sprintf("RSS at %s keys", report.Count(int64(keys))) }

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// evaluate checks the report's results against the targets.
func evaluate(r *Report) []Target {
	badger, etcd := r.Result(Badger), r.Result(Etcd)
	var out []Target

	t := Target{Goal: fmt.Sprintf("badger >= etcd at %d writers", targetWriters), Status: TargetNA, Row: writesRow(targetWriters)}
	bw, ew := badger.WriteLevel(targetWriters), etcd.WriteLevel(targetWriters)
	switch {
	case bw == nil || ew == nil:
		t.Detail = fmt.Sprintf("not measured at %d writers", targetWriters)
	case bw.PerSec >= ew.PerSec:
		t.Status = TargetMet
	default:
		t.Status = TargetMissed
	}
	if bw != nil && ew != nil {
		t.Detail = fmt.Sprintf("badger %s, etcd %s", report.Rate(bw.PerSec), report.Rate(ew.PerSec))
	}
	out = append(out, t)

	t = Target{Goal: "every watcher gets every event", Status: TargetNA, Row: deliveriesRow}
	var short []string
	measured := false
	for _, res := range []*Result{badger, etcd} {
		if res == nil || res.Watch == nil {
			continue
		}
		measured = true
		w := res.Watch
		if w.Missing > 0 || w.Extra > 0 || w.OutOfOrder > 0 || len(w.Errors) > 0 {
			short = append(short, fmt.Sprintf("%s: %s of %s delivered, %d extra, %d out of order, errors %q",
				res.Backend, report.Count(int64(w.Delivered)), report.Count(int64(w.Expected)), w.Extra, w.OutOfOrder, w.Errors))
		}
	}
	if measured {
		t.Status = TargetMet
		if len(short) > 0 {
			t.Status = TargetMissed
			t.Detail = strings.Join(short, "; ")
		}
	}
	out = append(out, t)

	t = Target{Goal: fmt.Sprintf("badger RSS < %s at %s keys", report.Bytes(targetRSS), report.Count(targetRSSKeys)), Status: TargetNA}
	switch {
	case badger == nil || badger.Memory == nil:
		t.Detail = "memory not measured"
	case badger.Memory.Keys != targetRSSKeys:
		t.Row = rssRow(badger.Memory.Keys)
		t.Detail = fmt.Sprintf("measured at %s keys", report.Count(int64(badger.Memory.Keys)))
	default:
		t.Row = rssRow(badger.Memory.Keys)
		t.Status = TargetMet
		if badger.Memory.RSSBytes >= targetRSS {
			t.Status = TargetMissed
		}
		t.Detail = "badger " + report.Bytes(badger.Memory.RSSBytes) + " right after the writes"
		if m := badger.Memory; m.SettledRSSBytes > 0 {
			t.Detail += fmt.Sprintf(", %s after %.0fs idle", report.Bytes(m.SettledRSSBytes), m.SettleSeconds)
		}
	}
	out = append(out, t)
	return out
}

// targetCell returns the target column's text for a row.
func (r *Report) targetCell(row string) string {
	var cells []string
	for _, t := range r.Targets {
		if t.Row != row {
			continue
		}
		cell := t.Goal + ": " + t.Status
		if t.Status == TargetNA && t.Detail != "" {
			cell += " (" + t.Detail + ")"
		}
		cells = append(cells, cell)
	}
	return strings.Join(cells, "; ")
}

// Table returns the summary table: one row per metric, with badger, etcd,
// their ratio and the target that applies to the row.
func (r *Report) Table() *report.Table {
	badger, etcd := r.Result(Badger), r.Result(Etcd)
	tb := report.NewTable("", "metric", "badger", "etcd", "badger/etcd", "target")
	tb.Columns[4].Align = report.AlignLeft
	add := func(label string, get func(*Result) (float64, string, bool)) {
		cell := func(res *Result) (float64, string) {
			if res == nil {
				return 0, "-"
			}
			v, s, ok := get(res)
			if !ok {
				return 0, "-"
			}
			return v, s
		}
		bv, bs := cell(badger)
		ev, es := cell(etcd)
		tb.AddRow(label, bs, es, report.Ratio(bv, ev), r.targetCell(label))
	}

	for _, n := range r.Config.Writers {
		add(writesRow(n), func(res *Result) (float64, string, bool) {
			w := res.WriteLevel(n)
			if w == nil {
				return 0, "", false
			}
			return w.PerSec, report.Rate(w.PerSec), true
		})
	}
	if len(r.Config.Writers) > 0 {
		n := slices.Max(r.Config.Writers)
		lat := func(q func(report.Latency) time.Duration) func(*Result) (float64, string, bool) {
			return func(res *Result) (float64, string, bool) {
				w := res.WriteLevel(n)
				if w == nil || w.Latency.Count == 0 {
					return 0, "", false
				}
				d := q(w.Latency)
				return float64(d), report.Duration(d), true
			}
		}
		add(fmt.Sprintf("write p50, %d writer%s", n, plural(n)), lat(func(l report.Latency) time.Duration { return l.P50 }))
		add(fmt.Sprintf("write p99, %d writer%s", n, plural(n)), lat(func(l report.Latency) time.Duration { return l.P99 }))
	}

	watchLat := func(q func(report.Latency) time.Duration) func(*Result) (float64, string, bool) {
		return func(res *Result) (float64, string, bool) {
			if res.Watch == nil || res.Watch.Latency.Count == 0 {
				return 0, "", false
			}
			d := q(res.Watch.Latency)
			return float64(d), report.Duration(d), true
		}
	}
	nw := r.Config.Watchers
	add(fmt.Sprintf("watch p50, %d watcher%s", nw, plural(nw)), watchLat(func(l report.Latency) time.Duration { return l.P50 }))
	add(fmt.Sprintf("watch p99, %d watcher%s", nw, plural(nw)), watchLat(func(l report.Latency) time.Duration { return l.P99 }))
	add(deliveriesRow, func(res *Result) (float64, string, bool) {
		if res.Watch == nil {
			return 0, "", false
		}
		return 0, report.Count(int64(res.Watch.Delivered)) + "/" + report.Count(int64(res.Watch.Expected)), true
	})

	mem := func(get func(*MemoryResult) uint64) func(*Result) (float64, string, bool) {
		return func(res *Result) (float64, string, bool) {
			if res.Memory == nil {
				return 0, "", false
			}
			v := get(res.Memory)
			return float64(v), report.Bytes(v), true
		}
	}
	keys := r.Config.Keys
	add(rssRow(keys), mem(func(m *MemoryResult) uint64 { return m.RSSBytes }))
	add("  of which file-backed", mem(func(m *MemoryResult) uint64 { return m.RSSFileBytes }))
	if r.Config.Settle > 0 {
		add(fmt.Sprintf("RSS settled (idle <= %v)", r.Config.Settle), func(res *Result) (float64, string, bool) {
			m := res.Memory
			if m == nil || m.SettledRSSBytes == 0 {
				return 0, "", false
			}
			return float64(m.SettledRSSBytes), report.Bytes(m.SettledRSSBytes), true
		})
	}
	add("peak RSS (VmHWM)", mem(func(m *MemoryResult) uint64 { return m.HWMBytes }))
	add(fmt.Sprintf("disk at %s keys", report.Count(int64(keys))), mem(func(m *MemoryResult) uint64 { return m.DiskBytes }))
	return tb
}

// LatencyTable returns the write throughput and latency at every count of
// writers, side by side for the backends.
func (r *Report) LatencyTable() *report.Table {
	tb := report.NewTable("durable writes by concurrency", "writers",
		"badger writes/s", "p50", "p99", "etcd writes/s", "p50", "p99")
	tb.Columns[0].Align = report.AlignRight
	for _, n := range r.Config.Writers {
		row := []string{fmt.Sprint(n)}
		for _, b := range Backends {
			w := r.Result(b).WriteLevel(n)
			if w == nil {
				row = append(row, "-", "-", "-")
				continue
			}
			row = append(row, report.Rate(w.PerSec), report.Duration(w.Latency.P50), report.Duration(w.Latency.P99))
		}
		tb.AddRow(row...)
	}
	return tb
}

// Render writes the summary table, the latency table, notes on how the
// backends were run, the targets missed, and the machine description.
func (r *Report) Render(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "store benchmark: badger vs etcd\n\n")
	b.WriteString(r.Table().String())
	b.WriteByte('\n')
	b.WriteString(r.LatencyTable().String())
	b.WriteByte('\n')
	for _, res := range r.Results {
		fmt.Fprintf(&b, "%s: %s.\n", res.Backend, res.Setup)
	}
	c := r.Config
	fmt.Fprintf(&b, "Each backend and phase ran in a child process of its own on an empty store in a fresh data dir.\n")
	fmt.Fprintf(&b, "writes: Creates of %s-byte random values, %v warm-up then %v per writer count; writes are durable when acknowledged.\n",
		report.Count(int64(c.ValueSize)), c.Warmup, c.Duration)
	fmt.Fprintf(&b, "watch: %d watchers, one writer at %d/s for %v; latency from just before the write call to receipt, so it includes the durable write.\n",
		c.Watchers, c.WatchRate, c.WatchDuration)
	fmt.Fprintf(&b, "memory: %s keys written by %d writers, then GC and FreeOSMemory; RSS is VmRSS of the worker right after the writes,\n", report.Count(int64(c.Keys)), c.KeyWriters)
	b.WriteString("  its file-backed part mapped files the kernel may reclaim (badger tables and memtables, bbolt's db);\n")
	if c.Settle > 0 {
		fmt.Fprintf(&b, "  settled is VmRSS once it stopped falling with the store idle (at most %v); disk is the allocated size of the data dir.\n", c.Settle)
	} else {
		b.WriteString("  disk is the allocated size of the data dir.\n")
	}
	report.WriteEnd(&b, r.Targets, r.Machine)
	_, err := io.WriteString(w, b.String())
	return err
}
