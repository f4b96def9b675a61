package containerd

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	tasktypes "github.com/containerd/containerd/api/types/task"
	"github.com/containerd/containerd/v2/core/containers"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/outpost-mesh/outpost/edge/runtime"
)

func TestProcessArgs(t *testing.T) {
	img := ocispec.ImageConfig{Entrypoint: []string{"/ep"}, Cmd: []string{"cmd1", "cmd2"}}
	for _, tc := range []struct {
		command, args []string
		img           ocispec.ImageConfig
		want          string
	}{
		{nil, nil, img, "/ep cmd1 cmd2"},
		{[]string{"/bin/x"}, nil, img, "/bin/x"},
		{[]string{"/bin/x"}, []string{"a"}, img, "/bin/x a"},
		{nil, []string{"a", "b"}, img, "/ep a b"},
		{nil, []string{"a"}, ocispec.ImageConfig{Cmd: []string{"sh"}}, "a"},
		{nil, nil, ocispec.ImageConfig{}, "error"},
	} {
		c := runtime.ContainerSpec{Command: tc.command, Args: tc.args}
		got, err := processArgs(&c, tc.img)
		s := strings.Join(got, " ")
		if err != nil {
			s = "error"
		}
		if s != tc.want {
			t.Errorf("processArgs(%q, %q, %+v) = %q, want %q", tc.command, tc.args, tc.img, s, tc.want)
		}
	}
}

func TestVerifyNonRoot(t *testing.T) {
	zero, uid := int64(0), int64(1000)
	for _, tc := range []struct {
		runAs     *int64
		imageUser string
		want      string // "" for allowed
	}{
		{nil, "", "image will run as root"},
		{nil, "0", "image will run as root"},
		{nil, "0:100", "image will run as root"},
		{nil, "1000", ""},
		{nil, "1000:0", ""},
		{nil, "nobody", "non-numeric user (nobody)"},
		{&zero, "1000", "runAsUser breaks non-root policy"},
		{&uid, "", ""},
		{&uid, "nobody", ""},
	} {
		c := runtime.ContainerSpec{Name: "c", RunAsNonRoot: true, RunAsUser: tc.runAs}
		err := verifyNonRoot(&c, tc.imageUser, "p_ns(u)")
		switch {
		case tc.want == "" && err != nil, tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, runtime.ErrContainerConfig)):
			t.Errorf("verifyNonRoot(runAs %v, image %q) = %v, want %q", tc.runAs, tc.imageUser, err, tc.want)
		}
	}
	c := runtime.ContainerSpec{RunAsUser: &zero}
	if err := verifyNonRoot(&c, "", "p"); err != nil {
		t.Errorf("verifyNonRoot without RunAsNonRoot = %v", err)
	}
}

func TestCapabilities(t *testing.T) {
	defaults := []string{"CAP_CHOWN", "CAP_KILL", "CAP_NET_RAW"}
	all := []string{"CAP_CHOWN", "CAP_KILL", "CAP_NET_RAW", "CAP_NET_ADMIN", "CAP_SYS_ADMIN"}
	for _, tc := range []struct {
		add, drop []string
		want      string
	}{
		{nil, nil, "CAP_CHOWN CAP_KILL CAP_NET_RAW"},
		{[]string{"NET_ADMIN"}, []string{"CAP_NET_RAW"}, "CAP_CHOWN CAP_KILL CAP_NET_ADMIN"},
		{[]string{"net_admin"}, []string{"ALL"}, "CAP_NET_ADMIN"},
		{[]string{"ALL"}, []string{"SYS_ADMIN"}, "CAP_CHOWN CAP_KILL CAP_NET_RAW CAP_NET_ADMIN"},
		{nil, []string{"all"}, ""},
	} {
		got := strings.Join(capabilities(defaults, all, tc.add, tc.drop), " ")
		if got != tc.want {
			t.Errorf("capabilities(add %q, drop %q) = %q, want %q", tc.add, tc.drop, got, tc.want)
		}
	}
}

func TestCPU(t *testing.T) {
	for milli, want := range map[int64]uint64{1: 2, 250: 256, 1000: 1024, 2500: 2560} {
		if got := cpuShares(milli); got != want {
			t.Errorf("cpuShares(%d) = %d, want %d", milli, got, want)
		}
	}
	for milli, want := range map[int64]int64{1: 1000, 500: 50000, 2000: 200000} {
		if got, period := cpuQuota(milli); got != want || period != 100000 {
			t.Errorf("cpuQuota(%d) = %d, %d; want %d, 100000", milli, got, period, want)
		}
	}
}

func TestStatus(t *testing.T) {
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	labels := func(kv ...string) map[string]string {
		m := map[string]string{LabelContainerName: "c", LabelAttempt: "2", labelImage: "img", labelStartedAt: formatTime(created.Add(time.Second))}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	for _, tc := range []struct {
		name string
		in   instance
		want string
	}{
		{"running", instance{info: containers.Container{ID: "x", Labels: labels()}, task: &tasktypes.Process{Status: tasktypes.Status_RUNNING}}, "running 0 "},
		{"created", instance{info: containers.Container{ID: "x", Labels: labels()}}, "created 0 "},
		{"unknown", instance{info: containers.Container{ID: "x", Labels: labels()}, task: &tasktypes.Process{Status: tasktypes.Status_UNKNOWN}}, "unknown 0 "},
		{"exited", instance{info: containers.Container{ID: "x", Labels: labels(labelExitCode, "137", labelReason, "OOMKilled", labelFinishedAt, formatTime(created.Add(time.Minute)))}}, "exited 137 OOMKilled"},
		{"exited, not reaped", instance{info: containers.Container{ID: "x", Labels: labels()}, task: &tasktypes.Process{Status: tasktypes.Status_STOPPED, ExitStatus: 3}}, "exited 3 Error"},
		{"exited, reaped meanwhile", instance{info: containers.Container{ID: "x", Labels: labels(labelExitCode, "0", labelReason, "Completed")}, task: &tasktypes.Process{Status: tasktypes.Status_STOPPED, ExitStatus: 0}}, "exited 0 Completed"},
	} {
		st := status(&tc.in)
		got := strings.TrimSpace(string(st.State) + " " + itoa(int(st.ExitCode)) + " " + st.Reason)
		if got != strings.TrimSpace(tc.want) || st.Attempt != 2 || st.ID != "containerd://x" || st.Image != "img" || !st.StartedAt.Equal(created.Add(time.Second)) {
			t.Errorf("%s: status = %+v, want %q", tc.name, st, tc.want)
		}
	}
	for _, tc := range []struct {
		code uint32
		oom  bool
		want string
	}{{0, false, "Completed"}, {1, false, "Error"}, {137, true, "OOMKilled"}, {0, true, "OOMKilled"}} {
		if got := exitReason(tc.code, tc.oom); got != tc.want {
			t.Errorf("exitReason(%d, %v) = %q, want %q", tc.code, tc.oom, got, tc.want)
		}
	}
}

func TestConfigFile(t *testing.T) {
	got := string(ConfigFile("/var/lib/outpost/containerd"))
	for _, want := range []string{
		"version = 2\n",
		`root = "/var/lib/outpost/containerd/root"`,
		`state = "/var/lib/outpost/containerd/state"`,
		`address = "/var/lib/outpost/containerd/containerd.sock"`,
		`address = "/var/lib/outpost/containerd/containerd.sock.ttrpc"`,
		`"io.containerd.grpc.v1.cri"`,
		`"io.containerd.nri.v1.nri"`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("ConfigFile lacks %q:\n%s", want, got)
		}
	}
	if slices.Contains(disabledPlugins, "io.containerd.runtime.v1.linux") {
		t.Errorf("the v1 runtime is disabled; containerd 1.6's task service needs it")
	}
	if err := (SupervisorConfig{Dir: "/" + strings.Repeat("x", 100), Binary: "c", ReadyTimeout: 1, StopTimeout: 1, MinBackoff: 1, MaxBackoff: 1}).Validate(); err == nil {
		t.Errorf("Validate accepted a dir too long for its sockets")
	}
}

// TestWithPathFirst: the containerd's own directory comes first in its
// PATH, the rest of the environment as it was.
func TestWithPathFirst(t *testing.T) {
	got := withPathFirst([]string{"HOME=/root", "PATH=/usr/bin:/bin", "LANG=C"}, "/opt/containerd-2/bin")
	want := []string{"HOME=/root", "LANG=C", "PATH=/opt/containerd-2/bin:/usr/bin:/bin"}
	if !slices.Equal(got, want) {
		t.Errorf("withPathFirst = %q, want %q", got, want)
	}
	if got := withPathFirst([]string{"HOME=/root"}, "/usr/bin"); !slices.Equal(got, []string{"HOME=/root", "PATH=/usr/bin"}) {
		t.Errorf("withPathFirst without a PATH = %q", got)
	}
}

// TestMountVolatile: an empty state directory gets a tmpfs, once; one
// holding state from before is left on disk, and said so.
func TestMountVolatile(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root")
	}
	dir := t.TempDir()
	if err := os.MkdirAll(RuncRoot(dir), 0o711); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(RuncRoot(dir), "left"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, d := range volatileDirs(dir) {
			_ = syscall.Unmount(d, syscall.MNT_DETACH)
		}
	})
	err := mountVolatile(dir)
	if err == nil || !strings.Contains(err.Error(), "left on disk") {
		t.Errorf("mountVolatile = %v, want runc's directory left on disk", err)
	}
	state := filepath.Join(dir, "state")
	if m, err := isMountPoint(state); err != nil || !m {
		t.Fatalf("state mounted = %v, %v; want a tmpfs", m, err)
	}
	if m, _ := isMountPoint(RuncRoot(dir)); m {
		t.Error("runc's directory, which held state, was mounted over")
	}
	if err := mountVolatile(dir); err == nil || strings.Count(err.Error(), "left on disk") != 1 {
		t.Errorf("mountVolatile again = %v, want the state's tmpfs kept and nothing new", err)
	}
	if b, err := os.ReadFile("/proc/self/mountinfo"); err != nil || strings.Count(string(b), " "+state+" ") != 1 {
		t.Errorf("%s mounted %d times, want once", state, strings.Count(string(b), " "+state+" "))
	}
}
