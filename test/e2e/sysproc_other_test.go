//go:build !linux

package e2e

import "os/exec"

// dieWithTest does nothing where the kernel cannot tie a child's life to its
// parent's; the tests' cleanups still stop every process they start.
func dieWithTest(*exec.Cmd) {}
