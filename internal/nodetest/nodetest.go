// Package nodetest removes what an edge node of the tests leaves behind
// on the machine (shims and containers outlive the agent and its
// containerd by design), and does to a node what a reboot does. Only
// tests import it.
package nodetest

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/outpost-mesh/outpost/edge/runtime/containerd"
)

// Cleanup removes what a node of the tests left once its agent (and so
// its containerd) stopped: shims and containers outlive both by
// design. It kills the processes of the node's pod cgroups and its shims,
// unmounts what is mounted under dir, removes the shims' sockets, the
// node's cgroups and dir. It returns what it found left, for the test to
// know, and the errors of the removal.
func Cleanup(dir, node string) (left []string, err error) {
	left = killNode(dir, node)
	removeShimSockets(dir)
	return left, errors.Join(unmountUnder(dir), removeCgroups(cgroupRoot(node)), os.RemoveAll(dir))
}

// removeShimSockets removes the sockets of the node's shims, which a
// reboot removes with /run.
func removeShimSockets(dir string) {
	for _, s := range containerd.ShimSockets(filepath.Join(dir, "containerd", "state")) {
		_ = os.Remove(s)
	}
}

// cgroupRoot is the node's cgroup under every hierarchy.
func cgroupRoot(node string) string { return "/outpost-" + node }

// killNode kills the node's processes (see nodeProcesses) until none is
// left, and returns what it killed.
func killNode(dir, node string) (killed []string) {
	sock := filepath.Join(dir, "containerd", "containerd.sock")
	for range 50 { // until nothing is left to kill
		pids := nodeProcesses(sock, cgroupRoot(node))
		if len(pids) == 0 {
			break
		}
		for _, pid := range pids {
			killed = append(killed, fmt.Sprintf("process %d (%s)", pid, Cmdline(pid)))
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(20 * time.Millisecond) // the kernel reaps them: no event to wait on
	}
	return killed
}

// unmountUnder unmounts everything mounted under dir, the last mounted
// first.
func unmountUnder(dir string) error {
	var errs []error
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	lines := strings.Split(string(mounts), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		f := strings.Fields(lines[i])
		if len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			if err := syscall.Unmount(f[4], syscall.MNT_DETACH); err != nil {
				errs = append(errs, fmt.Errorf("unmount %s: %w", f[4], err))
			}
		}
	}
	return errors.Join(errs...)
}

// removeCgroups removes the cgroup root, under every hierarchy, and the
// cgroups under it; their processes must have gone.
func removeCgroups(root string) error {
	var errs []error
	hs, _ := os.ReadDir("/sys/fs/cgroup")
	for _, h := range hs {
		var dirs []string
		filepath.WalkDir(filepath.Join("/sys/fs/cgroup", h.Name(), root), func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		slices.Reverse(dirs)
		for _, d := range dirs {
			if err := os.Remove(d); err != nil {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}

// nodeProcesses returns the processes of the node: its shims (those of
// its containerd's socket) and whatever runs in its cgroups.
func nodeProcesses(sock, cgroupRoot string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() || Zombie(pid) {
			continue
		}
		if c := Cmdline(pid); strings.Contains(c, "containerd-shim") && strings.Contains(c, sock) {
			out = append(out, pid)
			continue
		}
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid)); err == nil && strings.Contains(string(b), cgroupRoot+"/") {
			out = append(out, pid)
		}
	}
	return out
}

// Cmdline returns the command line of process pid, its arguments joined
// by spaces; "" once it is gone.
func Cmdline(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return strings.ReplaceAll(strings.TrimRight(string(b), "\x00"), "\x00", " ")
}

// Zombie reports whether pid has exited (and may wait to be reaped).
func Zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true // gone
	}
	i := strings.LastIndexByte(string(b), ')')
	return i < 0 || i+2 >= len(b) || b[i+2] == 'Z'
}

// Reboot does to a node whose agent stopped what a power cut does: every
// process of the node dies (shims, containers), every mount under dir
// goes (the pods' network namespaces, tmpfs volumes, root filesystems),
// and so does containerd's state, which lives on tmpfs (/run) on a real
// machine; the node's cgroups go, and every link of the test's network
// namespace but loopback (the bridge and the pods' veths). What is on
// disk stays: the agent's checkpoint, containerd's content and metadata.
func Reboot(dir, node string) error {
	killNode(dir, node)
	removeShimSockets(dir)
	errs := []error{unmountUnder(dir), os.RemoveAll(filepath.Join(dir, "containerd", "state")), removeCgroups(cgroupRoot(node))}
	links, err := netlink.LinkList()
	if err != nil {
		errs = append(errs, fmt.Errorf("list links: %w", err))
	}
	for _, l := range links {
		if l.Attrs().Name == "lo" {
			continue
		}
		if err := netlink.LinkDel(l); err != nil && !errors.Is(err, syscall.ENODEV) {
			errs = append(errs, fmt.Errorf("delete link %s: %w", l.Attrs().Name, err))
		}
	}
	return errors.Join(errs...)
}
