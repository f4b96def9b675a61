package cgroups

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// fakeV2 returns a directory laid out like a cgroup2 mount with the
// usual controllers.
func fakeV2(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "cgroup.controllers"), []byte("cpuset cpu io memory hugetlb pids rdma misc\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("read %s: %v", p, err)
	}
	return strings.TrimSpace(string(b))
}

func TestV2Tree(t *testing.T) {
	mount := fakeV2(t)
	m, err := New(Config{Root: "/outpost-gw1/kubepods", MountRoot: mount, PodPidsLimit: 512})
	if err != nil {
		t.Fatal(err)
	}
	if m.Layout().Mode() != V2 {
		t.Fatalf("mode = %v, want v2", m.Layout().Mode())
	}
	if err := m.Setup(1500, 3<<30); err != nil {
		t.Fatalf("Setup: %v", err)
	}
	root := filepath.Join(mount, "outpost-gw1/kubepods")
	for _, tc := range []struct{ file, want string }{
		{filepath.Join(mount, "cgroup.subtree_control"), "+cpuset +cpu +io +memory +hugetlb +pids"},
		{filepath.Join(mount, "outpost-gw1/cgroup.subtree_control"), "+cpuset +cpu +io +memory +hugetlb +pids"},
		{filepath.Join(root, "cgroup.subtree_control"), "+cpuset +cpu +io +memory +hugetlb +pids"},
		{filepath.Join(root, "cpu.weight"), "59"}, // 1536 shares
		{filepath.Join(root, "memory.max"), "3221225472"},
		{filepath.Join(root, "cpu.max"), "max 100000"},
		{filepath.Join(root, "burstable/cpu.weight"), "1"},
		{filepath.Join(root, "besteffort/memory.max"), "max"},
	} {
		if got := readFile(t, tc.file); got != tc.want {
			t.Errorf("%s = %q, want %q", tc.file, got, tc.want)
		}
	}

	g := podOf(reqs(rr("", "cpu=250m,memory=64Mi")))
	g.UID = "0f3c-guaranteed"
	b := podOf(reqs(rr("cpu=100m,memory=32Mi", "")))
	b.UID = "1a2b-burstable"
	if got, want := m.PodCgroup(g), "/outpost-gw1/kubepods/pod0f3c-guaranteed"; got != want {
		t.Errorf("PodCgroup(guaranteed) = %q, want %q", got, want)
	}
	if got, want := m.PodCgroup(b), "/outpost-gw1/kubepods/burstable/pod1a2b-burstable"; got != want {
		t.Errorf("PodCgroup(burstable) = %q, want %q", got, want)
	}
	for _, p := range []*corev1.Pod{g, b} {
		if err := m.EnsurePod(p); err != nil {
			t.Fatalf("EnsurePod(%s): %v", p.UID, err)
		}
	}
	if err := m.UpdateQoS(BurstableShares([]*corev1.Pod{g, b})); err != nil {
		t.Fatalf("UpdateQoS: %v", err)
	}
	gdir := filepath.Join(root, "pod0f3c-guaranteed")
	bdir := filepath.Join(root, "burstable/pod1a2b-burstable")
	for _, tc := range []struct{ file, want string }{
		{filepath.Join(gdir, "memory.max"), "67108864"},
		{filepath.Join(gdir, "cpu.max"), "25000 100000"},
		{filepath.Join(gdir, "cpu.weight"), "10"}, // 256 shares
		{filepath.Join(gdir, "pids.max"), "512"},
		{filepath.Join(gdir, "cgroup.subtree_control"), "+cpuset +cpu +io +memory +hugetlb +pids"},
		{filepath.Join(bdir, "memory.max"), "max"},
		{filepath.Join(bdir, "cpu.max"), "max 100000"},
		{filepath.Join(bdir, "cpu.weight"), "4"}, // 102 shares
		{filepath.Join(root, "burstable/cpu.weight"), "4"},
	} {
		if got := readFile(t, tc.file); got != tc.want {
			t.Errorf("%s = %q, want %q", tc.file, got, tc.want)
		}
	}

	list, err := m.ListPods()
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].UID != g.UID || list[0].QOS != corev1.PodQOSGuaranteed ||
		list[1].UID != b.UID || list[1].QOS != corev1.PodQOSBurstable || list[1].Path != m.PodCgroup(b) {
		t.Errorf("ListPods = %+v, want the guaranteed and the burstable pod", list)
	}

	// The kernel's readings, as a cgroup2 file system shows them.
	for name, content := range map[string]string{
		"memory.current": "10485760\n",
		"memory.stat":    "anon 4194304\nfile 6291456\nactive_file 2097152\ninactive_file 4194304\n",
		"memory.events":  "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\noom_group_kill 0\n",
		"cpu.stat":       "usage_usec 1500000\nuser_usec 1000000\nsystem_usec 500000\n",
		"pids.current":   "3\n",
	} {
		if err := os.WriteFile(filepath.Join(gdir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	st, err := m.PodStats(g.UID)
	if err != nil {
		t.Fatalf("PodStats: %v", err)
	}
	want := Stats{MemoryUsage: 10 << 20, MemoryWorkingSet: 6 << 20, MemoryLimit: 64 << 20,
		CPUUsage: 1500 * time.Millisecond, OOMKills: 1, HasOOMKills: true, Pids: 3}
	if st != want {
		t.Errorf("PodStats = %+v, want %+v", st, want)
	}
	if _, err := m.PodStats("nobody"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("PodStats(unknown) error = %v, want fs.ErrNotExist", err)
	}

	// Removal: the fake's regular files keep its directories from going,
	// as processes would; what is rmdir-able goes.
	if err := m.RemovePod(context.Background(), "nobody"); err != nil {
		t.Errorf("RemovePod(unknown) = %v, want nil", err)
	}
	if err := m.EnsurePod(&corev1.Pod{}); !errors.Is(err, ErrInvalidUID) {
		t.Errorf("EnsurePod(no uid) = %v, want ErrInvalidUID", err)
	}
	bad := podOf(nil)
	bad.UID = "../../etc"
	if err := m.EnsurePod(bad); !errors.Is(err, ErrInvalidUID) {
		t.Errorf("EnsurePod(../../etc) = %v, want ErrInvalidUID", err)
	}
}

func TestDetectLayout(t *testing.T) {
	v1 := t.TempDir()
	for _, d := range []string{"cpu,cpuacct", "memory", "pids", "cpuset", "systemd", "unified", "empty"} {
		if err := os.MkdirAll(filepath.Join(v1, d), 0o755); err != nil {
			t.Fatal(err)
		}
		f := "cgroup.procs"
		switch d {
		case "unified":
			f = "cgroup.controllers"
		case "empty":
			continue
		}
		if err := os.WriteFile(filepath.Join(v1, d, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("cpu,cpuacct", filepath.Join(v1, "cpu")); err != nil {
		t.Fatal(err)
	}
	l, err := DetectLayout(v1)
	if err != nil {
		t.Fatal(err)
	}
	if l.Mode() != Hybrid {
		t.Errorf("mode = %v, want hybrid", l.Mode())
	}
	var names []string
	for _, d := range l.Dirs() {
		names = append(names, filepath.Base(d))
	}
	if got, want := strings.Join(names, " "), "cpu,cpuacct cpuset memory pids systemd unified"; got != want {
		t.Errorf("dirs = %q, want %q", got, want)
	}
	if got := l.controllerDir("cpuacct", "/x"); got != filepath.Join(v1, "cpu,cpuacct/x") {
		t.Errorf("cpuacct dir = %q", got)
	}
	// An empty cgroup.controllers: no controller on the unified tree,
	// which crun accepts; then hugetlb on it, as on this project's test
	// machine, which crun refuses.
	if ctls, err := l.HybridControllers(); err != nil || len(ctls) != 0 {
		t.Errorf("HybridControllers() = %q, %v; want none", ctls, err)
	}
	if err := os.WriteFile(filepath.Join(v1, "unified", "cgroup.controllers"), []byte("hugetlb\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if ctls, err := l.HybridControllers(); err != nil || strings.Join(ctls, " ") != "hugetlb" {
		t.Errorf("HybridControllers() = %q, %v; want hugetlb", ctls, err)
	}
	want := "mkdir -p " + filepath.Join(v1, "hugetlb") + " && mount -t cgroup -o hugetlb cgroup " + filepath.Join(v1, "hugetlb")
	if err := l.CheckCrun(); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("CheckCrun() = %v, want the command %q", err, want)
	}
	if _, err := DetectLayout(t.TempDir()); !errors.Is(err, ErrNotSupported) {
		t.Errorf("DetectLayout(empty) = %v, want ErrNotSupported", err)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, root := range []string{"", "kubepods", "/", "/a/../b", "/a/"} {
		c := DefaultConfig()
		c.Root = root
		if c.Validate() == nil {
			t.Errorf("Validate(root %q) = nil, want an error", root)
		}
	}
	c := DefaultConfig()
	c.Root = "/outpost-n1/kubepods"
	if err := c.Validate(); err != nil {
		t.Errorf("Validate(%+v) = %v", c, err)
	}
}

func TestParseProcCgroup(t *testing.T) {
	const hybrid = "9:name=systemd:/\n4:memory:/process_api/9e9f\n2:cpu,cpuacct:/a\n0::/u\n"
	for _, tc := range []struct {
		in   string
		v2   bool
		ctl  string
		want string
	}{
		{hybrid, false, "memory", "/process_api/9e9f"},
		{hybrid, false, "cpuacct", "/a"},
		{hybrid, true, "", "/u"},
		{"0::/system.slice/outpost.service\n", true, "", "/system.slice/outpost.service"},
	} {
		got, err := ParseProcCgroup([]byte(tc.in), tc.v2, tc.ctl)
		if err != nil || got != tc.want {
			t.Errorf("ParseProcCgroup(%q, %v, %q) = %q, %v, want %q", tc.in, tc.v2, tc.ctl, got, err, tc.want)
		}
	}
	if _, err := ParseProcCgroup([]byte("4:memory:/x\n"), false, "pids"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ParseProcCgroup without the controller = %v, want fs.ErrNotExist", err)
	}
}

func FuzzParseKV(f *testing.F) {
	f.Add([]byte("cache 12058624\nrss 7557120\ntotal_inactive_file 3896467456\n"))
	f.Add([]byte("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n"))
	f.Add([]byte("low 0\nhigh 0\nmax 3\n"))
	f.Add([]byte("a\n b c d\n\x00 1\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m := ParseKV(b)
		if len(m) > len(b) {
			t.Fatalf("ParseKV found %d keys in %d bytes", len(m), len(b))
		}
	})
}

func FuzzParseProcCgroup(f *testing.F) {
	f.Add([]byte("9:name=systemd:/\n4:memory:/process_api/9e9f\n0::/u\n"), false)
	f.Add([]byte("0::/\n"), true)
	f.Fuzz(func(t *testing.T, b []byte, v2 bool) {
		p, err := ParseProcCgroup(b, v2, "memory")
		if err == nil && !strings.HasPrefix(p, "/") {
			t.Fatalf("ParseProcCgroup = %q, not absolute", p)
		}
	})
}
