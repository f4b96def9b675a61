//go:build !linux

package streams

import (
	"context"
	"time"
)

// fileWatch on systems without inotify only waits: a follow polls.
type fileWatch struct{}

func newFileWatch(string) *fileWatch { return &fileWatch{} }

func (w *fileWatch) wait(ctx context.Context, max time.Duration) error { return sleepCtx(ctx, max) }

func (w *fileWatch) close() {}
