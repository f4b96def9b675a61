package firmwarerelease

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"

	firmwarev1 "github.com/outpost-mesh/outpost/firmware/apis/v1"
	"github.com/outpost-mesh/outpost/firmware/artifacts"
	"github.com/outpost-mesh/outpost/internal/testlog"
)

// TestCollect: the artifacts no Release names go once older than the
// grace; those a Release names, and fresh uploads, stay; and nothing goes
// while a Release's manifest cannot be read.
func TestCollect(t *testing.T) {
	store, err := artifacts.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	put := func(data string, age time.Duration) string {
		sum := sha256.Sum256([]byte(data))
		d := hex.EncodeToString(sum[:])
		if err := store.Put(context.Background(), bytes.NewReader([]byte(data)), d, int64(len(data))); err != nil {
			t.Fatal(err)
		}
		at := testNow.Add(-age)
		if err := os.Chtimes(filepath.Join(store.Dir(), "blobs", "sha256", d), at, at); err != nil {
			t.Fatal(err)
		}
		return d
	}
	_, priv := key(t)
	rel, m := release(t, priv)
	named := m.Components[0].SHA256
	if got := put("config bytes", 48*time.Hour); got != named {
		t.Fatalf("stored %s, the release names %s", got, named)
	}
	old := put("an old release's agent", 3*time.Hour)
	fresh := put("an upload whose release comes next", time.Minute)

	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	add := func(rel *firmwarev1.Release) {
		body, err := runtime.DefaultUnstructuredConverter.ToUnstructured(rel)
		if err != nil {
			t.Fatal(err)
		}
		if err := idx.Add(&unstructured.Unstructured{Object: body}); err != nil {
			t.Fatal(err)
		}
	}
	add(rel)
	cfg := DefaultConfig(store)
	if cfg.Collect == nil {
		t.Fatal("DefaultConfig of an *artifacts.Store collects nothing")
	}
	ctl := &Controller{cfg: cfg, releases: cache.NewGenericLister(idx, ReleasesResource.GroupResource()),
		clock: clocktesting.NewFakeClock(testNow), log: testlog.New(t, 0)}

	held := func() []string {
		list, err := store.List()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range list {
			out = append(out, e.SHA256)
		}
		slices.Sort(out)
		return out
	}
	want := func(ds ...string) []string { slices.Sort(ds); return ds }

	// A Release whose manifest cannot be read: nothing goes.
	bad := rel.DeepCopy()
	bad.Name, bad.Spec.Envelope = "unreadable", []byte("{")
	add(bad)
	if n, err := ctl.collect(); err == nil || n != 0 {
		t.Errorf("collect with an unreadable Release = %d, %v; want 0 and an error", n, err)
	}
	if got := held(); !slices.Equal(got, want(named, old, fresh)) {
		t.Errorf("after a refused collection the store holds %q", got)
	}
	if err := idx.Delete(func() *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetName("unreadable")
		return u
	}()); err != nil {
		t.Fatal(err)
	}

	if n, err := ctl.collect(); err != nil || n != 1 {
		t.Errorf("collect = %d, %v; want 1 removed", n, err)
	}
	if got := held(); !slices.Equal(got, want(named, fresh)) {
		t.Errorf("the store holds %q, want the release's artifact and the fresh upload", got)
	}
	// Once its grace is over the upload goes too, and with its Release
	// deleted the release's artifact.
	ctl.clock.(*clocktesting.FakeClock).Step(2 * time.Hour)
	if err := idx.Delete(func() *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetName("r")
		return u
	}()); err != nil {
		t.Fatal(err)
	}
	if n, err := ctl.collect(); err != nil || n != 2 {
		t.Errorf("collect = %d, %v; want 2 removed", n, err)
	}
	if got := held(); len(got) != 0 {
		t.Errorf("the store holds %q, want nothing", got)
	}
}
