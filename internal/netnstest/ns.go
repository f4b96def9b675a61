package netnstest

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// NewNS makes a network namespace for a test to build a network in (a
// node, a pod, a LAN client): only its loopback, up, bind-mounted at a
// file named name under the test's temporary directory, whose path it
// returns, and removed when the test ends. Each sysctl, a path under
// /proc/sys/net with its value (such as "ipv6/conf/all/disable_ipv6",
// "1"), is written in it first, so that it holds for every link made in
// it later.
func NewNS(t testing.TB, name string, sysctls ...string) string {
	t.Helper()
	if len(sysctls)%2 != 0 {
		t.Fatalf("sysctls %q: want path and value pairs", sysctls)
	}
	path := filepath.Join(t.TempDir(), name)
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	errc := make(chan error, 1)
	go func() {
		// A thread that cannot go back to its namespace stays locked,
		// and Go ends it with the goroutine.
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("unshare: %w", err)
			return
		}
		err = unix.Mount(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()), path, "none", unix.MS_BIND, "")
		for i := 0; err == nil && i < len(sysctls); i += 2 {
			err = os.WriteFile(filepath.Join("/proc/sys/net", sysctls[i]), []byte(sysctls[i+1]), 0o644)
		}
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	if err := <-errc; err != nil {
		unix.Unmount(path, unix.MNT_DETACH)
		t.Fatalf("make netns %s: %v", name, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(path, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount netns %s: %v", path, err)
		}
	})
	WithNL(t, path, func(h *netlink.Handle) {
		lo, err := h.LinkByName("lo")
		if err == nil {
			err = h.LinkSetUp(lo)
		}
		if err != nil {
			t.Fatal(err)
		}
	})
	return path
}

// WithNL runs fn with a netlink handle in the namespace at path.
func WithNL(t testing.TB, path string, fn func(h *netlink.Handle)) {
	t.Helper()
	ns, err := netns.GetFromPath(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	fn(h)
}

// In runs fn on a thread in the namespace at path and returns its error:
// sockets fn opens live there.
func In(t testing.TB, path string, fn func() error) error {
	t.Helper()
	ns, err := netns.GetFromPath(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // unlocked once back, as in NewNS
		orig, err := netns.Get()
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		if err := netns.Set(ns); err != nil {
			errc <- err
			return
		}
		err = fn()
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}
