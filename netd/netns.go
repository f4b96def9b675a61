package netd

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// newNetNS creates a network namespace and bind-mounts it at path, which
// must not exist. On error nothing is left at path.
func newNetNS(path string) error {
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return fmt.Errorf("create netns file: %w", err)
	}
	f.Close()
	errc := make(chan error, 1)
	go func() {
		// The thread goes back to its namespace once done, and only then
		// is unlocked. One that cannot is never unlocked, so that no other
		// goroutine runs in the new namespace; but that is no way out for
		// the process's main thread, which Go never ends, and whose
		// namespace /proc/self/ns/net names: it would then name the pod's.
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- fmt.Errorf("open this thread's netns: %w", err)
			return
		}
		defer orig.Close()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("unshare: %w", err)
			return
		}
		self := fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid())
		err = unix.Mount(self, path, "none", unix.MS_BIND, "")
		if serr := netns.Set(orig); serr == nil {
			runtime.UnlockOSThread()
		}
		if err != nil {
			errc <- fmt.Errorf("bind-mount netns: %w", err)
			return
		}
		errc <- nil
	}()
	if err := <-errc; err != nil {
		os.Remove(path)
		return err
	}
	return nil
}

// isNetNS reports whether path holds a mounted network namespace, rather
// than the empty file a reboot or a crash mid-creation leaves.
func isNetNS(path string) (bool, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return false, nil
		}
		return false, fmt.Errorf("statfs %s: %w", path, err)
	}
	return st.Type == unix.NSFS_MAGIC, nil
}

// removeNetNS unmounts and removes the namespace file at path. The namespace
// itself lives on while a process is in it or holds it open. A missing or
// unmounted file is not an error.
func removeNetNS(path string) error {
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount netns %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove netns %s: %w", path, err)
	}
	return nil
}

// InNetNS runs fn on a thread switched into the network namespace at path
// ("" for this process's own, where fn just runs), for what only a thread
// can do in another namespace: open sockets that live there, read its
// cookie. The thread goes back to its namespace afterwards, or is
// discarded if it cannot.
func InNetNS(path string, fn func() error) error {
	if path == "" {
		return fn()
	}
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return fmt.Errorf("open netns %s: %w", path, err)
	}
	defer ns.Close()
	return inNetNS(ns, fn)
}

// inNetNS runs fn on a thread switched into ns, for what only a thread can
// do in another namespace, such as writing its /proc/sys/net. The thread
// goes back to its namespace afterwards, or is discarded if it cannot.
func inNetNS(ns netns.NsHandle, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // unlocked once back: see newNetNS
		orig, err := netns.Get()
		if err != nil {
			errc <- fmt.Errorf("open this thread's netns: %w", err)
			return
		}
		defer orig.Close()
		if err := netns.Set(ns); err != nil {
			errc <- fmt.Errorf("enter netns: %w", err)
			return
		}
		err = fn()
		if serr := netns.Set(orig); serr == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}
