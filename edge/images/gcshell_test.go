package images

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/outpost-mesh/outpost/edge/runtime"
)

func TestGC(t *testing.T) {
	c, _ := startContainerd(t)
	r := startRegistry(t, "", "")
	for _, n := range []string{"a", "b", "c"} {
		push(t, r, testImage(t, n), "test/"+n, "1", "", "")
	}
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	var fs FSUsage
	s := newService(t, c, func(c *Config) {
		c.InsecureRegistries = []string{r.Addr}
		c.Now = clock
		c.Root = "/image-fs"
		c.StatFS = func(path string) (FSUsage, error) {
			if path != "/image-fs" {
				t.Errorf("GC measured %s, want Config.Root", path)
			}
			mu.Lock()
			defer mu.Unlock()
			return fs, nil
		}
	})
	ctx := context.Background()
	ref := func(n string) string { return r.Addr + "/test/" + n + ":1" }
	digests := map[string]string{}
	for _, n := range []string{"a", "b", "c"} { // a is the least recently used
		img, err := s.Pull(ctx, ref(n), runtime.PullIfNotPresent, nil)
		if err != nil {
			t.Fatal(err)
		}
		digests[n] = img.Target().Digest.String()
		advance(time.Hour)
	}
	if _, err := s.Import(ctx, bytesReader(oci(t, "outpost.test/pinned:1"))); err != nil {
		t.Fatal(err)
	}
	b, _ := find(t, s, ref("b"))

	// Under the high threshold: nothing goes.
	mu.Lock()
	fs = FSUsage{Capacity: 1000 * 100, Available: 1000 * 16}
	mu.Unlock()
	advance(time.Hour)
	res, err := s.GC(ctx, nil)
	if err != nil || len(res.Removed) != 0 || res.Usage != 84 {
		t.Fatalf("GC at 84%% = %+v, %v; want nothing removed", res, err)
	}

	// Above it, freeing just more than b: a is in use, so b then c go;
	// the pinned import stays.
	need := uint64(b.Size) + 1
	mu.Lock()
	fs = FSUsage{Capacity: need * 10, Available: need} // 90% used, to free 10%: need
	mu.Unlock()
	res, err = s.GC(ctx, []string{ref("a")})
	if err != nil {
		t.Fatalf("GC: %v", err)
	}
	if want := []string{ref("b"), ref("c")}; !slices.Equal(res.Removed, want) || res.BytesToFree != int64(need) {
		t.Errorf("GC = %+v, want removed %v, %d bytes to free", res, want, need)
	}
	if got := names(t, s); !slices.Equal(got, []string{ref("a"), "outpost.test/pinned:1"}) {
		t.Errorf("images after GC: %v", got)
	}
	for _, n := range []string{"b", "c"} {
		if _, err := s.c.ContentStore().Info(s.ctx(ctx), mustDigest(digests[n])); !errdefs.IsNotFound(err) {
			t.Errorf("manifest of %s after GC: %v, want it collected", n, err)
		}
	}
	if a, _ := find(t, s, ref("a")); !a.LastUsed.Equal(clock()) {
		t.Errorf("a, in use, last used %v, want GC's time %v", a.LastUsed, clock())
	}

	// Still full, and what is left is in use or pinned: short.
	res, err = s.GC(ctx, []string{"sha256:" + digests["a"][len("sha256:"):]})
	if !errors.Is(err, ErrGCShort) || len(res.Removed) != 0 {
		t.Errorf("GC with nothing removable = %+v, %v; want ErrGCShort", res, err)
	}

	// a is no longer used, and was last seen in use more than MinAge
	// ago; c, pulled again just now, is spared for MinAge.
	advance(3 * time.Minute)
	if _, err := s.Pull(ctx, ref("c"), runtime.PullIfNotPresent, nil); err != nil {
		t.Fatal(err)
	}
	res, err = s.GC(ctx, nil)
	if !slices.Equal(res.Removed, []string{ref("a")}) || !errors.Is(err, ErrGCShort) {
		t.Errorf("GC = %+v, %v; want a removed and c, just pulled, spared", res, err)
	}

	// DeleteUnused, as the eviction manager asks under disk pressure,
	// removes all GC may however empty the disk: c, once past MinAge;
	// the pinned import stays.
	advance(3 * time.Minute)
	mu.Lock()
	fs = FSUsage{Capacity: 1 << 40, Available: 1<<40 - 1}
	mu.Unlock()
	res, err = s.DeleteUnused(ctx, nil)
	if err != nil || !slices.Equal(res.Removed, []string{ref("c")}) {
		t.Errorf("DeleteUnused = %+v, %v; want c removed", res, err)
	}
	if got := names(t, s); !slices.Equal(got, []string{"outpost.test/pinned:1"}) {
		t.Errorf("images after DeleteUnused: %v", got)
	}

	noRoot := newService(t, c, func(c *Config) { c.Namespace += "-noroot" })
	if _, err := noRoot.GC(ctx, nil); err == nil {
		t.Error("GC without Config.Root succeeded")
	}
}

func TestRunGC(t *testing.T) {
	c, _ := startContainerd(t)
	calls := make(chan struct{}, 10)
	s := newService(t, c, func(c *Config) {
		c.Root = t.TempDir()
		c.GC.Period = time.Millisecond
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- s.RunGC(ctx, func(context.Context) ([]string, error) {
			select {
			case calls <- struct{}{}:
			default:
			}
			return nil, nil
		})
	}()
	for range 3 {
		select {
		case <-calls:
		case <-time.After(30 * time.Second):
			t.Fatal("RunGC did not ask what is in use")
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("RunGC = %v, want nil after ctx ended", err)
	}
}
