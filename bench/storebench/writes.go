package storebench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/outpost-mesh/outpost/bench/report"
	"github.com/outpost-mesh/outpost/hub/store"
)

// measureWrites runs each count of writers in turn on st. Each writer
// Creates its own keys, /bench/w/<writer>/<n>, writer numbers running on
// across counts so that no key is written twice.
func measureWrites(ctx context.Context, st store.Store, cfg Config) ([]WriteResult, error) {
	var out []WriteResult
	next := 0
	for _, n := range cfg.Writers {
		r, err := writeLevel(ctx, st, cfg, next, n)
		if err != nil {
			return nil, fmt.Errorf("%d writers: %w", n, err)
		}
		out = append(out, r)
		next += n
	}
	return out, nil
}

// writeLevel runs n writers numbered from first for cfg.Warmup and then
// cfg.Duration, counting the Creates that complete inside the second window.
func writeLevel(ctx context.Context, st store.Store, cfg Config, first, n int) (WriteResult, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	start := time.Now()
	from := start.Add(cfg.Warmup)
	until := from.Add(cfg.Duration)
	lat := make([][]time.Duration, n)
	var wg sync.WaitGroup
	for w := range n {
		id := first + w
		wg.Go(func() {
			values := newValueSource(uint64(id), cfg.ValueSize)
			for i := 0; ; i++ {
				key := fmt.Sprintf("/bench/w/%d/%d", id, i)
				val := values.next()
				t0 := time.Now()
				if !t0.Before(until) || ctx.Err() != nil {
					return
				}
				if _, err := st.Create(ctx, key, val); err != nil {
					if !isCanceled(ctx, err) {
						cancel(fmt.Errorf("create %s: %w", key, err))
					}
					return
				}
				t1 := time.Now()
				if !t1.Before(from) && t1.Before(until) {
					lat[w] = append(lat[w], t1.Sub(t0))
				}
			}
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return WriteResult{}, err
	}
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	secs := cfg.Duration.Seconds()
	return WriteResult{
		Writers: n,
		Writes:  len(all),
		Seconds: secs,
		PerSec:  float64(len(all)) / secs,
		Latency: report.Summarize(all),
	}, nil
}
