package otabench

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/outpost-mesh/outpost/bench/report"
)

// Report is what Run measured, with the machine it ran on and the targets
// evaluated: rendered as tables by Render and written as JSON.
type Report struct {
	Machine report.Machine  `json:"machine"`
	Config  Config          `json:"config"`
	Result  *Result         `json:"result"`
	Targets []report.Target `json:"targets"`
}

// The targets set by the issue that asked for this benchmark.
const (
	targetNodes        = 1000
	targetArtifact     = 5_000_000
	targetFleet        = 10 * time.Minute
	targetDeltaPercent = 25.0
)

// NewReport returns the report of res, measured with cfg on this machine.
func NewReport(cfg Config, res *Result) *Report {
	return &Report{Machine: report.DescribeMachine(), Config: cfg, Result: res, Targets: evaluate(cfg, res)}
}

func evaluate(cfg Config, res *Result) []report.Target {
	other := ""
	if cfg.Nodes != targetNodes || cfg.ArtifactSize != targetArtifact {
		other = fmt.Sprintf("run with %s nodes and a %s artifact; the target is for %s and %s",
			report.Count(int64(cfg.Nodes)), report.Bytes(uint64(cfg.ArtifactSize)), report.Count(targetNodes), report.Bytes(targetArtifact))
	}
	judge := func(t report.Target, met bool) report.Target {
		switch {
		case other != "":
			t.Status, t.Detail = report.TargetNA, t.Detail+"; "+other
		case met:
			t.Status = report.TargetMet
		default:
			t.Status = report.TargetMissed
		}
		return t
	}
	f := res.Full
	return []report.Target{
		judge(report.Target{Goal: "whole fleet updated < " + report.Duration(targetFleet),
			Detail: fmt.Sprintf("%.1fs, %d/%d nodes", f.Seconds, f.Updated, cfg.Nodes)},
			f.Updated == cfg.Nodes && f.Seconds < targetFleet.Seconds()),
		// The delta's size does not depend on the fleet's.
		{Goal: fmt.Sprintf("delta < %.0f%% of full", targetDeltaPercent), Detail: fmt.Sprintf("%.2f%%, %s", res.DeltaPercent, deltaOf(res)),
			Status: map[bool]string{true: report.TargetMet, false: report.TargetMissed}[res.Delta.DeltaNodes > 0 && res.DeltaPercent < targetDeltaPercent]},
	}
}

// deltaOf says in words what the delta was measured on.
func deltaOf(res *Result) string {
	if res.DeltaOf == DeltaOfRebuilt {
		return "a rebuilt agent"
	}
	return "a pseudo-random artifact with small regions rewritten"
}

// Render writes the report's tables.
func (r *Report) Render(w io.Writer) error {
	var b strings.Builder
	res := r.Result
	fmt.Fprintf(&b, "outpost bench ota: %s nodes, %s artifact, waves %s, health window %v; delta of %s",
		report.Count(int64(r.Config.Nodes)), report.Bytes(uint64(r.Config.ArtifactSize)), r.Config.Waves, r.Config.HealthWindow, deltaOf(res))
	if res.DeltaOf == DeltaOfRebuilt {
		fmt.Fprintf(&b, " on %d nodes", res.Delta.Nodes)
	}
	b.WriteString("\n\n")
	// The columns: the full rollout, the rebuilt agent's base build if
	// there is one, and the delta.
	cols := []RolloutResult{res.Full}
	heads := []string{"", "full " + res.Full.Version}
	if res.RebuiltBase != nil {
		cols = append(cols, *res.RebuiltBase)
		heads = append(heads, "agent build "+res.RebuiltBase.Version)
	}
	cols = append(cols, res.Delta)
	heads = append(heads, "delta "+res.Delta.Version)
	t := report.NewTable("rollouts", heads...)
	row := func(name string, f func(RolloutResult) string) {
		cells := []string{name}
		for _, c := range cols {
			cells = append(cells, f(c))
		}
		t.AddRow(cells...)
	}
	row("nodes updated", func(x RolloutResult) string { return fmt.Sprintf("%d of %d (%d failed)", x.Updated, x.Nodes, x.Failed) })
	waves := 0
	for _, c := range cols {
		if len(c.Errors) > 0 {
			defer fmt.Fprintf(w, "\nfailures of %s: %q\n", c.Version, c.Errors)
		}
		waves = max(waves, len(c.Waves))
	}
	row("total", func(x RolloutResult) string { return fmt.Sprintf("%.1fs", x.Seconds) })
	for i := range waves {
		row(fmt.Sprintf("wave %d", i+1), func(x RolloutResult) string {
			if i >= len(x.Waves) {
				return "-"
			}
			wv := x.Waves[i]
			if wv.Seconds < 0 {
				return fmt.Sprintf("to %d: not done", wv.Target)
			}
			return fmt.Sprintf("to %d: %.1fs (from +%.0fs)", wv.Target, wv.Seconds, wv.StartedAt)
		})
	}
	row("node fetch to commit p50/p99", func(x RolloutResult) string {
		return report.Duration(x.Update.P50) + " / " + report.Duration(x.Update.P99)
	})
	row("artifact", func(x RolloutResult) string { return report.Bytes(uint64(x.ArtifactSize)) })
	row("bytes per node (mean)", func(x RolloutResult) string { return report.Bytes(uint64(x.BytesPerNode)) })
	row("bytes per node (max)", func(x RolloutResult) string { return report.Bytes(uint64(x.ReceivedMax)) })
	row("delta transfers", func(x RolloutResult) string {
		return fmt.Sprintf("%d, %s each", x.DeltaNodes, report.Bytes(uint64(x.DeltaBytesPerNode)))
	})
	row("wire per node (QUIC, sync)", func(x RolloutResult) string { return report.Bytes(uint64(x.WirePerNode)) })
	row("hub CPU", func(x RolloutResult) string { return fmt.Sprintf("%.2f CPUs (%.0f s)", x.HubCPUs, x.HubCPUSeconds) })
	row("hub RSS max", func(x RolloutResult) string { return report.Bytes(x.HubRSSMax) })
	row("fleet process CPU", func(x RolloutResult) string { return fmt.Sprintf("%.2f CPUs", x.FleetCPUs) })
	b.WriteString(t.String())
	a := res.Artifacts
	fmt.Fprintf(&b, "\ndelta per node: %.2f%% of the artifact (%s), measured on %s: %s (%s) to %s (%s), %s of it changed in place\n",
		res.DeltaPercent, report.Bytes(uint64(res.Delta.ArtifactSize)), deltaOf(res), a[0].File, report.Bytes(uint64(a[0].Size)),
		a[1].File, report.Bytes(uint64(a[1].Size)), report.Bytes(uint64(res.ChangedBytes)))
	fmt.Fprintf(&b, "hub: ready in %.1fs, RSS %s with the fleet joined (in %.1fs), peak %s, %.0f CPU seconds in all\n",
		res.Hub.ReadySeconds, report.Bytes(res.Hub.IdleRSS), res.JoinSeconds, report.Bytes(res.Hub.HWM), res.Hub.CPUSeconds)
	if len(res.Full.Cuts) > 0 {
		ct := report.NewTable(fmt.Sprintf("links cut for %v mid-transfer (full rollout)", r.Config.CutFor), "node", "cut at", "received", "resumes", "cost", "updated")
		for _, c := range res.Full.Cuts {
			ct.AddRow(c.Node, report.Bytes(uint64(c.At)), report.Bytes(uint64(c.Received)), fmt.Sprintf("%d", c.Resumes),
				fmt.Sprintf("%.3f× artifact", c.Cost), fmt.Sprintf("%v", c.Updated))
		}
		b.WriteString("\n" + ct.String())
	}
	if res.AgentWarnings > 0 {
		fmt.Fprintf(&b, "\nagent warnings: %d, such as %q\n", res.AgentWarnings, res.AgentLogSamples)
	}
	b.WriteString("\n" + report.TargetTable(r.Targets))
	report.WriteEnd(&b, r.Targets, r.Machine)
	_, err := io.WriteString(w, b.String())
	return err
}
