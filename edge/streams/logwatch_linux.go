package streams

import (
	"context"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// fileWatch tells a log follow when its file may have grown: an inotify
// watch on the file, so that a line the container writes goes out at
// once, as kubelet's follow does, rather than at the next look.
type fileWatch struct {
	f   *os.File // the inotify instance, in the runtime's poller; nil: none
	buf [4096]byte
}

// watchEvents are what wakes a follow: a write, a rename by rotation, a
// removal.
const watchEvents = unix.IN_MODIFY | unix.IN_MOVE_SELF | unix.IN_DELETE_SELF | unix.IN_ATTRIB

// newFileWatch watches path. Where inotify cannot be had (out of
// instances, an older kernel), the watch only times out: the follow polls.
func newFileWatch(path string) *fileWatch {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return &fileWatch{}
	}
	if _, err := unix.InotifyAddWatch(fd, path, watchEvents); err != nil {
		unix.Close(fd)
		return &fileWatch{}
	}
	return &fileWatch{f: os.NewFile(uintptr(fd), "inotify "+path)}
}

// wait returns once the file changed, after at most max, or at once if
// ctx is done, with ctx's error then. Changes made since the last wait
// count: their events wait to be read.
func (w *fileWatch) wait(ctx context.Context, max time.Duration) error {
	if w.f == nil {
		return sleepCtx(ctx, max)
	}
	if err := w.f.SetReadDeadline(time.Now().Add(max)); err != nil {
		return sleepCtx(ctx, max)
	}
	stop := context.AfterFunc(ctx, func() { w.f.SetReadDeadline(time.Now()) })
	defer stop()
	// What changed does not matter: any event is a reason to read on.
	_, _ = w.f.Read(w.buf[:])
	return ctx.Err()
}

// close releases the watch; safe on one that has none.
func (w *fileWatch) close() {
	if w.f != nil {
		w.f.Close()
	}
}
