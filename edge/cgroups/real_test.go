package cgroups

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/outpost-mesh/outpost/internal/wait"
)

// realManager returns a Manager on this machine's cgroups under a root of
// the test's own, removed (processes killed) when the test ends.
func realManager(t *testing.T) *Manager {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to make cgroups")
	}
	b := make([]byte, 6)
	rand.Read(b)
	top := "/outpost-test-" + hex.EncodeToString(b)
	m, err := New(Config{Root: top + "/kubepods", KillTimeout: 5 * time.Second})
	if errors.Is(err, ErrNotSupported) {
		t.Skipf("no cgroups here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := m.layout.remove(ctx, top, 5*time.Second); err != nil {
			t.Errorf("clean up %s: %v", top, err)
		}
		for _, d := range m.layout.dirsOf(top) {
			if exists(d) {
				t.Errorf("%s left behind", d)
			}
		}
	})
	return m
}

// startIn starts script under /bin/sh, moves it into cgroup p in every
// tree (as runc places a container), then lets it go on by a line on its
// stdin. The process is killed and reaped when the test ends; done is
// closed when it has exited.
func startIn(t *testing.T, m *Manager, p, script string) (pid int, done <-chan struct{}) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", "read x; "+script)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})
	for _, d := range m.layout.dirsOf(p) {
		if err := writeValue(filepath.Join(d, "cgroup.procs"), strconv.Itoa(cmd.Process.Pid)); err != nil {
			t.Fatalf("move %d into %s: %v", cmd.Process.Pid, d, err)
		}
	}
	io.WriteString(in, "go\n")
	in.Close()
	return cmd.Process.Pid, exited
}

func TestRealPodCgroup(t *testing.T) {
	m := realManager(t)
	t.Logf("layout %v: %v", m.Layout().Mode(), m.Layout().Dirs())
	if err := m.Setup(1000, 0); err != nil {
		t.Fatalf("Setup: %v", err)
	}
	pod := podOf(reqs(rr("", "cpu=250m,memory=64Mi")))
	pod.UID = "5d7e1c2a-0000-4000-8000-000000000001"
	if err := m.EnsurePod(pod); err != nil {
		t.Fatalf("EnsurePod: %v", err)
	}
	p := m.PodCgroup(pod)
	l := m.Layout()
	if l.Mode() == V2 {
		d := filepath.Join(l.unified, p)
		for f, want := range map[string]string{"memory.max": "67108864", "cpu.max": "25000 100000", "cpu.weight": "10", "pids.max": "max"} {
			if got := readFile(t, filepath.Join(d, f)); got != want {
				t.Errorf("%s = %q, want %q", f, got, want)
			}
		}
	} else {
		for _, tc := range []struct{ ctl, file, want string }{
			{"cpu", "cpu.shares", "256"},
			{"cpu", "cpu.cfs_quota_us", "25000"},
			{"cpu", "cpu.cfs_period_us", "100000"},
			{"memory", "memory.limit_in_bytes", "67108864"},
			{"pids", "pids.max", "max"},
		} {
			if d := l.controllerDir(tc.ctl, p); d != "" {
				if got := readFile(t, filepath.Join(d, tc.file)); got != tc.want {
					t.Errorf("%s/%s = %q, want %q", tc.ctl, tc.file, got, tc.want)
				}
			}
		}
		if d := l.controllerDir("cpuset", p); d != "" {
			if got := readFile(t, filepath.Join(d, "cpuset.cpus")); got == "" {
				t.Error("pod cpuset.cpus is empty; it takes no process")
			}
		}
		for _, d := range l.dirsOf(p) {
			if !exists(d) {
				t.Errorf("pod cgroup missing in %s", d)
			}
		}
	}
	// Setting again with other limits changes them in place.
	pod.Spec.Containers[0].Resources = rr("", "cpu=2,memory=128Mi")
	if err := m.EnsurePod(pod); err != nil {
		t.Fatalf("EnsurePod again: %v", err)
	}
	if st, err := m.PodStats(pod.UID); err != nil || st.MemoryLimit != 128<<20 {
		t.Errorf("after update PodStats = %+v, %v, want a limit of 128Mi", st, err)
	}

	pid, exited := startIn(t, m, p, "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; x=$(head -c 4000000 /dev/zero | tr '\\0' a); exec sleep 600")
	procs, err := l.Procs(p)
	if err != nil || len(procs) == 0 || procs[0] != pid {
		t.Errorf("Procs = %v, %v, want [%d]", procs, err, pid)
	}
	var st Stats
	wait.For(t, 20*time.Second, "the process's CPU and memory in the pod's readings", func() (bool, string) {
		st, err = m.PodStats(pod.UID)
		if err != nil {
			return false, err.Error()
		}
		return st.CPUUsage > 10*time.Millisecond && st.MemoryUsage > 0 && st.MemoryWorkingSet > 0, "not yet"
	})
	t.Logf("readings: %+v", st)
	if l.Has("pids") && (st.Pids < 1 || st.Pids > 4) {
		t.Errorf("Pids = %d, want the script's few", st.Pids)
	}
	if st.MemoryWorkingSet > st.MemoryUsage {
		t.Errorf("working set %d above usage %d", st.MemoryWorkingSet, st.MemoryUsage)
	}

	list, err := m.ListPods()
	if err != nil || len(list) != 1 || list[0].UID != pod.UID || list[0].QOS != corev1.PodQOSGuaranteed {
		t.Errorf("ListPods = %+v, %v, want the pod", list, err)
	}

	// The process is still running: RemovePod kills it and goes on.
	start := time.Now()
	if err := m.RemovePod(context.Background(), pod.UID); err != nil {
		t.Fatalf("RemovePod with a process left: %v", err)
	}
	t.Logf("RemovePod with a live process took %v", time.Since(start))
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		t.Error("the pod's process still runs after RemovePod")
	}
	for _, d := range l.dirsOf(p) {
		if exists(d) {
			t.Errorf("%s still there after RemovePod", d)
		}
	}
	if list, err := m.ListPods(); err != nil || len(list) != 0 {
		t.Errorf("ListPods after RemovePod = %+v, %v, want none", list, err)
	}
	if err := m.RemovePod(context.Background(), pod.UID); err != nil {
		t.Errorf("RemovePod again = %v, want nil", err)
	}
}

func TestRealOOMKill(t *testing.T) {
	m := realManager(t)
	if !m.Layout().Has("memory") {
		t.Skip("no memory controller")
	}
	if err := m.Setup(0, 0); err != nil {
		t.Fatalf("Setup: %v", err)
	}
	pod := podOf(reqs(rr("cpu=100m", "memory=16Mi")))
	pod.UID = "5d7e1c2a-0000-4000-8000-000000000002"
	if ComputeQOS(pod) != corev1.PodQOSBurstable {
		t.Fatalf("pod is %s, want Burstable", ComputeQOS(pod))
	}
	if err := m.EnsurePod(pod); err != nil {
		t.Fatalf("EnsurePod: %v", err)
	}
	st, err := m.PodStats(pod.UID)
	if err != nil {
		t.Fatal(err)
	}
	if !st.HasOOMKills {
		t.Skip("this kernel does not count OOM kills per cgroup")
	}
	// 64 MiB held by the shell in a 16 MiB cgroup.
	_, exited := startIn(t, m, m.PodCgroup(pod), "x=$(head -c 67108864 /dev/zero | tr '\\0' a); sleep 600")
	wait.For(t, 20*time.Second, "an OOM kill counted in the pod's cgroup", func() (bool, string) {
		st, err = m.PodStats(pod.UID)
		if err != nil {
			return false, err.Error()
		}
		return st.OOMKills >= 1, "none yet"
	})
	t.Logf("readings after the OOM kill: %+v", st)
	if st.MemoryUsage > 16<<20 {
		t.Errorf("usage %d above the 16Mi limit", st.MemoryUsage)
	}
	if err := m.RemovePod(context.Background(), pod.UID); err != nil {
		t.Fatalf("RemovePod: %v", err)
	}
	<-exited
}
