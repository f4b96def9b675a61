package controllers

import (
	"context"
	"errors"
	"log/slog"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// Workers is a pool of goroutines working on one rate-limited queue of
// keys, the shell every controller here runs: each takes a key off
// Queue, syncs it, forgets it on success and retries it with the
// queue's back-off on failure. Only Queue, Count, Sync and Log are
// required; the rest say how a controller's keys differ.
type Workers[T comparable] struct {
	// Queue holds the keys. Work shuts it down.
	Queue workqueue.TypedRateLimitingInterface[T]
	// Count is how many keys are synced at once; at least 1.
	Count int
	// Synced are the informers' HasSynced that Work waits for before it
	// starts any worker.
	Synced []cache.InformerSynced
	// Sync works on one key; an error retries it.
	Sync func(context.Context, T) error
	// Log receives the pool's logs.
	Log *slog.Logger

	// What names the key in logs ("daemonset", "node", ...).
	What string
	// Started is logged at Info once the caches have synced; "" logs
	// nothing.
	Started string
	// Failed is the message of a failed sync; "" is
	// "sync failed, will retry".
	Failed string
	// Level is the level Failed is logged at for err; nil is Quiet.
	// Nothing is logged for a sync that failed because ctx ended.
	Level func(err error) slog.Level
	// MaxRetries is how many times a failing key is retried before it is
	// dropped (logged at Warn) until something adds it again; 0 retries
	// for ever. Upstream's Deployment controller gives up after 15.
	MaxRetries int
	// Ignore reports errors that end a key's work as success would,
	// unlogged; nil ignores none.
	Ignore func(err error) bool
}

// Quiet logs conflicts at Debug and other errors at Warn: a conflict is
// most likely a decision made on a cache that had not yet seen the last
// write, and the retry will have seen it.
func Quiet(err error) slog.Level {
	if apierrors.IsConflict(err) {
		return slog.LevelDebug
	}
	return slog.LevelWarn
}

// Loud logs every error at Warn.
func Loud(error) slog.Level { return slog.LevelWarn }

// Work waits for w.Synced, logs w.Started, and runs w.Count workers on
// w.Queue until ctx ends. It blocks until then, shuts the queue down (also
// when ctx ends before the caches have synced), and returns only after
// every worker has exited: nil, or an error at once for a Workers that
// lacks a required field.
func Work[T comparable](ctx context.Context, w Workers[T]) error {
	switch {
	case w.Queue == nil:
		return errors.New("controllers: Work: nil Queue")
	case w.Sync == nil:
		return errors.New("controllers: Work: nil Sync")
	case w.Log == nil:
		return errors.New("controllers: Work: nil Log")
	case w.Count < 1:
		return errors.New("controllers: Work: Count below 1")
	}
	if w.Failed == "" {
		w.Failed = "sync failed, will retry"
	}
	if w.Level == nil {
		w.Level = Quiet
	}
	defer w.Queue.ShutDown()
	if !cache.WaitForCacheSync(ctx.Done(), w.Synced...) {
		return nil // ctx ended first
	}
	if w.Started != "" {
		w.Log.Info(w.Started)
	}
	var wg sync.WaitGroup
	for range w.Count {
		wg.Go(func() {
			for w.next(ctx) {
			}
		})
	}
	<-ctx.Done()
	w.Queue.ShutDown()
	wg.Wait()
	return nil
}

// next syncs one key; false once the queue is shut down.
func (w *Workers[T]) next(ctx context.Context) bool {
	key, quit := w.Queue.Get()
	if quit {
		return false
	}
	defer w.Queue.Done(key)
	err := w.Sync(ctx, key)
	switch {
	case err == nil || w.Ignore != nil && w.Ignore(err):
		w.Queue.Forget(key)
	case w.MaxRetries > 0 && w.Queue.NumRequeues(key) >= w.MaxRetries:
		w.Log.Warn("sync failed, giving up until the "+w.What+" changes",
			w.What, key, "err", err)
		w.Queue.Forget(key)
	default:
		if ctx.Err() == nil {
			w.Log.Log(ctx, w.Level(err), w.Failed,
				w.What, key, "err", err, "retries", w.Queue.NumRequeues(key))
		}
		w.Queue.AddRateLimited(key)
	}
	return true
}
