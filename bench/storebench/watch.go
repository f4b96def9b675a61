package storebench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outpost-mesh/outpost/bench/report"
	"github.com/outpost-mesh/outpost/hub/store"
)

const (
	watchPrefix = "/bench/watch/"
	// readyKey is written once every watch is open; a watcher that has
	// seen it is registered, so none of the measured writes can be missed
	// for being made too early.
	readyKey = watchPrefix + "ready"
	// watchKeys is the number of keys the watched writes cycle through:
	// the first round Creates them, later rounds Update them.
	watchKeys = 100
	// readyTimeout bounds the wait for every watcher to see readyKey.
	readyTimeout = 30 * time.Second
)

// watcher is the state one watch goroutine fills in; read only after it
// has exited.
type watcher struct {
	lat        []time.Duration
	lastRev    int64
	outOfOrder int
	err        error
}

// measureWatch opens cfg.Watchers watches on watchPrefix, then writes at
// cfg.WatchRate for cfg.WatchDuration values carrying their send time, and
// measures when each watcher receives each write.
func measureWatch(ctx context.Context, st store.Store, cfg Config) (*WatchResult, error) {
	wctx, stop := context.WithCancel(ctx)
	defer stop()

	var (
		wg        sync.WaitGroup
		delivered atomic.Int64
		ready     = make(chan struct{}, cfg.Watchers)
		watchers  = make([]watcher, cfg.Watchers)
	)
	// Stop and join the watchers on every return path.
	defer wg.Wait()
	defer stop()
	for i := range watchers {
		ch, err := st.Watch(wctx, watchPrefix, 0)
		if err != nil {
			return nil, fmt.Errorf("watch %d: %w", i, err)
		}
		w := &watchers[i]
		wg.Go(func() { w.consume(wctx, ch, ready, &delivered) })
	}

	if _, err := st.Create(ctx, readyKey, make([]byte, minValueSize)); err != nil {
		return nil, fmt.Errorf("create %s: %w", readyKey, err)
	}
	timeout := time.NewTimer(readyTimeout)
	defer timeout.Stop()
	for range cfg.Watchers {
		select {
		case <-ready:
		case <-timeout.C:
			return nil, fmt.Errorf("watchers did not see %s within %v", readyKey, readyTimeout)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}

	writes, err := watchedWrites(ctx, st, cfg)
	if err != nil {
		return nil, err
	}

	// Wait for every delivery, or for the drain time to pass.
	expected := int64(writes) * int64(cfg.Watchers)
	deadline := time.Now().Add(cfg.WatchDrain)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for delivered.Load() < expected && time.Now().Before(deadline) {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	stop()
	wg.Wait()

	res := &WatchResult{Watchers: cfg.Watchers, Writes: writes, Expected: int(expected)}
	var all []time.Duration
	for i := range watchers {
		w := &watchers[i]
		all = append(all, w.lat...)
		res.OutOfOrder += w.outOfOrder
		if w.err != nil && !slices.Contains(res.Errors, w.err.Error()) {
			res.Errors = append(res.Errors, w.err.Error())
		}
	}
	res.Delivered = len(all)
	res.Missing = max(res.Expected-res.Delivered, 0)
	res.Extra = max(res.Delivered-res.Expected, 0)
	res.Latency = report.Summarize(all)
	return res, nil
}

// consume records the deliveries of ch until it closes, signalling ready
// once when it sees readyKey.
func (w *watcher) consume(ctx context.Context, ch <-chan store.WatchResponse, ready chan<- struct{}, delivered *atomic.Int64) {
	for resp := range ch {
		now := time.Now()
		for _, ev := range resp.Events {
			if ev.Revision() <= w.lastRev {
				w.outOfOrder++
			}
			w.lastRev = ev.Revision()
			if ev.KV.Key == readyKey {
				ready <- struct{}{}
				continue
			}
			if len(ev.KV.Value) < 8 {
				continue
			}
			sent := int64(binary.BigEndian.Uint64(ev.KV.Value))
			w.lat = append(w.lat, now.Sub(time.Unix(0, sent)))
			delivered.Add(1)
		}
		if resp.Err != nil && ctx.Err() == nil && !errors.Is(resp.Err, context.Canceled) {
			w.err = resp.Err
		}
	}
	if w.err == nil && ctx.Err() == nil {
		w.err = errors.New("watch channel closed early")
	}
}

// watchedWrites makes cfg.WatchRate writes a second for cfg.WatchDuration,
// each value starting with its send time in nanoseconds, and returns how
// many it made. A write that falls behind schedule is made at once.
func watchedWrites(ctx context.Context, st store.Store, cfg Config) (int, error) {
	n := int(int64(cfg.WatchRate) * int64(cfg.WatchDuration) / int64(time.Second))
	n = max(n, 1)
	interval := time.Second / time.Duration(cfg.WatchRate)
	values := newValueSource(0x5eed, cfg.ValueSize)
	start := time.Now()
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for i := range n {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
		key := fmt.Sprintf("%sk/%d", watchPrefix, i%watchKeys)
		val := values.next()
		binary.BigEndian.PutUint64(val, uint64(time.Now().UnixNano()))
		var err error
		if i < watchKeys {
			_, err = st.Create(ctx, key, val)
		} else {
			_, err = st.Update(ctx, key, val, 0)
		}
		if err != nil {
			return 0, fmt.Errorf("write %s: %w", key, err)
		}
	}
	return n, nil
}
