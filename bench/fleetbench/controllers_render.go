package fleetbench

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/outpost-mesh/outpost/bench/report"
)

// ControllersReport is a controllers run's result with its targets and
// the machine it ran on.
type ControllersReport struct {
	Machine report.Machine     `json:"machine"`
	Config  ControllersConfig  `json:"config"`
	Result  *ControllersResult `json:"result"`
	Targets []Target           `json:"targets"`
}

// The targets of the issue that asked for this benchmark, for 1,000 nodes
// and 100 Deployments of 100 replicas on a 2-core machine.
const (
	targetCtlNodes       = 1000
	targetCtlDeployments = 100
	targetCtlReplicas    = 100
	targetBoundPerSec    = 300
	targetAllRunning     = 60 * time.Second
	targetHubRSS         = 800_000_000 // bytes: 800 MB
)

// Rows the targets attach to.
const (
	boundRateRow  = "deployments: scheduling throughput"
	allRunningRow = "deployments: all pods Running after first create"
	hubPeakRow    = "deployments: hub peak RSS"
)

func newControllersReport(cfg ControllersConfig, res *ControllersResult) *ControllersReport {
	return &ControllersReport{Machine: report.DescribeMachine(), Config: cfg, Result: res, Targets: evaluateControllers(cfg, res)}
}

func evaluateControllers(cfg ControllersConfig, res *ControllersResult) []Target {
	other := ""
	if cfg.Fleet.Nodes != targetCtlNodes || cfg.Deployments != targetCtlDeployments || cfg.Replicas != targetCtlReplicas {
		other = fmt.Sprintf("run with %s nodes and %d Deployments of %d; the targets are for %s nodes and %d of %d",
			report.Count(int64(cfg.Fleet.Nodes)), cfg.Deployments, cfg.Replicas, report.Count(targetCtlNodes), targetCtlDeployments, targetCtlReplicas)
	}
	judge := func(t Target, met bool) Target {
		switch {
		case other != "":
			t.Status, t.Detail = TargetNA, other
		case met:
			t.Status = TargetMet
		default:
			t.Status = TargetMissed
		}
		return t
	}
	d := res.Deployments
	all := d.Running == d.Pods
	runDetail := fmt.Sprintf("%.1fs", d.AllRunningSeconds)
	if !all {
		runDetail = fmt.Sprintf("%s of %s Running within %.0fs", report.Count(int64(d.Running)), report.Count(int64(d.Pods)), d.AllRunningSeconds)
	}
	peak := d.HubPeakRSSBytes
	if peak == 0 {
		peak = d.HubRSSBytes
	}
	return []Target{
		judge(Target{Goal: fmt.Sprintf(">= %d pods/s", targetBoundPerSec), Row: boundRateRow, Detail: fmt.Sprintf("%.0f pods/s", d.BoundPerSec)},
			d.Bound == d.Pods && d.BoundPerSec >= targetBoundPerSec),
		judge(Target{Goal: "< " + report.Duration(targetAllRunning), Row: allRunningRow, Detail: runDetail},
			all && d.AllRunningSeconds < targetAllRunning.Seconds()),
		judge(Target{Goal: "< " + report.Bytes(targetHubRSS), Row: hubPeakRow, Detail: report.Bytes(peak)},
			peak > 0 && peak < targetHubRSS),
	}
}

func (r *ControllersReport) targetCell(row string) string {
	var cells []string
	for _, t := range r.Targets {
		if t.Row == row {
			cells = append(cells, t.Goal+": "+t.Status)
		}
	}
	return strings.Join(cells, "; ")
}

// Table returns the results, one row per metric.
func (r *ControllersReport) Table() *report.Table {
	res := r.Result
	tb := report.NewTable("", "metric", "value", "target")
	tb.Columns[2].Align = report.AlignLeft
	add := func(label, value string) { tb.AddRow(label, value, r.targetCell(label)) }
	of := func(a, b int) string { return report.Count(int64(a)) + "/" + report.Count(int64(b)) }
	add("nodes Ready", of(res.Join.Ready, res.Join.Nodes))
	add("all nodes Ready after start", fmt.Sprintf("%.2fs", res.Join.Seconds))
	for _, w := range []struct {
		name string
		res  WorkloadResult
		skip bool
	}{
		{"deployments", res.Deployments, false},
		{"daemonset", res.DaemonSet, !r.Config.DaemonSet},
	} {
		if w.skip {
			continue
		}
		p, n := w.res, w.name+": "
		add(n+"creates took", fmt.Sprintf("%.2fs", p.CreateSeconds))
		add(n+"pods made by the controllers", of(p.Seen, p.Pods))
		add(n+"pods bound", of(p.Bound, p.Pods))
		add(n+"scheduling throughput", fmt.Sprintf("%.0f pods/s", p.BoundPerSec))
		add(n+"pods Running", of(p.Running, p.Pods))
		add(n+"all pods Running after first create", fmt.Sprintf("%.1fs", p.AllRunningSeconds))
		add(n+"made to bound p50, p99", report.Duration(p.ToBound.P50)+", "+report.Duration(p.ToBound.P99))
		add(n+"made to Running p50", report.Duration(p.ToRunning.P50))
		add(n+"made to Running p99", report.Duration(p.ToRunning.P99))
		add(n+"hub peak RSS", bytesCell(p.HubPeakRSSBytes))
		add(n+"hub RSS at the end", bytesCell(p.HubRSSBytes))
		add(n+"hub CPU seconds", fmt.Sprintf("%.1f", p.HubCPUSeconds))
	}
	for _, pc := range res.CPU {
		add("CPUs busy, "+pc.Phase+": hub/fleet/other", fmt.Sprintf("%.2f/%.2f/%.2f", pc.Hub, pc.Fleet, pc.Others))
	}
	return tb
}

// Render writes the table, what was measured, errors, missed targets and
// the machine.
func (r *ControllersReport) Render(w io.Writer) error {
	res, c := r.Result, r.Config
	var b strings.Builder
	b.WriteString("Controllers benchmark: the hub's controllers and scheduler placing workloads on simulated edge nodes over QUIC\n\n")
	b.WriteString(r.Table().String())
	b.WriteByte('\n')
	fmt.Fprintf(&b, "%s edge agents on the fake runtime run in this process, each with its own checkpoint and QUIC connection to a hub in a child process (its controllers and scheduler on, as by default). %d Deployments of %d replicas are created at once by %d workers; then one DaemonSet.\n",
		report.Count(int64(c.Fleet.Nodes)), c.Deployments, c.Replicas, c.Fleet.Workers)
	b.WriteString("A watch on the namespace's pods times each pod from its first sighting (the ReplicaSet or DaemonSet controller's create) to a node in spec.nodeName (the scheduler's binding) and to phase Running (the node's report). Scheduling throughput is pods bound over the time from the first pod seen to the last bound. Peak RSS is the hub's VmHWM, reset before the phase.\n")
	b.WriteString("Hub and agents share this machine's CPUs.\n")
	for _, p := range []WorkloadResult{res.Deployments, res.DaemonSet} {
		for _, e := range p.Errors {
			fmt.Fprintf(&b, "create error: %s\n", e)
		}
	}
	for _, e := range res.Watch.Errors {
		fmt.Fprintf(&b, "watch error: %s\n", e)
	}
	report.WriteEnd(&b, r.Targets, r.Machine)
	_, err := io.WriteString(w, b.String())
	return err
}
