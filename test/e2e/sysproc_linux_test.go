package e2e

import (
	"os/exec"
	"syscall"
)

// dieWithTest makes the kernel kill cmd's process if the test binary dies
// first (a panic or -timeout), so that no hub or `kubectl get -w` outlives
// the test that started it.
func dieWithTest(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
