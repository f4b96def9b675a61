package edgenode

import (
	"strings"
	"testing"
)

func TestNodeProcess(t *testing.T) {
	const (
		dir  = "/tmp/density1/pod"
		sock = dir + "/containerd/containerd.sock"
		root = "/outpost-density-pod-ab12"
	)
	nul := func(args ...string) []byte { return []byte(strings.Join(args, "\x00") + "\x00") }
	v1 := []byte("12:pids:/user.slice\n11:memory:/user.slice\n0::/user.slice\n")
	for _, tc := range []struct {
		name            string
		cmdline, cgroup []byte
		want            bool
	}{
		{"its shim", nul("/usr/bin/containerd-shim-runc-v2", "-namespace", "outpost-density-pod-ab12", "-id", "x", "-address", sock), v1, true},
		{"another containerd's shim", nul("/usr/bin/containerd-shim-runc-v2", "-namespace", "k8s.io", "-address", "/run/containerd/containerd.sock"), v1, false},
		{"a shim of a longer socket", nul("containerd-shim-runc-v2", "-address", sock+"x"), v1, false},
		{"its containerd", nul("/usr/bin/containerd", "--config", dir+"/containerd/config.toml"), v1, true},
		{"another containerd", nul("/usr/bin/containerd", "--config", "/tmp/density1/podx/containerd/config.toml"), v1, false},
		{"the host's containerd", nul("/usr/bin/containerd"), v1, false},
		{"a container, cgroup v1", nul("sleep", "3600"), []byte("12:pids:" + root + "/pod-uid/sleep\n11:memory:" + root + "/pod-uid/sleep\n"), true},
		{"a container, cgroup v2", nul("sleep", "3600"), []byte("0::" + root + "/burstable/pod/c\n"), true},
		{"a cgroup of the node's name alone", nul("sh"), []byte("0::" + root + "\n"), true},
		{"another node's container", nul("sleep", "3600"), []byte("0::/outpost-density-pod-ab123/c\n"), false},
		{"a kernel thread", nil, nil, false},
	} {
		if got := nodeProcess(tc.cmdline, tc.cgroup, dir, sock, root); got != tc.want {
			t.Errorf("nodeProcess(%s) = %v, want %v", tc.name, got, tc.want)
		}
	}
}
