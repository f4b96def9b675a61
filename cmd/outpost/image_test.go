package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"

	"github.com/outpost-mesh/outpost/edge/images"
	"github.com/outpost-mesh/outpost/internal/ociimage"
	"github.com/outpost-mesh/outpost/internal/wait"
)

// startContainerd runs a containerd of its own under a temporary
// directory (CRI disabled) until the test ends and returns its socket.
func startContainerd(t *testing.T) string {
	t.Helper()
	const bin = "/usr/bin/containerd"
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("no containerd: %v", err)
	}
	if os.Geteuid() != 0 {
		t.Skip("containerd needs root")
	}
	dir, err := os.MkdirTemp("", "ctrd-") // short: the socket's path must fit in sun_path
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "c.sock")
	cfg := fmt.Sprintf("version = 2\nroot = %q\nstate = %q\ndisabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n[grpc]\n  address = %q\n[ttrpc]\n  address = %q\n",
		filepath.Join(dir, "root"), filepath.Join(dir, "state"), sock, sock+".ttrpc")
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config", filepath.Join(dir, "config.toml"))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		exec.Command("umount", "-R", filepath.Join(dir, "root")).Run()
		os.RemoveAll(dir)
	})
	wait.For(t, 20*time.Second, "containerd serving", func() (bool, string) {
		c, err := client.New(sock, client.WithTimeout(time.Second))
		if err != nil {
			return false, err.Error()
		}
		defer c.Close()
		ok, err := c.IsServing(context.Background())
		return ok, fmt.Sprint(err)
	})
	return sock
}

func TestImageCommands(t *testing.T) {
	sock := startContainerd(t)
	dataDir := t.TempDir()
	if _, err := runOutpost(t, "image", "list", "--data-dir", dataDir); err == nil || !strings.Contains(err.Error(), "outpost edge --data-dir") {
		t.Errorf("image list before the agent ran: %v, want an error saying to start the agent", err)
	}
	if err := images.WriteEndpoint(dataDir, images.Endpoint{Address: sock, Namespace: "outpost"}); err != nil {
		t.Fatal(err)
	}

	out, err := runOutpost(t, "image", "demo", "--data-dir", dataDir)
	if err != nil {
		t.Fatalf("image demo: %v", err)
	}
	if out != DemoImage+"\n" {
		t.Errorf("image demo printed %q, want %q", out, DemoImage)
	}

	im, err := ociimage.Busybox("busybox:site")
	if err != nil {
		t.Skip(err)
	}
	archive := filepath.Join(t.TempDir(), "busybox.tar")
	if err := im.WriteFile(archive, true); err != nil {
		t.Fatal(err)
	}
	out, err = runOutpost(t, "image", "import", "--data-dir", dataDir, archive)
	if err != nil || out != "docker.io/library/busybox:site\n" {
		t.Errorf("image import = %q, %v", out, err)
	}

	garbage := filepath.Join(t.TempDir(), "garbage.tar")
	os.WriteFile(garbage, []byte("not a tarball"), 0o600)
	if _, err := runOutpost(t, "image", "import", "--data-dir", dataDir, garbage); err == nil || !strings.Contains(err.Error(), "nothing was imported") {
		t.Errorf("image import of garbage: %v, want an error saying nothing was imported", err)
	}

	out, err = runOutpost(t, "image", "list", "--data-dir", dataDir)
	if err != nil {
		t.Fatalf("image list: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || strings.Join(strings.Fields(lines[0]), " ") != "NAME DIGEST SIZE PINNED" {
		t.Fatalf("image list printed:\n%s", out)
	}
	for i, name := range []string{"docker.io/library/busybox:site", DemoImage} {
		f := strings.Fields(lines[i+1])
		if len(f) != 4 || f[0] != name || len(f[1]) != 12 || !strings.HasSuffix(f[2], "MB") || f[3] != "yes" {
			t.Errorf("image list line %q, want %s, a short digest, a size in MB, pinned", lines[i+1], name)
		}
	}

	if err := images.WriteEndpoint(dataDir, images.Endpoint{Address: filepath.Join(dataDir, "gone.sock"), Namespace: "outpost"}); err != nil {
		t.Fatal(err)
	}
	if _, err := runOutpost(t, "image", "list", "--data-dir", dataDir); err == nil || !strings.Contains(err.Error(), "is the edge agent running") {
		t.Errorf("image list with containerd gone: %v", err)
	}
}

func TestHumanSize(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want string
	}{
		{0, "0B"}, {999, "999B"}, {1000, "1kB"}, {1147176, "1.15MB"}, {52_400_000, "52.4MB"}, {3_210_000_000, "3.21GB"}, {999_999, "1MB"}, {999_400, "999kB"},
	} {
		if got := humanSize(tc.n); got != tc.want {
			t.Errorf("humanSize(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}
