package apibench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"
)

// RunSummary is one run of several, in a few numbers.
type RunSummary struct {
	CreatesPerSec    float64       `json:"creates_per_sec"`
	CreateP99        time.Duration `json:"create_p99_ns"`
	WatchP99         time.Duration `json:"watch_p99_ns"`
	HubCPUSeconds    float64       `json:"hub_cpu_seconds"`
	ClientCPUSeconds float64       `json:"client_cpu_seconds"`
	// Median marks the run whose report this is.
	Median bool `json:"median,omitempty"`
}

func summarize(r *Report) RunSummary {
	return RunSummary{
		CreatesPerSec:    r.Result.Creates.PerSec,
		CreateP99:        r.Result.Creates.Latency.P99,
		WatchP99:         r.Result.Watch.Latency.P99,
		HubCPUSeconds:    r.Result.Hub.CPUSeconds,
		ClientCPUSeconds: r.Result.ClientCPUSeconds,
	}
}

// RunMedian runs the workload n times, each against a fresh hub, and
// returns the report of the median run by creates/s, with every run
// summarized in Runs. On a shared machine one run's numbers move with
// whatever else runs; the median of several is the figure to hold to the
// targets. Profiles, if asked for, are of the last run.
func RunMedian(ctx context.Context, cfg Config, n int, progress io.Writer) (*Report, error) {
	if n < 1 {
		return nil, fmt.Errorf("run count %d is under 1", n)
	}
	if progress == nil {
		progress = io.Discard
	}
	reps := make([]*Report, 0, n)
	for i := range n {
		if n > 1 {
			fmt.Fprintf(progress, "run %d of %d\n", i+1, n)
		}
		c := cfg
		if i < n-1 {
			c.ProfileDir = ""
		}
		rep, err := Run(ctx, c, progress)
		if err != nil {
			return nil, fmt.Errorf("run %d of %d: %w", i+1, n, err)
		}
		reps = append(reps, rep)
	}
	return medianReport(reps), nil
}

// medianReport returns the report of the median run by creates/s (the
// lower median for an even count) with every run summarized in Runs; a
// single report is returned as it is.
func medianReport(reps []*Report) *Report {
	n := len(reps)
	if n == 1 {
		return reps[0]
	}
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return cmpFloat(reps[a].Result.Creates.PerSec, reps[b].Result.Creates.PerSec)
	})
	median := order[(n-1)/2]
	runs := make([]RunSummary, n)
	for i, r := range reps {
		runs[i] = summarize(r)
		runs[i].Median = i == median
	}
	out := reps[median]
	out.Runs = runs
	return out
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
