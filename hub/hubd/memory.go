package hubd

import (
	"context"
	"runtime/debug"
	"time"
)

// idleReturn gives back to the operating system the memory a spell of API
// work left behind, once the API has served nothing new for idle. The Go
// runtime otherwise keeps freed heap until its next collection, which an
// idle process runs only every two minutes, and the store's mapped files
// stay resident until the kernel is short of memory: a hub that listed
// 200 MB an hour ago would still hold it. served counts the requests
// served so far; release returns the memory. The hub is taken to be busy
// when idleReturn starts (it has just read its state). It returns when ctx
// ends.
func idleReturn(ctx context.Context, served func() uint64, idle time.Duration, release func()) {
	tick := time.NewTicker(max(idle/4, 10*time.Millisecond))
	defer tick.Stop()
	last, since, busy := served(), time.Now(), true
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			switch n := served(); {
			case n != last:
				last, since, busy = n, now, true
			case busy && now.Sub(since) >= idle:
				release()
				busy = false
			}
		}
	}
}

// memoryReleaser is implemented by stores that can give back the memory
// of what they read (the badger store pages out its value logs).
type memoryReleaser interface{ ReleaseMemory() }

// releaseMemory returns the heap the runtime holds free to the operating
// system, and st's pages when it can.
func releaseMemory(st any) func() {
	return func() {
		debug.FreeOSMemory()
		if r, ok := st.(memoryReleaser); ok {
			r.ReleaseMemory()
		}
	}
}
