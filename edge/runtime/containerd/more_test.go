package containerd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	tasktypes "github.com/containerd/containerd/api/types/task"
	"github.com/containerd/containerd/v2/core/snapshots"

	"github.com/outpost-mesh/outpost/edge/runtime"
	"github.com/outpost-mesh/outpost/internal/testlog"
	"github.com/outpost-mesh/outpost/internal/wait"
)

func waitShims(t *testing.T, r *Runtime, want func([]Shim) bool, what string) []Shim {
	t.Helper()
	var s []Shim
	wait.For(t, 10*time.Second, what, func() (bool, string) {
		var err error
		s, err = Shims(r.cfg.Address, r.cfg.Namespace)
		if err != nil {
			return false, err.Error()
		}
		var kids []string
		for _, x := range s {
			kids = append(kids, strconv.Itoa(x.Children))
		}
		return want(s), "shims with children " + strings.Join(kids, ",")
	})
	return s
}

func TestShimPerPod(t *testing.T) {
	r := newRuntime(t, nil)
	a, b := pod("a"), pod("b")
	for _, c := range []string{"one", "two"} {
		if err := r.StartContainer(bg, a, sh(c, "sleep 1000"), 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.StartContainer(bg, b, sh("one", "sleep 1000"), 0); err != nil {
		t.Fatal(err)
	}
	waitShims(t, r, func(s []Shim) bool {
		return len(s) == 2 && s[0].Children+s[1].Children == 3 && (s[0].Children == 2 || s[1].Children == 2)
	}, "two shims, one serving pod a's two containers")

	// Removing the container that started pod a's shim leaves the shim
	// serving the other.
	first := container(t, r, a, "one")
	if err := r.removeContainer(r.nsctx(bg), strings.TrimPrefix(first.ID, "containerd://")); err != nil {
		t.Fatal(err)
	}
	waitShims(t, r, func(s []Shim) bool { return len(s) == 2 && s[0].Children == 1 && s[1].Children == 1 }, "pod a's shim serves its second container")
	waitState(t, r, a, "two", runtime.StateRunning)
	if err := r.StartContainer(bg, a, sh("three", "sleep 1000"), 0); err != nil {
		t.Fatal(err)
	}
	waitShims(t, r, func(s []Shim) bool { return len(s) == 2 && s[0].Children+s[1].Children == 3 }, "a new container joins pod a's shim")
}

func TestShimPerNode(t *testing.T) {
	r := newRuntime(t, func(c *Config) { c.ShimPerNode = true })
	for _, p := range []runtime.PodRef{pod("a"), pod("b"), pod("c")} {
		if err := r.StartContainer(bg, p, sh("main", "sleep 1000"), 0); err != nil {
			t.Fatal(err)
		}
	}
	waitShims(t, r, func(s []Shim) bool { return len(s) == 1 && s[0].Children == 3 }, "one shim for the node's three pods")
}

// TestShimPerNodeConcurrentStarts starts the first pods of a node at
// once, as the pod workers do when a batch of pods arrives, and checks
// they all run in the node's one shim. The race between the shims'
// "start" commands that Runtime.nodeShim prevents is too narrow to be
// forced here.
func TestShimPerNodeConcurrentStarts(t *testing.T) {
	const rounds, pods = 2, 8
	for round := range rounds {
		r := newRuntime(t, func(c *Config) { c.ShimPerNode = true })
		errs := make(chan error, pods)
		for i := range pods {
			go func() {
				errs <- r.StartContainer(bg, pod("p"+strconv.Itoa(i)), sh("main", "sleep 1000"), 0)
			}()
		}
		for range pods {
			if err := <-errs; err != nil {
				t.Errorf("round %d: StartContainer = %v", round, err)
			}
		}
		waitShims(t, r, func(s []Shim) bool { return len(s) == 1 && s[0].Children == pods }, "one shim for the node's pods")
	}
}

// TestShimPerNodeCanceledTurn: a start given up while it waits for its
// turn to create a task leaves its container created, not failed, and
// the next start runs it.
func TestShimPerNodeCanceledTurn(t *testing.T) {
	r := newRuntime(t, func(c *Config) { c.ShimPerNode = true })
	p := pod("wait")
	r.nodeShim <- struct{}{} // another creation's turn
	ctx, cancel := context.WithCancel(bg)
	done := make(chan error, 1)
	go func() { done <- r.StartContainer(ctx, p, sh("main", "sleep 1000"), 0) }()
	wait.For(t, 10*time.Second, "the start waiting for its turn", func() (bool, string) {
		c := container(t, r, p, "main")
		return c != nil, fmt.Sprintf("%+v", c)
	})
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("StartContainer(canceled while waiting) = %v, want context.Canceled", err)
	}
	<-r.nodeShim
	if c := container(t, r, p, "main"); c == nil || c.State != runtime.StateCreated || c.Reason != "" {
		t.Errorf("main after the canceled start = %+v, want created with no reason", c)
	}
	if err := r.StartContainer(bg, p, sh("main", "sleep 1000"), 1); err != nil {
		t.Fatal(err)
	}
	waitState(t, r, p, "main", runtime.StateRunning)
}

// TestConcurrentReaps: List and StopContainer both reap an exited task,
// as the pod workers' round and a pod's deletion do at once. The second
// delete of a pod shim's last task can find the shim gone ("ttrpc:
// closed"); the task is gone all the same, and neither call fails.
func TestConcurrentReaps(t *testing.T) {
	r := newRuntime(t, nil)
	for i := range 8 {
		p := pod("reap" + strconv.Itoa(i))
		if err := r.StartContainer(bg, p, sh("main", "exit 0"), 0); err != nil {
			t.Fatal(err)
		}
		// Not through List, which would reap it.
		wait.For(t, 10*time.Second, "main exited", func() (bool, string) {
			cs, err := r.find(r.nsctx(bg), p.UID, "main")
			if err != nil || len(cs) != 1 {
				return false, fmt.Sprintf("%d containers, %v", len(cs), err)
			}
			task, err := r.getTask(r.nsctx(bg), cs[0].ID)
			return err == nil && task != nil && task.Status == tasktypes.Status_STOPPED, fmt.Sprintf("%+v %v", task, err)
		})
		errs := make(chan error, 2)
		go func() { _, err := r.List(bg); errs <- err }()
		go func() { errs <- r.StopContainer(bg, p, "main", 0) }()
		for range 2 {
			if err := <-errs; err != nil {
				t.Errorf("pod %d: reaping at once: %v", i, err)
			}
		}
	}
}

func TestStopContainer(t *testing.T) {
	r := newRuntime(t, nil)
	p := pod("stop")
	// PID 1 with no handler ignores SIGTERM: killed after the grace.
	if err := r.StartContainer(bg, p, sh("deaf", "while true; do sleep 0.1; done"), 0); err != nil {
		t.Fatal(err)
	}
	trap := sh("trap", "trap 'exit 5' TERM; while true; do sleep 0.1; done")
	if err := r.StartContainer(bg, p, trap, 0); err != nil {
		t.Fatal(err)
	}
	usr1 := sh("usr1", "trap 'exit 7' USR1; trap '' TERM; while true; do sleep 0.1; done")
	usr1.Image = busyboxUSR1
	if err := r.StartContainer(bg, p, usr1, 0); err != nil {
		t.Fatal(err)
	}
	waitState(t, r, p, "deaf", runtime.StateRunning)

	start := time.Now()
	if err := r.StopContainer(bg, p, "deaf", time.Second); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < time.Second {
		t.Errorf("StopContainer(deaf) returned after %v, before its grace", d)
	}
	if c := container(t, r, p, "deaf"); c.State != runtime.StateExited || c.ExitCode != 137 || c.Reason != "Error" {
		t.Errorf("deaf = %+v, want exited 137", c)
	}
	for name, code := range map[string]int32{"trap": 5, "usr1": 7} {
		start := time.Now()
		if err := r.StopContainer(bg, p, name, 20*time.Second); err != nil {
			t.Fatal(err)
		}
		if c := container(t, r, p, name); c.State != runtime.StateExited || c.ExitCode != code || time.Since(start) > 10*time.Second {
			t.Errorf("%s = %+v after %v, want exited %d at once", name, c, time.Since(start), code)
		}
	}
	if err := r.StopContainer(bg, p, "trap", time.Second); err != nil {
		t.Errorf("StopContainer(exited) = %v, want nil", err)
	}
	if err := r.StopContainer(bg, p, "nope", time.Second); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("StopContainer(unknown) = %v, want ErrNotFound", err)
	}
	if err := r.StopContainer(bg, pod("none"), "x", 0); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("StopContainer(unknown pod) = %v, want ErrNotFound", err)
	}
}

func TestRemovePod(t *testing.T) {
	r := newRuntime(t, nil)
	p := pod("gone")
	c := sh("main", "echo hi; sleep 1000")
	c.LogPath = filepath.Join(t.TempDir(), "main", "0.log")
	if err := r.StartContainer(bg, p, c, 0); err != nil {
		t.Fatal(err)
	}
	if err := r.StartContainer(bg, p, sh("side", "exit 0"), 0); err != nil {
		t.Fatal(err)
	}
	waitLog(t, c.LogPath, "stdout:hi")
	if err := r.RemovePod(bg, p); err != nil {
		t.Fatal(err)
	}
	pods, err := r.List(bg)
	if err != nil || len(pods) != 0 {
		t.Errorf("List after RemovePod = %+v, %v; want none", pods, err)
	}
	ctx := r.nsctx(bg)
	if cs, _ := r.c.ContainerService().List(ctx); len(cs) != 0 {
		t.Errorf("containers left: %d", len(cs))
	}
	var snaps int
	_ = r.c.SnapshotService(r.cfg.Snapshotter).Walk(ctx, func(_ context.Context, i snapshots.Info) error {
		if i.Kind != snapshots.KindCommitted {
			snaps++
		}
		return nil
	})
	if snaps != 0 {
		t.Errorf("%d active snapshots left", snaps)
	}
	if _, err := os.Stat(r.fifoDir(p.UID)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("FIFO dir: %v, want removed", err)
	}
	if _, err := os.Stat(c.LogPath); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("log: %v, want removed", err)
	}
	waitShims(t, r, func(s []Shim) bool { return len(s) == 0 }, "no shim")
	if err := r.RemovePod(bg, p); err != nil {
		t.Errorf("RemovePod(again) = %v", err)
	}
}

func TestStartErrors(t *testing.T) {
	r := newRuntime(t, nil)
	p := pod("bad")
	never := runtime.ContainerSpec{Name: "never", Image: "outpost.test/absent:1", PullPolicy: runtime.PullNever}
	err := r.StartContainer(bg, p, never, 0)
	if !errors.Is(err, runtime.ErrImagePull) || !strings.Contains(err.Error(), `Container image "outpost.test/absent:1" is not present with pull policy of Never`) {
		t.Errorf("StartContainer(absent, Never) = %v, want ErrImagePull with kubelet's words", err)
	}
	pull := runtime.ContainerSpec{Name: "pull", Image: "127.0.0.1:1/absent:1"}
	if err := r.StartContainer(bg, p, pull, 0); !errors.Is(err, runtime.ErrImagePull) {
		t.Errorf("StartContainer(unreachable registry) = %v, want ErrImagePull", err)
	}
	pods, _ := r.List(bg)
	if len(pods) != 1 || pods[0].Pod != p || len(pods[0].Containers) != 0 {
		t.Errorf("List after failed pulls = %+v, want the pod without containers", pods)
	}

	nocmd := runtime.ContainerSpec{Name: "nocmd", Image: busybox, Command: []string{"/no/such/binary"}}
	err = r.StartContainer(bg, p, nocmd, 0)
	if err == nil || errors.Is(err, runtime.ErrImagePull) || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("StartContainer(missing command) = %v, want a start error naming it", err)
	}
	if c := container(t, r, p, "nocmd"); c == nil || c.State != runtime.StateExited || c.ExitCode != 128 || c.Reason != "StartError" || c.Message == "" {
		t.Errorf("nocmd = %+v, want exited 128 StartError with a message", c)
	}

	root := sh("root", "id -u")
	root.RunAsNonRoot = true
	err = r.StartContainer(bg, p, root, 0)
	if !errors.Is(err, runtime.ErrContainerConfig) || !strings.Contains(err.Error(), "container has runAsNonRoot and image will run as root") {
		t.Errorf("StartContainer(non-root, image root) = %v", err)
	}
	named := root
	named.Image = busyboxUser
	if err := r.StartContainer(bg, p, named, 0); !errors.Is(err, runtime.ErrContainerConfig) || !strings.Contains(err.Error(), "non-numeric user (nobody)") {
		t.Errorf("StartContainer(non-root, image user nobody) = %v", err)
	}
	// The image's user is not in its /etc/passwd: the container cannot
	// be created, as CRI's CreateContainer fails for kubelet's
	// CreateContainerError.
	unknown := sh("unknown-user", "true")
	unknown.Image = busyboxNoSuchUser
	if err := r.StartContainer(bg, p, unknown, 0); !errors.Is(err, runtime.ErrCreateContainer) || !strings.Contains(err.Error(), `"ghost"`) {
		t.Errorf("StartContainer(image user ghost, no passwd entry) = %v, want ErrCreateContainer naming the user", err)
	}
	zero := int64(0)
	root.RunAsUser = &zero
	if err := r.StartContainer(bg, p, root, 0); !errors.Is(err, runtime.ErrContainerConfig) || !strings.Contains(err.Error(), "runAsUser breaks non-root policy") {
		t.Errorf("StartContainer(non-root, runAsUser 0) = %v", err)
	}
	uid, gid := int64(1234), int64(5678)
	root.RunAsUser, root.RunAsGroup = &uid, &gid
	root.SupplementalGroups = []int64{42}
	root.Command = []string{"sh", "-c", "id -u; id -g; id -G"}
	root.LogPath = filepath.Join(t.TempDir(), "0.log")
	if err := r.StartContainer(bg, p, root, 0); err != nil {
		t.Fatalf("StartContainer(runAsUser 1234) = %v", err)
	}
	waitLog(t, root.LogPath, "stdout:1234", "stdout:5678", "stdout:5678 42")
}

func TestCgroupsAndOOM(t *testing.T) {
	r := newRuntime(t, nil)
	if _, err := os.Stat("/sys/fs/cgroup/memory"); err != nil {
		t.Skip("needs the cgroup v1 memory controller")
	}
	parent := "/outpost-test-" + randHex(4) + "/pod1"
	t.Cleanup(func() {
		for _, ctrl := range []string{"memory", "cpu", "cpuacct", "blkio", "pids", "devices", "freezer", "cpuset", "net_cls", "perf_event", "hugetlb", "systemd", "unified"} {
			base := filepath.Join("/sys/fs/cgroup", ctrl)
			os.Remove(filepath.Join(base, parent))
			os.Remove(filepath.Join(base, filepath.Dir(parent)))
		}
	})
	p := pod("limits")
	c := sh("main", "sleep 1000")
	c.CgroupParent = parent
	c.MemoryLimitBytes = 64 << 20
	c.CPURequestMilli = 250
	c.CPULimitMilli = 500
	if err := r.StartContainer(bg, p, c, 0); err != nil {
		t.Fatal(err)
	}
	st := waitState(t, r, p, "main", runtime.StateRunning)
	id := strings.TrimPrefix(st.ID, "containerd://")
	for file, want := range map[string]string{
		"memory/" + parent + "/" + id + "/memory.limit_in_bytes": strconv.Itoa(64 << 20),
		"cpu/" + parent + "/" + id + "/cpu.shares":               "256",
		"cpu/" + parent + "/" + id + "/cpu.cfs_quota_us":         "50000",
		"cpu/" + parent + "/" + id + "/cpu.cfs_period_us":        "100000",
	} {
		b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", file))
		if got := string(bytes.TrimSpace(b)); err != nil || got != want {
			t.Errorf("%s = %q, %v; want %q", file, got, err, want)
		}
	}

	// Without Watch, the OOM kill is read from the cgroup's counter.
	oom := sh("oom", "x=1; while true; do x=$x$x; done")
	oom.CgroupParent = parent
	oom.MemoryLimitBytes = 32 << 20
	if err := r.StartContainer(bg, p, oom, 0); err != nil {
		t.Fatal(err)
	}
	st = waitState(t, r, p, "oom", runtime.StateExited)
	if st.ExitCode != 137 || st.Reason != "OOMKilled" {
		t.Errorf("oom = %+v, want 137 OOMKilled", st)
	}
	if err := r.RemovePod(bg, p); err != nil {
		t.Fatal(err)
	}
}

func TestExec(t *testing.T) {
	r := newRuntime(t, nil)
	p := pod("exec")
	c := sh("main", "sleep 1000")
	c.Env = []runtime.EnvVar{{Name: "GREETING", Value: "hi"}}
	if err := r.StartContainer(bg, p, c, 0); err != nil {
		t.Fatal(err)
	}
	waitState(t, r, p, "main", runtime.StateRunning)
	var out, errb bytes.Buffer
	code, err := r.Exec(bg, p, "main", runtime.ExecOptions{Command: []string{"sh", "-c", "echo $GREETING; echo bad >&2; exit 4"}, Stdout: &out, Stderr: &errb})
	if err != nil || code != 4 || out.String() != "hi\n" || errb.String() != "bad\n" {
		t.Errorf("Exec = %d, %v, out %q, err %q; want 4, hi, bad", code, err, out.String(), errb.String())
	}
	out.Reset()
	code, err = r.Exec(bg, p, "main", runtime.ExecOptions{Command: []string{"cat"}, Stdin: strings.NewReader("piped\n"), Stdout: &out})
	if err != nil || code != 0 || out.String() != "piped\n" {
		t.Errorf("Exec(cat) = %d, %v, %q", code, err, out.String())
	}
	out.Reset()
	code, err = r.Exec(bg, p, "main", runtime.ExecOptions{Command: []string{"sh", "-c", "test -t 1 && echo tty"}, Stdout: &out, TTY: true})
	if err != nil || code != 0 || !strings.Contains(out.String(), "tty") {
		t.Errorf("Exec(tty) = %d, %v, %q", code, err, out.String())
	}
	ctx, cancel := context.WithTimeout(bg, 300*time.Millisecond)
	defer cancel()
	if _, err := r.Exec(ctx, p, "main", runtime.ExecOptions{Command: []string{"sleep", "100"}}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Exec(ctx ends) = %v, want DeadlineExceeded", err)
	}
	if _, err := r.Exec(bg, p, "nope", runtime.ExecOptions{Command: []string{"true"}}); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("Exec(unknown) = %v, want ErrNotFound", err)
	}
	if err := r.StopContainer(bg, p, "main", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Exec(bg, p, "main", runtime.ExecOptions{Command: []string{"true"}}); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("Exec(exited) = %v, want ErrNotFound", err)
	}
}

// crunSupervisor returns the address and dir of a containerd that crun
// can run containers under. crun (1.8) refuses a hybrid cgroup layout
// whose cgroup2 hierarchy holds controllers (this machine's has hugetlb);
// there the containerd runs in a mount namespace of its own without the
// cgroup2 mount, so that its shims and crun see cgroup v1 only.
func crunSupervisor(t *testing.T) (address, containerdDir string) {
	need(t)
	if _, err := exec.LookPath("crun"); err != nil {
		t.Skip("crun is not installed")
	}
	b, err := os.ReadFile("/sys/fs/cgroup/unified/cgroup.controllers")
	if err != nil || len(bytes.TrimSpace(b)) == 0 {
		return sup.Address(), supDir
	}
	dir, err := os.MkdirTemp("", "octrd")
	if err != nil {
		t.Fatal(err)
	}
	wrapper := filepath.Join(dir, "containerd-v1only")
	script := fmt.Sprintf("#!/bin/sh\nPATH=%s:$PATH exec unshare -m --propagation private sh -c 'umount -l /sys/fs/cgroup/unified && exec %s \"$@\"' containerd \"$@\"\n",
		filepath.Dir(containerdBinary), containerdBinary)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultSupervisorConfig(filepath.Join(dir, "c"))
	cfg.Binary = wrapper
	cfg.Logger = testlog.New(t, slog.LevelWarn)
	s, err := NewSupervisor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(bg)
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		if err := removeAll(dir, s.Address()); err != nil {
			t.Error(err)
		}
	})
	select {
	case <-s.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("containerd for crun did not start")
	}
	return s.Address(), cfg.Dir
}

func TestCrun(t *testing.T) {
	addr, dir := crunSupervisor(t)
	r := newRuntime(t, func(c *Config) {
		c.OCIRuntime = "crun"
		c.Address, c.RuncRoot, c.StateDir = addr, RuncRoot(dir), filepath.Join(dir, "fifo", c.Namespace)
	})
	p := pod("crun")
	c := sh("main", "echo from crun; sleep 1000")
	c.LogPath = filepath.Join(t.TempDir(), "0.log")
	if err := r.StartContainer(bg, p, c, 0); err != nil {
		t.Fatal(err)
	}
	st := waitState(t, r, p, "main", runtime.StateRunning)
	waitLog(t, c.LogPath, "stdout:from crun")
	// crun keeps a "status" file where runc keeps state.json.
	state := filepath.Join(r.cfg.RuncRoot, r.cfg.Namespace, strings.TrimPrefix(st.ID, "containerd://"))
	if _, err := os.Stat(filepath.Join(state, "status")); err != nil {
		ents, _ := os.ReadDir(state)
		t.Errorf("crun state in %s: %v (holds %v)", state, err, ents)
	}
}
