package meshbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"time"

	"github.com/outpost-mesh/outpost/bench/report"
)

// Run measures as cfg says and returns the report, writing progress to
// progress. Every node it starts listens on 127.0.0.1 and is closed
// before it returns, also when ctx ends first.
func Run(ctx context.Context, cfg Config, progress io.Writer) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	logf := func(format string, args ...any) {
		fmt.Fprintf(progress, "%s  "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
	}
	base := cfg.nodeConfig()
	res := &Result{Mesh: timingsOf(base)}
	load := func(phase string) { res.Load = append(res.Load, report.ReadLoadAvg(phase)) }
	load("start")
	for _, size := range cfg.Sizes {
		sr := SizeResult{Nodes: size}
		sr.SuspicionMin, sr.SuspicionMax = suspicionTimeouts(base.SuspicionMult, base.SuspicionMaxTimeoutMult, size, base.ProbeInterval)
		var join, crash, dropped, leave []time.Duration
		for r := range cfg.Runs {
			logf("%d nodes, run %d of %d: join, crash, leave", size, r+1, cfg.Runs)
			j, c, d, l, err := measureRun(ctx, cfg, size, fmt.Sprintf("bench-%d-%d", size, r))
			if err != nil {
				return nil, fmt.Errorf("%d nodes, run %d: %w", size, r+1, err)
			}
			logf("  join seen by all in %s, crash in %s (its endpoint out of routing in %s), leave in %s",
				report.Duration(j), report.Duration(c), report.Duration(d), report.Duration(l))
			join, crash, dropped, leave = append(join, j), append(crash, c), append(dropped, d), append(leave, l)
		}
		sr.Join, sr.Crash, sr.Dropped, sr.Leave = summarize(join), summarize(crash), summarize(dropped), summarize(leave)
		load(fmt.Sprintf("%d nodes: runs", size))

		logf("%d nodes idle: settling %v, then counting for %v", size, cfg.Settle, cfg.Idle)
		idle, err := measureIdle(ctx, cfg, size)
		if err != nil {
			return nil, fmt.Errorf("%d nodes idle: %w", size, err)
		}
		logf("  %s a minute per node, %.2f kbit/s at most", report.Bytes(uint64(idle.MeanBytesPerMin)), idle.MaxKbits)
		sr.Idle = idle
		load(fmt.Sprintf("%d nodes: idle", size))
		res.Sizes = append(res.Sizes, sr)
	}
	if cfg.SyncBytes > 0 {
		logf("sync: %s of pods to one node, %d run(s) direct and through a relay", fmtMB(cfg.SyncBytes), cfg.SyncRuns)
		sync, err := measureSync(ctx, cfg, logf)
		if err != nil {
			return nil, fmt.Errorf("relayed sync: %w", err)
		}
		res.Sync = sync
		logf("  relayed/direct %.2f (%.1f against %.1f MB/s)", res.Sync.Ratio, res.Sync.RelayedMBps, res.Sync.DirectMBps)
		load("sync")
	}
	return NewReport(cfg, res), nil
}

// measureRun times, on a fresh site of size nodes: a node joining the
// others, converged, until all see all; a node crashing, as measureCrash
// says; a node added back, then one leaving (Leave, then Close) until no
// other lists it.
func measureRun(ctx context.Context, cfg Config, size int, name string) (join, crash, dropped, leave time.Duration, err error) {
	s, err := newSite(cfg.nodeConfig(), name)
	if err != nil {
		return 0, 0, 0, 0, err
	}
	defer func() { err = errors.Join(err, s.close()) }()
	if err := s.grow(ctx, size-1, cfg.Timeout); err != nil {
		return 0, 0, 0, 0, err
	}

	start := time.Now()
	n, err := s.start()
	if err != nil {
		return 0, 0, 0, 0, err
	}
	if err := s.join(n); err != nil {
		return 0, 0, 0, 0, err
	}
	if join, err = s.waitFor(ctx, start, cfg.Timeout, fmt.Sprintf("%s's join to be seen by all", n.name), s.converged); err != nil {
		return 0, 0, 0, 0, err
	}

	if crash, dropped, err = measureCrash(ctx, cfg, s); err != nil {
		return 0, 0, 0, 0, err
	}

	if err := s.grow(ctx, size, cfg.Timeout); err != nil {
		return 0, 0, 0, 0, err
	}
	gone := s.pick()
	start = time.Now()
	if err := gone.m.Leave(cfg.Timeout); err != nil {
		return 0, 0, 0, 0, fmt.Errorf("%s leaves: %w", gone.name, err)
	}
	if err := gone.m.Close(); err != nil {
		return 0, 0, 0, 0, fmt.Errorf("close %s: %w", gone.name, err)
	}
	if leave, err = s.waitFor(ctx, start, cfg.Timeout, fmt.Sprintf("%s's leave to be seen by all", gone.name), s.forgot(gone)); err != nil {
		return 0, 0, 0, 0, err
	}
	return join, crash, dropped, leave, nil
}

// measureCrash crashes a member of s (Close without Leave), while the
// others run the service proxy routing to an endpoint on each node, and
// times it until no other lists it alive (crash), and until every other's
// proxy has routing without its endpoint (dropped).
func measureCrash(ctx context.Context, cfg Config, s *site) (crash, dropped time.Duration, err error) {
	gone := s.pick()
	r, err := startRouting(ctx, s.nodes, gone)
	if err != nil {
		return 0, 0, err
	}
	defer r.stop()
	if _, err := s.waitFor(ctx, time.Now(), cfg.Timeout, "every proxy to route to every node's endpoint", r.routed); err != nil {
		return 0, 0, err
	}
	start := time.Now()
	if err := gone.m.Close(); err != nil {
		return 0, 0, fmt.Errorf("crash %s: %w", gone.name, err)
	}
	if crash, err = s.waitFor(ctx, start, cfg.Timeout, fmt.Sprintf("%s's crash to be seen by all", gone.name), s.forgot(gone)); err != nil {
		return 0, 0, err
	}
	if _, err = s.waitFor(ctx, start, cfg.Timeout, fmt.Sprintf("%s's endpoint to leave every node's routing", gone.name), r.dropped); err != nil {
		return 0, 0, err
	}
	last, _ := r.lastDrop()
	return crash, last.Sub(start), nil
}

// measureIdle counts what each node of a fresh, converged site of size
// nodes sends while nothing happens, after cfg.Settle, for cfg.Idle.
func measureIdle(ctx context.Context, cfg Config, size int) (idle IdleResult, err error) {
	s, err := newSite(cfg.nodeConfig(), fmt.Sprintf("bench-%d-idle", size))
	if err != nil {
		return idle, err
	}
	defer func() { err = errors.Join(err, s.close()) }()
	if err := s.grow(ctx, size, cfg.Timeout); err != nil {
		return idle, err
	}
	if err := sleep(ctx, cfg.Settle); err != nil {
		return idle, err
	}
	before, start := s.sent(), time.Now()
	if err := sleep(ctx, cfg.Idle); err != nil {
		return idle, err
	}
	after, took := s.sent(), time.Since(start)
	idle = IdleResult{Duration: took, Converged: s.converged()}
	for i, n := range s.nodes {
		idle.Nodes = append(idle.Nodes, NodeSent{Name: n.name, Sent: after[i].sub(before[i])})
	}
	idle.summarize()
	return idle, nil
}

// sleep waits d, or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// summarize returns the median, p95 and max of runs, which it keeps in
// their order.
func summarize(runs []time.Duration) Times {
	sorted := slices.Clone(runs)
	slices.Sort(sorted)
	t := Times{Runs: runs}
	if n := len(sorted); n > 0 {
		t.Median = (sorted[(n-1)/2] + sorted[n/2]) / 2
		t.Max = sorted[n-1]
		t.P95 = sorted[int(math.Ceil(0.95*float64(n)))-1]
	}
	return t
}

// suspicionTimeouts returns how long a suspected node has to refute
// before it is declared dead in a site of size nodes, as memberlist
// computes it: SuspicionMult probe intervals, times log10 of the nodes
// over 10, once the confirmations it expects have come, and up to
// maxMult times that until then. It expects SuspicionMult-2 of them,
// from peers whose own probes failed, and none where the site has too
// few other nodes (or SuspicionMult is under 3): lo and hi are then one.
func suspicionTimeouts(mult, maxMult, size int, probe time.Duration) (lo, hi time.Duration) {
	nodeScale := math.Max(1, math.Log10(math.Max(1, float64(size))))
	lo = time.Duration(mult) * time.Duration(nodeScale*1000) * probe / 1000
	if k := mult - 2; k < 1 || size-2 < k {
		return lo, lo
	}
	return lo, time.Duration(maxMult) * lo
}
