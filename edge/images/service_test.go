package images

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/errdefs"
	"github.com/containerd/platforms"
	"github.com/opencontainers/image-spec/identity"

	"github.com/outpost-mesh/outpost/edge/runtime"
	"github.com/outpost-mesh/outpost/internal/ociimage"
	"github.com/outpost-mesh/outpost/internal/testlog"
)

// newService returns a Service of c in a namespace of its own, with cfg
// adjusted by mod.
func newService(t *testing.T, c *client.Client, mod func(*Config)) *Service {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Client = c
	cfg.Namespace = "test-" + strings.NewReplacer("/", "-", "_", "-").Replace(strings.ToLower(t.Name()))
	cfg.Logger = testlog.New(t, slog.LevelDebug)
	if mod != nil {
		mod(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// testImage returns a busybox image named name with a file /id holding
// name, so that images of different names differ.
func testImage(t *testing.T, name string) *ociimage.Image {
	t.Helper()
	im, err := ociimage.Busybox(name)
	if errors.Is(err, ociimage.ErrNoBusybox) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	im.Add(ociimage.File{Path: "/id", Mode: 0o644, Content: []byte(name)})
	return im
}

// startRegistry runs a registry until the test ends, with basic auth if
// user is set.
func startRegistry(t *testing.T, user, password string) *ociimage.Registry {
	t.Helper()
	r, err := ociimage.StartRegistry(context.Background(), t.TempDir(), user, password)
	if errors.Is(err, ociimage.ErrNoRegistry) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func push(t *testing.T, r *ociimage.Registry, im *ociimage.Image, repo, tag, user, password string) {
	t.Helper()
	if err := im.Push(context.Background(), ociimage.PushOptions{Registry: r.URL(), Repository: repo, Tag: tag, Username: user, Password: password}); err != nil {
		t.Fatal(err)
	}
}

// unpacked checks that name's rootfs is unpacked: its snapshot exists,
// and a container's snapshot made from it holds the image's files.
func unpacked(t *testing.T, s *Service, name string) {
	t.Helper()
	ctx := s.ctx(context.Background())
	rec, err := s.c.ImageService().Get(ctx, name)
	if err != nil {
		t.Fatalf("image %s: %v", name, err)
	}
	diffs, err := client.NewImageWithPlatform(s.c, rec, platforms.Default()).RootFS(ctx)
	if err != nil {
		t.Fatalf("image %s rootfs: %v", name, err)
	}
	chain := identity.ChainID(diffs).String()
	sn := s.c.SnapshotService(s.cfg.Snapshotter)
	if _, err := sn.Stat(ctx, chain); err != nil {
		t.Fatalf("image %s: snapshot %s: %v", name, chain, err)
	}
	key := "check-" + strings.NewReplacer("/", "-", ":", "-").Replace(name)
	mounts, err := sn.View(ctx, key, chain)
	if err != nil {
		t.Fatalf("view snapshot of %s: %v", name, err)
	}
	defer sn.Remove(ctx, key)
	dir := t.TempDir()
	if err := mount.All(mounts, dir); err != nil {
		t.Fatalf("mount snapshot of %s: %v", name, err)
	}
	defer mount.UnmountAll(dir, 0)
	if fi, err := os.Stat(filepath.Join(dir, "bin", "busybox")); err != nil || fi.Size() == 0 {
		t.Errorf("image %s rootfs: bin/busybox: %v", name, err)
	}
}

func names(t *testing.T, s *Service) []string {
	t.Helper()
	imgs, err := s.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, im := range imgs {
		out = append(out, im.Name)
	}
	return out
}

func find(t *testing.T, s *Service, name string) (Image, bool) {
	t.Helper()
	imgs, err := s.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, im := range imgs {
		if im.Name == name {
			return im, true
		}
	}
	return Image{}, false
}

func wantPullError(t *testing.T, err error, substr ...string) {
	t.Helper()
	if !errors.Is(err, runtime.ErrImagePull) {
		t.Fatalf("error %v, want ErrImagePull", err)
	}
	t.Logf("pull error: %v", err)
	var pe *PullError
	if !errors.As(err, &pe) {
		t.Fatalf("error %v is not a *PullError", err)
	}
	for _, s := range substr {
		if !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(s)) {
			t.Errorf("error %q does not say %q", err, s)
		}
	}
}

func TestPullPolicies(t *testing.T) {
	c, _ := startContainerd(t)
	r := startRegistry(t, "", "")
	push(t, r, testImage(t, "v1"), "test/busybox", "1", "", "")
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	s := newService(t, c, func(c *Config) { c.InsecureRegistries = []string{r.Addr}; c.Now = clock })
	ctx := context.Background()
	ref := r.Addr + "/test/busybox:1"

	_, err := s.Pull(ctx, ref, runtime.PullNever, nil)
	wantPullError(t, err, "is not present with pull policy of Never")
	if !errors.Is(err, ErrImageNeverPull) {
		t.Errorf("Never without the image: %v, want ErrImageNeverPull", err)
	}

	img, err := s.Pull(ctx, ref, runtime.PullIfNotPresent, nil)
	if err != nil {
		t.Fatalf("IfNotPresent: %v", err)
	}
	if img.Name() != ref {
		t.Errorf("pulled image named %q, want %q", img.Name(), ref)
	}
	unpacked(t, s, ref)
	v1 := img.Target().Digest.String()
	im, ok := find(t, s, ref)
	if !ok || im.Digest != v1 || im.Size == 0 || !im.LastUsed.Equal(clock().Truncate(0)) || im.Pinned || im.ConfigDigest == "" {
		t.Errorf("List after the pull: %+v (found %v), want digest %s, a size, last used %v", im, ok, v1, clock())
	}

	// Present: IfNotPresent and Never use it and mark it used.
	advance(time.Hour)
	for _, p := range []runtime.PullPolicy{runtime.PullNever, runtime.PullIfNotPresent, ""} {
		if img, err := s.Pull(ctx, ref, p, nil); err != nil || img.Target().Digest.String() != v1 {
			t.Errorf("%q with the image present: %v", p, err)
		}
	}
	if im, _ := find(t, s, ref); !im.LastUsed.Equal(clock()) {
		t.Errorf("last used %v after use at %v", im.LastUsed, clock())
	}

	// The tag moves: IfNotPresent keeps what it has, Always pulls the new one.
	push(t, r, testImage(t, "v2"), "test/busybox", "1", "", "")
	if img, _ := s.Pull(ctx, ref, runtime.PullIfNotPresent, nil); img == nil || img.Target().Digest.String() != v1 {
		t.Errorf("IfNotPresent after the tag moved: %v, want the local %s", img, v1)
	}
	img, err = s.Pull(ctx, ref, runtime.PullAlways, nil)
	if err != nil {
		t.Fatalf("Always: %v", err)
	}
	if img.Target().Digest.String() == v1 {
		t.Errorf("Always kept the old image %s", v1)
	}
	unpacked(t, s, ref)

	// Docker-style short names are normalized; busybox is not on this registry.
	_, err = s.Pull(ctx, r.Addr+"/test/nosuch:1", runtime.PullIfNotPresent, nil)
	wantPullError(t, err, "manifest unknown")
	if !errdefs.IsNotFound(err) {
		t.Errorf("missing image: %v, want errdefs.ErrNotFound in the chain", err)
	}
	_, err = s.Pull(ctx, "Not A Ref", runtime.PullIfNotPresent, nil)
	wantPullError(t, err)
	if !errors.Is(err, ErrInvalidImageName) {
		t.Errorf("bad reference: %v, want ErrInvalidImageName", err)
	}

	// The registry goes away: Always fails, as kubelet's does; IfNotPresent
	// and Never still have the image.
	r.Close()
	_, err = s.Pull(ctx, ref, runtime.PullAlways, nil)
	wantPullError(t, err, "connection refused")
	for _, p := range []runtime.PullPolicy{runtime.PullNever, runtime.PullIfNotPresent} {
		if _, err := s.Pull(ctx, ref, p, nil); err != nil {
			t.Errorf("%s with the registry gone: %v", p, err)
		}
	}
}

func TestPullAuth(t *testing.T) {
	c, _ := startContainerd(t)
	r := startRegistry(t, "puller", "s3cret")
	push(t, r, testImage(t, "private"), "team/app", "1", "puller", "s3cret")
	s := newService(t, c, func(c *Config) { c.InsecureRegistries = []string{r.Addr} })
	ctx := context.Background()
	ref := r.Addr + "/team/app:1"

	_, err := s.Pull(ctx, ref, runtime.PullAlways, nil)
	wantPullError(t, err, "unauthorized: authentication required", "no credentials for "+r.Addr)

	other, err := ParseDockerConfig([]byte(`{"auths": {"registry.example.com": {"username": "puller", "password": "s3cret"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Pull(ctx, ref, runtime.PullAlways, other)
	wantPullError(t, err, "unauthorized", "no credentials for")

	wrong := []runtime.Credential{{Registry: r.Addr, Username: "puller", Password: "wrong"}}
	_, err = s.Pull(ctx, ref, runtime.PullAlways, wrong)
	wantPullError(t, err, "unauthorized", "were refused")

	secret := `{"auths": {"http://` + r.Addr + `/team": {"auth": "` + b64("puller:s3cret") + `"}}}`
	creds, err := ParseDockerConfig([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	// A wrong credential for the registry is tried after the right one
	// for the repository, which is more specific.
	creds = append(wrong, creds...)
	if _, err := s.Pull(ctx, ref, runtime.PullAlways, creds); err != nil {
		t.Fatalf("pull with the secret's credentials: %v", err)
	}
	unpacked(t, s, ref)
}

func TestPullInsecureRegistries(t *testing.T) {
	c, _ := startContainerd(t)
	r := startRegistry(t, "", "")
	push(t, r, testImage(t, "plain"), "test/app", "1", "", "")
	ctx := context.Background()
	ref := r.Addr + "/test/app:1"

	strict := newService(t, c, nil)
	_, err := strict.Pull(ctx, ref, runtime.PullAlways, nil)
	wantPullError(t, err, "server gave HTTP response to HTTPS client", "insecure registries")

	other := newService(t, c, func(c *Config) { c.Namespace += "-other"; c.InsecureRegistries = []string{"127.0.0.1:1"} })
	_, err = other.Pull(ctx, ref, runtime.PullAlways, nil)
	wantPullError(t, err, "HTTP response to HTTPS client")

	listed := newService(t, c, func(c *Config) { c.Namespace += "-listed"; c.InsecureRegistries = []string{r.Addr} })
	if _, err := listed.Pull(ctx, ref, runtime.PullAlways, nil); err != nil {
		t.Fatalf("pull from a listed insecure registry: %v", err)
	}
}

func TestNewValidates(t *testing.T) {
	for _, mod := range []func(*Config){
		func(c *Config) { c.Client = nil },
		func(c *Config) { c.Namespace = "" },
		func(c *Config) { c.Snapshotter = "" },
		func(c *Config) { c.InsecureRegistries = []string{"http://r.io"} },
		func(c *Config) { c.GC.LowThresholdPercent = 90 },
	} {
		cfg := DefaultConfig()
		cfg.Client = &client.Client{}
		mod(&cfg)
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) = nil error", cfg)
		}
	}
}
