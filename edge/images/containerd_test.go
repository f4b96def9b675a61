package images

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"

	"github.com/outpost-mesh/outpost/internal/wait"
)

// containerdBinary is Debian's containerd, which the tests run their own
// instance of.
const containerdBinary = "/usr/bin/containerd"

// startContainerd runs a containerd of its own under a temporary
// directory (CRI disabled) until the test ends, and returns a client of
// it and its socket's path.
func startContainerd(t testing.TB) (*client.Client, string) {
	t.Helper()
	if _, err := os.Stat(containerdBinary); err != nil {
		t.Skipf("no containerd: %v", err)
	}
	if os.Geteuid() != 0 {
		t.Skip("containerd needs root")
	}
	// A short directory: the socket's path must fit in sun_path.
	dir, err := os.MkdirTemp("", "ctrd-")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "c.sock")
	cfg := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = %q
[ttrpc]
  address = %q
[debug]
  address = ""
[metrics]
  address = ""
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), sock, sock+".ttrpc")
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	log, err := os.Create(filepath.Join(dir, "containerd.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(containerdBinary, "--config", filepath.Join(dir, "config.toml"))
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); log.Close(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		// Unmount whatever snapshots the tests left mounted, then remove.
		exec.Command("umount", "-R", filepath.Join(dir, "root")).Run()
		if t.Failed() {
			if b, err := os.ReadFile(filepath.Join(dir, "containerd.log")); err == nil {
				t.Logf("containerd log:\n%s", b)
			}
		}
		os.RemoveAll(dir)
	})
	var c *client.Client
	wait.For(t, 20*time.Second, "containerd serving", func() (bool, string) {
		select {
		case <-exited:
			b, _ := os.ReadFile(filepath.Join(dir, "containerd.log"))
			t.Fatalf("containerd exited:\n%s", b)
		default:
		}
		if _, err := os.Stat(sock); err != nil {
			return false, err.Error()
		}
		cc, err := client.New(sock, client.WithTimeout(time.Second))
		if err != nil {
			return false, err.Error()
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if ok, err := cc.IsServing(ctx); !ok || err != nil {
			cc.Close()
			return false, fmt.Sprint("not serving: ", err)
		}
		c = cc
		return true, ""
	})
	t.Cleanup(func() { c.Close() })
	return c, sock
}
