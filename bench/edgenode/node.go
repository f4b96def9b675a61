package edgenode

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/outpost-mesh/outpost/edge/agent"
	"github.com/outpost-mesh/outpost/edge/runtime/containerd"
)

// Node is one edge agent run as a child process on a data dir of its
// own, with a containerd it manages.
type Node struct {
	// Name is the Node's name; Dir the agent's data dir; Bridge the
	// pods' bridge, netd's.
	Name, Dir, Bridge string

	args    []string
	binary  string
	logPath string

	cmd    *exec.Cmd
	logf   *os.File
	exited chan struct{} // closed once Wait returned
	err    error         // Wait's result, set before exited is closed
}

// Options are what an agent is started with.
type Options struct {
	// Binary is the outpost-edge binary. Required.
	Binary string
	// ContainerdBinary is the containerd the agent starts and manages.
	ContainerdBinary string
	// Name is the Node's name; Dir the agent's data dir; Bridge the name
	// of the pods' bridge; LogPath the file the agent's output is
	// appended to.
	Name, Dir, Bridge, LogPath string
	// Hub is the hub's sync address; Token a bootstrap token (see
	// Prepare) and CAHash the pin of the hub's CA (see CAHash).
	Hub, Token, CAHash string
	// MaxPods is the agent's --max-pods; 0 keeps MaxPods.
	MaxPods int
	// OCIRuntime is the agent's --oci-runtime; "" keeps its default.
	OCIRuntime string
	// ShimPerNode runs every pod of the node under one shim.
	ShimPerNode bool
	// Extra are more flags of outpost-edge, after the others.
	Extra []string
}

// MaxPods is the default Options.MaxPods: a node's pod CIDR is a /24 of
// 254 addresses, one the bridge's.
const MaxPods = 250

// New returns the node of an agent as o says; Start starts it.
func New(o Options) *Node {
	if o.MaxPods == 0 {
		o.MaxPods = MaxPods
	}
	args := []string{
		"--hub", o.Hub, "--token", o.Token, "--ca-cert-hash", o.CAHash,
		"--node-name", o.Name, "--data-dir", o.Dir,
		"--containerd", "managed", "--containerd-binary", o.ContainerdBinary,
		"--bridge", o.Bridge, "--cluster-cidr", ClusterCIDR,
		"--max-pods", strconv.Itoa(o.MaxPods),
		// The node shares the machine's disk, which kubelet's disk
		// thresholds may find under pressure: memory alone, as
		// `outpost up`.
		"--eviction-hard", "memory.available<100Mi",
	}
	if o.OCIRuntime != "" {
		args = append(args, "--oci-runtime", o.OCIRuntime)
	}
	if o.ShimPerNode {
		args = append(args, "--shim-per-node")
	}
	args = append(args, o.Extra...)
	return &Node{Name: o.Name, Dir: o.Dir, Bridge: o.Bridge, args: args, binary: o.Binary, logPath: o.LogPath}
}

// ClusterCIDR is the pods' range, given to the hub and the agent alike.
const ClusterCIDR = "10.42.0.0/16"

// Start starts the agent, its output appended to n.logPath. It returns
// once the process runs.
func (n *Node) Start() error {
	f, err := os.OpenFile(n.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open agent log: %w", err)
	}
	cmd := exec.Command(n.binary, n.args...)
	cmd.Stdout, cmd.Stderr = f, f
	// Its own process group, so that ^C reaches only the benchmark, which
	// stops the agent in order; and dead with the benchmark.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start agent: %w", err)
	}
	n.cmd, n.logf, n.exited, n.err = cmd, f, make(chan struct{}), nil
	go func() {
		n.err = cmd.Wait()
		f.Close()
		close(n.exited)
	}()
	return nil
}

// PID returns the agent's process ID.
func (n *Node) PID() int { return n.cmd.Process.Pid }

// Running returns an error, with the end of the agent's log, if it has
// exited.
func (n *Node) Running() error {
	if n.cmd == nil {
		return errors.New("agent not started")
	}
	select {
	case <-n.exited:
		return fmt.Errorf("agent exited: %v%s", n.err, n.LogTail())
	default:
		return nil
	}
}

// Kill ends the agent with SIGKILL and waits for it to be gone.
func (n *Node) Kill() {
	if n.cmd == nil {
		return
	}
	_ = n.cmd.Process.Kill()
	<-n.exited
}

// Stop sends SIGTERM and waits at most timeout for the agent to exit,
// then kills it. It is safe to call after it exited and more than once.
func (n *Node) Stop(timeout time.Duration) {
	if n.cmd == nil {
		return
	}
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-n.exited:
	case <-t.C:
		n.Kill()
	}
}

// LogTail returns the last lines of the agent's log, indented after a
// newline, or "".
func (n *Node) LogTail() string {
	b, err := os.ReadFile(n.logPath)
	if err != nil || len(b) == 0 {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	lines = lines[max(0, len(lines)-20):]
	return "\n    " + strings.Join(lines, "\n    ") + "\n  (agent log: " + n.logPath + ")"
}

// Sock is the agent's containerd's socket.
func (n *Node) Sock() string {
	return filepath.Join(n.Dir, agent.ContainerdDir, "containerd.sock")
}

// Namespace is the node's containerd namespace, the agent's default.
func (n *Node) Namespace() string { return "outpost-" + n.Name }

// CgroupRoot is the parent of the node's pod cgroups in every hierarchy.
func (n *Node) CgroupRoot() string { return "/outpost-" + n.Name }

// ContainerdPID returns the PID of the agent's containerd, from the
// supervisor's pid file, checked against the process's command line; 0
// when it does not run.
func (n *Node) ContainerdPID() int {
	dir := filepath.Join(n.Dir, agent.ContainerdDir)
	b, err := os.ReadFile(filepath.Join(dir, "containerd.pid"))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return 0
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !bytes.Contains(cmdline, []byte(filepath.Join(dir, "config.toml"))) || zombie(pid) {
		return 0
	}
	return pid
}

// PowerOff does to the node what a power cut does, with the agent already
// dead: it kills every process of the node (containerd, shims,
// containers), removes the shims' sockets (under /run, a tmpfs a reboot
// empties), unmounts everything under the data dir (rootfs, volumes, the
// pods' network namespaces), removes the network namespaces' files, the
// node's cgroups, its bridge and veths. What a reboot leaves on disk stays:
// the checkpoint, containerd's root and state, runc's state.
func (n *Node) PowerOff() error {
	var errs []error
	if err := n.killProcesses(); err != nil {
		errs = append(errs, err)
	}
	for _, s := range containerd.ShimSockets(filepath.Join(n.Dir, agent.ContainerdDir, "state")) {
		_ = os.Remove(s)
	}
	errs = append(errs, unmountUnder(n.Dir))
	if ents, err := os.ReadDir(filepath.Join(n.Dir, agent.NetNSDir)); err == nil {
		for _, e := range ents {
			if err := os.Remove(filepath.Join(n.Dir, agent.NetNSDir, e.Name())); err != nil {
				errs = append(errs, fmt.Errorf("remove netns: %w", err))
			}
		}
	}
	errs = append(errs, removeCgroups(n.CgroupRoot()), deleteLinks(n.Bridge))
	return errors.Join(errs...)
}

// Remove stops the agent if it runs, does what PowerOff does and removes
// the data dir: nothing of the node is left.
func (n *Node) Remove(stopTimeout time.Duration) error {
	n.Stop(stopTimeout)
	return errors.Join(n.PowerOff(), os.RemoveAll(n.Dir))
}

// killProcesses kills the node's processes until none is left, or
// returns those that would not die.
func (n *Node) killProcesses() error {
	var pids []int
	for range 250 { // 5s: the kernel reaps them, with no event to wait on
		pids = n.Processes()
		if len(pids) == 0 {
			return nil
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("node processes %v would not die", pids)
}

// unmountUnder unmounts every mount point under dir, the deepest first.
func unmountUnder(dir string) error {
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return fmt.Errorf("read mounts: %w", err)
	}
	var errs []error
	lines := strings.Split(string(mounts), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		f := strings.Fields(lines[i])
		if len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			if err := syscall.Unmount(f[4], syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
				errs = append(errs, fmt.Errorf("unmount %s: %w", f[4], err))
			}
		}
	}
	return errors.Join(errs...)
}

// removeCgroups removes the cgroups named root (or root-*) at the top of
// every hierarchy, and those under them, the deepest first.
func removeCgroups(root string) error {
	var errs []error
	tops, _ := filepath.Glob("/sys/fs/cgroup/*" + root + "*")
	more, _ := filepath.Glob("/sys/fs/cgroup" + root + "*") // cgroup v2 alone
	for _, top := range append(tops, more...) {
		var dirs []string
		filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		slices.Reverse(dirs)
		for _, d := range dirs {
			if err := os.Remove(d); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}

// deleteLinks deletes the bridge and the pods' veths netd made for it
// (their node sides, labelled "netd:<bridge>:<uid>"), in this process's
// network namespace, the benchmark's own.
func deleteLinks(bridge string) error {
	links, err := netlink.LinkList()
	if err != nil {
		return fmt.Errorf("list links: %w", err)
	}
	var errs []error
	for _, l := range links {
		a := l.Attrs()
		if a.Name == bridge || strings.HasPrefix(a.Alias, "netd:"+bridge+":") {
			if err := netlink.LinkDel(l); err != nil {
				errs = append(errs, fmt.Errorf("delete link %s: %w", a.Name, err))
			}
		}
	}
	return errors.Join(errs...)
}
