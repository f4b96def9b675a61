package densitybench

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/outpost-mesh/outpost/bench/report"
)

// Report is what Run measured, with the machine it ran on and the targets
// evaluated: rendered as tables by Render, plotted by Chart and written
// as JSON.
type Report struct {
	Machine    report.Machine  `json:"machine"`
	Config     Config          `json:"config"`
	Result     *Result         `json:"result"`
	Targets    []report.Target `json:"targets"`
	References []string        `json:"references"`
}

// The targets, and the workload they are set for.
const (
	targetIdleRSS      = 35e6 // bytes, the agent idle
	targetIdleAnon     = 20e6
	targetPerPodNode   = 1e6 // PSS per pod, shim per node
	targetPerPodPod    = 4e6 // PSS per pod, shim per pod
	targetStartP99     = time.Second
	targetRecovery     = 10 * time.Second
	targetRebootPods   = 100
	targetOverheadPods = 200 // pods at which the per-pod overhead is judged
)

// references are other edge agents' published figures, to read ours
// against.
var references = []string{
	"KubeEdge EdgeCore idles at 89.5 MB RSS, 23.6 MB anonymous, with no pods",
	"K3s documents 275 MB for its agent",
	"OpenYurt took 49.9 s to recover 10 pods after an offline reboot",
}

// NewReport returns the report of res, measured with cfg on this machine,
// with the targets evaluated.
func NewReport(cfg Config, res *Result) *Report {
	return &Report{Machine: report.DescribeMachine(), Config: cfg, Result: res, Targets: evaluate(cfg, res), References: references}
}

// evaluate checks res against the targets. A target whose workload the
// run did not have (fewer pods, a mode not run) is n/a with the reason.
func evaluate(cfg Config, res *Result) []report.Target {
	judge := func(goal, detail, na string, met bool) report.Target {
		t := report.Target{Goal: goal, Detail: detail}
		switch {
		case na != "":
			t.Status, t.Detail = report.TargetNA, strings.TrimPrefix(detail+"; "+na, "; ")
		case met:
			t.Status = report.TargetMet
		default:
			t.Status = report.TargetMissed
		}
		return t
	}
	var out []report.Target
	for _, m := range res.Modes {
		out = append(out,
			judge(fmt.Sprintf("agent idle RSS < %s (%s)", report.Bytes(targetIdleRSS), m.Label()), report.Bytes(m.Idle.AgentRSS), "", m.Idle.AgentRSS < targetIdleRSS),
			judge(fmt.Sprintf("agent idle anon < %s (%s)", report.Bytes(targetIdleAnon), m.Label()), report.Bytes(m.Idle.AgentAnon), "", m.Idle.AgentAnon < targetIdleAnon))
	}
	for _, m := range res.Modes {
		if len(m.Steps) == 0 {
			continue
		}
		last := m.Steps[len(m.Steps)-1]
		limit := int64(targetPerPodPod)
		if m.Mode == ModeNode {
			limit = targetPerPodNode
		}
		na := ""
		if last.Pods < targetOverheadPods {
			na = fmt.Sprintf("run up to %d pods; the target is for %d", last.Pods, targetOverheadPods)
		}
		out = append(out, judge(fmt.Sprintf("per-pod overhead < %s PSS (%s)", report.Bytes(uint64(limit)), m.Label()),
			fmt.Sprintf("%s at %d pods", signedBytes(last.PerPodOverhead), last.Pods), na, last.PerPodOverhead < limit))
	}
	for _, m := range res.Modes {
		detail := fmt.Sprintf("%s over %d pods", report.Duration(m.Start.P99), m.Start.Count)
		if b := res.baseline(m.OCIRuntime); b != nil && b.Start.Count > 0 {
			detail += fmt.Sprintf(" (%s alone: %s)", floorName(b.OCIRuntime), report.Duration(b.Start.P99))
		}
		out = append(out, judge(fmt.Sprintf("pod start p99 < %s (%s)", report.Duration(targetStartP99), m.Label()),
			detail, "", m.Start.Count > 0 && m.Start.P99 < targetStartP99))
	}
	if rb := res.Reboot; rb != nil {
		na := ""
		if rb.Pods != targetRebootPods {
			na = fmt.Sprintf("rebooted with %d pods; the target is for %d", rb.Pods, targetRebootPods)
		}
		detail := fmt.Sprintf("%.2fs", rb.RecoverySeconds)
		if !rb.Recovered {
			detail = fmt.Sprintf("not within %v: %s", cfg.RecoverTimeout, rb.Mismatch)
		}
		if b := res.baseline(RuntimeRunc); b != nil && b.Reboot != nil {
			detail += fmt.Sprintf(" (%s alone: %.2fs)", floorName(RuntimeRunc), b.Reboot.Seconds)
		}
		out = append(out, judge(fmt.Sprintf("reboot recovery of %d pods < %s", targetRebootPods, report.Duration(targetRecovery)),
			detail, na, rb.Recovered && rb.RecoverySeconds < targetRecovery.Seconds()))
	}
	return out
}

// baseline returns the baseline of ociRuntime, or nil.
func (res *Result) baseline(ociRuntime string) *Baseline {
	for i := range res.Baselines {
		if res.Baselines[i].OCIRuntime == ociRuntime {
			return &res.Baselines[i]
		}
	}
	return nil
}

// floorName names a baseline in tables: "containerd and runc".
func floorName(ociRuntime string) string { return "containerd and " + ociRuntime }

// signedBytes formats a signed byte count as report.Bytes does.
func signedBytes(n int64) string {
	if n < 0 {
		return "-" + report.Bytes(uint64(-n))
	}
	return report.Bytes(uint64(n))
}

// Render writes the report as tables: the node per mode and pod count,
// the reboot, the targets, the references and the machine.
func (r *Report) Render(w io.Writer) error {
	var b strings.Builder
	t := report.NewTable("pod density on one edge node (real containerd, runc and crun)",
		"mode", "pods", "start p50", "start p99", "task p50", "task p99", "agent RSS", "anon", "agent PSS", "ctrd RSS", "ctrd PSS", "shims", "shim PSS", "total PSS", "per pod", "idle CPU")
	for _, m := range r.Result.Modes {
		mode := m.Label()
		row := func(pods string, start, local *report.Latency, mem Memory, perPod string) {
			p50, p99, l50, l99 := "-", "-", "-", "-"
			if start != nil {
				p50, p99 = report.Duration(start.P50), report.Duration(start.P99)
				l50, l99 = report.Duration(local.P50), report.Duration(local.P99)
			}
			t.AddRow(mode, pods, p50, p99, l50, l99, report.Bytes(mem.AgentRSS), report.Bytes(mem.AgentAnon), report.Bytes(mem.AgentPSS),
				report.Bytes(mem.ContainerdRSS), report.Bytes(mem.ContainerdPSS), strconv.Itoa(mem.Shims), report.Bytes(mem.ShimPSS),
				report.Bytes(mem.TotalPSS()), perPod, fmt.Sprintf("%.0f%%", 100*(mem.AgentCPU+mem.ContainerdCPU+mem.ShimCPU)))
		}
		row("0 (idle)", nil, nil, m.Idle, "-")
		for _, st := range m.Steps {
			row(strconv.Itoa(st.Pods), &st.Start, &st.Local, st.Memory, signedBytes(st.PerPodOverhead))
		}
	}
	if len(r.Result.Modes) > 0 {
		b.WriteString(t.String())
		b.WriteString("per pod: (agent PSS - idle + containerd PSS - idle + shims' PSS) / pods; start: Create to a watch seeing Running and Ready, of the step's pods; task: Create to the task's start in the node's containerd;\nidle CPU: agent, containerd and shims over the settle's last half (100% = one CPU)\n")
		if r.Config.CrunSkipped != "" {
			fmt.Fprintf(&b, "crun not measured: %s\n", r.Config.CrunSkipped)
		}
		b.WriteString("\n")
	}
	if rb := r.Result.Reboot; rb != nil {
		rt := report.NewTable("offline reboot: hub and agent killed, every process, mount, netns, link and cgroup of the node gone, agent started with the hub down",
			"mode", "pods", "recovered", "containerd up", "first pod", "all pods", "running", "same IP")
		all := fmt.Sprintf("%.2fs", rb.RecoverySeconds)
		if !rb.Recovered {
			all = "-"
		}
		rt.AddRow("shim per "+rb.Mode, strconv.Itoa(rb.Pods), strconv.FormatBool(rb.Recovered), fmt.Sprintf("%.2fs", rb.ContainerdSeconds),
			fmt.Sprintf("%.2fs", rb.FirstPodSeconds), all, strconv.Itoa(rb.Running), strconv.Itoa(rb.SameIP))
		b.WriteString(rt.String())
		b.WriteString("times from the agent's start; a pod is back when its container's task is RUNNING in the node's containerd namespace and its netns holds its old IP\n")
		if rb.Mismatch != "" {
			fmt.Fprintf(&b, "last look: %s\n", rb.Mismatch)
		}
		b.WriteString("\n")
	}
	if len(r.Result.Baselines) > 0 {
		bt := report.NewTable("the floor: containerd and the OCI runtime alone (same containerd, image and batches, a shim per container; no agent, hub or pod network)",
			"runtime", "containers", "start p50", "start p99", "agent's p99", "agent / floor")
		for _, b := range r.Result.Baselines {
			for _, st := range b.Steps {
				agentP99, ratio := "-", "-"
				if m := r.Result.mode(ModePod, b.OCIRuntime); m != nil {
					for _, ms := range m.Steps {
						if ms.Pods == st.Pods && st.Start.P99 > 0 {
							agentP99 = report.Duration(ms.Start.P99)
							ratio = fmt.Sprintf("%.2f", float64(ms.Start.P99)/float64(st.Start.P99))
						}
					}
				}
				bt.AddRow(b.OCIRuntime, strconv.Itoa(st.Pods), report.Duration(st.Start.P50), report.Duration(st.Start.P99), agentP99, ratio)
			}
		}
		b.WriteString(bt.String())
		b.WriteString("start: the container's Create to its task started, of the step's containers; agent's p99: shim per pod, Create of the pod to Running and Ready\n")
		for _, bl := range r.Result.Baselines {
			if rb := bl.Reboot; rb != nil {
				fmt.Fprintf(&b, "reboot floor: containerd started afresh, then %d containers at once: all running %.2fs after containerd's start (it answered at %.2fs)\n",
					rb.Containers, rb.Seconds, rb.ContainerdSeconds)
			}
		}
		b.WriteString("\n")
	}
	b.WriteString(report.TargetTable(r.Targets))
	b.WriteString("\nreferences\n")
	for _, ref := range r.References {
		fmt.Fprintf(&b, "  %s\n", ref)
	}
	report.WriteLoad(&b, r.Result.Load)
	report.WriteEnd(&b, r.Targets, r.Machine)
	_, err := io.WriteString(w, b.String())
	return err
}

// mode returns the result of mode with ociRuntime, or nil.
func (res *Result) mode(mode, ociRuntime string) *ModeResult {
	for i := range res.Modes {
		if res.Modes[i].Mode == mode && res.Modes[i].OCIRuntime == ociRuntime {
			return &res.Modes[i]
		}
	}
	return nil
}

// Chart plots the node's PSS against its pod count, agent, containerd,
// shims and their total, one color each (others for crun), per mode
// (shim per node dashed).
func (r *Report) Chart() *report.LineChart {
	c := &report.LineChart{
		Title:  "Edge node memory (PSS) against pods",
		XLabel: "pods on the node",
		YLabel: "PSS",
		Format: func(v float64) string { return report.Bytes(uint64(v)) },
	}
	parts := []struct {
		name string
		of   func(Memory) uint64
	}{
		{"agent", func(m Memory) uint64 { return m.AgentPSS }},
		{"containerd", func(m Memory) uint64 { return m.ContainerdPSS }},
		{"shims", func(m Memory) uint64 { return m.ShimPSS }},
		{"total", Memory.TotalPSS},
	}
	for _, m := range r.Result.Modes {
		for pi, p := range parts {
			color := pi
			if m.OCIRuntime == RuntimeCrun {
				color += len(parts)
			}
			s := report.LineSeries{Name: p.name + ", " + m.Label(), Color: report.SeriesColor(color), Dashed: m.Mode == ModeNode}
			s.Points = append(s.Points, report.Point{X: 0, Y: float64(p.of(m.Idle))})
			for _, st := range m.Steps {
				s.Points = append(s.Points, report.Point{X: float64(st.Pods), Y: float64(p.of(st.Memory))})
			}
			c.Series = append(c.Series, s)
		}
	}
	return c
}
