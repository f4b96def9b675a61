// Package netnstest runs a test in a network namespace of its own, with
// only a loopback and no route out, by running the test binary again
// inside it: the tests of pod networks and real containers, whose every
// packet must stay on the machine, and whose links, routes and rules must
// not touch the host's. Only tests import it.
package netnstest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"syscall"
	"testing"
)

// envVar names, in the test binary run again, the test it is to run
// inside the namespace made for it.
const envVar = "OUTPOST_NETNS_TEST"

// Enter returns true when t runs inside a network namespace made for it:
// the test then goes on there. Otherwise it makes the namespace, runs the
// test again inside it (the test binary, with -test.run naming only t),
// reports its output and outcome as t's, removes the namespace, and
// returns false: the caller returns at once. It skips t when not root or
// when ip(8) is missing.
//
//	func TestPods(t *testing.T) {
//		if !netnstest.Enter(t) {
//			return
//		}
//		...
//	}
func Enter(t *testing.T) bool {
	t.Helper()
	if os.Getenv(envVar) == t.Name() {
		// The loopback of a new namespace is down.
		if out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
			t.Fatalf("set lo up: %v: %s", err, out)
		}
		return true
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a network namespace")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs ip(8), from Debian's iproute2")
	}
	// A namespace of the child's alone, made as it starts (not with ip
	// netns exec, which mounts a sysfs of its own over /sys and so hides
	// the cgroup file systems), gone when it ends.
	args := []string{"-test.run=^" + regexp.QuoteMeta(t.Name()) + "$", "-test.count=1"}
	if testing.Verbose() {
		args = append(args, "-test.v")
	}
	if d, ok := t.Deadline(); ok {
		args = append(args, fmt.Sprintf("-test.timeout=%s", timeUntil(d)))
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), envVar+"="+t.Name())
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	t.Logf("in a network namespace of its own:\n%s", out.Bytes())
	switch {
	case err != nil:
		t.Fatalf("%s in its own network namespace: %v", t.Name(), err)
	case bytes.Contains(out.Bytes(), []byte("--- SKIP: "+t.Name())):
		t.Skip("skipped in its network namespace")
	case !bytes.Contains(out.Bytes(), []byte("PASS")):
		t.Fatalf("%s in its own network namespace did not pass", t.Name())
	}
	return false
}
