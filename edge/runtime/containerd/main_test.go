package containerd

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/pkg/namespaces"

	"github.com/outpost-mesh/outpost/edge/logs"
	"github.com/outpost-mesh/outpost/edge/runtime"
	"github.com/outpost-mesh/outpost/internal/ociimage"
	"github.com/outpost-mesh/outpost/internal/testlog"
	"github.com/outpost-mesh/outpost/internal/wait"
)

// The package's tests share one containerd that TestMain runs with a
// Supervisor in a temporary directory and removes at the end; each test
// has a namespace of its own.
var (
	sup       *Supervisor
	supDir    string
	skip      string // why the tests cannot run here, or ""
	imageTars = map[string][]byte{}
)

const (
	busybox           = "outpost.test/busybox:1"
	busyboxUSR1       = "outpost.test/busybox-usr1:1" // stop signal SIGUSR1
	busyboxUser       = "outpost.test/busybox-nobody:1"
	busyboxNoSuchUser = "outpost.test/busybox-ghost:1" // a user its /etc/passwd lacks
)

// containerdEnv names the containerd the tests run instead of Debian's,
// with the shims beside it (`make test-containerd2`).
const containerdEnv = "OUTPOST_TEST_CONTAINERD"

// containerdBinary is the containerd the tests run.
var containerdBinary = "/usr/bin/containerd"

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	if bin := os.Getenv(containerdEnv); bin != "" {
		containerdBinary = bin
	}
	for _, bin := range []string{containerdBinary, "containerd-shim-runc-v2", "runc"} {
		if _, err := exec.LookPath(bin); err != nil {
			skip = bin + " is not installed"
		}
	}
	if os.Geteuid() != 0 {
		skip = "containers need root"
	}
	if _, err := os.Stat(ociimage.BusyboxPath); err != nil {
		skip = "no static busybox for the test image"
	}
	if skip != "" {
		return m.Run()
	}
	for name, cfg := range map[string]ociimage.Config{
		busybox:           {},
		busyboxUSR1:       {StopSignal: "SIGUSR1"},
		busyboxUser:       {User: "nobody"},
		busyboxNoSuchUser: {User: "ghost"},
	} {
		im, err := ociimage.Busybox(name)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		im.Config.StopSignal, im.Config.User = cfg.StopSignal, cfg.User
		var b bytes.Buffer
		if err := im.WriteOCI(&b); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		imageTars[name] = b.Bytes()
	}
	dir, err := os.MkdirTemp("", "octrd")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	supDir = dir
	cfg := DefaultSupervisorConfig(dir)
	cfg.Binary = containerdBinary
	cfg.MinBackoff = 50 * time.Millisecond
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	sup, err = NewSupervisor(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sup.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			fmt.Fprintln(os.Stderr, "supervisor:", err)
		}
		if err := removeAll(dir, sup.Address()); err != nil {
			fmt.Fprintln(os.Stderr, "cleanup:", err)
		}
	}()
	select {
	case <-sup.Ready():
	case <-time.After(30 * time.Second):
		b, _ := os.ReadFile(filepath.Join(dir, "containerd.log"))
		fmt.Fprintf(os.Stderr, "containerd did not start:\n%s\n", b)
		return 1
	}
	return m.Run()
}

// removeAll kills what is left of the containerd at address (its shims
// and their containers), unmounts what is mounted under dir and removes
// it with the shims' sockets.
func removeAll(dir, address string) error {
	sockets := ShimSockets(filepath.Join(dir, "state"))
	var errs []error
	for _, ns := range namespacesOf(dir) {
		shims, _ := Shims(address, ns)
		for _, s := range shims {
			for _, c := range children(s.PID) {
				_ = syscall.Kill(c, syscall.SIGKILL)
			}
			_ = syscall.Kill(s.PID, syscall.SIGKILL)
			errs = append(errs, fmt.Errorf("shim %d of namespace %s was left running", s.PID, ns))
		}
	}
	for _, s := range sockets {
		_ = os.Remove(s)
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	lines := strings.Split(string(mounts), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		f := strings.Fields(lines[i])
		if len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			_ = syscall.Unmount(f[4], syscall.MNT_DETACH)
		}
	}
	errs = append(errs, os.RemoveAll(dir))
	return errors.Join(errs...)
}

func namespacesOf(dir string) []string {
	ds, _ := os.ReadDir(filepath.Join(dir, "state", "io.containerd.runtime.v2.task"))
	var out []string
	for _, d := range ds {
		out = append(out, d.Name())
	}
	return out
}

// children returns the processes whose parent is pid.
func children(pid int) []int {
	ps, _ := os.ReadDir("/proc")
	var out []int
	for _, p := range ps {
		var n int
		if _, err := fmt.Sscan(p.Name(), &n); err == nil && ppid(n) == pid {
			out = append(out, n)
		}
	}
	return out
}

func need(t *testing.T) {
	t.Helper()
	if skip != "" {
		t.Skip(skip)
	}
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// newRuntime returns a Runtime in a namespace of the test's own, with the
// test images imported. At the end of the test it removes every pod and
// checks that no shim of the namespace is left.
func newRuntime(t *testing.T, mod func(*Config)) *Runtime {
	t.Helper()
	need(t)
	ns := "t" + randHex(4)
	cfg := DefaultConfig()
	cfg.Address = sup.Address()
	cfg.Namespace = ns
	cfg.RuncRoot = RuncRoot(supDir)
	cfg.StateDir = filepath.Join(supDir, "fifo", ns)
	cfg.Logger = testlog.New(t, slog.LevelInfo)
	if mod != nil {
		mod(&cfg)
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := namespaces.WithNamespace(context.Background(), ns)
	for name, tar := range imageTars {
		if _, err := r.Client().Import(ctx, bytes.NewReader(tar)); err != nil {
			t.Fatalf("import %s: %v", name, err)
		}
	}
	// The test's temporary directories, which its pods' logs go to, are
	// made before the cleanup is registered, so that they are removed
	// after it: cleanupRuntime's Runtime attaches to running containers
	// again, and would make their log directories anew once removed.
	t.TempDir()
	t.Cleanup(func() { cleanupRuntime(t, cfg, r) })
	return r
}

func cleanupRuntime(t *testing.T, cfg Config, r *Runtime) {
	r.Close()
	r2, err := New(cfg)
	if err != nil {
		t.Error(err)
		return
	}
	defer r2.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pods, err := r2.List(ctx)
	if err != nil {
		t.Errorf("cleanup: List = %v", err)
	}
	for _, p := range pods {
		if err := r2.RemovePod(ctx, p.Pod); err != nil {
			t.Errorf("cleanup: RemovePod(%s) = %v", p.Pod, err)
		}
	}
	wait.For(t, 10*time.Second, "shims of "+cfg.Namespace+" exited", func() (bool, string) {
		s, err := Shims(cfg.Address, cfg.Namespace)
		return err == nil && len(s) == 0, fmt.Sprintf("%d shims, %v", len(s), err)
	})
	// Containers without a CgroupParent get /NAMESPACE/ID; runc removes
	// the leaf, the namespace's cgroup is the test's to remove.
	ctrls, _ := filepath.Glob("/sys/fs/cgroup/*/" + cfg.Namespace)
	if d := "/sys/fs/cgroup/" + cfg.Namespace; exists(d) {
		ctrls = append(ctrls, d)
	}
	for _, d := range ctrls {
		if err := os.Remove(d); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	}
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

var bg = context.Background()

func pod(name string) runtime.PodRef {
	return runtime.PodRef{UID: "uid-" + name + "-" + randHex(3), Namespace: "default", Name: name}
}

func sh(name, script string) runtime.ContainerSpec {
	return runtime.ContainerSpec{Name: name, Image: busybox, Command: []string{"sh", "-c", script}}
}

// container returns the status of the pod's container, or nil.
func container(t *testing.T, r *Runtime, p runtime.PodRef, name string) *runtime.ContainerStatus {
	t.Helper()
	l, err := r.List(bg)
	if err != nil {
		t.Fatalf("List = %v", err)
	}
	for i := range l {
		if l[i].Pod.UID == p.UID {
			return l[i].Container(name)
		}
	}
	return nil
}

// waitState waits until the container is in state and returns its status.
func waitState(t *testing.T, r *Runtime, p runtime.PodRef, name string, state runtime.ContainerState) runtime.ContainerStatus {
	t.Helper()
	var c *runtime.ContainerStatus
	wait.For(t, 20*time.Second, fmt.Sprintf("%s %s", name, state), func() (bool, string) {
		c = container(t, r, p, name)
		if c == nil {
			return false, "no such container"
		}
		return c.State == state, fmt.Sprintf("%+v", *c)
	})
	return *c
}

// logLines returns "stream:msg" of each entry of the log at path.
func logLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	rd := logs.NewReader(bytes.NewReader(b), 0)
	var out []string
	for {
		e, err := rd.Next()
		if err != nil {
			return out
		}
		out = append(out, e.Stream+":"+string(e.Msg))
	}
}

func waitLog(t *testing.T, path string, want ...string) {
	t.Helper()
	wait.For(t, 10*time.Second, "log "+path+" holds "+strings.Join(want, ", "), func() (bool, string) {
		got := logLines(t, path)
		for _, w := range want {
			if !slices.Contains(got, w) {
				return false, fmt.Sprintf("log = %q", got)
			}
		}
		return true, ""
	})
}

// taskPID returns the PID of the container's task.
func taskPID(t *testing.T, r *Runtime, id string) uint32 {
	t.Helper()
	tk, err := r.getTask(r.nsctx(bg), strings.TrimPrefix(id, "containerd://"))
	if err != nil || tk == nil {
		t.Fatalf("task of %s: %v, %v", id, tk, err)
	}
	return tk.Pid
}
