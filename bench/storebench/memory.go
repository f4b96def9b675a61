package storebench

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
	"time"

	"github.com/outpost-mesh/outpost/bench/internal/childhub"
)

// measureMemory writes cfg.Keys keys with cfg.KeyWriters concurrent
// writers, then collects garbage, returns free memory to the OS and reads
// the process's memory and the data dir's size.
func measureMemory(ctx context.Context, inst *instance, cfg Config, baseline childhub.Sample) (*MemoryResult, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	start := time.Now()
	var wg sync.WaitGroup
	for w := range cfg.KeyWriters {
		wg.Go(func() {
			values := newValueSource(uint64(w)+1<<32, cfg.ValueSize)
			for i := w; i < cfg.Keys && ctx.Err() == nil; i += cfg.KeyWriters {
				key := fmt.Sprintf("/bench/keys/%d/%d", w, i)
				if _, err := inst.store.Create(ctx, key, values.next()); err != nil {
					if !isCanceled(ctx, err) {
						cancel(fmt.Errorf("create %s: %w", key, err))
					}
					return
				}
			}
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	elapsed := time.Since(start)

	st, err := settledStatus()
	if err != nil {
		return nil, err
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	disk, apparent, err := childhub.DirSize(inst.dataDir)
	if err != nil {
		return nil, err
	}
	res := &MemoryResult{
		Keys:              cfg.Keys,
		WriteSeconds:      elapsed.Seconds(),
		BaselineRSSBytes:  baseline.RSS,
		RSSBytes:          st.RSS,
		RSSAnonBytes:      st.RSSAnon,
		RSSFileBytes:      st.RSSFile,
		HWMBytes:          st.HWM,
		GoHeapBytes:       ms.HeapInuse,
		DiskBytes:         disk,
		DiskApparentBytes: apparent,
	}
	if cfg.Settle > 0 {
		settled, waited, err := childhub.Settle(ctx, settledStatus, st, cfg.Settle)
		if err != nil {
			return nil, err
		}
		res.SettledRSSBytes = settled.RSS
		res.SettledRSSAnonBytes = settled.RSSAnon
		res.SettledRSSFileBytes = settled.RSSFile
		res.SettleSeconds = waited.Seconds()
		res.HWMBytes = settled.HWM
	}
	return res, nil
}

// settledStatus collects garbage, returns free memory to the OS and then
// reads the process's memory.
func settledStatus() (childhub.Sample, error) {
	runtime.GC()
	debug.FreeOSMemory()
	return childhub.ReadProc("self")
}
