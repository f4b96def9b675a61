package controllers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/outpost-mesh/outpost/internal/wait"
)

// limiter is a rate limiter with no delay that counts what Work asks of
// it.
type limiter struct {
	mu      sync.Mutex
	fails   map[string]int
	forgets map[string]int
}

func newLimiter() *limiter {
	return &limiter{fails: map[string]int{}, forgets: map[string]int{}}
}

func (l *limiter) When(k string) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.fails[k]++
	return 0
}

func (l *limiter) Forget(k string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.forgets[k]++
	delete(l.fails, k)
}

func (l *limiter) NumRequeues(k string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fails[k]
}

func (l *limiter) forgot(k string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.forgets[k]
}

// logs keeps every record's level, message and key.
type logs struct {
	mu   sync.Mutex
	recs []string // "LEVEL message key=value"
}

func (h *logs) Enabled(context.Context, slog.Level) bool { return true }
func (h *logs) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *logs) WithGroup(string) slog.Handler            { return h }
func (h *logs) Handle(_ context.Context, r slog.Record) error {
	s := r.Level.String() + " " + r.Message
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "thing" {
			s += " thing=" + a.Value.String()
		}
		return true
	})
	h.mu.Lock()
	h.recs = append(h.recs, s)
	h.mu.Unlock()
	return nil
}

func (h *logs) all() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.recs...)
}

var (
	errBoom     = errors.New("boom")
	errConflict = apierrors.NewConflict(schema.GroupResource{Resource: "things"}, "a", errors.New("stale"))
	errFine     = errors.New("fine after all")
)

// TestWork runs one key through Work per case, its sync failing with
// errs in turn and then succeeding, and checks how often it was synced,
// forgotten and retried, and what was logged.
func TestWork(t *testing.T) {
	tests := []struct {
		name      string
		w         Workers[string] // Queue, Sync, Log and Count filled in
		errs      []error
		syncs     int      // how many times the key is synced in all
		forgets   int      // how many times it is forgotten
		requeues  int      // its failure count at the end
		wantLogs  []string // after "INFO started"
		wantMatch func([]string) bool
	}{
		{name: "success", errs: nil, syncs: 1, forgets: 1},
		{name: "failure then success", errs: []error{errBoom, errBoom}, syncs: 3, forgets: 1,
			wantLogs: []string{"WARN sync failed, will retry thing=a", "WARN sync failed, will retry thing=a"}},
		{name: "conflict at debug", errs: []error{errConflict}, syncs: 2, forgets: 1,
			wantLogs: []string{"DEBUG sync failed, will retry thing=a"}},
		{name: "own message and level",
			w:    Workers[string]{Failed: "sync thing", Level: func(error) slog.Level { return slog.LevelInfo }},
			errs: []error{errConflict}, syncs: 2, forgets: 1,
			wantLogs: []string{"INFO sync thing thing=a"}},
		{name: "loud", w: Workers[string]{Level: Loud}, errs: []error{errConflict}, syncs: 2, forgets: 1,
			wantLogs: []string{"WARN sync failed, will retry thing=a"}},
		{name: "ignored error", w: Workers[string]{Ignore: func(err error) bool { return errors.Is(err, errFine) }},
			errs: []error{errFine}, syncs: 1, forgets: 1},
		{name: "gives up after MaxRetries", w: Workers[string]{MaxRetries: 2},
			errs: []error{errBoom, errBoom, errBoom, errBoom}, syncs: 3, forgets: 1,
			wantLogs: []string{"WARN sync failed, will retry thing=a", "WARN sync failed, will retry thing=a",
				"WARN sync failed, giving up until the thing changes thing=a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lim := newLimiter()
			h := &logs{}
			var mu sync.Mutex
			calls := 0
			w := tt.w
			w.Queue = workqueue.NewTypedRateLimitingQueueWithConfig[string](lim,
				workqueue.TypedRateLimitingQueueConfig[string]{Clock: clocktesting.NewFakeClock(time.Now())})
			w.Count, w.Log, w.What, w.Started = 2, slog.New(h), "thing", "started"
			w.Sync = func(_ context.Context, k string) error {
				mu.Lock()
				defer mu.Unlock()
				calls++
				if calls <= len(tt.errs) {
					return tt.errs[calls-1]
				}
				return nil
			}
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() { done <- Work(ctx, w) }()
			w.Queue.Add("a")
			wait.For(t, 5*time.Second, "key forgotten", func() (bool, string) {
				return lim.forgot("a") == tt.forgets, fmt.Sprintf("forgotten %d times", lim.forgot("a"))
			})
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("Work: %v", err)
			}
			if !w.Queue.ShuttingDown() {
				t.Error("queue not shut down")
			}
			mu.Lock()
			if calls != tt.syncs {
				t.Errorf("synced %d times, want %d", calls, tt.syncs)
			}
			mu.Unlock()
			if n := lim.NumRequeues("a"); n != tt.requeues {
				t.Errorf("failure count %d, want %d", n, tt.requeues)
			}
			want := append([]string{"INFO started"}, tt.wantLogs...)
			if got := h.all(); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("logs\n got %q\nwant %q", got, want)
			}
		})
	}
}

// TestWorkConcurrency checks that Count keys are synced at once and that
// Work returns only after every worker has exited.
func TestWorkConcurrency(t *testing.T) {
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	var mu sync.Mutex
	in, exited := 0, 0
	release := make(chan struct{})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- Work(ctx, Workers[string]{Queue: q, Count: 3, Log: slog.New(&logs{}), What: "thing",
			Sync: func(ctx context.Context, k string) error {
				mu.Lock()
				in++
				mu.Unlock()
				<-release
				mu.Lock()
				exited++
				mu.Unlock()
				return nil
			}})
	}()
	for _, k := range []string{"a", "b", "c", "d"} {
		q.Add(k)
	}
	wait.For(t, 5*time.Second, "three syncs at once", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return in == 3, fmt.Sprintf("%d in", in)
	})
	cancel()
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("Work: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	// A shut queue still hands out what it holds, so the fourth key is
	// synced too, before Work returns.
	if in != 4 || exited != 4 {
		t.Errorf("in %d, exited %d: want 4 each", in, exited)
	}
}

// TestWorkNotSynced checks that Work starts no worker before the caches
// have synced, and returns with the queue shut when ctx ends first.
func TestWorkNotSynced(t *testing.T) {
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	q.Add("a")
	h := &logs{}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err := Work(ctx, Workers[string]{Queue: q, Count: 1, Log: slog.New(h), Started: "started",
		Synced: []cache.InformerSynced{func() bool { return false }},
		Sync:   func(context.Context, string) error { t.Error("synced before the caches"); return nil }})
	if err != nil {
		t.Fatalf("Work: %v", err)
	}
	if !q.ShuttingDown() {
		t.Error("queue not shut down")
	}
	if got := h.all(); len(got) != 0 {
		t.Errorf("logged %q before the caches synced", got)
	}
}

func TestWorkBadConfig(t *testing.T) {
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	defer q.ShutDown()
	sync := func(context.Context, string) error { return nil }
	log := slog.New(&logs{})
	for name, w := range map[string]Workers[string]{
		"nil queue": {Count: 1, Sync: sync, Log: log},
		"nil sync":  {Queue: q, Count: 1, Log: log},
		"nil log":   {Queue: q, Count: 1, Sync: sync},
		"no count":  {Queue: q, Sync: sync, Log: log},
	} {
		if err := Work(t.Context(), w); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
