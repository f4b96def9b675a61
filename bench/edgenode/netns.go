package edgenode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
)

// ErrNotIsolated is returned by CheckIsolated when the benchmark is not in
// a network namespace of its own: every packet of the benchmark's pods
// must stay on the machine, and its bridge and veths off the host's
// namespace.
var ErrNotIsolated = errors.New("the benchmark must run in a network namespace holding only a loopback (outpost bench makes one itself)")

// Isolate runs exe with args in a new network namespace of its own, with
// env=1 added to its environment so that it knows it is there, its
// output to stdout and stderr; it returns once it exited. When ctx ends
// first it sends the child SIGTERM and waits for it to clean up (SIGKILL
// after stopTimeout). The child dies with the caller's thread
// (PR_SET_PDEATHSIG), and the namespace with it: nothing in it outlives
// the run but what is mounted elsewhere.
func Isolate(ctx context.Context, exe string, args []string, env string, stdout, stderr io.Writer, stopTimeout time.Duration) error {
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), env+"=1")
	cmd.Stdout, cmd.Stderr = stdout, stderr
	// A namespace made as the child starts (not with ip netns exec, which
	// mounts a sysfs of its own over /sys and so hides the cgroups).
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the benchmark in a network namespace: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return exitErr(err)
	case <-ctx.Done():
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(stopTimeout)
	defer t.Stop()
	select {
	case err := <-done:
		return exitErr(err)
	case <-t.C:
		_ = cmd.Process.Kill()
		<-done
		return fmt.Errorf("the benchmark did not clean up within %v of SIGTERM: killed", stopTimeout)
	}
}

// exitErr returns nil for a clean exit and a short error for another: the
// child printed its own.
func exitErr(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return fmt.Errorf("the benchmark in its network namespace: %s", ee.ProcessState)
	}
	return err
}

// LoopbackUp sets the loopback of this process's network namespace up: a
// new namespace's is down.
func LoopbackUp() error {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("find lo: %w", err)
	}
	if err := netlink.LinkSetUp(lo); err != nil {
		return fmt.Errorf("set lo up: %w", err)
	}
	return nil
}

// CheckIsolated returns ErrNotIsolated unless this process's network
// namespace holds only a loopback, and that up.
func CheckIsolated() error {
	ifs, err := net.Interfaces()
	if err != nil {
		return fmt.Errorf("list interfaces: %w", err)
	}
	for _, i := range ifs {
		if i.Flags&net.FlagLoopback == 0 {
			return fmt.Errorf("%w: found %s", ErrNotIsolated, i.Name)
		}
		if i.Flags&net.FlagUp == 0 {
			return fmt.Errorf("%w: its loopback is down", ErrNotIsolated)
		}
	}
	return nil
}
