// Package densitybench measures pod density on one edge node with real
// containerd and runc (and crun beside it): a hub and one edge agent run
// as child processes in a network namespace of the benchmark's own; it
// times pod starts at growing pod counts, reads the memory of the agent,
// its containerd and the runc shims, per shim-per-pod and shim-per-node
// mode and per OCI runtime, and times the
// recovery of every pod after a simulated reboot with the hub away; the
// same containers started on containerd alone are the floor it reads
// those times against. It backs `outpost bench density`.
package densitybench

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"time"

	"github.com/outpost-mesh/outpost/bench/edgenode"
	"github.com/outpost-mesh/outpost/edge/cgroups"
	"github.com/outpost-mesh/outpost/internal/ociimage"
)

// Shim modes of the agent: a runc shim per pod (the agent's default), or
// one for every pod of the node (--shim-per-node).
const (
	ModePod  = "pod"
	ModeNode = "node"
)

// OCI runtimes the shims run the containers with: runc (the agent's
// default) and crun (--oci-runtime crun), which the issue that made pods
// real asks to measure beside it.
const (
	RuntimeRunc = "runc"
	RuntimeCrun = "crun"
)

// Config sets what is measured. Durations encode in JSON as nanoseconds.
type Config struct {
	// Binary is the outpost binary run as `Binary hub ...`. Required.
	Binary string `json:"-"`
	// EdgeBinary is the edge agent run as `EdgeBinary --hub ...`, the
	// outpost-edge binary. Required.
	EdgeBinary string `json:"-"`
	// ContainerdBinary is the containerd the agent starts:
	// /usr/bin/containerd.
	ContainerdBinary string `json:"containerd_binary"`
	// Dir is the parent of the run's temporary directory, holding the
	// hub's and the agents' data dirs; "" means os.TempDir(). The
	// containerd sockets live there, so keep it short.
	Dir string `json:"dir,omitempty"`
	// LogDir, unless "", receives each agent's log as
	// agent-<mode>.log (and agent-reboot.log); "" keeps them in the run's
	// directory, removed at the end.
	LogDir string `json:"-"`
	// Namespace holds the pods: "density".
	Namespace string `json:"namespace"`

	// Pods are the pod counts measured, ascending: 10, 50, 100, 200.
	Pods []int `json:"pods"`
	// Batch is how many pods are created at once; each batch runs before
	// the next is created: 10.
	Batch int `json:"batch"`
	// Modes are the shim modes run, each on a fresh hub and agent:
	// pod, node.
	Modes []string `json:"modes"`
	// OCIRuntimes are the OCI runtimes each mode is run with, each on a
	// fresh hub and agent: runc, crun.
	OCIRuntimes []string `json:"oci_runtimes"`
	// CrunSkipped, unless "", says why crun was left out of the default
	// OCIRuntimes: CrunUsable's error.
	CrunSkipped string `json:"crun_skipped,omitempty"`
	// RebootPods is the number of pods running when the node is
	// rebooted while offline, on a hub and agent of its own; 0 skips
	// the reboot: 100.
	RebootPods int `json:"reboot_pods"`
	// RebootMode is the shim mode of the rebooted node: pod, the agent's
	// default.
	RebootMode string `json:"reboot_mode"`
	// Baseline measures containerd and each OCI runtime alone beside
	// the agent, the same containers started with no agent, hub or pod
	// network (see Baseline): true.
	Baseline bool `json:"baseline"`
	// Settle is the pause before each memory reading, once the node is
	// Ready or a step's pods run: 10s.
	Settle time.Duration `json:"settle_ns"`

	// ReadyTimeout bounds the wait for the hub to be ready: 60s.
	ReadyTimeout time.Duration `json:"ready_timeout_ns"`
	// JoinTimeout bounds the wait for the node to be Ready with a pod
	// CIDR: 2m.
	JoinTimeout time.Duration `json:"join_timeout_ns"`
	// BatchTimeout bounds the wait for a batch's pods to run: 3m.
	BatchTimeout time.Duration `json:"batch_timeout_ns"`
	// RecoverTimeout bounds the wait, after the reboot, for every pod to
	// run again: 3m.
	RecoverTimeout time.Duration `json:"recover_timeout_ns"`
	// StopTimeout is how long the hub and an agent get to exit after
	// SIGTERM before they are killed: 30s.
	StopTimeout time.Duration `json:"stop_timeout_ns"`
}

// DefaultConfig returns the defaults above, the workload the targets are
// set for. Binary and EdgeBinary are left empty.
func DefaultConfig() Config {
	return Config{
		ContainerdBinary: "/usr/bin/containerd",
		Namespace:        "density",
		Pods:             []int{10, 50, 100, 200},
		Batch:            10,
		Modes:            []string{ModePod, ModeNode},
		OCIRuntimes:      []string{RuntimeRunc, RuntimeCrun},
		RebootPods:       100,
		RebootMode:       ModePod,
		Baseline:         true,
		Settle:           10 * time.Second,
		ReadyTimeout:     60 * time.Second,
		JoinTimeout:      2 * time.Minute,
		BatchTimeout:     3 * time.Minute,
		RecoverTimeout:   3 * time.Minute,
		StopTimeout:      30 * time.Second,
	}
}

// QuickConfig returns DefaultConfig scaled down for a fast look: both
// modes at 10 and 20 pods, a reboot of 20 pods, 3s settles. Its numbers
// are rough and are not held to the targets.
func QuickConfig() Config {
	c := DefaultConfig()
	c.Pods = []int{10, 20}
	c.RebootPods = 20
	c.Settle = 3 * time.Second
	return c
}

// maxPods bounds the pod counts: the node's.
const maxPods = edgenode.MaxPods

// Validate reports the first invalid field.
func (c Config) Validate() error {
	switch {
	case c.Binary == "":
		return errors.New("no outpost binary to run the hub with")
	case c.EdgeBinary == "":
		return errors.New("no outpost-edge binary to run the agent with")
	case c.ContainerdBinary == "":
		return errors.New("no containerd binary")
	case c.Namespace == "":
		return errors.New("namespace is empty")
	case len(c.Pods) == 0 && c.RebootPods == 0:
		return errors.New("nothing to measure: no pod counts and no reboot")
	case c.Batch < 1:
		return fmt.Errorf("batch %d is under 1", c.Batch)
	case c.RebootPods < 0 || c.RebootPods > maxPods:
		return fmt.Errorf("reboot pods %d is outside 0..%d", c.RebootPods, maxPods)
	case c.RebootPods > 0 && !validMode(c.RebootMode):
		return fmt.Errorf("reboot mode %q: want %s or %s", c.RebootMode, ModePod, ModeNode)
	case c.Settle < 0:
		return errors.New("settle is negative")
	case c.ReadyTimeout <= 0 || c.JoinTimeout <= 0 || c.BatchTimeout <= 0 || c.RecoverTimeout <= 0 || c.StopTimeout <= 0:
		return errors.New("timeouts must be positive")
	}
	if len(c.Pods) > 0 && (len(c.Modes) == 0 || len(c.OCIRuntimes) == 0) {
		return errors.New("pod counts but no mode or OCI runtime to run them in")
	}
	for i, rt := range c.OCIRuntimes {
		if rt != RuntimeRunc && rt != RuntimeCrun {
			return fmt.Errorf("OCI runtime %q: want %s or %s", rt, RuntimeRunc, RuntimeCrun)
		}
		if slices.Contains(c.OCIRuntimes[:i], rt) {
			return fmt.Errorf("OCI runtime %q given twice", rt)
		}
	}
	for i, n := range c.Pods {
		if n < 1 || n > maxPods {
			return fmt.Errorf("pod count %d is outside 1..%d", n, maxPods)
		}
		if i > 0 && n <= c.Pods[i-1] {
			return fmt.Errorf("pod counts %v are not ascending", c.Pods)
		}
	}
	for i, m := range c.Modes {
		if !validMode(m) {
			return fmt.Errorf("mode %q: want %s or %s", m, ModePod, ModeNode)
		}
		if slices.Contains(c.Modes[:i], m) {
			return fmt.Errorf("mode %q given twice", m)
		}
	}
	return nil
}

func validMode(m string) bool { return m == ModePod || m == ModeNode }

// CrunUsable reports why crun cannot run the pods on this machine: it is
// not installed, or the cgroups are hybrid with controllers on the
// cgroup2 tree, which crun refuses (and the agent with it); nil if it
// can.
func CrunUsable() error {
	if _, err := exec.LookPath("crun"); err != nil {
		return fmt.Errorf("need crun (Debian's): %w", err)
	}
	l, err := cgroups.DetectLayout("")
	if err != nil {
		return err
	}
	return l.CheckCrun()
}

// ErrNotRoot is returned by Check when the benchmark does not run as
// root: real pods need network namespaces, cgroups and mounts.
var ErrNotRoot = errors.New("the density benchmark runs real pods and needs root (network namespaces, cgroups, mounts)")

// Check reports what this machine lacks to run the benchmark with c: root,
// containerd, its runc shim, runc, crun if c runs it, or Debian's
// busybox-static (the pods' image is made from it).
func Check(c Config) error {
	if os.Geteuid() != 0 {
		return ErrNotRoot
	}
	for _, bin := range []string{c.ContainerdBinary, c.Binary, c.EdgeBinary} {
		if _, err := os.Stat(bin); err != nil {
			return fmt.Errorf("need %s: %w", bin, err)
		}
	}
	for _, bin := range []string{"containerd-shim-runc-v2", "runc"} {
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Errorf("need %s (Debian's containerd and runc): %w", bin, err)
		}
	}
	if len(c.Pods) > 0 && slices.Contains(c.OCIRuntimes, RuntimeCrun) {
		if err := CrunUsable(); err != nil {
			return fmt.Errorf("%w; or --oci-runtimes runc", err)
		}
	}
	if _, err := os.Stat(ociimage.BusyboxPath); err != nil {
		return ociimage.ErrNoBusybox
	}
	return nil
}
